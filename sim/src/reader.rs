//! The readers: processes that serve the dataset through read-only live handles, as a search
//! node serves queries. Each refreshes its handle now and then and reads the objects of the
//! splits its generation shows; some queries run long, reading the same generation's objects
//! for seconds without refreshing. Every generation and every object read goes in the
//! history: a split marked for deletion (replaced by a merge, or collected) keeps its object
//! for the dataset's deletion grace period after its mark, so a reader still serving a
//! generation that showed it may read it until then (`grace-periods-kept`).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use mend::Engine;
use mend::live::{HandleMode, LiveHandle, Refresh};
use mend::objects::FoundObject;

use crate::check::{Check, GenerationRead, History, ObjectRead, Violation};
use crate::replica::Replica;
use crate::rng::SimRng;
use crate::schedule::{DATASET, pause};
use crate::trace::Trace;

/// Splits a query reads, drawn from its generation, each time it reads.
const SPLITS_PER_PASS: usize = 4;
/// Percent of a reader's refreshes followed by a long query: the generation's objects read
/// for [`LONG_QUERY_MS`] without refreshing.
const LONG_QUERY_PCT: u64 = 40;
/// How long a long query runs, at least and at most, in simulated ms: as long as the
/// deletion grace periods the run's configs have (4 to 6 s), so that a query meets the end of
/// the grace it is owed.
const LONG_QUERY_MS: (u64, u64) = (2_000, 7_000);

/// A reader: a read-only live handle on a replica drawn once, refreshed every 0.3 to 1.5
/// simulated s, an object of its generation read after each refresh, and sometimes a long
/// query. Each generation it publishes is recorded for the checks (its manifest version and
/// what it shows). A read-only handle never runs recovery: one that swept is a violation.
pub(crate) async fn reader(
    index: usize,
    replicas: Vec<Replica>,
    mut rng: SimRng,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
    trace: Trace,
) {
    // A reader is a process of its own, embedding the engine it started with.
    let engine = replicas[rng.below(replicas.len() as u64) as usize].engine();
    let mut handle: Option<LiveHandle> = None;
    while !stop.load(Ordering::SeqCst) {
        pause(&mut rng, 300, 1_500).await;
        let from_ms = trace.now_ms();
        let current = match &handle {
            None => match LiveHandle::open(engine.clone(), DATASET, HandleMode::ReadOnly).await {
                Ok(opened) => {
                    record(index, &opened, false, from_ms, &trace, &history);
                    handle = Some(opened);
                    true
                }
                Err(error) => {
                    trace.line(format!("reader {index}: open: {error}"));
                    false
                }
            },
            Some(open) => match open.refresh().await {
                // One probe found nothing new: the generation it serves is still the
                // dataset's state, a read as much as a new generation is.
                Ok(Refresh::Unchanged) => {
                    record(index, open, true, from_ms, &trace, &history);
                    true
                }
                Ok(Refresh::Published {
                    manifest_version, ..
                }) => {
                    trace.line(format!(
                        "reader {index}: generation at manifest version {manifest_version}"
                    ));
                    record(index, open, false, from_ms, &trace, &history);
                    true
                }
                Err(error) => {
                    trace.line(format!("reader {index}: refresh: {error}"));
                    false
                }
            },
        };
        if let (true, Some(open)) = (current, &handle) {
            let query = Query {
                index,
                engine: &engine,
                current_since_ms: from_ms,
                trace: &trace,
                history: &history,
            };
            query.run(open, &mut rng, &stop).await;
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
                .push(Violation::new(
                    Check::ReadOnlyHandles,
                    format!(
                        "reader {index}'s read-only handle ran {} recovery sweeps",
                        stats.sweeps
                    ),
                ));
        }
    }
}

/// A query over the generation a reader's handle serves, known current at `current_since_ms`.
struct Query<'a> {
    index: usize,
    engine: &'a Engine,
    current_since_ms: u64,
    trace: &'a Trace,
    history: &'a Mutex<History>,
}

impl Query<'_> {
    /// Reads [`SPLITS_PER_PASS`] objects of the generation; sometimes, a long query, reads as
    /// many again every 0.3 to 0.7 s for a while, without refreshing.
    async fn run(&self, handle: &LiveHandle, rng: &mut SimRng, stop: &AtomicBool) {
        let generation = handle.current();
        let splits: Vec<String> = generation
            .published
            .iter()
            .map(|row| row.split_id.clone())
            .collect();
        if splits.is_empty() {
            return;
        }
        let until_ms = if rng.chance(LONG_QUERY_PCT) {
            self.current_since_ms + rng.between(LONG_QUERY_MS.0, LONG_QUERY_MS.1)
        } else {
            0
        };
        loop {
            for _ in 0..SPLITS_PER_PASS {
                let split_id = &splits[rng.below(splits.len() as u64) as usize];
                self.read(split_id).await;
            }
            if self.trace.now_ms() >= until_ms || stop.load(Ordering::SeqCst) {
                return;
            }
            pause(rng, 300, 700).await;
        }
    }

    /// Reads the object of `split_id` (its header, as a query opens a split first) and records
    /// whether it was there; a read that failed says nothing.
    async fn read(&self, split_id: &str) {
        let at_ms = self.trace.now_ms();
        let found = match self.engine.objects().inspect(DATASET, split_id).await {
            Ok(FoundObject::Missing) => false,
            Ok(_) => true,
            Err(error) => {
                self.trace.line(format!(
                    "reader {}: reading {split_id}: {error}",
                    self.index
                ));
                return;
            }
        };
        if !found {
            self.trace.line(format!(
                "reader {}: the object of {split_id} is gone",
                self.index
            ));
        }
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .object_reads
            .push(ObjectRead {
                reader: self.index,
                split_id: split_id.to_string(),
                shown_current_at_ms: self.current_since_ms,
                at_ms,
                answered_ms: self.trace.now_ms(),
                found,
            });
    }
}

/// Records the generation `handle` serves, read between `from_ms` and now; `unchanged`: a
/// refresh found nothing new.
fn record(
    reader: usize,
    handle: &LiveHandle,
    unchanged: bool,
    from_ms: u64,
    trace: &Trace,
    history: &Mutex<History>,
) {
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
            config_version: generation.config_version,
            config: generation.config.clone(),
            published,
            unchanged,
            from_ms,
            until_ms: trace.now_ms(),
        });
}
