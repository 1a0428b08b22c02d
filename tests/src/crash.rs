//! Recovery after a crash, shared by the crash-schedule tests.

use std::sync::Arc;

use mend::engine::Outcome;
use mend::faults::CrashAt;
use mend_policy::RecoveryMode;

use crate::Harness;

/// Recovers `dataset_id`: first, when `crash_at` is given, with a crash at that durable write
/// of the sweeps (an odd step crashes before its write, an even one after it), one sweep per
/// mode of `modes`; then cleanly, one sweep per mode in turn until a sweep executes everything
/// it found. Returns how many durable writes the crashing sweeps reached, so that a caller
/// walking `crash_at` upwards knows when every step has had its crash.
pub async fn recover_after_crash(
    h: &Harness,
    dataset_id: &str,
    crash_at: Option<usize>,
    modes: &[RecoveryMode],
) -> usize {
    let mut reached = 0;
    if let Some(step) = crash_at {
        let crash = Arc::new(CrashAt::new(step, step % 2 == 0));
        let crashing = h.engine.with_faults(crash.clone());
        for mode in modes {
            let _ = crashing.recover(dataset_id, *mode).await;
        }
        reached = crash.steps().len();
    }
    for mode in modes {
        let report = h.engine.recover(dataset_id, *mode).await.unwrap();
        if report
            .intents
            .iter()
            .all(|i| i.outcome == Outcome::Executed)
        {
            break;
        }
    }
    reached
}
