//! Failed authentications, limited per client address, so that guessing a secret costs time:
//! without a limit, wrong guesses ran at about 9,000 a second (the per-principal limits of
//! `crate::quotas` apply only once a request is known to be someone's).
//!
//! Each address has a bucket of [`BURST`] failures, refilled at [`REFILL_PER_SECOND`]. A
//! failure takes one; an address whose bucket is empty is answered 429 with `Retry-After`
//! before its credential is even looked at, so that a right guess made while limited is not
//! confirmed either. A failure is a credential presented and not known: a wrong or malformed
//! bearer secret, or a client certificate that names no principal. A request with no
//! credential at all guesses nothing and is not counted.
//!
//! Every failure is counted in `mend_authentication_failures_total`, and said at warn, at
//! most once per [`WARN_EVERY`] with how many came since the last word, so that a flood
//! cannot flood the log too.
//!
//! At most [`MAX_ADDRESSES`] addresses are remembered; past that, those whose bucket has
//! refilled are forgotten, and while every remembered one is still limited, a new address
//! shares one bucket with every other new address (so that many addresses are no way around
//! the limit, and memory stays bounded).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The failures an address may make at once.
pub const BURST: u32 = 10;
/// Failures an address may make per second, after its burst.
pub const REFILL_PER_SECOND: f64 = 1.0;
/// The most addresses remembered.
pub const MAX_ADDRESSES: usize = 10_000;
/// The shortest time between two warnings about failed authentications.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// The address of the client a request came from, as the connection saw it (not as a header
/// says: a client can write any header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientAddress(pub(crate) IpAddr);

/// The failures of every address remembered.
#[derive(Debug, Default)]
pub(crate) struct Guessing {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    addresses: HashMap<IpAddr, Bucket>,
    /// The bucket new addresses share while the map is full of limited ones.
    overflow: Option<Bucket>,
    /// When the last warning was logged, and the failures since.
    last_warning: Option<Instant>,
    unreported: u64,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Failures it may still make now.
    tokens: f64,
    refilled: Instant,
}

impl Bucket {
    fn full(now: Instant) -> Self {
        Self {
            tokens: f64::from(BURST),
            refilled: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * REFILL_PER_SECOND).min(f64::from(BURST));
        self.refilled = now;
    }

    /// How long until one failure more is allowed; `None` if one is allowed now.
    fn wait(&self) -> Option<Duration> {
        (self.tokens < 1.0)
            .then(|| Duration::from_secs_f64((1.0 - self.tokens) / REFILL_PER_SECOND))
    }
}

/// What the log should say after a failure: how many failures, from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Warning {
    pub(crate) failures: u64,
    pub(crate) latest_from: IpAddr,
}

impl Guessing {
    /// How long `address` must wait before its credential is looked at again, if it is
    /// limited now.
    pub(crate) fn limited(&self, address: IpAddr, now: Instant) -> Option<Duration> {
        let mut state = self.lock();
        let full = state.addresses.len() >= MAX_ADDRESSES;
        match state.addresses.get_mut(&address) {
            Some(bucket) => {
                bucket.refill(now);
                bucket.wait()
            }
            // A new address shares the overflow bucket only while the map is full.
            None if full => state.overflow.as_mut().and_then(|bucket| {
                bucket.refill(now);
                bucket.wait()
            }),
            None => None,
        }
    }

    /// Takes one failure from `address`'s bucket; says what to log, at most once per
    /// [`WARN_EVERY`].
    pub(crate) fn failed(&self, address: IpAddr, now: Instant) -> Option<Warning> {
        let mut state = self.lock();
        if state.addresses.len() >= MAX_ADDRESSES && !state.addresses.contains_key(&address) {
            state.addresses.retain(|_, bucket| {
                bucket.refill(now);
                bucket.tokens < f64::from(BURST)
            });
        }
        let bucket =
            if state.addresses.len() < MAX_ADDRESSES || state.addresses.contains_key(&address) {
                state
                    .addresses
                    .entry(address)
                    .or_insert_with(|| Bucket::full(now))
            } else {
                state.overflow.get_or_insert_with(|| Bucket::full(now))
            };
        bucket.refill(now);
        bucket.tokens = (bucket.tokens - 1.0).max(0.0);
        state.unreported += 1;
        let due = state
            .last_warning
            .is_none_or(|last| now.saturating_duration_since(last) >= WARN_EVERY);
        if !due {
            return None;
        }
        state.last_warning = Some(now);
        let failures = std::mem::take(&mut state.unreported);
        Some(Warning {
            failures,
            latest_from: address,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(last: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, last])
    }

    #[test]
    fn an_address_is_limited_after_its_burst_and_freed_as_its_bucket_refills() {
        let guessing = Guessing::default();
        let start = Instant::now();
        let (one, other) = (address(1), address(2));
        for failure in 0..BURST {
            assert_eq!(guessing.limited(one, start), None, "failure {failure}");
            guessing.failed(one, start);
        }
        let wait = guessing
            .limited(one, start)
            .expect("limited after its burst");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        // Another address is not held by the first one's failures.
        assert_eq!(guessing.limited(other, start), None);
        // One second later, one more failure is allowed, and then it is limited again.
        let later = start + Duration::from_secs(1);
        assert_eq!(guessing.limited(one, later), None);
        guessing.failed(one, later);
        assert!(guessing.limited(one, later).is_some());
        // After the whole burst's time, its bucket is full again.
        let rested = later + Duration::from_secs(u64::from(BURST));
        for _ in 0..BURST {
            assert_eq!(guessing.limited(one, rested), None);
            guessing.failed(one, rested);
        }
        assert!(guessing.limited(one, rested).is_some());
    }

    #[test]
    fn failures_are_warned_about_at_most_once_per_interval_with_their_count() {
        let guessing = Guessing::default();
        let start = Instant::now();
        assert_eq!(
            guessing.failed(address(1), start),
            Some(Warning {
                failures: 1,
                latest_from: address(1)
            })
        );
        for n in 0..99u8 {
            assert_eq!(
                guessing.failed(address(n), start + Duration::from_secs(1)),
                None
            );
        }
        assert_eq!(
            guessing.failed(address(7), start + WARN_EVERY),
            Some(Warning {
                failures: 100,
                latest_from: address(7)
            })
        );
    }

    #[test]
    fn past_the_most_addresses_new_ones_share_one_bucket() {
        let guessing = Guessing::default();
        let now = Instant::now();
        let many = |n: usize| IpAddr::from((n as u128 + 1).to_be_bytes());
        for n in 0..MAX_ADDRESSES {
            guessing.failed(many(n), now);
        }
        assert_eq!(guessing.lock().addresses.len(), MAX_ADDRESSES);
        // New addresses, each failing once, exhaust their shared bucket after one burst.
        for n in 0..BURST as usize {
            let newcomer = many(MAX_ADDRESSES + n);
            assert_eq!(guessing.limited(newcomer, now), None, "newcomer {n}");
            guessing.failed(newcomer, now);
        }
        assert!(guessing.limited(many(MAX_ADDRESSES + 100), now).is_some());
        assert_eq!(
            guessing.lock().addresses.len(),
            MAX_ADDRESSES,
            "memory stays bounded"
        );
        // Once the remembered buckets have refilled, they are forgotten for a new address.
        let later = now + Duration::from_secs(60);
        guessing.failed(many(2 * MAX_ADDRESSES), later);
        assert_eq!(guessing.lock().addresses.len(), 1);
    }
}
