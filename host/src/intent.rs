//! Intents: the durable record an operation writes before its first durable effect.
//!
//! An operation with more than one durable effect (a commit stages rows, uploads objects and
//! publishes; a gc marks, deletes objects, then deletes rows) first writes an intent naming
//! every effect it plans and the state each one expects to find. An operation of a writer in
//! another process (and a reconcile) moves the intent from `Armed` to `EffectsConfirmed` once
//! its effects are all in place, and deletes it after the publish; an in-process commit
//! publishes from `Armed` and deletes the intent in the publish's own step
//! ([`Catalog::publish_commit`](crate::catalog::Catalog::publish_commit)), which refuses an
//! intent recovery abandoned as a confirmation does. Recovery may move an `Armed` intent whose lease ran out to `Abandoned`
//! ([`Catalog::abandon_intent`](crate::catalog::Catalog::abandon_intent)): from then on its
//! owner's confirmation (an update expecting `Armed`) fails, so it can never publish. Whatever is left behind by a crash or a retry is thus described by an intent, which
//! recovery reads, hands to the policy, and resolves.
//!
//! The stored form carries [`INTENT_FORMAT_VERSION`]. A backend refuses to load an intent
//! written in a newer format with `Corrupt` naming the version: a host never guesses at
//! semantics it does not know. It loads every older format, and writes whatever it writes in
//! its own ([`check_written_format`]).
//!
//! How an intent is stored is each backend's: Postgres keeps its fields in columns and its plan
//! (effects and expected state) as one compact byte string ([`compact`]), since format 3;
//! object storage keeps it as JSON in its log and checkpoints ([`Intent::to_json`]).

pub mod compact;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::{MendError, Result};
use crate::model::{CheckpointDelta, DatasetConfig, PublishRequest, SplitState, TimestampMs};

/// The intent format this host writes and the newest it reads. Format 2 added the
/// [`IntentPhase::Abandoned`] phase; format 1 is read as it was (it never holds that phase).
/// Format 3 holds what format 2 holds and changed how Postgres stores it: in columns and a
/// compact plan ([`compact`]) rather than one JSON body, so that a mend from before it, which
/// can read only the body, refuses it as written by a newer mend. On object storage a format 3
/// intent is the JSON of format 2 with its new number.
pub const INTENT_FORMAT_VERSION: u32 = 3;

/// What kind of operation an intent belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// Stage, upload objects put-if-absent, publish with a checkpoint delta.
    Commit,
    /// Publish new splits replacing old ones.
    Merge,
    /// Mark abandoned staged splits, delete marked splits' objects, then their rows.
    Gc,
    /// Stage a new config, then promote it.
    ConfigApply,
    /// Stage rows for orphan objects from their embedded metadata, then adopt or discard them.
    Reconcile,
}

impl OperationKind {
    /// Every kind, in declaration order.
    pub const ALL: [OperationKind; 5] = [
        Self::Commit,
        Self::Merge,
        Self::Gc,
        Self::ConfigApply,
        Self::Reconcile,
    ];

    /// The stable name used in JSON and in Postgres's `kind` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Commit => "commit",
            Self::Merge => "merge",
            Self::Gc => "gc",
            Self::ConfigApply => "config_apply",
            Self::Reconcile => "reconcile",
        }
    }

    /// The kind [`as_str`](Self::as_str) names; `None` for any other name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

/// How far an operation got. The operation's last step deletes the intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum IntentPhase {
    /// Written before the first effect; any subset of the effects may have happened.
    Armed,
    /// Every planned effect is in place; only the publish (or promotion) remains.
    EffectsConfirmed,
    /// Fenced by recovery after its owner's lease ran out before it confirmed (format 2): its
    /// owner can never confirm, renew or publish it. Recovery marks its staged rows and
    /// deletes the intent; gc removes its objects.
    Abandoned,
}

