//! The actors beside the writers and the supervisors: the operator, who runs what a person or
//! a cron job runs against a dataset (gc, reconcile, verify, config applies under idempotency
//! keys and, now and then, exclusive recovery), and the readers, who serve the dataset through read-only live handles and
//! refresh them. Both act through the replicas' engines, at drawn times, until the writers are
//! done.

use std::future::IntoFuture;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use mend::MendError;
use mend::model::DatasetConfig;
use mend_contract::RecoveryMode;

use crate::check::{Check, ConfigApplyRecord, ConfigOutcome, History, PolicyOutcome, Violation};
use crate::client::with_retries;
use crate::replica::Replica;
use crate::rng::SimRng;
use crate::schedule::{DATASET, pause};
use crate::supervisor::sweep_claim;
use crate::trace::Trace;

/// The node the operator's gc, reconcile and config applies run as, recorded in the rows a
/// reconcile stages.
pub(crate) const NODE: &str = "operator";

/// Percent of exclusive recoveries whose process crashes at one of their writes.
const EXCLUSIVE_RECOVERY_AIM_PCT: u64 = 50;

/// The operator: every 0.5 to 3 simulated s, one of gc (30%), reconcile (18%), verify (12%),
/// a config apply (15%), a policy swap or rollback (12%, [`crate::policy`]) or exclusive
/// recovery (13%), through a replica drawn each time. Exclusive recovery's
/// answers are claims as a sweep's are: rolled forward is published, rolled back or abandoned
/// is ended. A verify that finds an invariant broken mid-run is a violation: the invariants
/// hold at every moment, not only at the end.
pub(crate) async fn operator(
    replicas: Vec<Replica>,
    mut rng: SimRng,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
    trace: Trace,
) {
    let (mut applies, mut in_doubt) = (0, None);
    let (mut changes, mut change_in_doubt) = (0, None);
    while !stop.load(Ordering::SeqCst) {
        pause(&mut rng, 500, 3_000).await;
        let replica = &replicas[rng.below(replicas.len() as u64) as usize];
        let engine = &replica.engine();
        match rng.below(100) {
            0..30 => collect(engine, &mut rng, &history, &trace).await,
            30..48 => match engine.reconcile(DATASET, NODE).await {
                Ok(report) => trace.line(format!(
                    "operator: reconcile adopted {:?}, discarded {:?}, left to others {:?}, refused {:?}",
                    report.adopted, report.discarded, report.taken_by_others, report.refused
                )),
                Err(error) => trace.line(format!("operator: reconcile: {error}")),
            },
            48..60 => match engine.verify(DATASET).await {
                Ok(report) => {
                    trace.line(format!(
                        "operator: verify found {} violations",
                        report.violations.len()
                    ));
                    let mut history = history.lock().unwrap_or_else(PoisonError::into_inner);
                    for violation in report.violations {
                        history
                            .violations
                            .push(Violation::new(
                                Check::Invariants,
                                format!("mid-run verify: {violation:?}"),
                            ));
                    }
                }
                Err(error) => trace.line(format!("operator: verify: {error}")),
            },
            60..75 => {
                if in_doubt.is_none() {
                    applies += 1;
                }
                in_doubt = apply_config(
                    applies,
                    in_doubt.take(),
                    &replicas,
                    &mut rng,
                    &history,
                    &trace,
                )
                .await;
            }
            75..87 => {
                if change_in_doubt.is_none() {
                    changes += 1;
                }
                change_in_doubt = crate::policy::change_policy(
                    changes,
                    change_in_doubt.take(),
                    &replicas,
                    &mut rng,
                    &history,
                    &trace,
                )
                .await;
            }
            _ => exclusive_recovery(engine, &mut rng, &history, &trace).await,
        }
    }
    if let Some(apply) = in_doubt {
        record_config_apply(apply, ConfigOutcome::Unknown, &history);
    }
    if let Some(change) = change_in_doubt {
        let now = trace.now_ms();
        crate::policy::record_change(&change, PolicyOutcome::Unknown, now, &trace, &history);
    }
}

/// A cron job collecting garbage: gc every 0.5 to 1.5 simulated s, through a replica drawn
/// each time, until the writers are done. With the stagers' leftovers and the merges' replaced
/// splits, gc marks and deletes in most runs. A published split's mark is seen by one gc and
/// deleted by a later one (a grace period after the sighting), so the cron job runs several
/// times per deletion grace period (4 to 6 s): a gc that shortened the grace would delete
/// within it.
pub(crate) async fn collector(
    replicas: Vec<Replica>,
    mut rng: SimRng,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
    trace: Trace,
) {
    while !stop.load(Ordering::SeqCst) {
        pause(&mut rng, 500, 1_500).await;
        let engine = replicas[rng.below(replicas.len() as u64) as usize].engine();
        collect(&engine, &mut rng, &history, &trace).await;
    }
}

/// One gc run, its marks, the marks it saw first and its deletes counted in the history.
async fn collect(engine: &mend::Engine, rng: &mut SimRng, history: &Mutex<History>, trace: &Trace) {
    match aimed(rng, engine.gc(DATASET, NODE).into_future()).await {
        Ok(result) => {
            trace.line(format!(
                "gc marked {:?}, saw marks of {:?}, deleted {:?}",
                result.marked, result.seen, result.deleted
            ));
            let mut history = history.lock().unwrap_or_else(PoisonError::into_inner);
            history.gc_marked += result.marked.len();
            history.gc_seen += result.seen.len();
            history.gc_deleted += result.deleted.len();
        }
        Err(error) => trace.line(format!("gc: {error}")),
    }
}

