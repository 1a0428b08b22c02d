//! Grace periods at the edges of their range: every value is refused or honoured, and gc,
//! reconcile and recovery leave a split alone until it is older than its grace period, and
//! collect it once it is.
//!
//! Each grace field is tried at 0, 1, max-1, max, max+1 and `u64::MAX`, where max is
//! [`MAX_GRACE_PERIOD_MS`]. A value out of range is refused with `InvalidArgument` naming the
//! field and its range, at create and at config apply, and leaves nothing behind. A value in
//! range (with the other field at its maximum, so that only the one under test can expire
//! anything) gets rounds on datasets of their own, each holding a staged split with its
//! object, a marked split and an orphan object, all born at one instant (the orphan's
//! last-modified time, which the store stamps from the wall clock, is where the manual clock is
//! set before the rows are written). The clock then moves on by one age: short of the grace
//! period (0, 1 ms, grace-1 ms), exactly at it, one ms past it, and far past it (a whole
//! maximum grace period more). Then gc runs twice, reconcile once, a roll-forward sweep
//! settles a crashed gc intent that names the staged split (keeping it from gc until then),
//! and gc runs once more. What is older than its grace period is collected, and nothing else
//! (an age equal to the grace period is not past it, as the default policy's rule says):
//!
//! - the staged split is marked for deletion once its age is past the staged grace period,
//!   and staged otherwise, its object in place either way;
//! - the marked split loses its object and its row once its age is past the deletion grace
//!   period, and keeps both otherwise;
//! - the orphan is adopted (published under its name) once its age is past the staged grace
//!   period, and left alone (no row, its object in place) otherwise.
//!
//! (Before `bounds::ms_before`, a grace of `u64::MAX` wrapped the cutoff into the future: the
//! first gc marked the fresh split, the second deleted it.)

use mend::MendError;
use mend::bounds::{self, MAX_GRACE_PERIOD_MS};
use mend::catalog::MarkRule;
use mend::clock::Clock;
use mend::intent::{Intent, OperationKind, PlannedEffects};
use mend::model::{DatasetConfig, ListQuery, PublishRequest, SplitState, StageMode};
use mend_contract::RecoveryMode;
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
async fn gc_reconcile_and_recovery_collect_a_split_only_once_past_its_grace_period() {
    let h = Harness::new(Backend::Memory).await;
    let (mut refused, mut accepted, mut checks) = (0, 0, 0);
    let mut rounds = Rounds::default();
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
            // Short of the grace period, exactly at it, one ms past it and far past it.
            let mut ages: Vec<u64> = vec![
                0,
                1,
                grace.saturating_sub(1),
                grace,
                grace + 1,
                grace + FAR_PAST_MS,
            ];
            ages.sort_unstable();
            ages.dedup();
            // Each age on a dataset of its own: splits left by another round would rightly be
            // collected once the clock passes their grace period.
            for (round, age) in ages.into_iter().enumerate() {
                let dataset_id = if round == 0 {
                    dataset_id.clone()
                } else {
                    let other = h.unique_dataset_id("grace");
                    h.engine.create_dataset(&other, &config).await.unwrap();
                    other
                };
                rounds.count(age.cmp(&grace));
                checks += one_round(&h, &dataset_id, &config, field, age, &mut rounds).await;
            }
        }
    }
    println!(
        "grace edges: {refused} values refused (with their range), {accepted} accepted; \
         {} rounds of gc x2 + reconcile + roll-forward + gc: {} short of the grace period and \
         {} exactly at it (nothing collected), {} past it (collected: {} staged splits marked, \
         {} marked splits deleted, {} orphans adopted); {checks} checks",
        rounds.total(),
        rounds.short,
        rounds.at,
        rounds.past,
        rounds.marked,
        rounds.deleted,
        rounds.adopted,
    );
    assert_eq!(refused, 5, "0 staged, and max+1 and u64::MAX of each field");
    assert_eq!(accepted, 7);
    // Per accepted value: 0, 1 and grace-1 (those that are short of it and distinct), grace,
    // grace+1 and far past. Staged 1, max-1, max; deletion 0, 1, max-1, max.
    assert_eq!(
        (rounds.short, rounds.at, rounds.past),
        (14, 7, 14),
        "{rounds:?}"
    );
    // Collected in every round past the grace period under test (2 per value: 6 staged
    // splits marked and orphans adopted, 8 marked splits deleted), and in the rounds whose age
    // also passes the other field's maximum: grace+1 of a maximum grace, and far past of
    // 1, max-1 and max (4 of each field).
    assert_eq!(
        (rounds.marked, rounds.adopted, rounds.deleted),
        (6 + 4, 6 + 4, 8 + 4),
        "{rounds:?}"
    );
}

