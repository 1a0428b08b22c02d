//! The object-store catalog as a dataset grows, on a local directory (the embedded default):
//!
//!     cargo bench -p mend-tests --bench catalog_growth
//!
//! Two datasets, of 1,000 and of 100,000 staged splits, each staged in commits of 1,000
//! (untimed). Then, in the criterion group `catalog growth`, each iteration of `commit/1k`
//! and `commit/100k` is one commit of 100 splits: an upsert that overwrites 100 staged rows
//! (100 post-images in one log version), so that the dataset stays at its size however many
//! iterations criterion runs. Every `checkpoint_interval` (100) commits a checkpoint of the
//! whole dataset falls due; it is written in the background, and its cost shows in the tail
//! of the commits around it, if anywhere. Besides criterion's medians the bench prints, from
//! every commit it timed, p50, mean, p99 and max, each as a ratio against the same measure at
//! 1k, from the same run; then, after the commits, the bytes and files of each dataset on
//! disk (log and checkpoints), the first write of a new catalog instance on each dataset (a
//! process reopening it; and apart, at 100k, the GET of the newest checkpoint's bytes and a
//! load of the state without a write), medians of 5 reopenings, and the resident memory of this process (`/proc/self/statm`):
//! before the datasets, after staging 100,000 splits, after the commits, and a second later.
//!
//! Retention keeps the default 3 checkpoints, with a log retention of 2 s instead of the
//! default 10 minutes, so that the log's pruning shows within the run. It takes about half a
//! minute on the 2-core development machine. In test mode (`cargo test --benches`) the
//! datasets are 1,000 and 5,000 splits, each function runs once, and the bench does not wait
//! for the log retention.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::Throughput;
use mend::Catalog;
use mend::catalog::object_store::ObjectStoreCatalogOptions;
use mend::catalog::{ObjectStoreCatalog, PlannedAction, PlannedStage, StagePlan};
use mend::model::{NewSplit, StageMode, TimeRange};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;

mod common;
use common::{Bench, Sampling, millis};

const COMMIT: usize = 100;
const STAGING_BATCH: usize = 1_000;

fn options() -> ObjectStoreCatalogOptions {
    ObjectStoreCatalogOptions {
        log_retention: Duration::from_secs(2),
        ..ObjectStoreCatalogOptions::default()
    }
}

fn split(index: usize, round: usize) -> NewSplit {
    let start = (index * 1_000) as i64;
    NewSplit {
        split_id: format!("split-{index:06}"),
        node: "node-1".to_string(),
        metadata_json: serde_json::json!({
            "num_docs": 1_000 + index + round,
            "size_bytes": 1 << 20,
            "time_range": {"start": start, "end": start + 999},
            "tags": ["tenant:acme", "kind:logs"],
        })
        .to_string(),
        time_range: Some(TimeRange {
            start,
            end: start + 999,
        }),
    }
}

/// Stages `splits` (ids `first..first + len`) in upsert mode: inserts the missing rows,
/// overwrites the staged ones.
async fn upsert(catalog: &ObjectStoreCatalog, dataset: &str, splits: Vec<NewSplit>) {
    // As `Catalog::stage` takes them: one per id, sorted by id.
    let mut splits: Vec<Arc<NewSplit>> = splits.into_iter().map(Arc::new).collect();
    splits.sort_by(|a, b| a.split_id.cmp(&b.split_id));
    let planner = |existing: &[mend::catalog::ExistingRow]| {
        let mut entries: Vec<PlannedStage> = splits
            .iter()
            .map(|split| PlannedStage {
                split: Arc::clone(split),
                action: if existing.iter().any(|row| row.split_id == split.split_id) {
                    PlannedAction::Overwrite
                } else {
                    PlannedAction::Insert
                },
            })
            .collect();
        entries.sort_by(|a, b| a.split.split_id.cmp(&b.split.split_id));
        Ok(StagePlan { entries })
    };
    catalog
        .stage(
            dataset,
            StageMode::Upsert,
            &splits,
            &planner,
            1_700_000_000_000,
            None,
        )
        .await
        .unwrap();
}

/// A dataset of `size` staged splits, staged in commits of [`STAGING_BATCH`].
async fn grown(catalog: &ObjectStoreCatalog, dataset: &str, size: usize) {
    catalog
        .create_dataset(dataset, "uid", &Default::default(), 1_700_000_000_000, None)
        .await
        .unwrap();
    for first in (0..size).step_by(STAGING_BATCH) {
        let splits = (first..(first + STAGING_BATCH).min(size))
            .map(|index| split(index, 0))
            .collect();
        upsert(catalog, dataset, splits).await;
    }
    catalog.flush().await;
}

/// The `COMMIT` splits of commit number `round` on a dataset of `size`.
fn commit_splits(size: usize, round: usize) -> Vec<NewSplit> {
    let first = (round * COMMIT) % size;
    (first..first + COMMIT)
        .map(|index| split(index % size, round))
        .collect()
}

/// Resident memory of this process, in MiB.
fn resident_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1024.0 * 1024.0)
}

