//! The audit trail of writes: who changed a dataset, when, what and with what answer.
//!
//! Every write the engine makes for a request (create, config, token, fence, stage, publish,
//! mark, delete, an operation's begin, upload, publish and abort, gc, reconcile, recovery) is
//! recorded by the backend **in the atomic step of the write itself**: a row of `write_audit`
//! in the same Postgres transaction, one more action of the same object-store commit. A change
//! cannot land without its record, and a step that fails, or changes nothing, records nothing.
//!
//! Who and which request come from the engine: it runs each request inside a [`WriteScope`]
//! ([`within`]), which the backend reads in its step ([`pending`]); what the step did (its
//! name, the ids it names, its answer) comes from the backend, which alone sees the step.
//! A write outside any scope (a heartbeat's lease renewal, a test calling a backend) records
//! nothing. The scope is the one thing passed around implicitly, like a tracing span: the
//! alternative, a record threaded through every write of the [`Catalog`](super::Catalog)
//! trait, would make every backend and every caller build one for writes no one asked for.
//!
//! These records are kept apart from the policy's decisions ([`crate::audit`]): a policy
//! swap replays decisions, and a trail of millions of stages must not slow it down.
//! `mend audit` and the audit route read both, merged by time.

use std::future::Future;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::audit::AuditEntry;
use crate::error::{MendError, Result};
use crate::model::TimestampMs;
use crate::objects::format::sha256;

/// The capability of a backend that keeps the trail: records every write of a scope in its
/// step and lists them ([`Catalog::list_write_audit`](super::Catalog::list_write_audit)).
pub const WRITE_AUDIT: &str = "write.audit";

/// The write-record format this host writes and the newest it reads.
pub const WRITE_FORMAT_VERSION: u32 = 1;

/// Most ids a record lists by name; more are recorded as their count and a digest.
pub const MAX_LISTED_IDS: usize = 32;

/// Most bytes of an answer's JSON a record keeps; a larger answer is kept as its digest.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024;

/// Who is writing, and for which request: set by the engine around a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteScope {
    /// The principal ([`crate::Engine::acting_as`]); `None` for an engine no one named.
    pub principal: Option<String>,
    /// What was asked: `create`, `stage`, `publish`, `gc`, ... (the kind `mend audit --kind`
    /// filters on).
    pub kind: String,
    /// The operation the request is about, if any.
    pub operation_id: Option<String>,
}

tokio::task_local! {
    static SCOPE: Arc<WriteScope>;
}

/// Runs `write` inside `scope`, so that every write it makes is recorded as `scope`'s. A
/// request made inside another keeps the outer scope: a commit's stage is the commit's.
///
/// `write` is boxed here, so that wrapping a request's future adds a pointer to the futures
/// around it, not the request's whole state (in a debug build, a copy of it on the stack at
/// every poll: the simulator's deep futures overflowed their stacks).
pub fn within<F: Future>(scope: WriteScope, write: F) -> impl Future<Output = F::Output> {
    let write = Box::pin(write);
    async move {
        if SCOPE.try_with(|_| ()).is_ok() {
            write.await
        } else {
            SCOPE.scope(Arc::new(scope), write).await
        }
    }
}

/// The scope the current task writes in, if any.
pub fn current() -> Option<Arc<WriteScope>> {
    SCOPE.try_with(Arc::clone).ok()
}

/// What a record names: the ids, or when there are many their count and a digest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    /// How many ids the step names.
    pub count: usize,
    /// The ids, sorted as given, when at most [`MAX_LISTED_IDS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<String>,
    /// `sha256:<hex>` of the ids joined by newlines, when there are more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl Subject {
    /// The subject naming `ids`.
    pub fn of<'a>(ids: impl IntoIterator<Item = &'a str>) -> Self {
        let ids: Vec<&str> = ids.into_iter().collect();
        if ids.len() <= MAX_LISTED_IDS {
            return Self {
                count: ids.len(),
                ids: ids.into_iter().map(str::to_owned).collect(),
                digest: None,
            };
        }
        Self {
            count: ids.len(),
            ids: Vec::new(),
            digest: Some(sha256(ids.join("\n").as_bytes())),
        }
    }
}

/// One write: who made it, for which request, what the step wrote and what it answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteRecord {
    /// [`WRITE_FORMAT_VERSION`] when written by this host.
    pub format_version: u32,
    /// The dataset written.
    pub dataset_id: String,
    /// The time of the step (the write's own time).
    pub recorded_at_ms: TimestampMs,
    /// Who wrote; absent for an engine no one named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The request ([`WriteScope::kind`]).
    pub kind: String,
    /// The operation the request is about, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    /// The backend's step: `create-dataset`, `update-dataset`, `stage`, `publish`, `mark`,
    /// `see-marks`, `delete-splits`, `put-intent`, `update-intent`, `abandon-intent`,
    /// `delete-intent`, `settle`, `begin-commit`, `publish-commit`, `record-request`.
    pub step: String,
    /// The ids the step names (splits, or the operation).
    pub what: Subject,
    /// What the step answered, summarised ([`summarize`]).
    pub answer: serde_json::Value,
}

