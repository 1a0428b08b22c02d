//! Audit records: one per recovery decision a sweep acts on (and per gc plan and reconcile
//! decision), so that every decision can be traced to the policy that made it and replayed
//! from the inputs it saw.
//!
//! A record names the policy by digest and semantics revision, hashes the observation the
//! policy was given (sha256 of its canonical JSON), and keeps the decision and what the host
//! did with it. Probe and verify sweeps write no records: they write nothing at all.
//!
//! A decision the host executes is recorded twice: with the outcome `executing` before its
//! first effect, and with its settled outcome after. An `executing` record with no settled
//! record after it means the process stopped (or the second append failed) while executing:
//! any part of the decision may have landed. Whether it finished is told by the operation's
//! intent: gone means finished (deleting it is always the last step), still there means the
//! next sweep observes what landed and decides again (see `engine::recovery`).
//!
//! Both backends store an append as batches of up to [`RECORDS_PER_BATCH`] records, each in
//! one body ([`encode_batch`], [`decode_batch`]): a Postgres row, an object-store object.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::{MendError, Result};
use crate::model::TimestampMs;

/// The audit format this host writes and the newest it reads.
pub const AUDIT_FORMAT_VERSION: u32 = 1;

/// One decision, the policy that made it and what the host did with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// [`AUDIT_FORMAT_VERSION`] when written by this host.
    pub format_version: u32,
    /// The dataset the decision was about.
    pub dataset_id: String,
    /// The operation decided about (a sweep's intent, a gc run, a reconcile).
    pub operation_id: String,
    /// When the record was appended.
    pub recorded_at_ms: TimestampMs,
    /// `probe`, `roll-forward`, `exclusive` or `verify`.
    pub mode: String,
    /// `sha256:<hex>` of the policy component that decided.
    pub policy_digest: String,
    /// The policy's semantics revision (see the WIT contract).
    pub semantics_revision: u32,
    /// `sha256:<hex>` of the canonical JSON of the observation the policy decided on.
    pub inputs_hash: String,
    /// The decision, as JSON.
    pub decision: serde_json::Value,
    /// What the host did with it, as JSON.
    pub outcome: serde_json::Value,
    /// The policy's whole input for this decision, so that another policy can be asked the
    /// same question ([`crate::runtime::replay`]). Absent in records written before replay
    /// existed; readers of this format that predate it ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<DecisionInput>,
    /// Who acted: the principal of the request ([`crate::Engine::acting_as`]), a server's
    /// supervisor (`supervisor@REPLICA`), or `cli`. Absent in records written before
    /// principals existed, and by an engine no one named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

/// What `mend audit` and `GET /v1/datasets/{dataset}/audit` show of a record: who did what,
/// when, with which policy, and what came of it (the policy's whole input, which a record
/// keeps for replay, is left out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// When the record was appended.
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub recorded_at_ms: TimestampMs,
    /// Who acted, if the record names it (records written before principals existed do not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// What was run: `roll-forward`, `exclusive`, `gc` or `reconcile` for a decision; for a
    /// write, the request that made it (`stage`, `publish`, `begin`, ...).
    pub mode: String,
    /// The operation decided about.
    pub operation_id: String,
    /// The decision, as JSON; for a write, the step and what it named
    /// (`{"step": "stage", "what": {"count": 2, "ids": [...]}}`).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub decision: serde_json::Value,
    /// What the host did with it, as JSON (`executing` until it settled); for a write, the
    /// step's answer, summarised.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub outcome: serde_json::Value,
    /// The policy that decided; empty (and left out) for a write, which no policy decided.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy_digest: String,
}

impl From<&AuditRecord> for AuditEntry {
    fn from(record: &AuditRecord) -> Self {
        Self {
            recorded_at_ms: record.recorded_at_ms,
            principal: record.principal.clone(),
            mode: record.mode.clone(),
            operation_id: record.operation_id.clone(),
            decision: record.decision.clone(),
            outcome: record.outcome.clone(),
            policy_digest: record.policy_digest.clone(),
        }
    }
}