/// One split row an operation stages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedRow {
    /// The split's id.
    pub split_id: String,
    /// Its metadata, a JSON object as text.
    pub metadata_json: String,
}

/// One object an operation uploads, as it must be found: recovery checks size and checksum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedObject {
    /// The split the object belongs to.
    pub split_id: String,
    /// The whole object's size, header included.
    pub size: u64,
    /// `sha256:<hex>` of the payload, as the object's embedded header records it.
    pub checksum: String,
}

/// Every durable effect an operation plans, in the order it performs them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedEffects {
    /// Rows staged create-only, each with its metadata.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stage: Vec<PlannedRow>,
    /// Objects uploaded put-if-absent, each with the size and checksum it must have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<PlannedObject>,
    /// Splits to publish, splits they replace, and the checkpoint delta, as one publish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<PlannedPublish>,
    /// Splits marked for deletion (gc's abandoned staged splits; a reconcile's discards).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mark: Vec<String>,
    /// Splits whose objects, then rows, are deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete: Vec<String>,
    /// The config a config apply stages and promotes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<DatasetConfig>,
}

/// The one publish an operation plans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedPublish {
    /// Splits to publish.
    pub staged_split_ids: Vec<String>,
    /// Published splits they replace, which become marked.
    #[serde(default)]
    pub replaced_split_ids: Vec<String>,
    /// The checkpoint delta applied with the publish.
    #[serde(default)]
    pub checkpoint_delta: Option<CheckpointDelta>,
    /// The publish token the dataset required when the operation began.
    #[serde(default)]
    pub publish_token: Option<String>,
}

impl PlannedPublish {
    /// The publish request this plan makes on `dataset_id`, carrying `fencing_epoch`: what
    /// the operation's own publish sends, and what recovery sends when it rolls it forward.
    pub fn request(&self, dataset_id: &str, fencing_epoch: Option<u64>) -> PublishRequest {
        PublishRequest {
            dataset_id: dataset_id.to_string(),
            staged_split_ids: self.staged_split_ids.clone(),
            replaced_split_ids: self.replaced_split_ids.clone(),
            checkpoint_delta: self.checkpoint_delta.clone(),
            publish_token: self.publish_token.clone(),
            fencing_epoch,
        }
    }
}

/// The state the operation expects to find before its effects: recovery compares it with
/// what it observes to tell an operation that never started from one that finished.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectedState {
    /// The dataset's manifest version when the operation began.
    pub manifest_version: u64,
    /// Each split the operation touches, and its state before (`None`: no row).
    #[serde(default)]
    pub split_states: Vec<(String, Option<SplitState>)>,
    /// The config version a config apply expects to replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_version: Option<u64>,
}

/// An operation's intent, as stored in the catalog backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// [`INTENT_FORMAT_VERSION`] when written by this host; a newer one is refused.
    pub format_version: u32,
    /// The operation's id, unique in its dataset.
    pub operation_id: String,
    /// The dataset the operation works on.
    pub dataset_id: String,
    /// What kind of operation it is.
    pub kind: OperationKind,
    /// How far it got.
    pub phase: IntentPhase,
    /// The node running the operation.
    pub owner: String,
    /// Until then the owner may still be working: recovery outside exclusive mode defers.
    pub lease_expires_at_ms: TimestampMs,
    /// When the intent was written.
    pub created_at_ms: TimestampMs,
    /// When it last changed (confirmed, renewed).
    pub updated_at_ms: TimestampMs,
    /// Every durable effect the operation plans.
    pub effects: PlannedEffects,
    /// The state it expects to find before its effects.
    pub expected: ExpectedState,
}

impl Intent {
    /// Every split its planned effects name (to stage, publish, replace, mark or delete), in
    /// that order; an id named twice comes twice.
    pub fn named_splits(&self) -> impl Iterator<Item = &String> {
        let effects = &self.effects;
        let publish = effects.publish.iter().flat_map(|publish| {
            publish
                .staged_split_ids
                .iter()
                .chain(&publish.replaced_split_ids)
        });
        effects
            .stage
            .iter()
            .map(|row| &row.split_id)
            .chain(publish)
            .chain(&effects.mark)
            .chain(&effects.delete)
    }