impl From<&WriteRecord> for AuditEntry {
    fn from(record: &WriteRecord) -> Self {
        Self {
            recorded_at_ms: record.recorded_at_ms,
            principal: record.principal.clone(),
            mode: record.kind.clone(),
            operation_id: record.operation_id.clone().unwrap_or_default(),
            decision: serde_json::json!({ "step": record.step, "what": record.what }),
            outcome: record.answer.clone(),
            policy_digest: String::new(),
        }
    }
}

/// A step about to write inside a scope: the record it makes once it knows its answer.
#[derive(Debug, Clone)]
pub struct PendingWrite {
    scope: Arc<WriteScope>,
    dataset_id: String,
    step: &'static str,
    what: Subject,
}

/// The record-to-be of step `step` on `dataset_id`, naming `ids`; `None` outside a scope, in
/// which case `ids` is never called.
pub fn pending<'a, I>(
    dataset_id: &str,
    step: &'static str,
    ids: impl FnOnce() -> I,
) -> Option<PendingWrite>
where
    I: IntoIterator<Item = &'a str>,
{
    let scope = current()?;
    Some(PendingWrite {
        scope,
        dataset_id: dataset_id.to_owned(),
        step,
        what: Subject::of(ids()),
    })
}

impl PendingWrite {
    /// The record of the step, which answered `answer` at `at_ms`.
    pub fn answered(&self, answer: &impl Serialize, at_ms: TimestampMs) -> WriteRecord {
        let answer = serde_json::to_value(answer).expect("answers are plain data");
        WriteRecord {
            format_version: WRITE_FORMAT_VERSION,
            dataset_id: self.dataset_id.clone(),
            recorded_at_ms: at_ms,
            principal: self.scope.principal.clone(),
            kind: self.scope.kind.clone(),
            operation_id: self.scope.operation_id.clone(),
            step: self.step.to_owned(),
            what: self.what.clone(),
            answer: summarize(answer),
        }
    }
}

/// An answer as a record keeps it: a list of more than [`MAX_LISTED_IDS`] entries becomes its
/// count and digest (with how many of each `outcome`, for a stage's), and an answer whose
/// JSON is still over [`MAX_ANSWER_BYTES`] becomes its size and digest.
pub fn summarize(answer: serde_json::Value) -> serde_json::Value {
    let summarized = shorten(answer);
    let text = summarized.to_string();
    if text.len() <= MAX_ANSWER_BYTES {
        return summarized;
    }
    serde_json::json!({ "bytes": text.len(), "digest": sha256(text.as_bytes()) })
}

fn shorten(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Array(items) if items.len() > MAX_LISTED_IDS => {
            let digest = sha256(Value::Array(items.clone()).to_string().as_bytes());
            let mut summary = serde_json::Map::new();
            summary.insert("count".into(), items.len().into());
            summary.insert("digest".into(), digest.into());
            let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
            for item in &items {
                if let Some(outcome) = item.get("outcome").and_then(Value::as_str) {
                    *outcomes.entry(outcome.to_owned()).or_default() += 1;
                }
            }
            if !outcomes.is_empty() {
                summary.insert("outcomes".into(), serde_json::json!(outcomes));
            }
            Value::Object(summary)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(shorten).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(name, value)| (name, shorten(value)))
                .collect(),
        ),
        other => other,
    }
}

/// The ids a publish names, for its record: those it publishes, then those it replaces.
pub fn publish_ids(request: &crate::model::PublishRequest) -> impl Iterator<Item = &str> {
    request
        .staged_split_ids
        .iter()
        .chain(&request.replaced_split_ids)
        .map(String::as_str)
}

/// A step's answer as JSON, for [`PendingWrite::answered`].
pub fn answer_of(answer: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(answer).expect("answers are plain data")
}

/// A stage's answer: how many splits it inserted, overwrote and skipped (the ids are the
/// record's `what`). The same on every backend, and what a Postgres create-only stage
/// computes in its one statement.
pub fn stage_answer(staged: &[crate::model::StagedSplit]) -> serde_json::Value {
    use crate::model::StageOutcome;
    let (mut inserted, mut overwritten, mut skipped) = (0usize, 0usize, 0usize);
    for split in staged {
        match split.outcome {
            StageOutcome::Inserted => inserted += 1,
            StageOutcome::Overwritten => overwritten += 1,
            StageOutcome::Skipped(_) => skipped += 1,
        }
    }
    serde_json::json!({ "inserted": inserted, "overwritten": overwritten, "skipped": skipped })
}

