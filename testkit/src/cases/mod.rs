//! The conformance cases: plain async functions, each one behaviour of the catalog protocol,
//! listed in [`ALL`] with the capabilities each needs.
//!
//! Each case starts from a fresh [`Harness`] and unique dataset ids, so cases never see each
//! other's rows even on a shared catalog. A case asserts; where it counts something (checks
//! made, racing tasks, rounds) it prints the count, `conformance[BACKEND]: ...`, so that a run
//! shows how much it proved.
//!
//! - `staging.rs`: datasets, staging in both modes, refused input, racing create-only batches;
//! - `lifecycle.rs`: publish, fencing (tokens, epochs), mark, seeing marks, delete, list;
//! - `intents.rs`: intents, abandoning them, what a confirmation and gc's mark require of the
//!   rows and intents, audit records;
//! - `audit.rs`: audit appends larger than a stored batch, and the newest records of the whole
//!   catalog;
//! - `commits.rs`: one commit's two catalog steps (`begin_commit`, `publish_commit`);
//! - `recorded.rs`: requests under an idempotency key, at the catalog trait itself;
//! - `settle.rs`: a recovery sweep's batches of settlements, at the catalog trait itself;
//! - `pending.rs`: discovery of the datasets with pending intents, and taking them off;
//! - `writes.rs`: the trail of writes, each recorded in its own step.

use mend::MendError;
use mend::catalog::SETTLE_ATOMIC;
use mend::catalog::write_audit::WRITE_AUDIT;
use mend::model::{
    ListQuery, PublishRequest, SplitRow, StageMode, StageOutcome, StageRequest, StageResult,
    StageSplit,
};
use mend_contract::capability::{
    PUBLISH_CHECKPOINT, PUBLISH_FENCING_EPOCH, PUBLISH_TOKEN, STAGE_CREATE_ONLY, STAGE_UPSERT,
};

use crate::harness::Harness;
use crate::suite::Case;

mod audit;
mod commits;
mod intents;
mod lifecycle;
mod pending;
mod recorded;
mod settle;
mod staging;
mod writes;

/// `case!(module::name, [capabilities])`: the case `name`, running `module::name`.
macro_rules! case {
    ($module:ident :: $name:ident, [$($needs:expr),* $(,)?]) => {
        Case::new(stringify!($name), &[$($needs),*], |h| Box::pin($module::$name(h)))
    };
}

