//! The range of every number that enters mend, and the only time arithmetic it does.
//!
//! Settings (`config.rs`), dataset configs and requests (`validate.rs`) check each number
//! against its [`Bound`] here, once, where it enters; a value out of range is refused with
//! [`MendError::InvalidArgument`] naming the field and its range, and nothing happens. Past
//! that edge, numbers are trusted, but time is still only moved with [`ms_before`] and
//! [`ms_after`], which saturate: a stored value from an older version, or a caller of the
//! library who skipped validation, can make a cutoff reach the beginning or the end of time,
//! never wrap around it. (A grace period of `u64::MAX` once wrapped `now - grace` into the
//! future and let gc delete splits staged a moment before.)

use std::fmt;

use crate::error::{MendError, Result};
use crate::model::TimestampMs;

/// A day, in milliseconds.
const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// The longest grace period a dataset may have: 100 years. Long enough to mean "keep",
/// short enough that `now - grace` stays far from the ends of `i64`.
pub const MAX_GRACE_PERIOD_MS: u64 = 36_525 * DAY_MS;

/// The inclusive range of one number, and the name it is known by where it enters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// The field, key or parameter as its user writes it (`staged_grace_period_ms`).
    pub name: &'static str,
    /// The smallest value allowed.
    pub min: u64,
    /// The largest value allowed.
    pub max: u64,
}

/// A dataset's `staged_grace_period_ms`. Zero would collect splits while they are being
/// written.
pub const STAGED_GRACE_PERIOD_MS: Bound =
    Bound::new("staged_grace_period_ms", 1, MAX_GRACE_PERIOD_MS);
/// A dataset's `deletion_grace_period_ms`.
pub const DELETION_GRACE_PERIOD_MS: Bound =
    Bound::new("deletion_grace_period_ms", 0, MAX_GRACE_PERIOD_MS);
/// Splits in one stage request (the `limits.max_stage_batch` setting's own range).
pub const STAGE_BATCH: Bound = Bound::new("limits.max_stage_batch", 1, 100_000);
/// Bytes of one split's metadata (the `limits.max_metadata_bytes` setting's own range):
/// at most half of the largest object header, which embeds the metadata.
pub const METADATA_BYTES: Bound = Bound::new("limits.max_metadata_bytes", 2, 512 << 10);
/// Splits in one page of a listing (the `limits.max_list_page` setting's own range).
pub const LIST_PAGE: Bound = Bound::new("limits.max_list_page", 1, 100_000);
/// A policy decision's memory, all its memories together: at least a few wasm pages, at most
/// what wasm32 can address.
pub const POLICY_MEMORY_BYTES: Bound = Bound::new("limits.policy_memory_bytes", 1 << 20, 4 << 30);
/// Core instances one instantiation of a policy may create: a Rust policy is one, a
/// JavaScript engine with its shims a handful, a composition of components more.
pub const POLICY_CORE_INSTANCES: Bound = Bound::new("limits.policy_core_instances", 1, 32);
/// Linear memories one instantiation of a policy may define. Each reserves address space (not
/// memory) for the largest memory allowed in every sandbox of the pool, so the range is small.
pub const POLICY_MEMORIES: Bound = Bound::new("limits.policy_memories", 1, 8);
/// Tables one instantiation of a policy may define.
pub const POLICY_TABLES: Bound = Bound::new("limits.policy_tables", 1, 32);
/// A policy decision's running time, in ms: one epoch tick to a minute.
pub const POLICY_CPU_TIME_MS: Bound = Bound::new("limits.policy_cpu_time_ms", 10, 60_000);
/// A policy decision's answer, in bytes.
pub const POLICY_OUTPUT_BYTES: Bound = Bound::new("limits.policy_output_bytes", 1 << 10, 1 << 30);
/// How long an operation waits for its gates, in ms (0: try once).
pub const GATE_TIMEOUT_MS: Bound = Bound::new("limits.gate_timeout_ms", 0, DAY_MS);
/// How long an object-store gate's lease lasts unless renewed, in ms: how long a process that
/// died holding a gate keeps it from the others. Renewed every third of it, so a second at least.
pub const GATE_LEASE_MS: Bound = Bound::new("limits.gate_lease_ms", 1_000, DAY_MS);
/// How long an intent's owner may still be working, in ms. A lease under a second would let
/// recovery take over from a live writer between two of its steps.
pub const INTENT_LEASE_MS: Bound = Bound::new("limits.intent_lease_ms", 1_000, 7 * DAY_MS);
/// The lease an operation's writer asks for at begin or in a heartbeat, in ms: the range of
/// the `limits.intent_lease_ms` setting.
pub const OPERATION_LEASE_MS: Bound = Bound::new("lease_ms", 1_000, 7 * DAY_MS);
/// The payload of one split object an operation plans, in bytes: up to 5 TiB, the largest
/// object S3 stores.
pub const OBJECT_PAYLOAD_BYTES: Bound = Bound::new("size", 0, 5 << 40);
/// The default grace periods of new datasets (settings) have the datasets' own ranges.
pub const DEFAULT_STAGED_GRACE_PERIOD_MS: Bound =
    Bound::new("grace.staged_grace_period_ms", 1, MAX_GRACE_PERIOD_MS);