/// Files and bytes under `{dataset}/catalog/{kind}/`.
fn on_disk(root: &std::path::Path, dataset: &str, kind: &str) -> (usize, u64) {
    let dir = root
        .join("datasets")
        .join(dataset)
        .join("catalog")
        .join(kind);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    entries
        .filter_map(|entry| entry.ok()?.metadata().ok())
        .filter(|meta| meta.is_file())
        .fold((0, 0), |(files, bytes), meta| {
            (files + 1, bytes + meta.len())
        })
}

/// The size of the dataset's newest checkpoint file and the time a GET of its bytes takes;
/// `None` before its first checkpoint (in test mode).
async fn read_newest_checkpoint(
    store: &dyn ObjectStore,
    dataset: &str,
) -> Option<(usize, Duration)> {
    use futures::TryStreamExt;
    let dir = Path::from(format!("datasets/{dataset}/catalog/checkpoints"));
    let mut files: Vec<Path> = store
        .list(Some(&dir))
        .map_ok(|meta| meta.location)
        .try_collect()
        .await
        .unwrap();
    files.sort();
    let newest = files.last()?;
    let started = Instant::now();
    let bytes = store.get(newest).await.unwrap().bytes().await.unwrap();
    Some((bytes.len(), started.elapsed()))
}

/// How many times the bench reopens the catalog, for the first write's median.
const REOPENINGS: usize = 5;

/// The measures of the reopened catalogs, one entry per reopening.
#[derive(Default)]
struct Reopened {
    /// The newest checkpoint's size and the time of a GET of its bytes.
    file_reads: Vec<(usize, Duration)>,
    /// A load of the large dataset's state without a write.
    loads: Vec<Duration>,
    /// The log reads of each load (the versions after the checkpoint, and the probes past
    /// the last one).
    log_reads: Vec<u64>,
    /// The first write on each dataset, small then large.
    writes: [Vec<Duration>; 2],
}

/// `times` as their median, with their range when there are several.
fn spread(times: &mut [Duration]) -> String {
    times.sort();
    match times {
        [] => "not measured".to_string(),
        [one] => format!("{:.1} ms", millis(*one)),
        _ => format!(
            "{:.1} ms ({:.1} to {:.1})",
            millis(times[times.len() / 2]),
            millis(times[0]),
            millis(times[times.len() - 1])
        ),
    }
}

/// p50, mean, p99 and max of `times`.
fn summary(times: &mut [Duration]) -> [Duration; 4] {
    times.sort();
    let at = |fraction: f64| times[((times.len() - 1) as f64 * fraction).round() as usize];
    let mean = times.iter().sum::<Duration>() / times.len().max(1) as u32;
    [at(0.5), mean, at(0.99), *times.last().unwrap()]
}

