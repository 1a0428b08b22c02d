//! How a command ends early: on SIGINT or SIGTERM it is cancelled, and after a panic it has
//! unwound; either way the gates it held are released before the process exits.
//!
//! Cancelling is dropping the command's future where it waits: every [`GateGuard`] in it is
//! dropped, which starts its release in the background, and [`Gates::wait_for_releases`] lets
//! those releases land before the runtime goes. A panic is caught at the same place
//! ([`futures::FutureExt::catch_unwind`]), so that the unwinding drops the guards inside the
//! runtime, where their releases can run. What the command had begun is left as it is, as
//! after a crash: an intent that the next recovery finishes.
//!
//! Without this, SIGINT and SIGTERM would end the process at once, and a lease on object
//! storage would keep the gate from every other process until it ran out.
//!
//! `serve` is not run through here: it has a graceful shutdown of its own.
//!
//! [`GateGuard`]: mend::gates::GateGuard

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use mend::gates::Gates;

/// How long an ending command waits for its gates' releases. A release is one small write
/// or one statement; a store that does not answer within this has its leases run out instead.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// A signal that stops a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Interrupt,
    Terminate,
}

impl Signal {
    fn name(self) -> &'static str {
        match self {
            Self::Interrupt => "SIGINT",
            Self::Terminate => "SIGTERM",
        }
    }

    /// 128 plus the signal's number, as a shell reports a process the signal killed.
    fn exit_code(self) -> u8 {
        match self {
            Self::Interrupt => 130,
            Self::Terminate => 143,
        }
    }
}

/// SIGINT and SIGTERM, caught from the moment this is made: until then they end the process
/// at once (nothing is held yet), from then on they cancel the command.
#[derive(Debug)]
pub struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn watch() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use anyhow::Context;
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                interrupt: signal(SignalKind::interrupt()).context("watch SIGINT")?,
                terminate: signal(SignalKind::terminate()).context("watch SIGTERM")?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {})
        }
    }

    /// The next signal.
    pub async fn next(&mut self) -> Signal {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => Signal::Interrupt,
                _ = self.terminate.recv() => Signal::Terminate,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Signal::Interrupt
        }
    }
}

/// Why a command ended before it finished: the error `mend` exits with.
#[derive(Debug, thiserror::Error)]
pub enum Stopped {
    #[error(
        "stopped by {}: the command was cancelled{}",
        signal.name(),
        released_text(*released)
    )]
    Signalled { signal: Signal, released: bool },
    #[error("mend panicked (a bug; the panic is shown above){}", released_text(*released))]
    Panicked { released: bool },
}

impl Stopped {
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Signalled { signal, .. } => signal.exit_code(),
            // What Rust's runtime exits with after a panic.
            Self::Panicked { .. } => 101,
        }
    }
}

fn released_text(released: bool) -> &'static str {
    if released {
        " and the gates it held were released"
    } else {
        "; the gates it held could not all be released in time, their leases run out on their own"
    }
}

/// Runs `command` until it ends, a signal arrives or it panics. Whichever happens, the
/// releases of the gates it dropped are waited for (at most [`RELEASE_WAIT`], or until the
/// next signal) on the gates `opened` holds by then, which the command sets once it has
/// opened them.
pub async fn run_to_end<T>(
    command: impl Future<Output = anyhow::Result<T>>,
    opened: &std::sync::OnceLock<Arc<dyn Gates>>,
    signals: &mut Signals,
) -> anyhow::Result<T> {
    let ended = {
        // Dropped at the end of this block, before the wait below: a cancelled command's
        // guards are dropped here.
        let command = AssertUnwindSafe(command).catch_unwind();
        tokio::select! {
            ended = command => match ended {
                Ok(result) => Ok(result),
                // The panic hook printed the message when it happened.
                Err(_panic) => Err(Ended::Panicked),
            },
            signal = signals.next() => Err(Ended::Signalled(signal)),
        }
    };
    let released = match opened.get() {
        None => true,
        Some(gates) => tokio::select! {
            () = gates.wait_for_releases() => true,
            () = tokio::time::sleep(RELEASE_WAIT) => false,
            _ = signals.next() => false,
        },
    };
    match ended {
        Ok(result) => result,
        Err(Ended::Signalled(signal)) => Err(Stopped::Signalled { signal, released }.into()),
        Err(Ended::Panicked) => Err(Stopped::Panicked { released }.into()),
    }
}

enum Ended {
    Signalled(Signal),
    Panicked,
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, OnceLock};
    use std::time::Duration;

    use mend::gates::{GateName, GateSession, Gates, open_gates_as};

    use super::{Signals, Stopped, run_to_end};

    /// A command that panics while it holds a gate on object storage: the panic unwinds
    /// through the guard, whose release lands before `run_to_end` returns, so another
    /// process's gates find the gate free at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_releases_the_gates_the_command_held() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = dir.path().to_str().unwrap();
        let gates = open_gates_as(catalog, "mend test", mend::gates::DEFAULT_LEASE_DURATION)
            .await
            .unwrap();
        let opened = OnceLock::new();
        let _ = opened.set(Arc::clone(&gates));
        let name = GateName::dataset("d1");
        let mut signals = Signals::watch().unwrap();
        let command = async {
            let _held = gates
                .acquire_one(&GateSession::new(), name.clone(), Duration::from_secs(5))
                .await?;
            if name.dataset_id() == "d1" {
                panic!("a bug while holding the {name}");
            }
            Ok(())
        };
        let error = run_to_end(command, &opened, &mut signals)
            .await
            .expect_err("a panic is an error");
        let stopped = error.downcast_ref::<Stopped>().expect("Stopped");
        assert!(
            matches!(stopped, Stopped::Panicked { released: true }),
            "{stopped:?}"
        );
        assert_eq!(stopped.exit_code(), 101);

        let other: Arc<dyn Gates> = open_gates_as(
            catalog,
            "another process",
            mend::gates::DEFAULT_LEASE_DURATION,
        )
        .await
        .unwrap();
        other
            .acquire_one(&GateSession::new(), name, Duration::ZERO)
            .await
            .expect("the gate is free at once");
        println!("cli panic releases gates: 3 checks");
    }
}
