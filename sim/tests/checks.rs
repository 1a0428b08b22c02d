//! Every check of the simulator shown to fire, by name, and alone: a small history and end
//! state that every check holds ([`baseline`]), then, for each check, one change to it that
//! breaks what that check holds and nothing else ([`PLANTED`]). A check that could never fire
//! would pass every seed while proving nothing; this shows each one can, on the exact
//! violation it names.

use std::collections::{BTreeMap, BTreeSet};

use mend::model::{Dataset, DatasetConfig, SplitState};
use mend::runtime::registry::ActiveRecord;
use mend_sim::check::{
    self, Check, Claim, ClaimRecord, ConfigApplyRecord, ConfigOutcome, End, GenerationRead,
    HeartbeatRecord, History, LeaseGrant, ObjectRead, OperationRecord, PolicyChangeRecord,
    PolicyOutcome, PolicyRun, PositionRead, SweepRecord, TakeoverRecord, Violation,
};

const DEFAULT_DIGEST: &str = "sha256:default";

fn config() -> DatasetConfig {
    DatasetConfig {
        staged_grace_period_ms: 4_000,
        deletion_grace_period_ms: 5_000,
        policy_params: BTreeMap::new(),
    }
}

fn claim(claim: Claim, at_ms: u64) -> ClaimRecord {
    ClaimRecord {
        claim,
        by: "a hand-made answer".into(),
        at_ms,
    }
}

fn operation(id: &str, from: u64, splits: &[&str], invoked_ms: u64) -> OperationRecord {
    OperationRecord {
        operation_id: id.into(),
        partition: "w0".into(),
        from,
        split_ids: splits.iter().map(|split| split.to_string()).collect(),
        invoked_ms,
        ..OperationRecord::default()
    }
}

fn view(replica: usize, epoch: u64, at_ms: u64) -> HeartbeatRecord {
    HeartbeatRecord {
        replica,
        replica_id: format!("r{replica}"),
        started_ms: at_ms,
        answered_ms: at_ms + 5,
        epoch,
        rejoined: false,
        members: vec![("r0".into(), 1), ("r1".into(), 2)],
        expired: Vec::new(),
        owner: Some("r0".into()),
        lease_live_until_ms: 900,
    }
}

fn record(version: u64, digest: &str, previous: &str) -> ActiveRecord {
    ActiveRecord {
        version,
        digest: digest.into(),
        previous: Some(previous.into()),
        change: "swap".into(),
        changed_at_ms: 0,
        recorded: None,
        principal: None,
    }
}

/// A history every check holds: writer w0's operations from 0 and 1 published (w0-1 with two
/// splits), the one from 2 ended; a reader's generation and a writer's read of the position
/// after both publishes; two sweeps one after the other; two replicas in a fleet agreeing on
/// everything; an object read that found its object.
fn baseline() -> (History, End) {
    let mut first = operation("w0-0", 0, &["w0-0-s0"], 0);
    first.claims = vec![
        claim(Claim::Begun { sent_ms: 10 }, 20),
        claim(Claim::Published, 100),
    ];
    first.leases = vec![LeaseGrant {
        sent_ms: 10,
        lease_ms: 3_000,
    }];
    let mut second = operation("w0-1", 1, &["w0-1-s0", "w0-1-s1"], 150);
    second.claims = vec![claim(Claim::Published, 300)];
    let mut third = operation("w0-2", 2, &["w0-2-s0"], 400);
    third.claims = vec![claim(Claim::Ended, 500)];
    let shown: BTreeSet<String> = ["w0-0-s0", "w0-1-s0", "w0-1-s1"]
        .into_iter()
        .map(String::from)
        .collect();
    let history = History {
        operations: vec![first, second, third],
        sweeps: vec![
            SweepRecord {
                replica: 0,
                gate_epoch: 1,
                from_ms: 100,
                until_ms: 200,
            },
            SweepRecord {
                replica: 1,
                gate_epoch: 2,
                from_ms: 300,
                until_ms: 400,
            },
        ],
        reads: vec![GenerationRead {
            reader: 0,
            manifest_version: 3,
            config_version: 0,
            config: config(),
            published: shown,
            unchanged: false,
            from_ms: 350,
            until_ms: 360,
        }],
        positions_read: vec![PositionRead {
            partition: "w0".into(),
            position: 2,
            from_ms: 400,
            until_ms: 410,
        }],
        policy_runs: vec![PolicyRun {
            replica: 0,
            incarnation: 0,
            registry_version: None,
            digest: DEFAULT_DIGEST.into(),
        }],
        heartbeats: vec![view(0, 1, 0), view(1, 2, 0)],
        object_reads: vec![ObjectRead {
            reader: 0,
            split_id: "w0-0-s0".into(),
            shown_current_at_ms: 350,
            at_ms: 400,
            answered_ms: 410,
            found: true,
        }],
        ..History::default()
    };
    let rows: BTreeMap<String, SplitState> = ["w0-0-s0", "w0-1-s0", "w0-1-s1"]
        .into_iter()
        .map(|split| (split.to_string(), SplitState::Published))
        .collect();
    let dataset = Dataset {
        dataset_id: "sim".into(),
        uid: "uid".into(),
        config: config(),
        config_version: 0,
        checkpoint: BTreeMap::from([("sim".to_string(), BTreeMap::from([("w0".to_string(), 2)]))]),
        manifest_version: 3,
        publish_token: None,
        fencing_epoch: 0,
        created_at_ms: 0,
        updated_at_ms: 0,
    };
    let end = End {
        initial_config: config(),
        rows,
        reconciled: BTreeSet::new(),
        dataset: Some(dataset),
        invariant_violations: Vec::new(),
        registry: Vec::new(),
        running: vec![DEFAULT_DIGEST.into(), DEFAULT_DIGEST.into()],
        default_digest: DEFAULT_DIGEST.into(),
        fleet: true,
        last_views: vec![Some(view(0, 1, 20)), Some(view(1, 2, 20))],
        clocks_beyond_allowance: false,
        clock_spread_ms: 0,
        unsettled: Vec::new(),
        quiet_wait_ms: 30_000,
        quiet_rounds: 6,
        ends_unrecorded: Vec::new(),
        unreadable: Vec::new(),
    };
    (history, end)
}

