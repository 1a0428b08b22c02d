//! Grace periods at the edges of their range: every value is refused or honoured, and gc,
//! reconcile and recovery never touch a split younger than its grace period.
//!
//! Each grace field is tried at 0, 1, max-1, max, max+1 and `u64::MAX`, where max is
//! [`MAX_GRACE_PERIOD_MS`]. A value out of range is refused with `InvalidArgument` naming the
//! field and its range, at create and at config apply, and leaves nothing behind. A value in
//! range (with the other field at its maximum, so that only the one under test can expire
//! anything) gets a dataset holding a staged split with its object, a marked split and an
//! orphan object, each as old as the clock allows short of the grace period (0 ms, 1 ms and
//! grace-1 ms). Then gc runs twice, reconcile once and a roll-forward sweep settles a crashed gc
//! intent that names the staged split, and every split and object is still where it was.
//! (Before `bounds::ms_before`, a grace of `u64::MAX` wrapped the cutoff into the future: the
//! first gc marked the fresh split, the second deleted it.)

use mend::MendError;
use mend::bounds::{self, MAX_GRACE_PERIOD_MS};
use mend::intent::{Intent, OperationKind, PlannedEffects};
use mend::model::{DatasetConfig, ListQuery, PublishRequest, SplitState, StageMode};
use mend_policy::RecoveryMode;
use mend_tests::harness::{Backend, Harness};

/// The values every grace field is tried at.
const EDGES: [u64; 6] = [
    0,
    1,
    MAX_GRACE_PERIOD_MS - 1,
    MAX_GRACE_PERIOD_MS,
    MAX_GRACE_PERIOD_MS + 1,
    u64::MAX,
];

#[derive(Debug, Clone, Copy)]
enum Field {
    Staged,
    Deletion,
}

impl Field {
    fn bound(self) -> bounds::Bound {
        match self {
            Field::Staged => bounds::STAGED_GRACE_PERIOD_MS,
            Field::Deletion => bounds::DELETION_GRACE_PERIOD_MS,
        }
    }

    /// A config with this field at `value` and the other one at its maximum.
    fn config(self, value: u64) -> DatasetConfig {
        let mut config = DatasetConfig {
            staged_grace_period_ms: MAX_GRACE_PERIOD_MS,
            deletion_grace_period_ms: MAX_GRACE_PERIOD_MS,
            ..DatasetConfig::default()
        };
        match self {
            Field::Staged => config.staged_grace_period_ms = value,
            Field::Deletion => config.deletion_grace_period_ms = value,
        }
        config
    }
}

#[tokio::test]
async fn gc_reconcile_and_recovery_never_touch_a_split_younger_than_its_grace_period() {
    let h = Harness::new(Backend::Memory).await;
    let (mut refused, mut accepted, mut rounds, mut checks) = (0, 0, 0, 0);
    for field in [Field::Staged, Field::Deletion] {
        for value in EDGES {
            let bound = field.bound();
            let config = field.config(value);
            let dataset_id = h.unique_dataset_id("grace");
            let in_range = (bound.min..=bound.max).contains(&value);
            let created = h.engine.create_dataset(&dataset_id, &config).await;
            if !in_range {
                assert_out_of_range(created.map(|_| ()), bound, value);
                let lookup = h.engine.dataset(&dataset_id).await;
                assert!(
                    matches!(lookup, Err(MendError::NotFound { .. })),
                    "a refused create left a dataset behind: {lookup:?}"
                );
                // The same value is refused by a config change of an existing dataset.
                let existing = h.create_dataset("grace-existing").await;
                let before = h.engine.dataset(&existing).await.unwrap();
                let applied = h
                    .engine
                    .apply_config(&existing, before.config_version, &config, "node-a")
                    .await;
                assert_out_of_range(applied.map(|_| ()), bound, value);
                assert_eq!(h.engine.dataset(&existing).await.unwrap(), before);
                refused += 1;
                checks += 4;
                continue;
            }
            created.unwrap_or_else(|error| panic!("{field:?}={value} refused: {error}"));
            accepted += 1;
            let grace = match field {
                Field::Staged => config.staged_grace_period_ms,
                Field::Deletion => config.deletion_grace_period_ms,
            };
            // Every age short of the grace period: nothing may be touched at any of them.
            let mut ages: Vec<u64> = [0, 1, grace.saturating_sub(1)]
                .into_iter()
                .filter(|age| *age < grace)
                .collect();
            ages.dedup();
            // Each age on a dataset of its own: splits left by a younger round would be
            // rightly collected once the clock passes their grace period.
            for (round, age) in ages.into_iter().enumerate() {
                let dataset_id = if round == 0 {
                    dataset_id.clone()
                } else {
                    let other = h.unique_dataset_id("grace");
                    h.engine.create_dataset(&other, &config).await.unwrap();
                    other
                };
                checks += young_splits_survive(&h, &dataset_id, field, age).await;
                rounds += 1;
            }
        }
    }
    println!(
        "grace edges: {refused} values refused (with their range), {accepted} accepted, \
         {rounds} rounds of gc x2 + reconcile + roll-forward, {checks} checks"
    );
    assert_eq!(refused, 5, "0 staged, and max+1 and u64::MAX of each field");
    assert_eq!(accepted, 7);
    assert!(rounds >= 14, "{rounds} rounds");
}

