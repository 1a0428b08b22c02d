//! The engine's ambient inputs: the randomness it draws (operation, lease and commit ids, the
//! jitter of a retry) and the wall clock of the code that is handed no
//! [`Clock`](crate::clock::Clock) (the object-store catalog's marker and log ages).
//!
//! In production both come from the operating system. A deterministic simulation (the
//! `mend-sim` crate) runs the whole engine on one thread and installs a seeded [`Ambient`] on
//! it, so that one seed decides every id and every jitter, and a failing run replays bit for
//! bit. Passing a source through every constructor instead would thread one more parameter
//! through the gates, the fleet and both catalogs for the sake of tests alone; a thread-local
//! override is what simulators of this kind do (madsim intercepts `getrandom` and the clock
//! the same way), and it is only ever set by code that asks for it by name.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use uuid::Uuid;

/// A source of the ambient inputs, installed on one thread with [`install`].
pub trait Ambient: std::fmt::Debug {
    /// 64 random bits.
    fn next_u64(&self) -> u64;
    /// Milliseconds since the Unix epoch.
    fn wall_clock_ms(&self) -> i64;
}

thread_local! {
    static INSTALLED: RefCell<Option<Arc<dyn Ambient>>> = const { RefCell::new(None) };
}

/// While alive, `source` answers this thread's ambient inputs; dropped, the one before it does
/// again.
#[derive(Debug)]
#[must_use = "the source is uninstalled when the guard is dropped"]
pub struct Installed {
    previous: Option<Arc<dyn Ambient>>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let previous = self.previous.take();
        INSTALLED.with(|installed| *installed.borrow_mut() = previous);
    }
}

/// Makes `source` answer this thread's ambient inputs until the guard is dropped.
pub fn install(source: Arc<dyn Ambient>) -> Installed {
    let previous = INSTALLED.with(|installed| installed.borrow_mut().replace(source));
    Installed { previous }
}

fn installed() -> Option<Arc<dyn Ambient>> {
    INSTALLED.with(|installed| installed.borrow().clone())
}

fn random_bytes<const N: usize>(source: &dyn Ambient) -> [u8; N] {
    let mut bytes = [0u8; N];
    for chunk in bytes.chunks_mut(8) {
        let word = source.next_u64().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    bytes
}

/// Whether a deterministic source is installed on this thread: work the engine would hand to
/// another thread (encoding or decoding a checkpoint) is then done in place, since an answer
/// from another thread lands at a moment no seed decides.
pub fn is_deterministic() -> bool {
    INSTALLED.with(|installed| installed.borrow().is_some())
}

/// A random (version 4) UUID.
pub fn uuid_v4() -> Uuid {
    match installed() {
        Some(source) => uuid::Builder::from_random_bytes(random_bytes(source.as_ref())).into_uuid(),
        None => Uuid::new_v4(),
    }
}

/// A time-ordered (version 7) UUID.
pub fn uuid_v7() -> Uuid {
    match installed() {
        Some(source) => {
            let ms = u64::try_from(source.wall_clock_ms()).unwrap_or(0);
            uuid::Builder::from_unix_timestamp_millis(ms, &random_bytes(source.as_ref()))
                .into_uuid()
        }
        None => Uuid::now_v7(),
    }
}

/// A random number below `bound` (0 when `bound` is 0).
pub fn below(bound: u64) -> u64 {
    let bits = match installed() {
        Some(source) => source.next_u64(),
        None => {
            let random = Uuid::new_v4().as_u128();
            (random >> 64) as u64 ^ random as u64
        }
    };
    bits.checked_rem(bound).unwrap_or(0)
}

/// Milliseconds since the Unix epoch, by the wall clock.
pub fn wall_clock_ms() -> i64 {
    match installed() {
        Some(source) => source.wall_clock_ms(),
        None => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
            }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[derive(Debug)]
    struct Counting(AtomicU64);

    impl Ambient for Counting {
        fn next_u64(&self) -> u64 {
            self.0.fetch_add(1, Ordering::SeqCst)
        }
        fn wall_clock_ms(&self) -> i64 {
            1_800_000_000_000
        }
    }

    #[test]
    fn an_installed_source_decides_ids_until_its_guard_is_dropped() {
        let first = {
            let _guard = install(Arc::new(Counting(AtomicU64::new(7))));
            let id = uuid_v4();
            assert_eq!(wall_clock_ms(), 1_800_000_000_000);
            assert_eq!(below(5), 9 % 5, "two words for the uuid, then the third");
            id
        };
        let again = {
            let _guard = install(Arc::new(Counting(AtomicU64::new(7))));
            uuid_v4()
        };
        assert_eq!(first, again, "the same source gives the same id");
        assert_eq!(first.get_version_num(), 4);
        assert_ne!(
            uuid_v4(),
            first,
            "uninstalled: the operating system's randomness"
        );
        assert!(wall_clock_ms() > 1_700_000_000_000);
    }

    #[test]
    fn a_time_ordered_id_reads_the_installed_clock() {
        let _guard = install(Arc::new(Counting(AtomicU64::new(0))));
        let id = uuid_v7();
        assert_eq!(id.get_version_num(), 7);
        let (seconds, _) = id.get_timestamp().expect("v7 has a timestamp").to_unix();
        assert_eq!(seconds, 1_800_000_000);
    }
}