/// How far past its grace period the last age of a round is: a whole maximum grace period.
const FAR_PAST_MS: u64 = MAX_GRACE_PERIOD_MS;

/// The rounds run, by where their age stands against the grace period under test, and what
/// they collected.
#[derive(Debug, Default)]
struct Rounds {
    short: usize,
    at: usize,
    past: usize,
    marked: usize,
    deleted: usize,
    adopted: usize,
}

impl Rounds {
    fn count(&mut self, age: std::cmp::Ordering) {
        match age {
            std::cmp::Ordering::Less => self.short += 1,
            std::cmp::Ordering::Equal => self.at += 1,
            std::cmp::Ordering::Greater => self.past += 1,
        }
    }

    fn total(&self) -> usize {
        self.short + self.at + self.past
    }
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

/// One round on `dataset_id`: a staged split with its object, a marked split and an orphan
/// object, all born at one instant; the clock moved on by `age`; every collector run; then
/// each is checked against what its grace period says (see the module doc), and what was
/// collected is counted in `rounds`. Returns how many checks it made.
async fn one_round(
    h: &Harness,
    dataset_id: &str,
    config: &DatasetConfig,
    field: Field,
    age: u64,
    rounds: &mut Rounds,
) -> usize {
    let engine = &h.engine;
    let round = uuid::Uuid::new_v4().simple().to_string();
    let staged = format!("staged-{round}");
    let marked = format!("marked-{round}");
    let orphan = format!("orphan-{round}");
    let dataset = engine.dataset(dataset_id).await.unwrap();

    // The orphan's age comes from the store's clock (the wall clock, which stamps objects):
    // the rows are written with the manual clock at the orphan's birth, so that all three are
    // exactly `age` old below.
    h.plant_orphan(dataset_id, &orphan, &dataset.uid, false)
        .await;
    let born = listed(h, dataset_id).await[&orphan];
    h.clock.set_ms(born);
    for id in [&staged, &marked] {
        stage_with_object(h, dataset_id, &dataset.uid, id, "lost-operation").await;
    }
    engine
        .publish(&PublishRequest::staged(dataset_id, vec![marked.clone()]))
        .await
        .unwrap();
    h.mark_seen_now(dataset_id, std::slice::from_ref(&marked))
        .await;

    // A gc that planned to mark the staged split and crashed: its roll-forward marks only
    // what is older than the intent's own cutoff (its birth), and until then the split is
    // its intent's, not gc's.
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
            born,
            0,
        )
    };
    engine.catalog().put_intent(&crashed_gc).await.unwrap();

    h.clock
        .set_ms(born.saturating_add(i64::try_from(age).unwrap_or(i64::MAX)));
    for _ in 0..2 {
        engine.gc(dataset_id, "node-a").await.unwrap();
    }
    let reconciled = engine.reconcile(dataset_id, "node-a").await.unwrap();
    engine
        .recover(dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();
    // The crashed gc is settled: the staged split is gc's to judge again.
    engine.gc(dataset_id, "node-a").await.unwrap();

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
    let objects = listed(h, dataset_id).await;
    let context = format!(
        "{field:?} grace under test; staged grace {} ms, deletion grace {} ms; age {age} ms",
        config.staged_grace_period_ms, config.deletion_grace_period_ms
    );

    // The staged split: marked once past the staged grace period; its object stays.
    let staged_past = age > config.staged_grace_period_ms;
    let expected = match staged_past {
        true => SplitState::MarkedForDeletion,
        false => SplitState::Staged,
    };
    assert_eq!(
        state(&staged),
        Some(expected),
        "{context}: the staged split"
    );
    assert!(
        objects.contains_key(&staged),
        "{context}: the staged split's object is gone"
    );
    // The marked split: its object and its row removed once past the deletion grace period.
    let deletion_past = age > config.deletion_grace_period_ms;
    let expected = (!deletion_past).then_some(SplitState::MarkedForDeletion);
    assert_eq!(state(&marked), expected, "{context}: the marked split");
    assert_eq!(
        objects.contains_key(&marked),
        !deletion_past,
        "{context}: the marked split's object"
    );
    // The orphan: adopted (published) once past the staged grace period, else left alone.
    let (adopted, row) = match staged_past {
        true => (vec![orphan.clone()], Some(SplitState::Published)),
        false => (Vec::new(), None),
    };
    assert_eq!(reconciled.adopted, adopted, "{context}: {reconciled:?}");
    assert!(reconciled.discarded.is_empty(), "{context}: {reconciled:?}");
    assert_eq!(state(&orphan), row, "{context}: the orphan");
    assert!(
        objects.contains_key(&orphan),
        "{context}: the orphan's object is gone"
    );
    // The crashed gc was settled.
    assert!(
        engine
            .catalog()
            .list_intents(dataset_id)
            .await
            .unwrap()
            .is_empty(),
        "{context}: the crashed gc's intent is still there"
    );
    rounds.marked += usize::from(staged_past);
    rounds.adopted += usize::from(staged_past);
    rounds.deleted += usize::from(deletion_past);
    9
}

