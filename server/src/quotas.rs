//! Per-principal limits, so that one noisy client cannot take what every other one needs: a
//! request rate (`serve.principal_requests_per_second`, a token bucket holding one second's
//! worth) and writes in flight (`serve.principal_max_writes`, of the server's
//! `serve.max_queued_writes`). Past either, the answer is 429 with `Retry-After`, before the
//! request is read, so nothing is applied.
//!
//! A write is every request other than GET and HEAD. Its slot is taken when it arrives
//! (`Quotas::admit`, by the access check) and held until its answer is made and, for a write
//! admitted to run on its own task, until that write ends: the admission takes a share of the
//! slot (from `crate::access::answering`) into its ticket, so a client that disconnects does
//! not free a slot while its write still runs.
//!
//! Requests without a credential (the principal `anonymous`, on a loopback server without a
//! tokens file) are held only by the server-wide limits: they are one principal for every
//! client, so a per-principal limit would be a second server-wide one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The limits each principal is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrincipalLimits {
    /// Requests a principal may make per second, on average; as many at once.
    pub requests_per_second: u32,
    /// Writes a principal may have in flight at once.
    pub max_writes: usize,
}

impl Default for PrincipalLimits {
    fn default() -> Self {
        Self {
            requests_per_second: 1_000,
            max_writes: 256,
        }
    }
}

/// Why a request was refused, and how long to wait before a retry may pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OverLimit {
    Rate { limit: u32, retry_after: Duration },
    Writes { limit: usize },
}

/// Each principal's bucket and writes in flight.
#[derive(Debug)]
pub(crate) struct Quotas {
    limits: PrincipalLimits,
    principals: Mutex<HashMap<String, Quota>>,
}

#[derive(Debug)]
struct Quota {
    /// Requests it may still make now.
    tokens: f64,
    refilled: Instant,
    writes: Arc<AtomicUsize>,
}

/// A write's place among its principal's writes in flight; freed when the last share of it
/// is dropped.
#[derive(Debug)]
pub(crate) struct WriteSlot {
    writes: Arc<AtomicUsize>,
}

impl Drop for WriteSlot {
    fn drop(&mut self) {
        self.writes.fetch_sub(1, Ordering::SeqCst);
    }
}

/// When more principals than this are remembered, those with no write in flight are
/// forgotten (a forgotten principal starts again with a full bucket). A tokens file names at
/// most [`crate::auth::MAX_PRINCIPALS`].
const MAX_REMEMBERED: usize = 2 * crate::auth::MAX_PRINCIPALS;

impl Quotas {
    pub(crate) fn new(limits: PrincipalLimits) -> Self {
        Self {
            limits,
            principals: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request from `principal`'s bucket and, for a write, a slot among its writes
    /// in flight; refuses (and takes nothing) past either limit.
    pub(crate) fn admit(
        &self,
        principal: &str,
        write: bool,
        now: Instant,
    ) -> Result<Option<Arc<WriteSlot>>, OverLimit> {
        let rate = f64::from(self.limits.requests_per_second);
        let mut principals = self
            .principals
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if principals.len() >= MAX_REMEMBERED && !principals.contains_key(principal) {
            principals.retain(|_, quota| quota.writes.load(Ordering::SeqCst) > 0);
        }
        let quota = principals
            .entry(principal.to_owned())
            .or_insert_with(|| Quota {
                tokens: rate,
                refilled: now,
                writes: Arc::new(AtomicUsize::new(0)),
            });
        let elapsed = now.saturating_duration_since(quota.refilled).as_secs_f64();
        quota.tokens = (quota.tokens + elapsed * rate).min(rate);
        quota.refilled = now;
        if quota.tokens < 1.0 {
            let wait = (1.0 - quota.tokens) / rate;
            return Err(OverLimit::Rate {
                limit: self.limits.requests_per_second,
                retry_after: Duration::from_secs_f64(wait),
            });
        }
        let slot = if write {
            if quota.writes.load(Ordering::SeqCst) >= self.limits.max_writes {
                return Err(OverLimit::Writes {
                    limit: self.limits.max_writes,
                });
            }
            quota.writes.fetch_add(1, Ordering::SeqCst);
            Some(Arc::new(WriteSlot {
                writes: quota.writes.clone(),
            }))
        } else {
            None
        };
        quota.tokens -= 1.0;
        Ok(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_over_its_rate_waits_and_others_do_not() {
        let quotas = Quotas::new(PrincipalLimits {
            requests_per_second: 10,
            max_writes: 100,
        });
        let start = Instant::now();
        for _ in 0..10 {
            quotas.admit("noisy", false, start).unwrap();
        }
        let Err(OverLimit::Rate { retry_after, .. }) = quotas.admit("noisy", false, start) else {
            panic!("the eleventh request in the same instant passed");
        };
        assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_millis(100));
        // Another principal has a bucket of its own.
        quotas.admit("quiet", false, start).unwrap();
        // A tenth of a second later, one more request may pass, and only one.
        let later = start + Duration::from_millis(100);
        quotas.admit("noisy", false, later).unwrap();
        assert!(quotas.admit("noisy", false, later).is_err());
    }

    #[test]
    fn a_write_slot_is_held_until_every_share_is_dropped() {
        let quotas = Quotas::new(PrincipalLimits {
            requests_per_second: 1_000,
            max_writes: 2,
        });
        let now = Instant::now();
        let first = quotas.admit("w", true, now).unwrap().unwrap();
        let _second = quotas.admit("w", true, now).unwrap().unwrap();
        assert_eq!(
            quotas.admit("w", true, now).unwrap_err(),
            OverLimit::Writes { limit: 2 }
        );
        // Reads are not writes.
        assert!(quotas.admit("w", false, now).unwrap().is_none());
        // The request's share is dropped; the admitted write's share still holds the slot.
        let admitted_write = first.clone();
        drop(first);
        assert!(quotas.admit("w", true, now).is_err());
        drop(admitted_write);
        quotas.admit("w", true, now).unwrap().unwrap();
    }
}