/// What a policy was asked, as an audit record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "kebab-case")]
pub enum DecisionInput {
    /// One intent of a recovery sweep.
    DecideRecovery {
        /// The dataset.
        dataset_id: String,
        /// The sweep's mode.
        mode: mend_contract::RecoveryMode,
        /// The sweep's time.
        now_ms: TimestampMs,
        /// What the host observed of the intent.
        intent: mend_contract::IntentObservation,
    },
    /// One orphan of a reconcile.
    PlanReconcile {
        /// The dataset.
        dataset_id: String,
        /// The reconcile's time.
        now_ms: TimestampMs,
        /// What the host found of the orphan object.
        orphan: mend_contract::OrphanObject,
    },
    /// One gc run (ABI 1.3).
    PlanGc {
        /// The gc planning input.
        input: mend_contract::GcInput,
    },
}

/// The outcome of a record written before its decision is executed.
pub const OUTCOME_EXECUTING: &str = "executing";

impl AuditRecord {
    /// Whether this is the record written before executing (outcome `executing`).
    pub fn is_executing(&self) -> bool {
        self.outcome
            .get("outcome")
            .or(Some(&self.outcome))
            .and_then(serde_json::Value::as_str)
            == Some(OUTCOME_EXECUTING)
    }
}

/// Refuses a whole append, before anything is written, unless every record names
/// `dataset_id` and is in this host's format.
pub fn check_append(dataset_id: &str, records: &[AuditRecord]) -> Result<()> {
    for record in records {
        if record.dataset_id != dataset_id {
            return Err(MendError::invalid(format!(
                "audit record of operation {} names dataset {}, not {dataset_id}; append it with the records of its own dataset",
                record.operation_id, record.dataset_id
            )));
        }
        if record.format_version != AUDIT_FORMAT_VERSION {
            return Err(MendError::invalid(format!(
                "audit record of operation {} has format version {}; this mend writes only version {AUDIT_FORMAT_VERSION}",
                record.operation_id, record.format_version
            )));
        }
    }
    Ok(())
}

/// Parses a stored record, reading its version first so that a record from a newer mend is
/// refused as such rather than as whatever field it happens to have changed. `what` names
/// the record in errors.
pub fn parse_stored(body: &[u8], what: &str) -> Result<AuditRecord> {
    #[derive(Deserialize)]
    struct Version {
        format_version: u32,
    }
    let unreadable = |error: serde_json::Error| MendError::Corrupt {
        message: format!("{what} is unreadable: {error}"),
    };
    let Version { format_version } = serde_json::from_slice(body).map_err(unreadable)?;
    if format_version == 0 || format_version > AUDIT_FORMAT_VERSION {
        let origin = if format_version == 0 {
            "no mend writes it"
        } else {
            "a newer mend wrote it; upgrade before reading this dataset's audit trail"
        };
        return Err(MendError::Corrupt {
            message: format!(
                "{what} has format version {format_version}, but this mend reads only versions 1 to {AUDIT_FORMAT_VERSION}: {origin}"
            ),
        });
    }
    serde_json::from_slice(body).map_err(unreadable)
}

/// The most records one stored batch holds: an append of a recovery sweep's batch (up to
/// 1,000 decisions) fits in one, and a batch stays small enough to read in one request. A
/// larger append is stored as several batches.
pub const RECORDS_PER_BATCH: usize = 1_000;

/// The format of a stored batch: `{"format_version": 2, "records": [<record>, ...]}`. Its
/// number follows format 1, a record stored on its own, which earlier mends wrote and this
/// one still reads.
pub const BATCH_FORMAT: u32 = 2;

#[derive(Serialize)]
struct BatchOut<'a> {
    format_version: u32,
    records: &'a [AuditRecord],
}

/// The body of a batch of `records` (at most [`RECORDS_PER_BATCH`], checked by the caller's
/// [`check_append`]).
pub fn encode_batch(records: &[AuditRecord]) -> Vec<u8> {
    serde_json::to_vec(&BatchOut {
        format_version: BATCH_FORMAT,
        records,
    })
    .expect("audit records are plain data and serialise")
}