/// Stages `split_id` alone (create-only, as node-a) and puts its object, whole, its header
/// naming `operation_id`: a split a writer staged and uploaded.
async fn stage_with_object(
    h: &Harness,
    dataset_id: &str,
    uid: &str,
    split_id: &str,
    operation_id: &str,
) {
    let request = mend::model::StageRequest {
        dataset_id: dataset_id.to_string(),
        mode: StageMode::CreateOnly,
        node: "node-a".into(),
        splits: vec![mend::model::StageSplit {
            split_id: split_id.to_string(),
            metadata_json: r#"{"num_docs": 1}"#.into(),
        }],
    };
    h.engine.stage(&request).await.unwrap();
    h.plant_orphan_of(dataset_id, split_id, uid, operation_id)
        .await;
}

/// The dataset's objects, each with its last-modified time (ms).
async fn listed(h: &Harness, dataset_id: &str) -> std::collections::BTreeMap<String, i64> {
    h.engine
        .objects()
        .list(dataset_id)
        .await
        .unwrap()
        .into_iter()
        .map(|object| (object.split_id, object.last_modified_ms))
        .collect()
}

/// Recovery settles an intent only over the rows it planned on. A split `replaced` is
/// published by one operation, then marked (as a merge's replaced split is) and the mark seen;
/// `then_marked` is marked and seen only after a crashed gc planned to delete it. Two leftover intents name them:
///
/// - a second begin of the same split ids, never published: its roll-back (exclusive
///   recovery) leaves `replaced`'s row and object, which belong to the operation that
///   published it (`mend-sim` seed 1971851877719533564: the row went, its object stayed, and
///   reconcile published it again beside the merge that had replaced it);
/// - a crashed gc that planned, after `replaced` was marked and before `then_marked` was, to
///   delete both: its roll-forward deletes `replaced`, marked by the mark it planned on, and
///   leaves `then_marked`, whose mark was seen after its plan (`mend-sim` seed
///   9956702636221711115: a split id staged again, published and marked since was deleted
///   1.6 s into its grace period).
#[tokio::test]
async fn recovery_settles_an_intent_only_over_the_rows_it_planned_on() {
    let h = Harness::new(Backend::Memory).await;
    let engine = &h.engine;
    let dataset_id = h.create_dataset("planned-on").await;
    let dataset = engine.dataset(&dataset_id).await.unwrap();
    let (replaced, then_marked) = ("replaced".to_string(), "then-marked".to_string());
    let t0 = 1_800_000_000_000;
    h.clock.set_ms(t0);
    for id in [&replaced, &then_marked] {
        stage_with_object(&h, &dataset_id, &dataset.uid, id, "the-publisher").await;
    }
    engine
        .publish(&PublishRequest::staged(
            &dataset_id,
            vec![replaced.clone(), then_marked.clone()],
        ))
        .await
        .unwrap();
    h.mark_seen_now(&dataset_id, std::slice::from_ref(&replaced))
        .await;

    // The crashed gc is born after `replaced` was marked and before `then_marked` was.
    h.clock.set_ms(t0 + 1_000);
    let crashed_gc = Intent {
        effects: PlannedEffects {
            delete: vec![replaced.clone(), then_marked.clone()],
            ..PlannedEffects::default()
        },
        ..Intent::armed(
            uuid::Uuid::new_v4().to_string(),
            OperationKind::Gc,
            &dataset_id,
            "crashed-node",
            t0 + 1_000,
            0,
        )
    };
    h.clock.set_ms(t0 + 2_000);
    h.mark_seen_now(&dataset_id, std::slice::from_ref(&then_marked))
        .await;
    // It planned an object of its own that never came (the one there is the publisher's), so
    // it cannot be completed, and exclusive recovery rolls it back.
    let second_begin = Intent {
        effects: PlannedEffects {
            stage: vec![mend::intent::PlannedRow {
                split_id: replaced.clone(),
                metadata_json: r#"{"num_docs": 1}"#.into(),
            }],
            objects: vec![mend::intent::PlannedObject {
                split_id: replaced.clone(),
                size: 1,
                checksum: format!("sha256:{}", "0".repeat(64)),
            }],
            ..PlannedEffects::default()
        },
        ..Intent::armed(
            uuid::Uuid::new_v4().to_string(),
            OperationKind::Commit,
            &dataset_id,
            "crashed-node",
            t0 + 2_000,
            0,
        )
    };

    // The roll-back first, while `replaced` still has its row.
    engine.catalog().put_intent(&second_begin).await.unwrap();
    h.clock.set_ms(t0 + 3_000);
    let report = engine
        .recover(&dataset_id, RecoveryMode::Exclusive)
        .await
        .unwrap();
    let decisions: Vec<_> = report
        .intents
        .iter()
        .map(|intent| (intent.decision.clone(), intent.outcome.clone()))
        .collect();
    assert_eq!(
        format!("{decisions:?}"),
        "[(RollBack, Executed)]",
        "the second begin is rolled back"
    );
    let state = |rows: &[mend::model::SplitRow], id: &str| {
        rows.iter()
            .find(|row| row.split_id == id)
            .map(|row| row.state)
    };
    let rows = engine
        .list_splits(&dataset_id, &ListQuery::default())
        .await
        .unwrap()
        .splits;
    let objects = listed(&h, &dataset_id).await;
    assert!(
        engine
            .catalog()
            .list_intents(&dataset_id)
            .await
            .unwrap()
            .is_empty(),
        "exclusive recovery settled the second begin"
    );
    assert_eq!(
        state(&rows, &replaced),
        Some(SplitState::MarkedForDeletion),
        "the roll-back left the published-then-marked row"
    );
    assert_eq!(
        state(&rows, &then_marked),
        Some(SplitState::MarkedForDeletion)
    );
    assert!(objects.contains_key(&replaced) && objects.contains_key(&then_marked));

    // The crashed gc, rolled forward: it deletes `replaced` (its mark is the one it planned
    // on) and leaves `then_marked`.
    engine.catalog().put_intent(&crashed_gc).await.unwrap();
    engine
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();
    let rows = engine
        .list_splits(&dataset_id, &ListQuery::default())
        .await
        .unwrap()
        .splits;
    let objects = listed(&h, &dataset_id).await;
    assert_eq!(
        state(&rows, &replaced),
        None,
        "the gc deleted what it planned on"
    );
    assert!(!objects.contains_key(&replaced));
    assert_eq!(
        state(&rows, &then_marked),
        Some(SplitState::MarkedForDeletion),
        "the gc left a row marked after it planned"
    );
    assert!(objects.contains_key(&then_marked));
    assert!(
        engine
            .catalog()
            .list_intents(&dataset_id)
            .await
            .unwrap()
            .is_empty()
    );
    println!(
        "recovery over rows it planned on: 2 intents settled, 1 row deleted, 1 kept, 12 checks"
    );
}

