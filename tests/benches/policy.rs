//! The cost of the policy boundary, measured against itself in one run:
//!
//!     cargo bench -p mend-tests --bench policy
//!
//! - a stage decision (a fresh sandbox: instantiate, copy in, decide, copy out) in wasm
//!   against the same code native, for plans of 1, 100 and 10,000 splits;
//! - loading a new component: compiling it, and loading it from the on-disk cache;
//! - preparing a swap (checks and a replay of 1,000 recorded decisions) and publishing it;
//! - decision latency percentiles while the policy is swapped every few milliseconds, and
//!   without swaps.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mend::engine::{CommitRequest, CommitSplit};
use mend::faults::CrashAt;
use mend::runtime::{DEFAULT_POLICY_WASM, LoadOptions, PolicyRuntime};
use mend_policy::{ExistingRow, RecoveryMode, SplitState, StageMode, StagePlanInput};
use mend_tests::{Backend, Harness};

fn plan_input(splits: usize) -> StagePlanInput {
    let split_ids: Vec<String> = (0..splits).map(|i| format!("split-{i:06}")).collect();
    let existing = split_ids
        .iter()
        .step_by(3)
        .map(|id| ExistingRow {
            split_id: id.clone(),
            state: SplitState::Published,
        })
        .collect();
    StagePlanInput {
        dataset_id: "bench".into(),
        mode: StageMode::CreateOnly,
        split_ids,
        existing,
    }
}

/// The median of `runs` timings of `body`.
fn median(runs: usize, mut body: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            body();
            started.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn decision_cost(policy: &PolicyRuntime) {
    for (splits, runs) in [(1, 2_000), (100, 1_000), (10_000, 30)] {
        let input = plan_input(splits);
        let wasm = median(runs, || {
            policy.plan_stage(&input).expect("decides");
        });
        let native = median(runs, || {
            std::hint::black_box(mend_policy::plan_stage(&input));
        });
        println!(
            "stage decision of {splits:>6} splits: wasm {:>9.1} us, native {:>9.1} us, wasm/native {:>6.1}x",
            wasm.as_secs_f64() * 1e6,
            native.as_secs_f64() * 1e6,
            wasm.as_secs_f64() / native.as_secs_f64()
        );
    }
}

/// A distinct component with the default policy's code: a custom section appended.
fn rebadged(label: &str) -> Vec<u8> {
    let mut bytes = DEFAULT_POLICY_WASM.to_vec();
    let mut section = vec![4u8];
    section.extend_from_slice(b"mend");
    section.extend_from_slice(label.as_bytes());
    bytes.push(0);
    bytes.push(section.len() as u8);
    bytes.extend_from_slice(&section);
    bytes
}

fn load_cost() {
    let cache = tempfile::tempdir().expect("cache dir");
    let options = LoadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..LoadOptions::default()
    };
    let bytes = rebadged("load-cost");
    let started = Instant::now();
    PolicyRuntime::load_with(&bytes, &options).expect("loads");
    let cold = started.elapsed();
    let started = Instant::now();
    PolicyRuntime::load_with(&bytes, &options).expect("loads");
    let warm = started.elapsed();
    println!(
        "loading a component: first time (compile, write the cache) {:.1} ms; again (compiled form reused, handshake) {:.2} ms",
        cold.as_secs_f64() * 1e3,
        warm.as_secs_f64() * 1e3,
    );
}

async fn swap_cost() {
    let h = Harness::new(Backend::Memory).await;
    let dataset_id = h.create_dataset("bench").await;
    // 1,000 recorded decisions to replay.
    for i in 0..1_000 {
        let request = CommitRequest {
            dataset_id: dataset_id.clone(),
            node: "w".into(),
            splits: vec![CommitSplit {
                split_id: format!("s-{i}"),
                metadata_json: "{}".into(),
                payload: bytes::Bytes::from_static(b"x"),
            }],
            checkpoint_delta: None,
            publish_token: None,
        };
        let crashing = h.engine.with_faults(Arc::new(CrashAt::new(4, false)));
        assert!(crashing.commit(&request).await.is_err());
    }
    h.clock.advance_ms(120_000);
    h.engine
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .expect("recover");
    let candidates = [
        PolicyRuntime::load(&rebadged("a"), Default::default()).expect("loads"),
        PolicyRuntime::load(&rebadged("b"), Default::default()).expect("loads"),
    ];
    let mut prepare = Vec::new();
    let mut publish = Vec::new();
    for round in 0..10 {
        let started = Instant::now();
        let prepared = h
            .engine
            .prepare_policy_swap(candidates[round % 2].clone(), 1_000, &[])
            .await
            .expect("prepare");
        prepare.push(started.elapsed());
        assert_eq!(prepared.replay.replayed, 1_000);
        let started = Instant::now();
        h.engine.publish_policy_swap(prepared).expect("publish");
        publish.push(started.elapsed());
    }
    prepare.sort();
    publish.sort();
    println!(
        "swap: prepare (capabilities, replay of 1000 recorded decisions) {:.1} ms, publish {:.2} us (medians of 10)",
        prepare[5].as_secs_f64() * 1e3,
        publish[5].as_secs_f64() * 1e6
    );
}

/// Decision latencies over `period` on `threads` of a blocking pool, optionally while
/// another thread swaps the policy every 2 ms.
async fn latencies(swapping: bool, period: Duration) -> Vec<Duration> {
    let h = Harness::new(Backend::Memory).await;
    let engine = h.engine.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = swapping.then(|| {
        let engine = engine.clone();
        let stop = stop.clone();
        let versions = [
            PolicyRuntime::load(&rebadged("x"), Default::default()).expect("loads"),
            PolicyRuntime::load(&rebadged("y"), Default::default()).expect("loads"),
        ];
        std::thread::spawn(move || {
            let mut swaps = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let active = engine.active_policy();
                let generation = active.generation();
                active
                    .publish(versions[swaps % 2].clone(), generation)
                    .expect("swap");
                swaps += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            swaps
        })
    });
    let input = plan_input(100);
    let started = Instant::now();
    let mut times = Vec::new();
    while started.elapsed() < period {
        let begun = Instant::now();
        engine.policy().plan_stage(&input).expect("decides");
        times.push(begun.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(swapper) = swapper {
        let swaps = swapper.join().expect("swapper");
        println!("  ({swaps} swaps during the run)");
    }
    times.sort();
    times
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1e6
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let policy = PolicyRuntime::default_policy().expect("default policy");
    decision_cost(&policy);
    load_cost();
    swap_cost().await;
    for swapping in [false, true] {
        let times = latencies(swapping, Duration::from_secs(3)).await;
        println!(
            "decision latency, 100 splits, {}: p50 {:.1} us, p99 {:.1} us, max {:.1} us over {} decisions",
            if swapping {
                "swapping every 2 ms"
            } else {
                "no swaps          "
            },
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            percentile(&times, 1.0),
            times.len()
        );
    }
}
