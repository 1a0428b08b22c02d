//! Admitted writes. A write the server admitted runs to its end on its own task: a client
//! that disconnects drops only its wait for the answer, and a graceful shutdown waits for
//! every admitted write before the process exits.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Debug, Default)]
pub struct Writes {
    state: Mutex<State>,
    idle: Notify,
}

#[derive(Debug, Default)]
struct State {
    closed: bool,
    admitted: usize,
}

/// Held while an admitted write runs.
#[derive(Debug)]
pub struct WriteTicket {
    writes: Arc<Writes>,
}

impl Writes {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A ticket for one write, or `None` once the server is shutting down.
    pub fn admit(self: &Arc<Self>) -> Option<WriteTicket> {
        let mut state = self.state();
        if state.closed {
            return None;
        }
        state.admitted += 1;
        Some(WriteTicket {
            writes: self.clone(),
        })
    }

    /// Admits no more writes.
    pub fn close(&self) {
        self.state().closed = true;
    }

    pub fn in_flight(&self) -> usize {
        self.state().admitted
    }

    /// Waits until every admitted write has finished.
    pub async fn drained(&self) {
        loop {
            let idle = self.idle.notified();
            if self.state().admitted == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Runs `write` on its own task, so that dropping the caller (a client that went away)
    /// does not cancel it.
    pub async fn run<T: Send + 'static>(
        ticket: WriteTicket,
        write: impl Future<Output = T> + Send + 'static,
    ) -> T {
        let task = tokio::spawn(async move {
            let result = write.await;
            drop(ticket);
            result
        });
        match task.await {
            Ok(result) => result,
            // Only a panic in the write, or a runtime shutting down under it, ends the task
            // early; either way the caller cannot go on.
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(error) => panic!("an admitted write was cancelled: {error}"),
        }
    }
}

impl Drop for WriteTicket {
    fn drop(&mut self) {
        let mut state = self.writes.state();
        state.admitted -= 1;
        if state.admitted == 0 {
            self.writes.idle.notify_waiters();
        }
    }
}
