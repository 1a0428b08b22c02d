//! The actors beside the writers and the supervisors: the operator, who runs what a person or
//! a cron job runs against a dataset (gc, reconcile, verify and, now and then, exclusive
//! recovery), and the readers, who serve the dataset through read-only live handles and
//! refresh them. Both act through the replicas' engines, at drawn times, until the writers are
//! done.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use mend::live::{HandleMode, LiveHandle, Refresh};
use mend_policy::RecoveryMode;

use crate::check::{GenerationRead, History};
use crate::rng::SimRng;
use crate::schedule::{DATASET, Replica, pause, sweep_claim};
use crate::trace::Trace;

/// The operator: every 0.5 to 3 simulated s, one of gc (40%), reconcile (25%), verify (20%)
/// or exclusive recovery (15%), through a replica drawn each time. Exclusive recovery's
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
    while !stop.load(Ordering::SeqCst) {
        pause(&mut rng, 500, 3_000).await;
        let replica = &replicas[rng.below(replicas.len() as u64) as usize];
        let engine = &replica.engine;
        match rng.below(100) {
            0..40 => match engine.gc(DATASET, "operator").await {
                Ok(result) => trace.line(format!(
                    "operator: gc marked {:?}, deleted {:?}",
                    result.marked, result.deleted
                )),
                Err(error) => trace.line(format!("operator: gc: {error}")),
            },
            40..65 => match engine.reconcile(DATASET, "operator").await {
                Ok(report) => trace.line(format!(
                    "operator: reconcile adopted {:?}, discarded {:?}, left to others {:?}, refused {:?}",
                    report.adopted, report.discarded, report.taken_by_others, report.refused
                )),
                Err(error) => trace.line(format!("operator: reconcile: {error}")),
            },
            65..85 => match engine.verify(DATASET).await {
                Ok(report) => {
                    trace.line(format!(
                        "operator: verify found {} violations",
                        report.violations.len()
                    ));
                    let mut history = history.lock().unwrap_or_else(PoisonError::into_inner);
                    for violation in report.violations {
                        history
                            .violations
                            .push(format!("mid-run verify: invariant violated: {violation:?}"));
                    }
                }
                Err(error) => trace.line(format!("operator: verify: {error}")),
            },
            _ => exclusive_recovery(engine, &history, &trace).await,
        }
    }
}

async fn exclusive_recovery(engine: &mend::Engine, history: &Mutex<History>, trace: &Trace) {
    let report = match engine.recover(DATASET, RecoveryMode::Exclusive).await {
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
        );
        settled.push(format!("{}: {said}", intent.operation_id));
    }
    trace.line(format!("operator: exclusive recovery: {settled:?}"));
}

/// A reader: a read-only live handle on a replica drawn once, refreshed every 0.3 to 1.5
/// simulated s. Each generation it publishes is recorded for the checks (its manifest version
/// and what it shows). A read-only handle never runs recovery: one that swept is a violation.
pub(crate) async fn reader(
    index: usize,
    replicas: Vec<Replica>,
    mut rng: SimRng,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
    trace: Trace,
) {
    let engine = replicas[rng.below(replicas.len() as u64) as usize]
        .engine
        .clone();
    let mut handle = None;
    while !stop.load(Ordering::SeqCst) {
        pause(&mut rng, 300, 1_500).await;
        let Some(open) = &handle else {
            match LiveHandle::open(engine.clone(), DATASET, HandleMode::ReadOnly).await {
                Ok(opened) => {
                    record(index, &opened, &history);
                    handle = Some(opened);
                }
                Err(error) => trace.line(format!("reader {index}: open: {error}")),
            }
            continue;
        };
        match open.refresh().await {
            Ok(Refresh::Unchanged) => {}
            Ok(Refresh::Published {
                manifest_version, ..
            }) => {
                trace.line(format!(
                    "reader {index}: generation at manifest version {manifest_version}"
                ));
                record(index, open, &history);
            }
            Err(error) => trace.line(format!("reader {index}: refresh: {error}")),
        }
    }
    if let Some(handle) = handle {
        let stats = handle.stats();
        trace.line(format!("reader {index}: {stats:?}"));
        if stats.sweeps != 0 {
            history
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .violations
                .push(format!(
                    "reader {index}'s read-only handle ran {} recovery sweeps",
                    stats.sweeps
                ));
        }
    }
}

fn record(reader: usize, handle: &LiveHandle, history: &Mutex<History>) {
    let generation = handle.current();
    let published: BTreeSet<String> = generation
        .published
        .iter()
        .map(|row| row.split_id.clone())
        .collect();
    history
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .reads
        .push(GenerationRead {
            reader,
            manifest_version: generation.manifest_version,
            published,
        });
}
