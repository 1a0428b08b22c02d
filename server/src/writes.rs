//! Admitted writes. A write the server admitted runs to its end on its own task: a client
//! that disconnects drops only its wait for the answer, and a graceful shutdown waits for
//! every admitted write before the process exits.
//!
//! Admission is bounded, per dataset and overall: a write past either bound is refused at
//! once (503 with `Retry-After`) before it has done anything, instead of queueing behind the
//! dataset's gate until its client gives up. The writes of one dataset run one at a time
//! under its gate, so a deep queue only turns into answers that come too late.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tracing::Instrument;

#[derive(Debug)]
pub struct Writes {
    state: Mutex<State>,
    idle: Notify,
    max_admitted: usize,
    max_admitted_per_dataset: usize,
}

#[derive(Debug, Default)]
struct State {
    closed: bool,
    admitted: usize,
    /// Admitted writes per dataset; a dataset with none has no entry.
    per_dataset: HashMap<String, usize>,
}

/// Why a write was not admitted. Either way it certainly did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    ShuttingDown,
    /// `limit` writes are already admitted on the dataset.
    DatasetFull {
        limit: usize,
    },
    /// `limit` writes are already admitted on the whole server.
    ServerFull {
        limit: usize,
    },
}

/// Held while an admitted write runs.
#[derive(Debug)]
pub struct WriteTicket {
    writes: Arc<Writes>,
    dataset_id: Option<String>,
    /// A share of the request's place among its principal's writes in flight
    /// ([`crate::quotas`]), held until the write ends.
    slot: Option<Arc<crate::quotas::WriteSlot>>,
}

impl WriteTicket {
    /// The ticket, holding `slot` too until the write ends.
    pub(crate) fn holding(mut self, slot: Option<Arc<crate::quotas::WriteSlot>>) -> Self {
        self.slot = slot;
        self
    }
}

impl Writes {
    /// At most `max_admitted` writes at once, and at most `max_admitted_per_dataset` of them
    /// on one dataset.
    pub fn new(max_admitted: usize, max_admitted_per_dataset: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            idle: Notify::new(),
            max_admitted,
            max_admitted_per_dataset,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A ticket for one write on `dataset_id` (`None`: a write of the whole deployment, such
    /// as a policy swap, bounded only overall).
    pub fn admit(self: &Arc<Self>, dataset_id: Option<&str>) -> Result<WriteTicket, Refused> {
        let mut state = self.state();
        if state.closed {
            return Err(Refused::ShuttingDown);
        }
        if state.admitted >= self.max_admitted {
            return Err(Refused::ServerFull {
                limit: self.max_admitted,
            });
        }
        if let Some(dataset_id) = dataset_id {
            let on_dataset = state.per_dataset.entry(dataset_id.to_owned()).or_default();
            if *on_dataset >= self.max_admitted_per_dataset {
                return Err(Refused::DatasetFull {
                    limit: self.max_admitted_per_dataset,
                });
            }
            *on_dataset += 1;
        }
        state.admitted += 1;
        Ok(WriteTicket {
            writes: self.clone(),
            dataset_id: dataset_id.map(str::to_owned),
            slot: None,
        })
    }

    /// A ticket for a supervisor's sweep, or `None` once the server is shutting down. Sweeps
    /// are outside the bounds: there is at most one per dataset, and it is what clears the
    /// way for the writes a crashed operation holds up.
    pub fn admit_sweep(self: &Arc<Self>) -> Option<WriteTicket> {
        let mut state = self.state();
        if state.closed {
            return None;
        }
        state.admitted += 1;
        Some(WriteTicket {
            writes: self.clone(),
            dataset_id: None,
            slot: None,
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
    /// does not cancel it. The task stays in the caller's span (its request's), so what the
    /// write logs names the request, even after its client left.
    pub async fn run<T: Send + 'static>(
        ticket: WriteTicket,
        write: impl Future<Output = T> + Send + 'static,
    ) -> T {
        let task = tokio::spawn(
            async move {
                let result = write.await;
                drop(ticket);
                result
            }
            .instrument(tracing::Span::current()),
        );
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
        if let Some(dataset_id) = &self.dataset_id
            && let Some(on_dataset) = state.per_dataset.get_mut(dataset_id)
        {
            *on_dataset -= 1;
            if *on_dataset == 0 {
                state.per_dataset.remove(dataset_id);
            }
        }
        if state.admitted == 0 {
            self.writes.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_is_bounded_per_dataset_and_overall_and_frees_on_drop() {
        let writes = Arc::new(Writes::new(3, 2));
        let a1 = writes.admit(Some("a")).unwrap();
        let _a2 = writes.admit(Some("a")).unwrap();
        assert_eq!(
            writes.admit(Some("a")).unwrap_err(),
            Refused::DatasetFull { limit: 2 }
        );
        let _b1 = writes.admit(Some("b")).unwrap();
        assert_eq!(
            writes.admit(Some("c")).unwrap_err(),
            Refused::ServerFull { limit: 3 }
        );
        assert_eq!(
            writes.admit(None).unwrap_err(),
            Refused::ServerFull { limit: 3 }
        );
        drop(a1);
        assert_eq!(writes.in_flight(), 2);
        let _a3 = writes.admit(Some("a")).unwrap();
        writes.close();
        assert_eq!(writes.admit(Some("d")).unwrap_err(), Refused::ShuttingDown);
    }
}