fn assert_out_of_range(result: Result<(), MendError>, bound: bounds::Bound, value: u64) {
    match result {
        Err(MendError::InvalidArgument { message }) => {
            assert!(message.contains(bound.name), "{message}");
            assert!(message.contains(&bound.to_string()), "{message}");
            assert!(message.contains(&value.to_string()), "{message}");
        }
        other => panic!("{}={value} was not refused: {other:?}", bound.name),
    }
}

/// Stages, marks and orphans splits at the clock's now, moves the clock on by `age` (short
/// of the grace period under test), runs every collector and checks that nothing moved.
/// Returns how many checks it made.
async fn young_splits_survive(h: &Harness, dataset_id: &str, field: Field, age: u64) -> usize {
    let engine = &h.engine;
    let round = uuid::Uuid::new_v4().simple().to_string();
    let staged = format!("staged-{round}");
    let marked = format!("marked-{round}");
    let orphan = format!("orphan-{round}");
    let dataset = engine.dataset(dataset_id).await.unwrap();

    // The orphan object's age comes from the store's clock, which is the wall clock.
    h.set_clock_past_wall_clock(0);
    for id in [&staged, &marked] {
        let metadata = r#"{"num_docs": 1}"#;
        let request = mend::model::StageRequest {
            dataset_id: dataset_id.to_string(),
            mode: StageMode::CreateOnly,
            node: "node-a".into(),
            splits: vec![mend::model::StageSplit {
                split_id: id.clone(),
                metadata_json: metadata.into(),
            }],
        };
        engine.stage(&request).await.unwrap();
        h.plant_orphan(dataset_id, id, &dataset.uid, false).await;
    }
    engine
        .publish(&PublishRequest::staged(dataset_id, vec![marked.clone()]))
        .await
        .unwrap();
    engine
        .mark_for_deletion(dataset_id, std::slice::from_ref(&marked))
        .await
        .unwrap();
    h.plant_orphan(dataset_id, &orphan, &dataset.uid, false)
        .await;
    let started = h.clock_now();

    // A gc that planned to mark the staged split and crashed: its roll-forward marks only
    // what is older than the intent's own cutoff.
    let crashed_gc = Intent {
        effects: PlannedEffects {
            mark: vec![staged.clone()],
            ..PlannedEffects::default()
        },
        ..Intent::armed(
            uuid::Uuid::new_v4().to_string(),
            OperationKind::Gc,
            dataset_id,
            "crashed-node",
            started,
            0,
        )
    };
    engine.catalog().put_intent(&crashed_gc).await.unwrap();

    let age = i64::try_from(age).unwrap_or(i64::MAX);
    h.clock.set_ms(started.saturating_add(age));
    for _ in 0..2 {
        engine.gc(dataset_id, "node-a").await.unwrap();
    }
    let reconciled = engine.reconcile(dataset_id, "node-a").await.unwrap();
    engine
        .recover(dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();

    let rows = engine
        .list_splits(dataset_id, &ListQuery::default())
        .await
        .unwrap()
        .splits;
    let state = |id: &str| {
        rows.iter()
            .find(|row| row.split_id == id)
            .map(|row| row.state)
    };
    let context = format!("{field:?} grace, age {age} ms");
    assert_eq!(state(&staged), Some(SplitState::Staged), "{context}");
    assert_eq!(
        state(&marked),
        Some(SplitState::MarkedForDeletion),
        "{context}"
    );
    // The orphan is younger than the staged grace, so reconcile neither adopts nor discards it.
    assert!(
        reconciled.adopted.is_empty() && reconciled.discarded.is_empty(),
        "{context}: {reconciled:?}"
    );
    assert_eq!(state(&orphan), None, "{context}");
    let objects: Vec<String> = engine
        .objects()
        .list(dataset_id)
        .await
        .unwrap()
        .into_iter()
        .map(|object| object.split_id)
        .collect();
    for id in [&staged, &marked, &orphan] {
        assert!(
            objects.contains(id),
            "{context}: the object of {id} is gone"
        );
    }
    // The crashed gc was settled without marking the young split.
    assert!(
        engine
            .catalog()
            .list_intents(dataset_id)
            .await
            .unwrap()
            .is_empty(),
        "{context}: the crashed gc's intent is still there"
    );
    7
}
