//! Every statement the backend runs, each kept in its own file under `sql/` and compiled in.
//!
//! The statements are checked at run time (`sqlx::query`), not by the compile-time macros:
//! there is no database at build time. The parameters each one takes are listed at its top.

pub(super) const DATASET_INSERT: &str = include_str!("sql/dataset_insert.sql");
pub(super) const DATASET_LIST: &str = include_str!("sql/dataset_list.sql");
pub(super) const DATASET_SELECT: &str = include_str!("sql/dataset_select.sql");
pub(super) const DATASET_LOCK: &str = include_str!("sql/dataset_lock.sql");
pub(super) const DATASET_EXISTS: &str = include_str!("sql/dataset_exists.sql");
pub(super) const DATASET_UPDATE_CONFIG: &str = include_str!("sql/dataset_update_config.sql");
pub(super) const DATASET_UPDATE_PUBLISH_TOKEN: &str =
    include_str!("sql/dataset_update_publish_token.sql");
pub(super) const DATASET_ADVANCE_FENCING_EPOCH: &str =
    include_str!("sql/dataset_advance_fencing_epoch.sql");
pub(super) const DATASET_BUMP_MANIFEST: &str = include_str!("sql/dataset_bump_manifest.sql");
pub(super) const DATASET_PROBE: &str = include_str!("sql/dataset_probe.sql");
pub(super) const DATASET_SETTLE: &str = include_str!("sql/dataset_settle.sql");

pub(super) const SPLIT_STATES: &str = include_str!("sql/split_states.sql");
pub(super) const SPLIT_STATES_FOR_UPDATE: &str = include_str!("sql/split_states_for_update.sql");
pub(super) const SPLIT_STAGE_UPSERT: &str = include_str!("sql/split_stage_upsert.sql");
pub(super) const SPLIT_INSERT_STAGED: &str = include_str!("sql/split_insert_staged.sql");
pub(super) const SPLIT_INSERT_STAGED_RECORDED: &str =
    include_str!("sql/split_insert_staged_recorded.sql");
pub(super) const SPLIT_CREATE_ONLY_INSERT_FIRST: &str =
    include_str!("sql/split_create_only_insert_first.sql");
pub(super) const SPLIT_CREATE_ONLY_PROBE_FIRST: &str =
    include_str!("sql/split_create_only_probe_first.sql");
pub(super) const SPLIT_OVERWRITE_STAGED: &str = include_str!("sql/split_overwrite_staged.sql");
pub(super) const SPLIT_PUBLISH: &str = include_str!("sql/split_publish.sql");
pub(super) const SPLIT_MARK: &str = include_str!("sql/split_mark.sql");
pub(super) const SPLIT_MARK_STALE_STAGED: &str = include_str!("sql/split_mark_stale_staged.sql");
pub(super) const SPLIT_SEE_MARKS: &str = include_str!("sql/split_see_marks.sql");
pub(super) const SPLIT_DELETE: &str = include_str!("sql/split_delete.sql");
pub(super) const SPLIT_LIST: &str = include_str!("sql/split_list.sql");

pub(super) const INTENT_INSERT: &str = include_str!("sql/intent_insert.sql");
pub(super) const INTENT_UPDATE: &str = include_str!("sql/intent_update.sql");
pub(super) const INTENT_SELECT_PHASE: &str = include_str!("sql/intent_select_phase.sql");
pub(super) const INTENT_ABANDON: &str = include_str!("sql/intent_abandon.sql");
pub(super) const INTENT_SELECT: &str = include_str!("sql/intent_select.sql");
pub(super) const INTENT_DELETE: &str = include_str!("sql/intent_delete.sql");
pub(super) const INTENT_DELETE_UNABANDONED: &str =
    include_str!("sql/intent_delete_unabandoned.sql");
pub(super) const INTENT_LIST: &str = include_str!("sql/intent_list.sql");
pub(super) const INTENT_SELECT_FOR_SETTLE: &str = include_str!("sql/intent_select_for_settle.sql");
pub(super) const INTENT_DELETE_BATCH: &str = include_str!("sql/intent_delete_batch.sql");
pub(super) const INTENT_PENDING_DATASETS: &str = include_str!("sql/intent_pending_datasets.sql");

pub(super) const AUDIT_INSERT: &str = include_str!("sql/audit_insert.sql");
pub(super) const AUDIT_LIST: &str = include_str!("sql/audit_list.sql");
pub(super) const AUDIT_LIST_RECENT: &str = include_str!("sql/audit_list_recent.sql");

pub(super) const RECORDED_LOCK_KEY: &str = include_str!("sql/recorded_lock_key.sql");
pub(super) const RECORDED_SELECT: &str = include_str!("sql/recorded_select.sql");
pub(super) const RECORDED_INSERT: &str = include_str!("sql/recorded_insert.sql");
pub(super) const RECORDED_FORGET: &str = include_str!("sql/recorded_forget.sql");
pub(super) const RECORDED_LOCK_KEYS: &str = include_str!("sql/recorded_lock_keys.sql");
pub(super) const RECORDED_SELECT_KEYS: &str = include_str!("sql/recorded_select_keys.sql");
pub(super) const RECORDED_INSERT_BATCH: &str = include_str!("sql/recorded_insert_batch.sql");

pub(super) const WRITE_AUDIT_INSERT: &str = include_str!("sql/write_audit_insert.sql");
pub(super) const WRITE_AUDIT_LIST: &str = include_str!("sql/write_audit_list.sql");
