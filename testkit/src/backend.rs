//! What the kit needs from a backend: [`BackendUnderTest`], the trait an embedder implements,
//! with the values it hands over ([`FreshCatalog`], [`Fingerprint`], [`Scale`]). Everything
//! else (the engine, the clock, counting the split objects' writes) is the kit's own
//! ([`Harness`](crate::Harness)).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use mend::Catalog;
use mend::objects::SplitObjects;

/// A catalog backend the conformance cases run against.
///
/// The kit calls [`open`](Self::open) once per case, builds an engine on the fresh catalog
/// (mend's default policy, a manual clock), and asks
/// [`catalog_fingerprint`](Self::catalog_fingerprint) before and after each step that must
/// write nothing. It counts the writes to the split objects itself, by wrapping the store of
/// [`FreshCatalog::objects`] in a [`CountingStore`](crate::CountingStore).
///
/// mend's own four backends implement it in `tests/src/conformance.rs`, and
/// `host/examples/custom_backend.rs` is a complete implementation for a backend of an
/// embedder's own.
#[async_trait]
pub trait BackendUnderTest: Send + Sync {
    /// What the backend keeps for one opened catalog: what its fingerprint reads (an
    /// inspection connection, a counter of the catalog's writes) and whatever must live as long
    /// as the catalog (a temporary directory). `()` if nothing.
    type State: Send + Sync;

    /// A short name for the output: every line a case prints starts `conformance[NAME]`.
    fn name(&self) -> String;

    /// A fresh catalog for one case, with the split objects the engine writes beside it.
    ///
    /// The catalog may be shared with other cases (one Postgres database, one bucket): every
    /// case uses dataset ids no other case uses, so cases never see each other's datasets
    /// except in [`Catalog::list_datasets`], where a case looks only for its own, and in
    /// [`Catalog::list_recent_audit`], where a case's records are the newest (a century past
    /// the wall clock). The objects
    /// may share a store with the catalog (as mend's object-store catalog does) or live
    /// elsewhere. Panics if the backend cannot be reached, saying how to make it reachable.
    async fn open(&self) -> FreshCatalog<Self::State>;

    /// The catalog's part of the write fingerprint of `dataset_id`: a value that changes
    /// whenever the catalog writes anything for the dataset (its row, its splits, intents,
    /// audit records, recorded requests), and that reads leave alone. The cases compare it
    /// before and after a step to assert that the step wrote nothing; a fingerprint that
    /// misses a kind of write makes those assertions pass vacuously.
    ///
    /// A write count of the catalog's own storage is enough ([`Fingerprint::writes`]); a
    /// database can fingerprint row versions instead, as mend's Postgres backend does with
    /// each row's `ctid` and `xmin`.
    async fn catalog_fingerprint(&self, state: &Self::State, dataset_id: &str) -> Fingerprint;

    /// How hard the concurrency cases push this backend.
    fn scale(&self) -> Scale {
        Scale::default()
    }
}

/// A catalog opened for one case: what [`BackendUnderTest::open`] returns.
#[derive(Debug)]
pub struct FreshCatalog<S> {
    /// The catalog under test.
    pub catalog: Arc<dyn Catalog>,
    /// Where the split objects live. The kit takes its store and prefix
    /// ([`SplitObjects::store`]) and counts the writes to them; an upload signer is not kept,
    /// since no case presigns.
    pub objects: SplitObjects,
    /// Handed back to [`BackendUnderTest::catalog_fingerprint`], and dropped with the case.
    pub state: S,
}

/// The catalog's part of a write fingerprint: any value that changes whenever the catalog
/// writes, made of strings so that every backend can express its own. Compared for equality
/// only, and printed when a case finds that it moved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Fingerprint(Vec<String>);

impl Fingerprint {
    /// The fingerprint of a backend that counts the writes its catalog makes (for instance
    /// with a [`CountingStore`](crate::CountingStore) under it): the count so far.
    pub fn writes(count: u64) -> Self {
        Self(vec![count.to_string()])
    }

    /// The parts it was made of, in order.
    pub fn parts(&self) -> &[String] {
        &self.0
    }
}

impl<S: Into<String>> FromIterator<S> for Fingerprint {
    fn from_iter<I: IntoIterator<Item = S>>(parts: I) -> Self {
        Self(parts.into_iter().map(Into::into).collect())
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(", "))
    }
}

/// How hard the concurrency cases push a backend: how many tasks race, for how many rounds.
/// Each field names the case it shapes.
///
/// Start from a preset and change what you need: `Scale { stage_race_rounds: 50,
/// ..Scale::STANDARD }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// `concurrent_create_only_batches_claim_each_id_once`: workers staging the same ids at
    /// once, create-only, each in its own order (at least 1).
    pub stage_race_workers: usize,
    /// ... rounds of that race, each with new ids (at least 1).
    pub stage_race_rounds: usize,
    /// ... ids per round (at least 3: workers drop up to 2 of them from their batch).
    pub stage_race_ids: usize,
    /// `keyed_creation_answers_a_retry_with_the_dataset_it_created`: copies of one keyed
    /// dataset creation sent at once (at least 1).
    pub racing_creations: usize,
    /// `record_request_keeps_the_first_record_of_racing_runs`: runs recording a result under
    /// one key at once (at least 1).
    pub racing_records: usize,
    /// `keyed_records_survive_concurrent_writes`: workers mixing keyed and unkeyed writes
    /// to one dataset at once (at least 1).
    pub keyed_writers: usize,
    /// ... rounds each of them writes (at least 1).
    pub keyed_rounds: usize,
}

impl Scale {
    /// For a backend whose writes are cheap: a catalog on a local directory or in memory.
    /// The default.
    pub const STANDARD: Scale = Scale {
        stage_race_workers: 4,
        stage_race_rounds: 15,
        stage_race_ids: 12,
        racing_creations: 6,
        racing_records: 8,
        keyed_writers: 4,
        keyed_rounds: 4,
    };

    /// For a transactional database, where lock-order bugs (deadlocks between batches that
    /// lock the same rows in different orders) show only after many rounds: 8 workers, 200
    /// rounds of 24 ids. What mend's Postgres backend runs.
    pub const THOROUGH: Scale = Scale {
        stage_race_workers: 8,
        stage_race_rounds: 200,
        stage_race_ids: 24,
        keyed_writers: 6,
        keyed_rounds: 6,
        ..Scale::STANDARD
    };

    /// For a store where every write is a round trip to a slow server: what mend's S3 backend
    /// runs (its tests talk to an S3-compatible server written in Python).
    pub const LIGHT: Scale = Scale {
        stage_race_workers: 4,
        stage_race_rounds: 6,
        stage_race_ids: 8,
        racing_creations: 3,
        racing_records: 3,
        keyed_writers: 3,
        keyed_rounds: 2,
    };

    /// Panics, naming the field, if a value is below what its case needs.
    pub(crate) fn check(&self) {
        let minimums = [
            ("stage_race_workers", self.stage_race_workers, 1),
            ("stage_race_rounds", self.stage_race_rounds, 1),
            ("stage_race_ids", self.stage_race_ids, 3),
            ("racing_creations", self.racing_creations, 1),
            ("racing_records", self.racing_records, 1),
            ("keyed_writers", self.keyed_writers, 1),
            ("keyed_rounds", self.keyed_rounds, 1),
        ];
        for (field, value, minimum) in minimums {
            assert!(
                value >= minimum,
                "Scale::{field} is {value}, but its case needs at least {minimum}"
            );
        }
    }
}

impl Default for Scale {
    fn default() -> Self {
        Self::STANDARD
    }
}