/// The records of a stored batch, in order. A body of a newer batch format, or holding a
/// record of a newer format, is refused as a newer mend's (`Corrupt`, saying to upgrade),
/// never read as whatever its fields happen to be; `what` names the batch in errors.
pub fn decode_batch(body: &[u8], what: &str) -> Result<Vec<AuditRecord>> {
    #[derive(Deserialize)]
    struct Version {
        format_version: u32,
    }
    #[derive(Deserialize)]
    struct BatchIn {
        records: Vec<Box<RawValue>>,
    }
    let unreadable = |error: serde_json::Error| MendError::Corrupt {
        message: format!("{what} is unreadable: {error}"),
    };
    let Version { format_version } = serde_json::from_slice(body).map_err(unreadable)?;
    if format_version != BATCH_FORMAT {
        let origin = if format_version > BATCH_FORMAT {
            "a newer mend wrote it; upgrade before reading this dataset's audit trail"
        } else {
            "no mend writes batches in it"
        };
        return Err(MendError::Corrupt {
            message: format!(
                "{what} has batch format version {format_version}, but this mend reads only version {BATCH_FORMAT}: {origin}"
            ),
        });
    }
    let batch: BatchIn = serde_json::from_slice(body).map_err(unreadable)?;
    batch
        .records
        .iter()
        .enumerate()
        .map(|(index, raw)| {
            parse_stored(raw.get().as_bytes(), &format!("record {index} of {what}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(operation_id: &str, recorded_at_ms: TimestampMs) -> AuditRecord {
        AuditRecord {
            format_version: AUDIT_FORMAT_VERSION,
            dataset_id: "logs".into(),
            operation_id: operation_id.into(),
            recorded_at_ms,
            mode: "roll-forward".into(),
            policy_digest: "sha256:policy".into(),
            semantics_revision: 1,
            inputs_hash: "sha256:inputs".into(),
            decision: serde_json::json!("roll-forward"),
            outcome: serde_json::json!({ "outcome": "executed" }),
            inputs: None,
            principal: Some("cli".into()),
        }
    }

    fn is_corrupt_saying(result: Result<Vec<AuditRecord>>, says: &str) -> bool {
        matches!(result, Err(MendError::Corrupt { message }) if message.contains(says))
    }

    #[test]
    fn a_batch_decodes_to_its_records_in_order() {
        let records = vec![record("op-2", 2_000), record("op-1", 1_000)];
        let body = encode_batch(&records);
        let as_json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(as_json["format_version"], BATCH_FORMAT);
        assert_eq!(decode_batch(&body, "batch").unwrap(), records);
        assert_eq!(decode_batch(&encode_batch(&[]), "batch").unwrap(), []);
    }

    #[test]
    fn a_batch_of_another_format_or_holding_a_newer_record_is_refused() {
        let mut newer_batch: serde_json::Value =
            serde_json::from_slice(&encode_batch(&[record("op-1", 1)])).unwrap();
        newer_batch["format_version"] = serde_json::json!(BATCH_FORMAT + 1);
        let newer_batch = serde_json::to_vec(&newer_batch).unwrap();
        assert!(is_corrupt_saying(
            decode_batch(&newer_batch, "b"),
            "newer mend"
        ));

        let mut newer_record = record("op-1", 1);
        newer_record.format_version = AUDIT_FORMAT_VERSION + 1;
        let holding_newer = encode_batch(&[record("op-0", 0), newer_record]);
        assert!(is_corrupt_saying(
            decode_batch(&holding_newer, "b"),
            "record 1 of b has format version"
        ));

        let single = serde_json::to_vec(&record("op-1", 1)).unwrap();
        assert!(is_corrupt_saying(
            decode_batch(&single, "b"),
            "no mend writes"
        ));
        assert!(is_corrupt_saying(
            decode_batch(b"{\"format_version\": 2", "b"),
            "unreadable"
        ));
    }
}