/// Runs `work`, sometimes with a crash aimed at one of its writes
/// ([`crate::client::aim`]): then its answer is an outcome unknown.
async fn aimed<T>(
    rng: &mut SimRng,
    work: impl std::future::Future<Output = Result<T, MendError>>,
) -> Result<T, MendError> {
    aimed_at(crate::client::aim(rng), work).await
}

/// `work`, crashed at `crash` if one is aimed.
async fn aimed_at<T>(
    crash: Option<crate::store::AimedCrash>,
    work: impl std::future::Future<Output = Result<T, MendError>>,
) -> Result<T, MendError> {
    let Some(crash) = crash else {
        return work.await;
    };
    match crate::store::with_aimed_crash(crash, work).await {
        (answer, false) => answer,
        (_, true) => Err(MendError::Unavailable {
            message: "the operator's process crashed at a write".into(),
            source: None,
        }),
    }
}

/// A config apply the operator sent under an idempotency key.
struct ConfigApply {
    key: String,
    expected_config_version: u64,
    config: DatasetConfig,
}

/// A config apply under an idempotency key, as `mend dataset config --set` sends it: the
/// config read, a new one made from it (grace periods unique to this apply, so that what a
/// reader sees names the apply it came from), sent with retries under one key. Or, while the
/// last one's answer is unknown, that one again: as docs/src/writers.md tells a client, an apply in
/// doubt is sent again under its key until its answer is known, before any other (an apply
/// given up and replaced by another leaves an intent only exclusive recovery drops). Each
/// answer known is recorded for the checks: promoted at a version, or refused (the version
/// moved first: under a key, a refusal says this key's config was never promoted). Returns
/// the apply still in doubt.
async fn apply_config(
    number: u64,
    in_doubt: Option<ConfigApply>,
    replicas: &[Replica],
    rng: &mut SimRng,
    history: &Mutex<History>,
    trace: &Trace,
) -> Option<ConfigApply> {
    let apply = match in_doubt {
        Some(apply) => apply,
        None => {
            let engine = &replicas[rng.below(replicas.len() as u64) as usize].engine();
            let dataset = match engine.dataset(DATASET).await {
                Ok(dataset) => dataset,
                Err(error) => {
                    trace.line(format!("operator: config read: {error}"));
                    return None;
                }
            };
            ConfigApply {
                key: format!("config-{number}"),
                expected_config_version: dataset.config_version,
                config: DatasetConfig {
                    staged_grace_period_ms: 3_000 + number * 10 + rng.below(10),
                    deletion_grace_period_ms: rng.between(4_000, 6_000),
                    ..dataset.config
                },
            }
        }
    };
    let answer = with_retries(replicas, rng, trace, &apply.key, |engine| {
        let (config, key) = (apply.config.clone(), apply.key.clone());
        let expected = apply.expected_config_version;
        async move {
            engine
                .apply_config(DATASET, expected, &config, NODE)
                .idempotency_key(key.as_str())
                .await
        }
    })
    .await;
    trace.line(format!(
        "operator: {} from config version {}: {:?}",
        apply.key,
        apply.expected_config_version,
        answer.as_ref().map(|dataset| dataset.config_version)
    ));
    let outcome = match answer {
        Ok(promoted) => ConfigOutcome::Promoted {
            version: promoted.config_version,
            config: promoted.config,
        },
        Err(MendError::FailedPrecondition { .. }) => ConfigOutcome::Refused,
        // RecoveryRequired (an earlier copy's intent is there: the supervisors settle it),
        // or an outcome unknown: sent again next time.
        Err(_) => return Some(apply),
    };
    record_config_apply(apply, outcome, history);
    None
}

fn record_config_apply(apply: ConfigApply, outcome: ConfigOutcome, history: &Mutex<History>) {
    history
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .config_applies
        .push(ConfigApplyRecord {
            key: apply.key,
            config: apply.config,
            outcome,
        });
}

async fn exclusive_recovery(
    engine: &mend::Engine,
    rng: &mut SimRng,
    history: &Mutex<History>,
    trace: &Trace,
) {
    // Crashed half-way far more often than other requests: an exclusive recovery that dies
    // between fencing intents and rolling them back leaves fenced intents behind, the state
    // in which a publish must still be refused (`PublishIgnoresFence` went unfound in 250
    // seeds at the common rate, one seed in about 400 meeting it).
    let crash = crate::client::aim_at(rng, EXCLUSIVE_RECOVERY_AIM_PCT);
    let report = match aimed_at(
        crash,
        engine
            .recover(DATASET, RecoveryMode::Exclusive)
            .into_future(),
    )
    .await
    {
        Ok(report) => report,
        Err(error) => {
            trace.line(format!("operator: exclusive recovery: {error}"));
            return;
        }
    };
    let mut history = history.lock().unwrap_or_else(PoisonError::into_inner);
    let mut settled = Vec::new();
    for intent in &report.intents {
        let claim = sweep_claim(intent);
        let said = format!("{:?} {:?}", intent.decision, intent.outcome);
        history.claim(
            &intent.operation_id,
            claim,
            format!("exclusive recovery: {said}"),
            trace.now_ms(),
        );
        settled.push(format!("{}: {said}", intent.operation_id));
    }
    trace.line(format!("operator: exclusive recovery: {settled:?}"));
}