    /// The checkpoint delta its publish plans, if any.
    pub fn planned_delta(&self) -> Option<&CheckpointDelta> {
        self.effects
            .publish
            .as_ref()
            .and_then(|publish| publish.checkpoint_delta.as_ref())
    }

    /// A new intent in this host's format, `Armed`, leased to `owner` for `lease_ms` from
    /// `now_ms`, planning nothing yet: callers fill in `effects` and `expected`.
    pub fn armed(
        operation_id: String,
        kind: OperationKind,
        dataset_id: &str,
        owner: &str,
        now_ms: TimestampMs,
        lease_ms: i64,
    ) -> Self {
        Self {
            format_version: INTENT_FORMAT_VERSION,
            operation_id,
            dataset_id: dataset_id.to_string(),
            kind,
            phase: IntentPhase::Armed,
            owner: owner.to_string(),
            lease_expires_at_ms: now_ms.saturating_add(lease_ms),
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            effects: PlannedEffects::default(),
            expected: ExpectedState::default(),
        }
    }

    /// Parses a stored intent, refusing a format newer than this host's.
    pub fn from_json(text: &str) -> Result<Self> {
        #[derive(Deserialize)]
        struct Version {
            format_version: u32,
        }
        // One parse when it reads (a recovery sweep lists thousands of intents); the version
        // alone only when it does not, so that a newer format is refused as such rather than
        // as whatever field it changed.
        let unreadable = match serde_json::from_str::<Intent>(text) {
            Ok(intent) => {
                check_format(intent.format_version)?;
                return Ok(intent);
            }
            Err(error) => error,
        };
        let version: Version = serde_json::from_str(text).map_err(|error| MendError::Corrupt {
            message: format!("an intent is unreadable: {error}"),
        })?;
        check_format(version.format_version)?;
        Err(MendError::Corrupt {
            message: format!(
                "an intent of format {} is unreadable: {unreadable}",
                version.format_version
            ),
        })
    }

    /// The intent as its stored JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an intent is plain data and always serialises")
    }
}

/// The splits whose rows `intent` stages or publishes, while it may still publish them (it is
/// not `Abandoned`): no one but the operation itself may mark them. Garbage collection's mark
/// ([`MarkRule::Unclaimed`](crate::catalog::MarkRule::Unclaimed)) skips them in the same
/// atomic step as the mark, whatever intents it read when it planned (found by mend-sim, seed
/// 995752377249: gc read the intents before a writer's begin and the rows after it, and marked
/// the rows of a live operation).
pub fn claimed_split_ids(intent: &Intent) -> impl Iterator<Item = &str> {
    let live = intent.phase != IntentPhase::Abandoned;
    let staged = intent.effects.stage.iter().map(|row| row.split_id.as_str());
    let published = intent
        .effects
        .publish
        .iter()
        .flat_map(|publish| publish.staged_split_ids.iter().map(String::as_str));
    staged.chain(published).filter(move |_| live)
}

