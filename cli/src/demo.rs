//! `mend demo`: mend's main job in a few seconds, on the catalog the CLI opened (by default a
//! local directory). Writers commit concurrently and some crash in the middle of their
//! operations; a probe shows the in-doubt state; recovery finishes what the crashed writers
//! started and reconcile adopts an object no row describes; the deployment swaps to a second
//! policy (`policies/cautious/`, which discards orphans), sees which recorded decisions that
//! changes and discards the next orphan; verify checks the invariants; and the swap is rolled
//! back, so the deployment runs the policy it ran before.
//!
//! Each run makes a dataset of its own, so the demo runs any number of times in one data
//! directory. It calls only the library's public operations: what it shows is what an
//! embedding storage system gets.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Settings;
use anyhow::Context;
use bytes::Bytes;
use mend::engine::{
    CommitRequest, CommitSplit, IntentStatus, Outcome, ReconcileReport, RecoveryReport,
    VerifyReport,
};
use mend::faults::CrashAt;
use mend::model::{CheckpointDelta, DatasetConfig, PartitionDelta};
use mend::objects::format::{HEADER_FORMAT_VERSION, SplitObjectHeader, sha256};
use mend::runtime::registry::PolicyRegistry;
use mend::runtime::replay::ReplayReport;
use mend::runtime::{CAUTIOUS_POLICY_WASM, LoadOptions, PolicyRuntime, digest_of};
use mend::{Engine, MendError};
use mend_contract::RecoveryMode;
use serde::Serialize;

use super::output;
use super::policy::{DEFAULT_REPLAY_RECORDS, registry};

/// Short enough that reconcile may consider an orphan a moment after it appears (the default,
/// an hour, protects writers between their upload and their stage).
const STAGED_GRACE_PERIOD_MS: u64 = 100;
/// Short enough that `mend gc` removes the discarded orphan a second after the demo.
const DELETION_GRACE_PERIOD_MS: u64 = 1_000;
const COMMITS_PER_WRITER: usize = 3;
const SPLITS_PER_COMMIT: usize = 2;
/// A commit's durable steps: begin (the intent and the stage), one upload per split, publish
/// (with the intent's deletion) (`engine/commit.rs`).
const STEPS_PER_COMMIT: usize = SPLITS_PER_COMMIT + 2;
/// The commit, counting from 1, in which a crashing writer crashes: it publishes the ones
/// before.
const CRASHING_COMMIT: usize = 2;
/// The node named in every decision the demo's reconciles make.
const NODE: &str = "demo";
const CAUTIOUS_SCENARIOS: &str = include_str!("../../policies/cautious/scenarios/reconcile.json");

/// Where in its commit a writer crashes, as a process dying there would.
#[derive(Debug, Clone, Copy)]
struct Crash {
    /// The durable step of the commit, counting from 1 (see [`STEPS_PER_COMMIT`]).
    step: usize,
    /// After the step's write landed (the writer is told it failed), rather than before it.
    after: bool,
    what: &'static str,
}

const WRITERS: [(&str, Option<Crash>); 4] = [
    ("writer-1", None),
    (
        "writer-2",
        Some(Crash {
            step: SPLITS_PER_COMMIT + 2,
            after: false,
            what: "after uploading its objects, before publishing",
        }),
    ),
    (
        "writer-3",
        Some(Crash {
            step: SPLITS_PER_COMMIT + 1,
            after: true,
            what: "as its uploads landed, before hearing so",
        }),
    ),
    (
        "writer-4",
        Some(Crash {
            step: SPLITS_PER_COMMIT + 2,
            after: true,
            what: "after its publish landed, before hearing so",
        }),
    ),
];

/// What one writer did.
#[derive(Debug, Serialize)]
struct WriterReport {
    node: String,
    commits_planned: usize,
    commits_completed: usize,
    outcome: WriterOutcome,
    /// Where it crashed, or why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum WriterOutcome {
    Completed,
    /// Where the demo crashed it.
    Crashed,
    /// For a reason of its own: the demo goes on, and says so.
    Failed,
}

#[derive(Debug, Serialize)]
struct ReconcileCounts {
    adopted: usize,
    discarded: usize,
}

impl From<&ReconcileReport> for ReconcileCounts {
    fn from(report: &ReconcileReport) -> Self {
        Self {
            adopted: report.adopted.len(),
            discarded: report.discarded.len(),
        }
    }
}

