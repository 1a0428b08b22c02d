//! Round trips on object storage: what an `Engine::commit` costs on a store where every
//! request waits tens of milliseconds, as on S3, against a Delta-style floor in the same run:
//!
//!     cargo bench -p mend-tests --bench round_trips
//!
//! The store is an in-memory one behind [`LatencyStore`], which answers every request 25 ms
//! late, counts requests by kind and tracks the longest chain of requests made one after
//! another (requests made at once count as one round trip). The catalog is the object-store
//! catalog on that store, with a cached state (a writer that has committed before), and with
//! checkpoints off (`checkpoint_interval` 10^6), so that only a commit's own requests are
//! counted: a checkpoint falls due every 100 versions by default and is written after the
//! commit is acknowledged, off its path. Each split's payload is 1 KiB, so the latency is all
//! there is to wait for.
//!
//! For a commit of 1 split and of 10, the bench counts one commit's requests (by kind), its
//! sequential round trips and the log versions it writes; then criterion times `commit/N` and
//! `floor/N`. The floor is what a Delta-style table writer must do at least: put the objects
//! at once, then one put-if-absent of the next log file (two round trips). The bench prints
//! the counts, criterion's medians and mend/floor. In test mode (`cargo test --benches`) each
//! function runs once and the counts are printed without the ratios (about a second).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use mend::catalog::ObjectStoreCatalog;
use mend::catalog::object_store::ObjectStoreCatalogOptions;
use mend::engine::{CommitRequest, CommitSplit};
use mend::model::{CheckpointDelta, DatasetConfig, PartitionDelta};
use mend::objects::SplitObjects;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions};
use mend_tests::latency_store::{LatencyStore, RoundTrips};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutPayload};

mod common;
use common::{Bench, Sampling, millis};

const LATENCY: Duration = Duration::from_millis(25);
const PAYLOAD_BYTES: usize = 1024;
const DATASET: &str = "events";
const SIZES: [usize; 2] = [1, 10];

/// Commits numbered from 0: each its own splits, and the next checkpoint position.
struct Commits {
    next: AtomicUsize,
}

