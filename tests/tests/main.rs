//! mend's integration tests as one test binary, one module per file: the build links one
//! executable rather than one per file (each links wasmtime, sqlx, object_store and the
//! server; a binary per file took gigabytes of disk). Run one file's tests with its module
//! name as the filter: `cargo test -p mend-tests --test integration crash_commit::`.

mod abandonment;
mod audit_pages;
mod capabilities;
mod checkpoint_bounds;
mod component;
mod conformance;
mod crash_commit;
mod crash_gc;
mod crash_operations;
mod crash_recovery;
mod engine_gates;
mod fleet_clocks;
mod fuzz;
mod grace_periods;
mod hostile_components;
mod hostile_policy;
mod idempotency;
mod js_policy;
mod live_handles;
mod manifests;
mod mixed_versions;
mod nul_characters;
mod object_store_writers;
mod operation_races;
mod operations;
mod pending_discovery;
mod policy_swap;
mod reconcile;
mod recovery_audit;
mod recovery_batches;
mod recovery_modes;
mod round_trips;
mod s3_store;
mod scenarios;
mod split_ids;
mod staging_contention;
mod standard_plans;
mod verify;
mod write_audit;
mod write_fingerprint;