/// Whether the publish `intent` plans can still land on rows in `states` (the state of each of
/// its split ids that has a row): what a confirmation (`Armed` to `EffectsConfirmed`) requires
/// in the same atomic step as its write, so that no operation is ever confirmed, and its writer
/// told that it publishes, once its publish cannot land (found by mend-sim, seed
/// 995752377249: a confirm landed on rows gc had marked, and the operation could neither
/// publish nor be aborted). Every split to publish must be staged, every split it replaces
/// published; otherwise `FailedPrecondition` naming those that are not, and nothing is
/// confirmed. An intent that plans no publish confirms whatever the rows.
pub fn check_confirmable(intent: &Intent, states: &BTreeMap<&str, SplitState>) -> Result<()> {
    let Some(publish) = &intent.effects.publish else {
        return Ok(());
    };
    let not_in = |ids: &[String], wanted: SplitState| -> Vec<String> {
        ids.iter()
            .filter(|id| states.get(id.as_str()) != Some(&wanted))
            .cloned()
            .collect()
    };
    let not_staged = not_in(&publish.staged_split_ids, SplitState::Staged);
    let not_published = not_in(&publish.replaced_split_ids, SplitState::Published);
    if not_staged.is_empty() && not_published.is_empty() {
        return Ok(());
    }
    let mut reasons = Vec::new();
    if !not_staged.is_empty() {
        reasons.push(format!(
            "splits to publish must be staged, these are not: {}",
            not_staged.join(", ")
        ));
    }
    if !not_published.is_empty() {
        reasons.push(format!(
            "splits it replaces must be published, these are not: {}",
            not_published.join(", ")
        ));
    }
    Err(MendError::failed_precondition(
        format!(
            "operation {} cannot confirm: its publish can no longer land ({}); nothing was confirmed: abort it",
            intent.operation_id,
            reasons.join("; ")
        ),
        not_staged.into_iter().chain(not_published).collect(),
    ))
}

/// Whether `stored` may be abandoned now: `Ok(true)` if it is `Armed` and its lease ran out by
/// `lease_expired_by` (or whatever its lease, with `None`: its owner's abort, exclusive
/// recovery), `Ok(false)` if it is already `Abandoned` and the caller names no lease;
/// `FailedPrecondition` naming the operation if it is `EffectsConfirmed`, its lease is still
/// live, or a caller that abandons it for a lease that ran out finds it `Abandoned` already.
/// Such a caller (a recovery sweep) observed it `Armed`: another step fenced it since (its
/// writer's abort, another sweep), and the sweep taking it for its own takeover would answer
/// that the owner's lease ran out when the owner ended it (found by `mend-sim`, seed
/// 8115394297526634718: a sweep reported taking over an operation whose writer had renewed
/// its lease, then aborted it). Both backends decide with it, inside their atomic step.
pub fn abandonable(stored: &Intent, lease_expired_by: Option<TimestampMs>) -> Result<bool> {
    let operation_id = &stored.operation_id;
    match stored.phase {
        IntentPhase::Abandoned if lease_expired_by.is_some() => {
            Err(MendError::failed_precondition(
                format!(
                    "intent {operation_id} was abandoned already, since it was observed armed \
                     (its writer aborted it, or another sweep abandoned it): an abandonment for \
                     a lease that ran out no longer applies"
                ),
                vec![operation_id.clone()],
            ))
        }
        IntentPhase::Abandoned => Ok(false),
        IntentPhase::EffectsConfirmed => Err(MendError::failed_precondition(
            format!(
                "intent {operation_id} confirmed its effects: it is rolled forward, never abandoned"
            ),
            vec![operation_id.clone()],
        )),
        IntentPhase::Armed => match lease_expired_by {
            Some(at) if stored.lease_expires_at_ms > at => Err(MendError::failed_precondition(
                format!(
                    "the lease of intent {operation_id} runs until {} ms, after {at} ms: its owner may still be working",
                    stored.lease_expires_at_ms
                ),
                vec![operation_id.clone()],
            )),
            _ => Ok(true),
        },
    }
}

/// Refuses to write an intent of a format this host does not know (0, or newer than its own).
/// A backend stores every intent it writes in this host's format, [`INTENT_FORMAT_VERSION`],
/// whatever format it was read in: each format holds everything the ones before it hold (format
/// 2 added a phase, format 3 a stored form), so an intent read in an older one and written back
/// (renewed, confirmed, fenced) loses nothing, and an operation in flight across an upgrade
/// goes on.
pub fn check_written_format(intent: &Intent) -> Result<()> {
    if intent.format_version == 0 || intent.format_version > INTENT_FORMAT_VERSION {
        return Err(MendError::invalid(format!(
            "intent {} has format version {}; this mend writes only version {INTENT_FORMAT_VERSION}, from an intent of version 1 to {INTENT_FORMAT_VERSION}",
            intent.operation_id, intent.format_version
        )));
    }
    Ok(())
}