/// One violation planted by hand: the check it must make fire, and the change that breaks it.
type Plant = (Check, fn(&mut History, &mut End));

/// A violation planted for each check.
const PLANTED: [Plant; 22] = [
    // Told ended, yet published.
    (Check::NoFalseAnswer, |history, _| {
        history.operations[0].claims.push(claim(Claim::Ended, 150));
    }),
    // Told ended at 500, then a begin sent at 600 began it again.
    (Check::EndedStaysEnded, |history, _| {
        history.operations[2]
            .claims
            .push(claim(Claim::Begun { sent_ms: 600 }, 610));
    }),
    // One split of an operation published, the other still staged.
    (Check::AllOrNothing, |history, end| {
        history
            .operations
            .push(operation("w0-3", 3, &["w0-3-s0", "w0-3-s1"], 700));
        end.rows.insert("w0-3-s0".into(), SplitState::Published);
        end.rows.insert("w0-3-s1".into(), SplitState::Staged);
    }),
    // The partition stands one further than its published operations moved it.
    (Check::ExactlyOnce, |_, end| {
        let dataset = end.dataset.as_mut().expect("the baseline's dataset");
        dataset
            .checkpoint
            .get_mut("sim")
            .unwrap()
            .insert("w0".into(), 3);
    }),
    (Check::Invariants, |_, end| {
        end.invariant_violations.push("a planted violation".into());
    }),
    // A read after both publishes were answered sees the position before the second.
    (Check::Linearizable, |history, _| {
        history.positions_read[0].position = 1;
    }),
    (Check::OneSweepAtATime, |history, _| {
        history.sweeps[1].from_ms = 150;
    }),
    // The reader's handle goes back a manifest version.
    (Check::ReaderGenerations, |history, _| {
        let mut older = history.reads[0].clone();
        older.manifest_version = 2;
        older.from_ms = 370;
        older.until_ms = 380;
        history.reads.push(older);
    }),
    (Check::ReadOnlyHandles, |history, _| {
        history.violations.push(Violation::new(
            Check::ReadOnlyHandles,
            "reader 0's read-only handle ran 1 recovery sweeps",
        ));
    }),
    // Answered promoted at config version 1; the dataset never left version 0.
    (Check::ConfigApplies, |history, _| {
        let promoted = DatasetConfig {
            deletion_grace_period_ms: 6_000,
            ..config()
        };
        history.config_applies.push(ConfigApplyRecord {
            key: "config-1".into(),
            config: promoted.clone(),
            outcome: ConfigOutcome::Promoted {
                version: 1,
                config: promoted,
            },
        });
    }),
    // Record 1 names another policy than record 0's as the one it replaced.
    (Check::PolicyRegistry, |_, end| {
        end.registry = vec![
            record(0, "sha256:one", DEFAULT_DIGEST),
            record(1, "sha256:two", "sha256:other"),
        ];
        end.running = vec!["sha256:two".into(), "sha256:two".into()];
    }),
    // A swap answered made at record 0, which no key of it made.
    (Check::PolicyAnswers, |history, end| {
        end.registry = vec![record(0, "sha256:one", DEFAULT_DIGEST)];
        end.running = vec!["sha256:one".into(), "sha256:one".into()];
        history.policy_changes.push(PolicyChangeRecord {
            key: "policy-1".into(),
            swap_to: Some("sha256:one".into()),
            outcome: PolicyOutcome::Changed {
                version: 0,
                digest: "sha256:one".into(),
            },
            invoked_ms: 100,
            answered_ms: 200,
        });
    }),
    // A replica ran another policy than the record it says it followed.
    (Check::PolicyRuns, |history, end| {
        end.registry = vec![record(0, "sha256:one", DEFAULT_DIGEST)];
        end.running = vec!["sha256:one".into(), "sha256:one".into()];
        history.policy_runs.push(PolicyRun {
            replica: 0,
            incarnation: 0,
            registry_version: Some(0),
            digest: "sha256:other".into(),
        });
    }),
    (Check::PolicyLiveness, |_, end| {
        end.running[1] = "sha256:other".into();
    }),
    // Replica 1's view gives replica 0 the epoch replica 1 holds.
    (Check::FleetEpochs, |history, _| {
        history.heartbeats[1].members[0].1 = 2;
    }),
    // Replica 0 counted replica 1 gone at 1005, after its lease had run out (900); replica 1
    // then renewed under the same epoch.
    (Check::CountedGoneStaysGone, |history, _| {
        let mut gone = view(0, 1, 1_000);
        gone.expired = vec![("r1".into(), 2)];
        history.heartbeats.push(gone);
        history.heartbeats.push(view(1, 2, 1_100));
    }),
    // Replica 0 counted replica 1 gone at 1005, while replica 1's own view had its lease
    // live until 5000.
    (Check::CountedGoneHadStopped, |history, _| {
        history.heartbeats[1].lease_live_until_ms = 5_000;
        let mut gone = view(0, 1, 1_000);
        gone.expired = vec![("r1".into(), 2)];
        history.heartbeats.push(gone);
    }),
    (Check::FleetLiveness, |_, end| {
        end.last_views[1] = None;
    }),
    (Check::SettlesWithoutOperator, |_, end| {
        end.unsettled.push("w0-9 (Armed)".into());
    }),
    // Taken over at 1000 while a lease asked for at 800 ran until 3800.
    (Check::LeasesRespected, |history, _| {
        history.operations[2].leases.push(LeaseGrant {
            sent_ms: 800,
            lease_ms: 3_000,
        });
        history.takeovers.push(TakeoverRecord {
            operation_id: "w0-2".into(),
            replica: 0,
            at_ms: 1_000,
        });
    }),
    // An object gone 60 ms after a generation showed its split published.
    (Check::GracePeriodsKept, |history, _| {
        history.object_reads[0].found = false;
    }),
    (Check::EndReadable, |_, end| {
        end.unreadable
            .push("the rows cannot be read: a planted failure".into());
    }),
];