/// A mark's deletion grace period counts from when gc first sees it, not from the mark's own
/// stamp, which its writer reads before its write lands. Here a merge's publish, which marks
/// the split `replaced`, and an operator's mark of the split `dropped` land at `t0 + 2 grace`,
/// stamped `t0`: as when the process that wrote them paused for two grace periods between
/// reading its clock and its write (a collector, swapping, a stopped VM). A reader that
/// probed the catalog just before they landed saw both published and may read them until
/// `t0 + 3 grace`. Timed from their stamps, the first gc deleted both at once; now it sees
/// them, and a gc exactly a grace period later deletes nothing, one a millisecond past it
/// deletes both. Found by `mend-sim`, seed 1282375541035437414 (a replica paused 3 s in a
/// merge's publish, under a 4.5 s deletion grace period). On every backend.
#[tokio::test]
async fn a_mark_stamped_before_it_landed_is_timed_from_when_gc_saw_it() {
    const GRACE: i64 = 10_000;
    let mut checks = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let config = DatasetConfig {
            deletion_grace_period_ms: GRACE as u64,
            ..DatasetConfig::default()
        };
        let dataset_id = h.unique_dataset_id("paused-mark");
        engine.create_dataset(&dataset_id, &config).await.unwrap();
        let uid = engine.dataset(&dataset_id).await.unwrap().uid;
        let [replaced, dropped, merged] = ["replaced", "dropped", "merged"].map(String::from);
        let t0 = h.clock.now_ms();
        for id in [&replaced, &dropped, &merged] {
            stage_with_object(&h, &dataset_id, &uid, id, "lost-operation").await;
        }
        engine
            .publish(&PublishRequest::staged(
                &dataset_id,
                vec![replaced.clone(), dropped.clone()],
            ))
            .await
            .unwrap();

        // The writes land two grace periods after their stamps.
        let landed = t0 + 2 * GRACE;
        h.clock.set_ms(landed);
        let merge = PublishRequest {
            replaced_split_ids: vec![replaced.clone()],
            ..PublishRequest::staged(&dataset_id, vec![merged.clone()])
        };
        let published = engine
            .catalog()
            .publish(&merge, &|_| Ok(()), t0, None)
            .await
            .unwrap();
        assert_eq!(published.marked, [replaced.as_str()], "{backend}");
        engine
            .catalog()
            .mark(
                &dataset_id,
                std::slice::from_ref(&dropped),
                MarkRule::Named,
                t0,
                None,
            )
            .await
            .unwrap();

        let gone = [dropped.clone(), replaced.clone()];
        let first = engine.gc(&dataset_id, "node-a").await.unwrap();
        assert!(
            first.deleted.is_empty(),
            "{backend}: deleted within a grace period of the reader's last sight: {first:?}"
        );
        assert_eq!(first.seen, gone, "{backend}: the first gc sees both marks");
        let rows = engine
            .list_splits(&dataset_id, &ListQuery::default())
            .await
            .unwrap()
            .splits;
        for row in rows.iter().filter(|row| gone.contains(&row.split_id)) {
            assert_eq!(row.state, SplitState::MarkedForDeletion, "{backend}");
            assert_eq!(row.updated_at_ms, t0, "{backend}: the mark keeps its stamp");
            assert_eq!(row.mark_seen_at_ms, Some(landed), "{backend}: {row:?}");
        }
        let merged_row = rows.iter().find(|row| row.split_id == merged).unwrap();
        assert_eq!(merged_row.mark_seen_at_ms, None, "{backend}: published");
        checks += 1 + 2 + 3 * 2 + 1;

        // Exactly a grace period after gc saw them: kept, and seen only once.
        h.clock.set_ms(landed + GRACE);
        let second = engine.gc(&dataset_id, "node-a").await.unwrap();
        assert_eq!(second, mend::engine::GcResult::default(), "{backend}");
        let objects = listed(&h, &dataset_id).await;
        assert!(
            gone.iter().all(|id| objects.contains_key(id)),
            "{backend}: an object went before its grace period ended: {objects:?}"
        );
        // A millisecond past it: both go, object and row.
        h.clock.set_ms(landed + GRACE + 1);
        let third = engine.gc(&dataset_id, "node-a").await.unwrap();
        assert_eq!(third.deleted, gone, "{backend}: {third:?}");
        let objects = listed(&h, &dataset_id).await;
        assert!(
            gone.iter().all(|id| !objects.contains_key(id)) && objects.contains_key(&merged),
            "{backend}: {objects:?}"
        );
        let left: Vec<String> = engine
            .list_splits(&dataset_id, &ListQuery::default())
            .await
            .unwrap()
            .splits
            .into_iter()
            .map(|row| row.split_id)
            .collect();
        assert_eq!(left, [merged.as_str()], "{backend}");
        checks += 5;
    }
    println!(
        "marks stamped two grace periods before they landed, on {} backends: each seen by the \
         first gc, kept by one a grace period later, deleted by one a millisecond past it; \
         {checks} checks",
        Backend::ALL.len()
    );
    assert_eq!(checks, 15 * Backend::ALL.len());
}