/// Refuses an intent format this host does not know.
pub fn check_format(format_version: u32) -> Result<()> {
    if format_version == 0 || format_version > INTENT_FORMAT_VERSION {
        return Err(MendError::Corrupt {
            message: format!(
                "an intent has format version {format_version}, but this mend reads only versions 1 to {INTENT_FORMAT_VERSION}: a newer mend wrote it; upgrade before recovering this dataset"
            ),
        });
    }
    Ok(())
}

/// The first of `intents` that names a split `requested` holds ([`Intent::named_splits`]): the
/// unresolved operation in the way of a write of those splits.
pub fn in_the_way<'a>(
    intents: impl IntoIterator<Item = &'a Intent>,
    requested: impl Fn(&str) -> bool,
) -> Option<&'a Intent> {
    intents
        .into_iter()
        .find(|intent| intent.named_splits().any(|split_id| requested(split_id)))
}

/// [`in_the_way`] of a write of `split_ids`. Without intents (the usual case, on every
/// write's path) it builds no set of a large batch's ids.
pub fn naming_any<'a, 'b>(
    intents: impl IntoIterator<Item = &'a Intent>,
    split_ids: impl IntoIterator<Item = &'b String>,
) -> Option<&'a Intent> {
    let mut intents = intents.into_iter().peekable();
    intents.peek()?;
    let requested: BTreeSet<&str> = split_ids.into_iter().map(String::as_str).collect();
    in_the_way(intents, |split_id| requested.contains(split_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent() -> Intent {
        Intent {
            format_version: INTENT_FORMAT_VERSION,
            operation_id: "op-1".into(),
            dataset_id: "ds".into(),
            kind: OperationKind::Commit,
            phase: IntentPhase::Armed,
            owner: "node-a".into(),
            lease_expires_at_ms: 2_000,
            created_at_ms: 1_000,
            updated_at_ms: 1_000,
            effects: PlannedEffects {
                stage: vec![PlannedRow {
                    split_id: "s1".into(),
                    metadata_json: "{}".into(),
                }],
                ..Default::default()
            },
            expected: ExpectedState::default(),
        }
    }

    #[test]
    fn intents_round_trip_through_json() {
        let intent = intent();
        assert_eq!(Intent::from_json(&intent.to_json()).unwrap(), intent);
    }

    #[test]
    fn kind_names_are_the_json_names() {
        for kind in OperationKind::ALL {
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::json!(kind.as_str())
            );
            assert_eq!(OperationKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(OperationKind::parse("Commit"), None);
    }

    #[test]
    fn format_1_intents_are_still_read() {
        let mut value: serde_json::Value = serde_json::from_str(&intent().to_json()).unwrap();
        value["format_version"] = serde_json::json!(1);
        let read = Intent::from_json(&value.to_string()).unwrap();
        assert_eq!(read.format_version, 1);
        assert_eq!(read.phase, IntentPhase::Armed);
    }

    #[test]
    fn a_newer_format_is_refused_not_guessed_at() {
        let mut value: serde_json::Value = serde_json::from_str(&intent().to_json()).unwrap();
        value["format_version"] = serde_json::json!(INTENT_FORMAT_VERSION + 1);
        value["some_future_field"] = serde_json::json!({"meaning": "unknown"});
        let error = Intent::from_json(&value.to_string()).unwrap_err();
        assert!(
            matches!(&error, MendError::Corrupt { message } if message.contains("newer mend")),
            "{error:?}"
        );
    }
}