/// Every case, in the order `run_all` runs them, with the capabilities it exercises: on an
/// engine without one of them, it is skipped.
pub(crate) const ALL: &[Case] = &[
    case!(staging::datasets_create_list_show_and_configure, []),
    case!(
        staging::create_only_leaves_existing_rows_exactly_as_they_were,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        staging::duplicate_ids_fold_in_both_modes,
        [STAGE_CREATE_ONLY, STAGE_UPSERT]
    ),
    case!(
        staging::create_only_batch_of_existing_rows_writes_nothing,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        staging::upsert_overwrites_staged_and_rejects_whole_batch_otherwise,
        [STAGE_UPSERT]
    ),
    case!(
        staging::bad_stage_input_is_refused_and_writes_nothing,
        [STAGE_CREATE_ONLY, STAGE_UPSERT]
    ),
    case!(
        staging::a_stage_unless_in_the_way_refuses_only_the_splits_an_intent_names,
        [STAGE_CREATE_ONLY, STAGE_UPSERT]
    ),
    case!(
        lifecycle::publish_moves_states_and_checkpoint_at_once,
        [STAGE_CREATE_ONLY, PUBLISH_CHECKPOINT]
    ),
    case!(
        lifecycle::publish_errors_name_ids_and_write_nothing,
        [STAGE_CREATE_ONLY, PUBLISH_CHECKPOINT, PUBLISH_TOKEN]
    ),
    case!(
        lifecycle::publish_token_fences_stale_publishers,
        [STAGE_CREATE_ONLY, PUBLISH_TOKEN]
    ),
    case!(
        lifecycle::fencing_epoch,
        [STAGE_CREATE_ONLY, PUBLISH_CHECKPOINT, PUBLISH_FENCING_EPOCH]
    ),
    case!(
        lifecycle::a_publish_or_mark_unless_in_the_way_refuses_only_the_splits_an_intent_names,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        lifecycle::mark_is_idempotent_and_names_unknown_ids,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        lifecycle::a_published_splits_mark_is_seen_once_and_a_staged_ones_at_once,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        lifecycle::delete_removes_objects_then_rows_of_marked_splits_only,
        [STAGE_CREATE_ONLY]
    ),
    case!(lifecycle::list_filters_and_pages, [STAGE_CREATE_ONLY]),
    case!(
        lifecycle::split_states_name_each_row_by_id,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        staging::concurrent_create_only_batches_claim_each_id_once,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        intents::intents_are_created_once_advanced_conditionally_and_deleted,
        []
    ),
    case!(
        intents::intents_keep_every_planned_effect_and_are_written_in_this_hosts_format,
        []
    ),
    case!(intents::a_lease_never_moves_back, []),
    case!(
        intents::gc_marks_only_rows_no_intent_claims,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        intents::a_confirm_requires_its_publish_to_still_land,
        [STAGE_CREATE_ONLY]
    ),
    case!(intents::abandon_fences_an_expired_armed_intent_only, []),
    case!(
        intents::abandon_and_a_heartbeat_race_and_exactly_one_wins,
        []
    ),
    case!(
        intents::audit_records_append_in_order_and_list_the_newest,
        []
    ),
    case!(audit::an_append_of_any_size_lists_whole_and_in_order, []),
    case!(
        writes::every_write_of_a_scope_is_recorded_in_its_step,
        [STAGE_CREATE_ONLY, WRITE_AUDIT]
    ),
    case!(
        audit::recent_audit_is_the_newest_records_of_every_dataset,
        []
    ),
    case!(
        commits::begin_commit_writes_the_intent_and_stages_at_once,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        commits::publish_commit_settles_its_intent_at_once,
        [STAGE_CREATE_ONLY, PUBLISH_CHECKPOINT]
    ),
    case!(
        commits::publish_commit_and_an_abandonment_race_and_exactly_one_wins,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        recorded::keyed_creation_answers_a_retry_with_the_dataset_it_created,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        recorded::keyed_config_and_token_changes_answer_a_retry,
        [PUBLISH_TOKEN]
    ),
    case!(
        recorded::keyed_stage_and_publish_answer_a_retry,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        recorded::keyed_mark_and_delete_answer_a_retry_after_their_rows_moved,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        recorded::record_request_keeps_the_first_record_of_racing_runs,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        recorded::keyed_records_survive_concurrent_writes,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        settle::settle_intents_publishes_marks_and_deletes_in_order,
        [STAGE_CREATE_ONLY, PUBLISH_CHECKPOINT]
    ),
    case!(
        settle::settle_intents_checks_the_batch_before_reading,
        [STAGE_CREATE_ONLY, PUBLISH_CHECKPOINT]
    ),
    case!(
        settle::settle_intents_refuses_a_batch_whole,
        [STAGE_CREATE_ONLY, PUBLISH_CHECKPOINT, SETTLE_ATOMIC]
    ),
    case!(
        pending::pending_datasets_name_every_dataset_with_an_intent,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        pending::a_crashed_commit_leaves_its_dataset_discoverable,
        [STAGE_CREATE_ONLY]
    ),
    case!(
        pending::clear_pending_takes_off_a_dataset_only_without_intents,
        [STAGE_CREATE_ONLY]
    ),
];

// ---------------------------------------------------------------------------------------------
// Helpers

fn metadata(docs: u64) -> String {
    serde_json::json!({ "num_docs": docs, "tags": ["t"] }).to_string()
}