#[test]
fn the_baseline_holds_every_check() {
    let (history, end) = baseline();
    let found = check::run(&history, &end);
    assert!(found.violations.is_empty(), "{:#?}", found.violations);
    // And it gives every check something to hold.
    assert_eq!((found.published, found.ended), (2, 1));
    assert!(found.claims_checked >= 4 && found.generations_checked == 1);
    assert!(found.events_linearized >= 4 && found.heartbeats_checked >= 4);
    assert_eq!(found.object_reads_checked, 1);
}

#[test]
fn every_check_fires_alone_on_a_violation_planted_for_it() {
    let mut covered = BTreeSet::new();
    for (check, plant) in PLANTED {
        let (mut history, mut end) = baseline();
        plant(&mut history, &mut end);
        let found = check::run(&history, &end);
        let fired = found.fired();
        assert_eq!(
            fired,
            BTreeSet::from([check]),
            "the violation planted for {check} made {fired:?} fire: {:#?}",
            found.violations
        );
        println!("checks[{check}]: fired alone: {}", found.violations[0]);
        covered.insert(check);
    }
    let every: BTreeSet<Check> = Check::ALL.into_iter().collect();
    assert_eq!(
        covered,
        every,
        "checks with no violation planted for them: {:?}",
        every.difference(&covered).collect::<Vec<_>>()
    );
    println!("checks: {} checks, each shown to fire alone", covered.len());
}
