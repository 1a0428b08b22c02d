//! Work started in the background after an answer was given, counted so that whoever needs
//! it finished (a test, a shutdown, a command about to exit) can wait for it: the releases of
//! dropped gate guards ([`crate::gates::Gates::wait_for_releases`]) and the clean-up after an
//! operation ended ([`crate::Engine::wait_for_cleanups`]).

use std::future::Future;
use std::sync::Arc;

/// A count of the tasks running in the background; clones share it.
#[derive(Debug, Clone)]
pub(crate) struct BackgroundTasks {
    running: Arc<tokio::sync::watch::Sender<usize>>,
    /// Set once by [`BackgroundTasks::stop`]: every task stops at its next await point.
    stopped: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Default for BackgroundTasks {
    fn default() -> Self {
        Self {
            running: Arc::new(tokio::sync::watch::Sender::new(0)),
            stopped: Arc::new(tokio::sync::watch::Sender::new(false)),
        }
    }
}

impl BackgroundTasks {
    /// Runs `task` on `runtime`, counted until it ends, is stopped, or is dropped (the runtime
    /// shut down first). Once stopped, nothing new starts.
    pub(crate) fn spawn(
        &self,
        runtime: &tokio::runtime::Handle,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        let mut stopped = self.stopped.subscribe();
        if *stopped.borrow() {
            return;
        }
        self.running.send_modify(|running| *running += 1);
        let counted = Counted(Arc::clone(&self.running));
        runtime.spawn(async move {
            // Biased, so that no random draw of tokio's decides (a simulation replays it).
            tokio::select! {
                biased;
                () = task => {}
                _ = stopped.wait_for(|stopped| *stopped) => {}
            }
            drop(counted);
        });
    }

    /// Stops every task where it is, as a crash of the process would, and starts no more.
    pub(crate) fn stop(&self) {
        self.stopped.send_replace(true);
    }

    /// Waits until no task of the count is running.
    pub(crate) async fn idle(&self) {
        let mut running = self.running.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = running.wait_for(|running| *running == 0).await;
    }
}

/// One background task in the count; leaves it when dropped.
struct Counted(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.send_modify(|running| *running -= 1);
    }
}