impl Commits {
    fn request(&self, splits: usize) -> CommitRequest {
        let round = self.next.fetch_add(1, Ordering::SeqCst);
        CommitRequest {
            dataset_id: DATASET.into(),
            node: "writer".into(),
            splits: (0..splits)
                .map(|index| CommitSplit {
                    split_id: format!("c{round:06}-s{index:02}"),
                    metadata_json: format!(r#"{{"num_docs": {}}}"#, 1_000 + index),
                    payload: Bytes::from(vec![b'x'; PAYLOAD_BYTES]),
                })
                .collect(),
            checkpoint_delta: Some(CheckpointDelta {
                source: "kafka".into(),
                partitions: vec![PartitionDelta {
                    partition: "0".into(),
                    from_position: round.checked_sub(1).map(|before| before as u64),
                    to_position: round as u64,
                }],
            }),
            publish_token: None,
        }
    }
}

/// The floor: `splits` objects put at once, then one put-if-absent of the next log file.
async fn floor(store: &dyn ObjectStore, splits: usize, round: usize) {
    let puts = (0..splits).map(|index| async move {
        let path = Path::from(format!("floor/splits/f{round:06}-s{index:02}"));
        let object = PutPayload::from(vec![b'x'; PAYLOAD_BYTES + 300]);
        store.put_opts(&path, object, PutMode::Create.into()).await
    });
    futures::future::try_join_all(puts).await.unwrap();
    let adds: Vec<String> = (0..splits)
        .map(|index| format!(r#"{{"add":{{"path":"f{round:06}-s{index:02}"}}}}"#))
        .collect();
    let version = Path::from(format!("floor/_delta_log/{round:020}.json"));
    store
        .put_opts(
            &version,
            PutPayload::from(adds.join("\n")),
            PutMode::Create.into(),
        )
        .await
        .unwrap();
}

fn counts_line(what: &str, counts: &RoundTrips, took: Duration) -> String {
    format!(
        "  {what}: {} requests ({} log put, {} object put, {} GET, {} HEAD, {} LIST), {} \
         sequential round trips, log versions written: {}; {:.1} ms (this counted run)",
        counts.requests(),
        counts.log_puts,
        counts.object_puts,
        counts.gets,
        counts.heads,
        counts.lists,
        counts.sequential,
        counts.log_puts,
        millis(took),
    )
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut bench = Bench::from_args();
    let store = Arc::new(LatencyStore::new(Arc::new(InMemory::new()), LATENCY));
    let options = ObjectStoreCatalogOptions {
        checkpoint_interval: 1_000_000,
        ..ObjectStoreCatalogOptions::default()
    };
    let catalog = ObjectStoreCatalog::new(store.clone(), Path::default(), options);
    let objects = SplitObjects::new(store.clone(), Path::default());
    let engine = Engine::new(
        Arc::new(catalog),
        objects,
        PolicyRuntime::default_policy().unwrap(),
        EngineOptions::default(),
    )
    .unwrap();
    let commits = Commits {
        next: AtomicUsize::new(0),
    };
    let floors = AtomicUsize::new(0);
    runtime.block_on(async {
        engine
            .create_dataset(DATASET, &DatasetConfig::default())
            .await
            .unwrap();
        // A writer that has committed before: its catalog holds the dataset's state.
        engine.commit(&commits.request(1)).await.unwrap();
    });

    let mut counted = Vec::new();
    for splits in SIZES {
        let (mend, mend_took) = runtime.block_on(async {
            store.take();
            let started = std::time::Instant::now();
            engine.commit(&commits.request(splits)).await.unwrap();
            (store.take(), started.elapsed())
        });
        let (bare, bare_took) = runtime.block_on(async {
            let started = std::time::Instant::now();
            floor(&*store, splits, floors.fetch_add(1, Ordering::SeqCst)).await;
            (store.take(), started.elapsed())
        });
        counted.push((splits, mend, mend_took, bare, bare_took));
    }

    bench.report(format!(
        "round trips on object storage, {} ms per request (an in-memory store behind the injected latency), payloads of {PAYLOAD_BYTES} bytes:",
        LATENCY.as_millis()
    ));
    for (splits, mend, mend_took, bare, bare_took) in &counted {
        let noun = if *splits == 1 { "split" } else { "splits" };
        bench.report(format!("a commit of {splits} {noun}:"));
        bench.report(counts_line("mend  Engine::commit", mend, *mend_took));
        bench.report(counts_line(
            "floor (objects at once, one put-if-absent)",
            bare,
            *bare_took,
        ));
    }
    let mut group = bench.group(
        "round trips",
        Sampling::Expensive {
            measurement: Duration::from_secs(2),
        },
    );
    for splits in SIZES {
        group.bench(&format!("commit/{splits}"), |b| {
            b.iter_custom(|iterations| {
                runtime.block_on(async {
                    let started = std::time::Instant::now();
                    for _ in 0..iterations {
                        engine.commit(&commits.request(splits)).await.unwrap();
                    }
                    started.elapsed()
                })
            });
        });
        group.bench(&format!("floor/{splits}"), |b| {
            b.iter_custom(|iterations| {
                runtime.block_on(async {
                    let started = std::time::Instant::now();
                    for _ in 0..iterations {
                        floor(&*store, splits, floors.fetch_add(1, Ordering::SeqCst)).await;
                    }
                    started.elapsed()
                })
            });
        });
    }
    let estimates = group.finish();

    estimates.report(|times| {
        SIZES
            .iter()
            .map(|splits| {
                let (mend, bare) = (
                    times[format!("commit/{splits}").as_str()],
                    times[format!("floor/{splits}").as_str()],
                );
                format!(
                    "commit of {splits:>2}: {:6.1} ms against the floor's {:6.1} ms (criterion's medians): mend/floor {:.2}x (goal <= 2x)",
                    millis(mend),
                    millis(bare),
                    mend.as_secs_f64() / bare.as_secs_f64()
                )
            })
            .collect()
    });
    bench.finish();
}