fn request(
    dataset_id: &str,
    mode: StageMode,
    node: &str,
    splits: &[(&str, String)],
) -> StageRequest {
    StageRequest {
        dataset_id: dataset_id.into(),
        mode,
        node: node.into(),
        splits: splits
            .iter()
            .map(|(id, metadata_json)| StageSplit {
                split_id: (*id).into(),
                metadata_json: metadata_json.clone(),
            })
            .collect(),
    }
}

/// Stages `ids` and, as a writer does, uploads the object of each split it inserted.
async fn stage(h: &Harness<'_>, dataset_id: &str, mode: StageMode, ids: &[&str]) -> StageResult {
    let splits: Vec<(&str, String)> = ids.iter().map(|id| (*id, metadata(1))).collect();
    let staged = h
        .engine
        .stage(&request(dataset_id, mode, "node-a", &splits))
        .await
        .unwrap_or_else(|error| panic!("stage {ids:?}: {error}"));
    h.put_objects(dataset_id, staged.inserted()).await;
    staged
}

/// Uploads the object of each split to publish (a no-op for one already there), then
/// publishes.
async fn publish(h: &Harness<'_>, dataset_id: &str, staged: &[&str], replaced: &[&str]) {
    h.put_objects(dataset_id, staged).await;
    h.engine
        .publish(&publish_request(dataset_id, staged, replaced))
        .await
        .unwrap_or_else(|error| panic!("publish {staged:?}: {error}"));
}

fn publish_request(dataset_id: &str, staged: &[&str], replaced: &[&str]) -> PublishRequest {
    PublishRequest {
        dataset_id: dataset_id.into(),
        staged_split_ids: staged.iter().map(|id| id.to_string()).collect(),
        replaced_split_ids: replaced.iter().map(|id| id.to_string()).collect(),
        checkpoint_delta: None,
        publish_token: None,
        fencing_epoch: None,
    }
}

/// Every row of the dataset (the catalog's own listing: the engine's pages hold at most
/// `max_list_page` rows).
async fn rows(h: &Harness<'_>, dataset_id: &str) -> Vec<SplitRow> {
    h.engine
        .catalog()
        .list_splits(dataset_id, &ListQuery::default())
        .await
        .expect("list splits")
        .splits
}

async fn row(h: &Harness<'_>, dataset_id: &str, split_id: &str) -> Option<SplitRow> {
    rows(h, dataset_id)
        .await
        .into_iter()
        .find(|row| row.split_id == split_id)
}

fn outcomes(result: &StageResult) -> Vec<(String, StageOutcome)> {
    result
        .splits
        .iter()
        .map(|s| (s.split_id.clone(), s.outcome))
        .collect()
}

fn ids_of(error: &MendError) -> Vec<String> {
    match error {
        MendError::NotFound { ids, .. } | MendError::FailedPrecondition { ids, .. } => ids.clone(),
        other => panic!("expected an error naming ids, got {other:?}"),
    }
}

/// Checks that `stamped` is the moment of a step that began at real time `began` while the
/// harness clock read `h.clock_now()`: that time, or later by at most the real time the step
/// took. A catalog may stamp a write with the clock's time plus the real time its attempt
/// waited (the object-store catalog does, so that a commit never predates its own put after
/// a lost race); on a slow store that is a few milliseconds. Equality would fail there by
/// the store's speed, not the catalog's rules.
fn assert_stamped_now(h: &Harness<'_>, stamped: i64, began: std::time::Instant, what: &str) {
    let now = h.clock_now();
    let waited = i64::try_from(began.elapsed().as_millis()).unwrap_or(i64::MAX);
    assert!(
        stamped >= now && stamped <= now.saturating_add(waited),
        "{what}: stamped {stamped}, the clock read {now} and the step took {waited} ms"
    );
}

pub(super) fn strings(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|id| id.to_string()).collect()
}