fn main() {
    let quick = common::test_mode();
    let sizes: [(&str, usize); 2] = if quick {
        [("1k", 1_000), ("5k", 5_000)]
    } else {
        [("1k", 1_000), ("100k", 100_000)]
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut bench = Bench::from_args();
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(directory.path()).unwrap());
    let catalog = ObjectStoreCatalog::new(Arc::clone(&store), Path::default(), options());

    let resident_before = resident_mib();
    let began = Instant::now();
    for (name, size) in sizes {
        runtime.block_on(grown(&catalog, &format!("growth-{name}"), size));
    }
    let staging = began.elapsed();
    let resident_staged = resident_mib();

    let mut times: Vec<Vec<Duration>> = vec![Vec::new(), Vec::new()];
    let rounds = [AtomicUsize::new(0), AtomicUsize::new(0)];
    let mut group = bench.group(
        "catalog growth",
        Sampling::Quick {
            measurement: Duration::from_secs(4),
        },
    );
    group.throughput(Throughput::Elements(COMMIT as u64));
    for (index, (name, size)) in sizes.iter().enumerate() {
        let dataset = format!("growth-{name}");
        let (samples, round) = (&mut times[index], &rounds[index]);
        group.bench(&format!("commit/{name}"), |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let splits = commit_splits(*size, round.fetch_add(1, Ordering::Relaxed));
                    let started = Instant::now();
                    runtime.block_on(upsert(&catalog, &dataset, splits));
                    let took = started.elapsed();
                    samples.push(took);
                    total += took;
                }
                total
            });
        });
    }
    let estimates = group.finish();
    runtime.block_on(catalog.flush());
    let resident_committed = resident_mib();
    // Past the log retention, then one more checkpoint's worth of commits, so that the
    // sizes below are what retention keeps rather than what it has not reached yet (in test
    // mode, without the wait).
    let settling = if quick {
        0
    } else {
        options().checkpoint_interval
    };
    if !quick {
        std::thread::sleep(options().log_retention + Duration::from_millis(200));
    }
    for (index, (name, size)) in sizes.iter().enumerate() {
        for _ in 0..settling {
            let splits = commit_splits(*size, rounds[index].fetch_add(1, Ordering::Relaxed));
            runtime.block_on(upsert(&catalog, &format!("growth-{name}"), splits));
        }
    }
    runtime.block_on(catalog.flush());
    let resident_settled = resident_mib();

    // A process that opens the catalog again: its first write loads the newest checkpoint.
    // Apart, on fresh instances of their own: reading the checkpoint file's bytes, and loading
    // the state (the checkpoint and the log versions after it) without writing. Each a few
    // times, for the median: one run of tens of milliseconds on a shared machine is noise.
    let reopenings = if quick { 1 } else { REOPENINGS };
    let large = format!("growth-{}", sizes[1].0);
    let mut reopened = Reopened::default();
    for _ in 0..reopenings {
        reopened
            .file_reads
            .extend(runtime.block_on(read_newest_checkpoint(&*store, &large)));
        let loading = ObjectStoreCatalog::new(Arc::clone(&store), Path::default(), options());
        let started = Instant::now();
        runtime.block_on(loading.probe_version(&large)).unwrap();
        reopened.loads.push(started.elapsed());
        reopened.log_reads.push(loading.stats().log_reads);
        for (index, (name, size)) in sizes.iter().enumerate() {
            let writer = ObjectStoreCatalog::new(Arc::clone(&store), Path::default(), options());
            let splits = commit_splits(*size, rounds[index].fetch_add(1, Ordering::Relaxed));
            let started = Instant::now();
            runtime.block_on(upsert(&writer, &format!("growth-{name}"), splits));
            reopened.writes[index].push(started.elapsed());
        }
    }

    let [small, large] = [0, 1].map(|index| summary(&mut times[index]));
    let stats = catalog.stats();
    estimates.report(|times| {
        let (small_name, large_name) = (sizes[0].0, sizes[1].0);
        let median = |name: &str| times[format!("commit/{name}").as_str()];
        vec![format!(
            "catalog growth: a commit of {COMMIT} splits takes {:.2} ms at {large_name} splits, \
             {:.2} ms at {small_name} (criterion's medians): {:.2}x",
            millis(median(large_name)),
            millis(median(small_name)),
            median(large_name).as_secs_f64() / median(small_name).as_secs_f64()
        )]
    });
    let labels = ["p50", "mean", "p99", "max"];
    for (position, label) in labels.iter().enumerate() {
        bench.report(format!(
            "  {label:>4}: {:7.2} ms at {}, {:7.2} ms at {}: {:.2}x",
            millis(large[position]),
            sizes[1].0,
            millis(small[position]),
            sizes[0].0,
            large[position].as_secs_f64() / small[position].as_secs_f64()
        ));
    }
    bench.report(format!(
        "  over {} and {} timed commits; {} checkpoints written in the background, {} failed, \
         {} old files pruned",
        times[1].len(),
        times[0].len(),
        stats.checkpoints_written,
        stats.checkpoint_failures,
        stats.files_pruned
    ));
    for (name, _) in sizes {
        let dataset = format!("growth-{name}");
        let (log_files, log_bytes) = on_disk(directory.path(), &dataset, "log");
        let (checkpoints, checkpoint_bytes) = on_disk(directory.path(), &dataset, "checkpoints");
        let commits = runtime
            .block_on(catalog.probe_version(&dataset))
            .unwrap_or_default();
        bench.report(format!(
            "catalog growth: dataset {name} after {commits} commits: {:.1} MB on disk, \
             {checkpoints} checkpoints ({:.1} MB) and {log_files} log files ({:.1} MB)",
            (log_bytes + checkpoint_bytes) as f64 / 1e6,
            checkpoint_bytes as f64 / 1e6,
            log_bytes as f64 / 1e6,
        ));
    }
    bench.report(format!(
        "catalog growth: the first write after reopening: {} at {} splits, {} at {} (medians of {reopenings})",
        spread(&mut reopened.writes[1]),
        sizes[1].0,
        spread(&mut reopened.writes[0]),
        sizes[0].0
    ));
    let file = match reopened.file_reads.first() {
        Some((bytes, _)) => {
            let mut reads: Vec<Duration> =
                reopened.file_reads.iter().map(|(_, took)| *took).collect();
            format!(
                "reading its checkpoint file ({:.1} MB) {}",
                *bytes as f64 / 1e6,
                spread(&mut reads)
            )
        }
        None => "no checkpoint written yet".to_string(),
    };
    reopened.log_reads.sort();
    bench.report(format!(
        "  at {}, apart: {file}; loading the state (the checkpoint, and {} to {} log reads for \
         the versions after it) {}",
        sizes[1].0,
        reopened.log_reads.first().unwrap_or(&0),
        reopened.log_reads.last().unwrap_or(&0),
        spread(&mut reopened.loads),
    ));
    bench.report(format!(
        "catalog growth: resident memory {resident_before:.0} MiB before, {resident_staged:.0} \
         MiB after staging {} splits ({:.1} s), {resident_committed:.0} MiB after the commits, \
         {resident_settled:.0} MiB after {} more and the log retention",
        sizes[0].1 + sizes[1].1,
        staging.as_secs_f64(),
        settling * 2,
    ));
    bench.finish();
}