#[derive(Debug, Serialize)]
struct PolicySummary {
    before: String,
    swapped_to: String,
    /// False when the cautious policy was already the deployment's: the demo then swapped in
    /// this process only.
    recorded_in_registry: bool,
    replayed: usize,
    replay_changed: usize,
    replay_changed_in_dataset: usize,
    restored: String,
}

/// What `mend demo --json` prints, and nothing else.
#[derive(Debug, Serialize)]
struct Summary {
    dataset: String,
    writers: Vec<WriterReport>,
    crashed: usize,
    orphans_planted: Vec<String>,
    /// Intents the crashed writers left, as the probe found them.
    in_doubt: usize,
    /// The probe's intents by status.
    probe: BTreeMap<String, usize>,
    recovered: usize,
    intents_left: usize,
    reconcile_before_swap: ReconcileCounts,
    policy: PolicySummary,
    reconcile_after_swap: ReconcileCounts,
    verify_violations: usize,
    data: DataLocation,
    next: Vec<NextStep>,
    elapsed_ms: u128,
}

#[derive(Debug, Serialize)]
struct NextStep {
    command: String,
    shows: String,
}

#[derive(Debug, Serialize)]
struct DataLocation {
    catalog: String,
    /// The local directory of the split objects and the policy registry, if they are in one.
    directory: Option<PathBuf>,
}

pub async fn run(engine: &Engine, settings: &Settings, json: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    let (dataset, uid, already_cautious) = begin(engine, json).await?;
    let policy = engine.policy();

    let (writers, first_orphan, first_planted) =
        crash_writers(engine, &dataset, &uid, json).await?;
    let crashed = writers
        .iter()
        .filter(|w| w.outcome == WriterOutcome::Crashed)
        .count();

    let (probe, probe_counts, recovered, intents_left) =
        probe_and_recover(engine, &dataset, json).await?;

    wait_past_grace_period(first_planted).await;
    say(
        json,
        &format!(
            "reconcile: objects with no row, under {}: it adopts a whole object of this dataset",
            policy.description().name
        ),
    );
    let before_swap = engine
        .reconcile(&dataset, NODE)
        .await
        .context("reconcile the demo dataset")?;
    if !json {
        output::reconcile_report(&before_swap, false)?;
    }

    let registry = registry(engine);
    let load = settings.load_options();
    let swap = swap_to_cautious(engine, &registry, &load, &dataset, already_cautious, json).await?;
    // Whatever happens next, the deployment gets its policy back.
    let after_swap = reconcile_and_verify(engine, &dataset, &uid, json).await;
    let restored = restore_policy(engine, &registry, &load, &swap, json).await;
    let (second_orphan, after_swap, verified) = after_swap?;
    let restored = restored?;
    anyhow::ensure!(
        verified.violations.is_empty(),
        "{} invariant violation(s) in dataset {dataset}; `mend verify {dataset}` lists them",
        verified.violations.len()
    );

    let data = DataLocation {
        catalog: engine.catalog().describe(),
        directory: local_directory(engine),
    };
    let summary = Summary {
        dataset: dataset.clone(),
        crashed,
        writers,
        orphans_planted: vec![first_orphan, second_orphan],
        in_doubt: probe.intents.len(),
        probe: probe_counts,
        recovered,
        intents_left,
        reconcile_before_swap: ReconcileCounts::from(&before_swap),
        policy: PolicySummary {
            before: policy.digest().to_string(),
            swapped_to: swap.digest.clone(),
            recorded_in_registry: swap.recorded,
            replayed: swap.replay.replayed,
            replay_changed: swap.replay.changed_count(),
            replay_changed_in_dataset: swap
                .replay
                .changed
                .iter()
                .filter(|change| change.dataset_id == dataset)
                .count(),
            restored,
        },
        reconcile_after_swap: ReconcileCounts::from(&after_swap),
        verify_violations: verified.violations.len(),
        data,
        next: next_steps(&dataset),
        elapsed_ms: started.elapsed().as_millis(),
    };
    if json {
        return output::print_json(&summary);
    }
    print_ending(&summary, started);
    Ok(())
}