/// The same, for the other grace period.
pub const DEFAULT_DELETION_GRACE_PERIOD_MS: Bound =
    Bound::new("grace.deletion_grace_period_ms", 0, MAX_GRACE_PERIOD_MS);
/// How often a server's supervisors run, in ms.
pub const SUPERVISOR_INTERVAL_MS: Bound =
    Bound::new("serve.supervisor_interval_ms", 10, 60 * 60 * 1000);
/// The longest a failing supervisor waits, in ms.
pub const SUPERVISOR_MAX_BACKOFF_MS: Bound =
    Bound::new("serve.supervisor_max_backoff_ms", 10, DAY_MS);
/// How long a fleet member's lease lasts, in ms ([`crate::fleet::check_member_lease`]).
pub const MEMBER_LEASE_MS: Bound = Bound::new("serve.member_lease_ms", 200, 600_000);
/// A supervisor's full scan of every dataset, every this many rounds.
pub const SUPERVISOR_FULL_SCAN_EVERY: Bound =
    Bound::new("serve.supervisor_full_scan_every", 1, 1_000_000);
/// Connections a server keeps open.
pub const SERVE_MAX_CONNECTIONS: Bound = Bound::new("serve.max_connections", 1, 100_000);
/// From a request head's first byte to its last, in ms.
pub const SERVE_HEADER_READ_TIMEOUT_MS: Bound =
    Bound::new("serve.header_read_timeout_ms", 100, 600_000);
/// From a request head's end to its body's end, in ms.
pub const SERVE_BODY_READ_TIMEOUT_MS: Bound =
    Bound::new("serve.body_read_timeout_ms", 100, 3_600_000);
/// How long a connection may wait for its next request, in ms.
pub const SERVE_IDLE_TIMEOUT_MS: Bound = Bound::new("serve.idle_timeout_ms", 100, 3_600_000);
/// How long a shutdown lets requests being answered finish, in ms.
pub const SERVE_SHUTDOWN_DEADLINE_MS: Bound =
    Bound::new("serve.shutdown_deadline_ms", 0, 3_600_000);
/// Writes a server admits at once, overall and per dataset.
pub const SERVE_MAX_QUEUED_WRITES: Bound = Bound::new("serve.max_queued_writes", 1, 100_000);
/// The same, for one dataset.
pub const SERVE_MAX_QUEUED_WRITES_PER_DATASET: Bound =
    Bound::new("serve.max_queued_writes_per_dataset", 1, 100_000);
/// Requests one principal may make per second on a server (its burst: as many at once).
pub const SERVE_PRINCIPAL_REQUESTS_PER_SECOND: Bound =
    Bound::new("serve.principal_requests_per_second", 1, 1_000_000);
/// Writes one principal may have in flight on a server.
pub const SERVE_PRINCIPAL_MAX_WRITES: Bound = Bound::new("serve.principal_max_writes", 1, 100_000);
/// Bytes of a policy component (or scenarios file) an admin request may upload or name.
pub const SERVE_MAX_ADMIN_COMPONENT_BYTES: Bound =
    Bound::new("serve.max_admin_component_bytes", 1024, 1 << 30);
/// Bytes of one JSON request body of the server (every route but the uploads). Its default
/// holds the largest legal request under the default `limits.*`; `mend serve` refuses to start
/// with a cap that cannot hold the largest request its `limits.*` allow.
pub const SERVE_MAX_JSON_BODY_BYTES: Bound =
    Bound::new("serve.max_json_body_bytes", 1 << 20, 1 << 30);
/// How long `mend request` waits, from connecting to the answer's last byte (`--timeout-ms`):
/// a millisecond to an hour, the longest a server reads a request body.
pub const REQUEST_TIMEOUT_MS: Bound = Bound::new("--timeout-ms", 1, 3_600_000);
/// Audit records `mend audit` (and its route) reads, newest first.
pub const AUDIT_LIMIT: Bound = Bound::new("limit", 1, 100_000);
/// Audit records a policy replay reads: the newest of the whole catalog, every dataset's
/// together.
pub const REPLAY_RECORDS: Bound = Bound::new("records", 1, 100_000);
/// Entries of a dataset's `policy_params`.
pub const POLICY_PARAMS: Bound = Bound::new("policy_params", 0, 64);
/// Bytes of one policy parameter's value.
pub const POLICY_PARAM_VALUE_BYTES: Bound = Bound::new("policy_params value", 0, 4096);
/// Partitions one checkpoint delta moves. A delta is one source's move in one publish; a
/// source with more partitions moves them in several publishes.
pub const CHECKPOINT_DELTA_PARTITIONS: Bound =
    Bound::new("partitions per checkpoint delta", 1, 1_000);