/// A settle step's answer: how its settlements ended, by kind.
pub fn settled_answer(settled: &[super::Settled]) -> serde_json::Value {
    use super::Settled;
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    let mut published = 0usize;
    for one in settled {
        let kind = match one {
            Settled::Published(result) => {
                published += result.published.len();
                "published"
            }
            Settled::Discarded => "discarded",
            Settled::Abandoned { .. } => "abandoned",
            Settled::Gone => "gone",
        };
        *counts.entry(kind).or_default() += 1;
    }
    serde_json::json!({ "settled": counts, "splits_published": published })
}

/// A begun commit's answer: its operation and what its stage did.
pub fn begun_answer(begun: &super::BegunCommit) -> serde_json::Value {
    serde_json::json!({
        "operation_id": begun.intent.operation_id,
        "splits": begun.splits,
    })
}

/// The body a backend stores for `record`.
pub fn encode(record: &WriteRecord) -> Vec<u8> {
    serde_json::to_vec(record).expect("write records are plain data")
}

/// The JSON text of `record`.
pub fn encode_text(record: &WriteRecord) -> String {
    serde_json::to_string(record).expect("write records are plain data")
}

/// A stored record, its version read first: one a newer mend wrote is refused as such
/// (`Corrupt`, saying to upgrade), never read as whatever its fields happen to be.
pub fn decode(body: &[u8], what: &str) -> Result<WriteRecord> {
    #[derive(Deserialize)]
    struct Version {
        format_version: u32,
    }
    let unreadable = |error: serde_json::Error| MendError::Corrupt {
        message: format!("{what} is unreadable: {error}"),
    };
    let Version { format_version } = serde_json::from_slice(body).map_err(unreadable)?;
    check_format(format_version, what)?;
    serde_json::from_slice(body).map_err(unreadable)
}

/// Refuses a record of a format this host does not read.
pub fn check_format(format_version: u32, what: &str) -> Result<()> {
    if format_version == 0 || format_version > WRITE_FORMAT_VERSION {
        return Err(MendError::Corrupt {
            message: format!(
                "{what} has write-record format {format_version}, but this mend reads only \
                 versions 1 to {WRITE_FORMAT_VERSION}: upgrade before reading this dataset's \
                 audit trail"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_ids_are_listed_and_many_are_counted_and_digested() {
        let few = Subject::of(["a", "b"]);
        assert_eq!((few.count, few.ids.len(), few.digest), (2, 2, None));
        let names: Vec<String> = (0..=MAX_LISTED_IDS).map(|n| format!("s{n}")).collect();
        let many = Subject::of(names.iter().map(String::as_str));
        assert_eq!(many.count, MAX_LISTED_IDS + 1);
        assert!(many.ids.is_empty());
        let other = Subject::of(names.iter().skip(1).map(String::as_str));
        assert_ne!(many.digest, other.digest, "the digest tells sets apart");
    }

    #[test]
    fn a_long_answer_keeps_its_count_outcomes_and_digest() {
        let staged: Vec<serde_json::Value> = (0..40)
            .map(|n| {
                let outcome = if n < 30 { "inserted" } else { "skipped" };
                serde_json::json!({"split_id": format!("s{n}"), "outcome": outcome})
            })
            .collect();
        let summary = summarize(serde_json::Value::Array(staged));
        assert_eq!(summary["count"], 40);
        assert_eq!(summary["outcomes"]["inserted"], 30);
        assert_eq!(summary["outcomes"]["skipped"], 10);
        assert!(summary["digest"].as_str().unwrap().starts_with("sha256:"));
        let huge = serde_json::json!({ "config": "x".repeat(MAX_ANSWER_BYTES) });
        let kept = summarize(huge);
        assert!(
            kept["bytes"].as_u64().unwrap() > MAX_ANSWER_BYTES as u64,
            "{kept}"
        );
    }

    #[test]
    fn a_record_of_a_newer_format_is_refused_as_such() {
        let error = decode(br#"{"format_version": 9}"#, "write record 1").unwrap_err();
        assert!(error.to_string().contains("upgrade"), "{error}");
    }

    #[tokio::test]
    async fn outside_a_scope_nothing_is_recorded_and_an_inner_scope_keeps_the_outer() {
        assert!(pending("d", "stage", || ["a"]).is_none());
        let outer = WriteScope {
            principal: Some("writer".into()),
            kind: "commit".into(),
            operation_id: None,
        };
        let inner = WriteScope {
            kind: "stage".into(),
            ..outer.clone()
        };
        let record = within(
            outer,
            within(inner, async {
                pending("d", "stage", || ["a"]).unwrap().answered(&"ok", 5)
            }),
        )
        .await;
        assert_eq!(record.kind, "commit");
        assert_eq!(record.principal.as_deref(), Some("writer"));
        assert_eq!(record.what.ids, ["a"]);
    }
}