/// The demo's start: the policy it decides with until the swap (not the cautious one it
/// swaps to), said, and a fresh dataset with short grace periods. Answers the dataset's id
/// and uid, and whether the deployment's policy was the cautious one already.
async fn begin(engine: &Engine, json: bool) -> anyhow::Result<(String, String, bool)> {
    let dataset = format!("demo-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    // The demo shows what the swap to the cautious policy changes, so it must start on another
    // one. When the cautious policy is already the deployment's, the demo decides with the
    // built-in policy until the swap, in this process only, and leaves the registry alone.
    let already_cautious = engine.policy().digest() == digest_of(CAUTIOUS_POLICY_WASM);
    if already_cautious {
        engine.install_policy(PolicyRuntime::default_policy().context("load the built-in policy")?);
    }
    let policy = engine.policy();
    say(
        json,
        &format!(
            "mend demo on {}, policy {} {} ({})",
            engine.catalog().describe(),
            policy.description().name,
            policy.description().version,
            policy.digest()
        ),
    );
    if already_cautious && !json {
        println!(
            "(the deployment's policy is the cautious one the demo swaps to; until the swap, this process decides with the built-in policy instead)"
        );
    }
    say(
        json,
        &format!(
            "creating dataset {dataset}, with grace periods short enough for a demo: staged {STAGED_GRACE_PERIOD_MS} ms (reconcile considers an orphan at once), deletion {DELETION_GRACE_PERIOD_MS} ms"
        ),
    );
    let config = DatasetConfig {
        staged_grace_period_ms: STAGED_GRACE_PERIOD_MS,
        deletion_grace_period_ms: DELETION_GRACE_PERIOD_MS,
        ..DatasetConfig::default()
    };
    let uid = engine
        .create_dataset(&dataset, &config)
        .await
        .context("create the demo dataset")?
        .uid;
    Ok((dataset, uid, already_cautious))
}

/// The writers commit concurrently and some crash part-way; then an object is planted with
/// no row, as a writer that died before staging leaves it. Answers the writers' reports, the
/// orphan's id and when it was planted.
async fn crash_writers(
    engine: &Engine,
    dataset: &str,
    uid: &str,
    json: bool,
) -> anyhow::Result<(Vec<WriterReport>, String, Instant)> {
    say(
        json,
        &format!(
            "{} writers commit concurrently, {COMMITS_PER_WRITER} commits of {SPLITS_PER_COMMIT} splits each (begin: intent and stage; uploads; publish); {} of them crash in commit {CRASHING_COMMIT}",
            WRITERS.len(),
            WRITERS.iter().filter(|(_, crash)| crash.is_some()).count()
        ),
    );
    let writers = run_writers(engine, dataset).await?;
    let first_orphan = "orphan-1".to_string();
    let first_planted = plant_orphan(engine, dataset, uid, &first_orphan).await?;
    if !json {
        for writer in &writers {
            println!(
                "{}: {} of {} commits completed{}",
                writer.node,
                writer.commits_completed,
                writer.commits_planned,
                match (writer.outcome, &writer.detail) {
                    (WriterOutcome::Crashed, Some(detail)) => format!(", then crashed {detail}"),
                    (_, Some(detail)) => format!(", then failed: {detail}"),
                    (_, None) => String::new(),
                }
            );
        }
        println!(
            "and split {first_orphan}'s object sits in the bucket with no row, as a writer that died between its upload and its stage leaves it"
        );
    }
    Ok((writers, first_orphan, first_planted))
}

/// The in-doubt state probed, then rolled forward: the probe's report and its count by
/// status, the intents the roll-forward executed, and the intents left after it.
async fn probe_and_recover(
    engine: &Engine,
    dataset: &str,
    json: bool,
) -> anyhow::Result<(RecoveryReport, BTreeMap<String, usize>, usize, usize)> {
    say(
        json,
        "the in-doubt state: recover --mode probe observes every intent and asks the policy, writing nothing",
    );
    let probe = engine
        .recover(dataset, RecoveryMode::Probe)
        .await
        .context("probe the demo dataset")?;
    if !json {
        output::recovery_report(&probe, false)?;
    }
    let mut probe_counts = BTreeMap::new();
    for intent in &probe.intents {
        *probe_counts.entry(status_name(intent.status)).or_insert(0) += 1;
    }

    say(
        json,
        "recover --mode roll-forward: finish what the crashed writers started",
    );
    let recovery = engine
        .recover(dataset, RecoveryMode::RollForward)
        .await
        .context("recover the demo dataset")?;
    if !json {
        output::recovery_report(&recovery, false)?;
    }
    let recovered = recovery
        .intents
        .iter()
        .filter(|intent| intent.outcome == Outcome::Executed)
        .count();
    let intents_left = engine
        .catalog()
        .list_intents(dataset)
        .await
        .context("list the demo dataset's intents")?
        .len();
    Ok((probe, probe_counts, recovered, intents_left))
}

/// Under the swapped policy: a second orphan planted and reconciled, then the invariants
/// verified. Answers the orphan's id, the reconcile's report and the verify report.
async fn reconcile_and_verify(
    engine: &Engine,
    dataset: &str,
    uid: &str,
    json: bool,
) -> anyhow::Result<(String, ReconcileReport, VerifyReport)> {
    let second_orphan = "orphan-2".to_string();
    let planted = plant_orphan(engine, dataset, uid, &second_orphan).await?;
    wait_past_grace_period(planted).await;
    say(
        json,
        &format!(
            "a second orphan, {second_orphan}, and reconcile again under {}: it discards (marks for deletion) what the default would adopt",
            engine.policy().description().name
        ),
    );
    let reconciled = engine
        .reconcile(dataset, NODE)
        .await
        .context("reconcile the demo dataset again")?;
    if !json {
        output::reconcile_report(&reconciled, false)?;
    }

    say(
        json,
        "verify: the invariants over the whole dataset, bucket included",
    );
    let verified = engine
        .verify(dataset)
        .await
        .context("verify the demo dataset")?;
    if !json {
        output::verify_report(&verified, false)?;
    }
    anyhow::Ok((second_orphan, reconciled, verified))
}

fn next_steps(dataset: &str) -> Vec<NextStep> {
    [
        (
            "mend status".to_string(),
            "the catalog, the active policy and each dataset's pending intents".to_string(),
        ),
        (
            format!("mend list {dataset}"),
            "the demo's splits: published, and the discarded orphan marked for deletion".into(),
        ),
        (
            format!("mend recover {dataset} --mode probe"),
            "the probe again: nothing is in doubt any more".into(),
        ),
        (
            format!("mend gc {dataset}"),
            format!(
                "after {DELETION_GRACE_PERIOD_MS} ms, deletes the discarded orphan: its object, then its row"
            ),
        ),
        (
            "mend serve".into(),
            "the same engine behind a server".into(),
        ),
        (
            "mend policy active".into(),
            "which policy this deployment runs, and its last swap or rollback".into(),
        ),
    ]
    .into_iter()
    .map(|(command, shows)| NextStep { command, shows })
    .collect()
}

fn print_ending(summary: &Summary, started: Instant) {
    println!(
        "\n== done in {:.1} s: {} writers ({} crashed), {} in-doubt intent(s) found, {} recovered, {} left; reconcile adopted {} before the swap and discarded {} after; {} violation(s)",
        started.elapsed().as_secs_f64(),
        summary.writers.len(),
        summary.crashed,
        summary.in_doubt,
        summary.recovered,
        summary.intents_left,
        summary.reconcile_before_swap.adopted,
        summary.reconcile_after_swap.discarded,
        summary.verify_violations,
    );
    println!("data: {}", summary.data.catalog);
    if let Some(directory) = &summary.data.directory {
        println!("      in {}", directory.display());
    }
    println!("next:");
    for step in &summary.next {
        println!("  {:<40} {}", step.command, step.shows);
    }
}

/// Runs every writer of [`WRITERS`] on a task of its own and waits for all of them.
async fn run_writers(engine: &Engine, dataset: &str) -> anyhow::Result<Vec<WriterReport>> {
    let tasks: Vec<_> = WRITERS
        .iter()
        .map(|(node, crash)| {
            let engine = engine.clone();
            let dataset = dataset.to_string();
            tokio::spawn(write(engine, dataset, node, *crash))
        })
        .collect();
    let mut reports = Vec::with_capacity(tasks.len());
    for task in tasks {
        reports.push(task.await.context("a demo writer panicked")?);
    }
    Ok(reports)
}

/// One writer: its commits in turn, each publishing its splits with a checkpoint delta on a
/// partition of its own (writers do not contend for positions), until it crashes or is done.
async fn write(
    engine: Engine,
    dataset: String,
    node: &'static str,
    crash: Option<Crash>,
) -> WriterReport {
    // The seam counts durable steps across all of the writer's commits.
    let seam = crash.map(|crash| {
        let k = (CRASHING_COMMIT - 1) * STEPS_PER_COMMIT + crash.step;
        (crash, k, Arc::new(CrashAt::new(k, crash.after)))
    });
    let engine = match &seam {
        // A writer that crashed is known dead here: its intents are leased for no time at
        // all, so the next roll-forward sweep finishes them rather than deferring to their
        // owner for the default minute.
        Some((_, _, seam)) => engine.with_faults(seam.clone()).with_intent_lease(0),
        None => engine,
    };
    let mut report = WriterReport {
        node: node.to_string(),
        commits_planned: COMMITS_PER_WRITER,
        commits_completed: 0,
        outcome: WriterOutcome::Completed,
        detail: None,
    };
    for commit in 1..=COMMITS_PER_WRITER {
        let request = commit_request(&dataset, node, commit);
        if let Err(error) = engine.commit(&request).await {
            // Crashed where planned, or failed for a reason of its own.
            let planned = seam.as_ref().filter(|(_, k, seam)| {
                matches!(&error, MendError::Unavailable { .. }) && seam.steps().len() == *k
            });
            (report.outcome, report.detail) = match planned {
                Some((crash, _, _)) => (
                    WriterOutcome::Crashed,
                    Some(format!("in commit {commit} {} ({error})", crash.what)),
                ),
                None => (WriterOutcome::Failed, Some(error.to_string())),
            };
            break;
        }
        report.commits_completed += 1;
    }
    report
}

/// The `commit`-th commit of `node` (counting from 1): its splits with real payloads, and the
/// checkpoint of its partition moved on by 1,000.
fn commit_request(dataset: &str, node: &str, commit: usize) -> CommitRequest {
    let position = |commit: usize| commit as u64 * 1_000;
    let window = 60_000 * commit as i64;
    CommitRequest {
        dataset_id: dataset.to_string(),
        node: node.to_string(),
        splits: (1..=SPLITS_PER_COMMIT)
            .map(|split| CommitSplit {
                split_id: format!("{node}-c{commit}-s{split}"),
                metadata_json: serde_json::json!({
                    "num_docs": 500,
                    "time_range": {"start": window - 60_000, "end": window - 1},
                })
                .to_string(),
                payload: Bytes::from(format!(
                    "documents {node} indexed in commit {commit}, split {split}"
                )),
            })
            .collect(),
        checkpoint_delta: Some(CheckpointDelta {
            source: "events".into(),
            partitions: vec![PartitionDelta {
                partition: node.to_string(),
                from_position: (commit > 1).then(|| position(commit - 1)),
                to_position: position(commit),
            }],
        }),
        publish_token: None,
    }
}

/// Writes a whole object of this dataset with no row and no intent, reconcile's work, and
/// returns when it was written.
async fn plant_orphan(
    engine: &Engine,
    dataset: &str,
    uid: &str,
    split_id: &str,
) -> anyhow::Result<Instant> {
    let payload = format!("documents of {split_id}, uploaded by a writer that died before staging");
    let header = SplitObjectHeader {
        format_version: HEADER_FORMAT_VERSION,
        dataset_id: dataset.to_string(),
        dataset_uid: uid.to_string(),
        split_id: split_id.to_string(),
        node: "lost-writer".into(),
        metadata_json: serde_json::json!({"num_docs": 200}).to_string(),
        operation_id: None,
        payload_size: payload.len() as u64,
        payload_sha256: sha256(payload.as_bytes()),
    };
    engine
        .objects()
        .put_split(&header, payload.as_bytes())
        .await
        .with_context(|| format!("write the object of {split_id}"))?;
    Ok(Instant::now())
}

/// Reconcile leaves alone an object younger than the staged grace period: one written at
/// `planted` must age past it first (with a margin for the store's coarser timestamps).
async fn wait_past_grace_period(planted: Instant) {
    let aged = planted + Duration::from_millis(STAGED_GRACE_PERIOD_MS + 50);
    tokio::time::sleep_until(aged.into()).await;
}

/// The policy the demo swapped to, and how.
struct CautiousSwap {
    digest: String,
    /// Recorded in the deployment's registry (and so to be rolled back there).
    recorded: bool,
    replay: ReplayReport,
}

/// Swaps the deployment to the cautious policy, showing what the replay of recorded decisions
/// says it changes. If the cautious policy was already the deployment's (an operator chose it,
/// or an earlier demo was killed before its rollback), the demo leaves the registry alone and
/// swaps in this process only.
async fn swap_to_cautious(
    engine: &Engine,
    registry: &PolicyRegistry,
    load: &LoadOptions,
    dataset: &str,
    already_cautious: bool,
    json: bool,
) -> anyhow::Result<CautiousSwap> {
    let cautious =
        PolicyRuntime::load_with(CAUTIOUS_POLICY_WASM, load).context("load the cautious policy")?;
    let digest = cautious.digest().to_string();
    let name = format!(
        "{} {}",
        cautious.description().name,
        cautious.description().version
    );
    let golden = mend::scenarios::parse_suite(
        "policies/cautious/scenarios/reconcile.json",
        CAUTIOUS_SCENARIOS,
    )
    .context("read the cautious policy's scenarios")?;
    say(
        json,
        &format!(
            "swap the deployment's policy to {name} ({digest}): it discards every orphan; its golden scenarios must pass, and the audit log replayed against it shows which recorded decisions it changes"
        ),
    );
    let recorded = !already_cautious;
    let replay = if recorded {
        let swap = engine
            .swap_deployment_policy(
                registry,
                CAUTIOUS_POLICY_WASM,
                cautious,
                DEFAULT_REPLAY_RECORDS,
                &[golden],
            )
            .await
            .context("swap to the cautious policy")?;
        if !json {
            output::replay_report(&swap.replay, false)?;
            println!(
                "swapped: {name} is active (change {}), replacing {}",
                swap.record.version,
                swap.record.previous.as_deref().unwrap_or("-")
            );
        }
        swap.replay
    } else {
        let replay = engine
            .replay_policy(&cautious, DEFAULT_REPLAY_RECORDS)
            .await
            .context("replay the audit log against the cautious policy")?;
        engine.install_policy(cautious);
        if !json {
            output::replay_report(&replay, false)?;
            println!(
                "{name} was already this deployment's policy when the demo began: the demo decided with the built-in policy until now, in this process only, and leaves the registry as it found it (`mend policy rollback` restores the policy before it)"
            );
        }
        replay
    };
    if !json {
        let here = replay
            .changed
            .iter()
            .filter(|change| change.dataset_id == dataset)
            .count();
        println!(
            "{here} of the {} changed decision(s) in dataset {dataset}: the orphan its reconcile adopted, the cautious policy would have discarded",
            replay.changed_count()
        );
    }
    Ok(CautiousSwap {
        digest,
        recorded,
        replay,
    })
}

/// Rolls the deployment back to the policy the demo found, and returns its digest.
async fn restore_policy(
    engine: &Engine,
    registry: &PolicyRegistry,
    load: &LoadOptions,
    swap: &CautiousSwap,
    json: bool,
) -> anyhow::Result<String> {
    if !swap.recorded {
        return Ok(swap.digest.clone());
    }
    say(
        json,
        "roll the deployment's policy back to the one the demo found",
    );
    let record = engine
        .rollback_deployment_policy(registry, load)
        .await
        .context(
            "roll back the demo's policy swap; the cautious policy is still active: run `mend policy rollback`",
        )?;
    if !json {
        let policy = engine.policy();
        println!(
            "rolled back: {} {} ({}) is active again (change {}), replacing {}",
            policy.description().name,
            policy.description().version,
            record.digest,
            record.version,
            record.previous.as_deref().unwrap_or("-")
        );
    }
    Ok(record.digest)
}

/// The probe's name for a status, as `--json` spells it.
fn status_name(status: IntentStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|value| value.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{status:?}"))
}

/// The local directory holding the split objects and the policy registry, if they are in one.
/// The engine does not say how its catalog was opened, but a local store names its root as a
/// `file://` URL (`LocalFileSystem(file:///...)`).
fn local_directory(engine: &Engine) -> Option<PathBuf> {
    let (store, prefix) = engine.objects().store();
    let name = store.to_string();
    let root = name.strip_prefix("LocalFileSystem(")?.strip_suffix(')')?;
    let directory = url::Url::parse(root).ok()?.to_file_path().ok()?;
    Some(match prefix.as_ref() {
        "" => directory,
        prefix => directory.join(prefix),
    })
}

fn say(json: bool, line: &str) {
    if !json {
        println!("\n== {line}");
    }
}