/// Partitions a dataset's checkpoint holds, all sources together. Every publish reads and
/// writes the whole checkpoint, and a partition, once there, stays for the dataset's life.
pub const CHECKPOINT_PARTITIONS: Bound = Bound::new("partitions per dataset checkpoint", 0, 10_000);
/// A partition's position, `from_position` and `to_position` alike: at most `i64::MAX`, the
/// largest a signed 64-bit column stores (and the largest number every JSON reader reads
/// exactly). A position moves only forward, so a partition at the top stays there.
pub const CHECKPOINT_POSITION: Bound = Bound::new("position", 0, i64::MAX as u64);

/// The limits that are not settings, as the table of fixed limits in docs/src/configuration.md lists them.
pub const FIXED: [Bound; 5] = [
    POLICY_PARAMS,
    POLICY_PARAM_VALUE_BYTES,
    CHECKPOINT_DELTA_PARTITIONS,
    CHECKPOINT_PARTITIONS,
    CHECKPOINT_POSITION,
];

impl Bound {
    /// The range `min..=max` of the number called `name`.
    pub const fn new(name: &'static str, min: u64, max: u64) -> Self {
        Self { name, min, max }
    }

    /// `value` if it is in range; otherwise the error naming the field and its range.
    pub fn check(self, value: u64) -> Result<u64> {
        self.within(value)
            .map_err(|problem| MendError::invalid(problem.to_string()))
    }

    /// The same check for a `usize` (a count or a size).
    pub fn check_usize(self, value: usize) -> Result<usize> {
        self.check(u64::try_from(value).unwrap_or(u64::MAX))
            .map(|_| value)
    }

    /// `value` if it is in range; otherwise what is wrong with it, for callers with errors of
    /// their own (the settings name where the value came from).
    pub fn within(self, value: u64) -> std::result::Result<u64, OutOfRange> {
        if (self.min..=self.max).contains(&value) {
            Ok(value)
        } else {
            Err(OutOfRange {
                bound: self,
                value: value.to_string(),
            })
        }
    }

    /// The error for a value that is not even a whole number in `u64` (negative, too large
    /// or not a number), quoting at most its first 32 characters.
    pub fn not_a_number(self, text: &str) -> OutOfRange {
        OutOfRange {
            bound: self,
            value: format!("{:?}", truncated(text, 32)),
        }
    }
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..={}", self.min, self.max)
    }
}

/// A number outside its [`Bound`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfRange {
    /// The range it is outside.
    pub bound: Bound,
    /// The value as given (a number, or quoted text that is not one).
    pub value: String,
}

impl fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is {}, out of its range {}",
            self.bound.name, self.value, self.bound
        )
    }
}

impl std::error::Error for OutOfRange {}

impl From<OutOfRange> for MendError {
    fn from(problem: OutOfRange) -> Self {
        MendError::invalid(problem.to_string())
    }
}

/// `at` moved back by `ms`, stopping at the beginning of time rather than wrapping.
pub fn ms_before(at: TimestampMs, ms: u64) -> TimestampMs {
    at.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// `at` moved on by `ms`, stopping at the end of time rather than wrapping.
pub fn ms_after(at: TimestampMs, ms: u64) -> TimestampMs {
    at.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// How much of a refused value an error quotes: enough to find it, never a whole payload.
pub const QUOTED_CHARS: usize = 64;

/// What a refused value looks like in an error: its first `chars` characters, with `…` when
/// there were more.
pub fn truncated(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_names_its_field_and_range() {
        assert_eq!(STAGED_GRACE_PERIOD_MS.check(1).unwrap(), 1);
        assert_eq!(
            STAGED_GRACE_PERIOD_MS.check(MAX_GRACE_PERIOD_MS).unwrap(),
            MAX_GRACE_PERIOD_MS
        );
        for bad in [0, MAX_GRACE_PERIOD_MS + 1, u64::MAX] {
            let message = STAGED_GRACE_PERIOD_MS.check(bad).unwrap_err().to_string();
            assert!(message.contains("staged_grace_period_ms"), "{message}");
            assert!(
                message.contains(&format!("1..={MAX_GRACE_PERIOD_MS}")),
                "{message}"
            );
        }
    }

    #[test]
    fn time_arithmetic_saturates() {
        assert_eq!(ms_before(1_000, u64::MAX), 1_000 - i64::MAX);
        assert_eq!(ms_before(-1_000, u64::MAX), i64::MIN);
        assert_eq!(ms_before(i64::MIN, 1), i64::MIN);
        assert_eq!(ms_after(1_000, u64::MAX), i64::MAX);
        assert_eq!(ms_after(i64::MAX, 1), i64::MAX);
        assert_eq!(ms_before(1_000, 10), 990);
        assert_eq!(ms_after(1_000, 10), 1_010);
        // The cutoff of the longest grace period stays ordered with every real time.
        let now = 1_800_000_000_000;
        assert!(ms_before(now, MAX_GRACE_PERIOD_MS) < 0);
    }
}
