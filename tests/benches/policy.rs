//! The cost of the policy boundary, measured against itself in one run:
//!
//!     cargo bench -p mend-tests --bench policy
//!
//! Measured by criterion (`common`), each a group:
//!
//! - `stage decision`: a stage decision (a fresh sandbox: instantiate, copy in, decide, copy
//!   out) in wasm against the same code native, for plans of 1, 100 and 10,000 splits (sorted
//!   ids) and of 10,000 drawn unsorted with repeats from a pool of 10,000 (the seed's shape): as
//!   decisions naming their ids (`plan_stage`, each id copied into a `String`), and as the
//!   engine asks since ABI 1.4, by request entry (`plan_stage_by_index` against the native
//!   planner on borrowed ids, `plan_ids`: no id copied on either side), for the default
//!   policy (1.5: the host sorts the request and the policy decides on integers) and for the
//!   frozen 1.4 one (`policies/abi-1-4`: the policy sorts the packed ids itself);
//! - `load a component`: compiling a new component (each iteration a distinct one, with an
//!   empty cache), and loading one from the on-disk cache;
//! - `swap`: preparing a swap (checks and a replay of 1,000 recorded decisions) and publishing
//!   a prepared one;
//! - `policy languages`: the default policy in Rust against the same decisions in JavaScript
//!   (`policies/js`, built with componentize-js and with componentize-qjs): stage decisions of
//!   1 and 100 splits, a recovery decision of 10 intents, and loading from the on-disk cache;
//!   beside them, not criterion's, each component's size, its compiled size and one first
//!   load (compiling it), timed once.
//!
//! Not criterion's (it has no percentiles), printed beside: decision latency percentiles over
//! 3 s (`MEND_BENCH_LATENCY_SECONDS`) while the policy is swapped every 2 ms, and without swaps.
//!
//! It takes about a minute on the 2-core development machine, most of it the six decision
//! functions (3 s each with warm-up). For more samples or time:
//! `-- --sample-size 200 --measurement-time 10`; `-- 'stage decision'` runs one group.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BatchSize, Throughput};
use mend::engine::{CommitRequest, CommitSplit};
use mend::faults::CrashAt;
use mend::runtime::{DEFAULT_POLICY_WASM, LoadOptions, PolicyRuntime};
use mend_contract::{ExistingRow, RecoveryMode, SplitState, StageMode, StagePlanInput};
use mend_tests::js_policies::{JsEngine, js_policy};
use mend_tests::{Backend, Harness};

/// The default decisions built against the frozen 1.4 contract (`policies/abi-1-4`).
const ABI_1_4_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_ABI_1_4_WASM"));

mod common;
use common::{Bench, Sampling, micros, millis};

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

/// `plan_input(splits)` in the seed's shape instead (issue 43): the ids drawn, unsorted and
/// with repeats, from a pool of `splits` (a fixed linear congruential sequence), the rows
/// every third id of the pool, in id order as a backend reads them.
fn unsorted_plan_input(splits: usize) -> StagePlanInput {
    let mut input = plan_input(splits);
    let pool = std::mem::take(&mut input.split_ids);
    let mut draw: u64 = 0x2545_f491_4f6c_dd1d;
    input.split_ids = (0..splits)
        .map(|_| {
            draw = draw
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            pool[(draw >> 33) as usize % pool.len()].clone()
        })
        .collect();
    input
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

/// Decision latencies over `period`, optionally while another thread swaps the policy every
/// 2 ms; how many swaps it made.
async fn latencies(swapping: bool, period: Duration) -> (Vec<Duration>, Option<usize>) {
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
    let swaps = swapper.map(|swapper| swapper.join().expect("swapper"));
    times.sort();
    (times, swaps)
}

fn decision_cost(bench: &mut Bench, policy: &PolicyRuntime, abi_1_4: &PolicyRuntime) {
    // Each case by its label: the number of splits, sorted as most requests are, and 10,000
    // drawn unsorted with repeats (the seed's shape).
    let cases: [(&str, StagePlanInput); 4] = [
        ("1", plan_input(1)),
        ("100", plan_input(100)),
        ("10000", plan_input(10_000)),
        ("10000 unsorted", unsorted_plan_input(10_000)),
    ];
    let mut group = bench.group(
        "stage decision",
        Sampling::Quick {
            measurement: Duration::from_secs(2),
        },
    );
    for (splits, input) in &cases {
        group.throughput(Throughput::Elements(input.split_ids.len() as u64));
        group.bench(&format!("wasm/{splits}"), |b| {
            b.iter(|| policy.plan_stage(input).expect("decides"))
        });
        group.bench(&format!("native/{splits}"), |b| {
            b.iter(|| mend_default_policy::plan_stage(input))
        });
        // As the engine asks (ABI 1.4 on): decisions by request entry, no id copied, against
        // the same decisions made natively on borrowed ids. A 1.5 policy is asked on the
        // request grouped by id, the host sorting it natively (inside the time measured); the
        // frozen 1.4 component, asked on the ids packed, shows what that changed.
        for (name, policy) in [("wasm by index", policy), ("wasm 1.4 by index", abi_1_4)] {
            group.bench(&format!("{name}/{splits}"), |b| {
                b.iter(|| {
                    policy
                        .plan_stage_by_index(
                            &input.dataset_id,
                            input.mode,
                            &input.split_ids,
                            &input.existing,
                        )
                        .expect("decides")
                })
            });
        }
        group.bench(&format!("native by index/{splits}"), |b| {
            b.iter(|| {
                let ids: Vec<&str> = input.split_ids.iter().map(String::as_str).collect();
                let existing = input
                    .existing
                    .iter()
                    .map(|row| (row.split_id.as_str(), row.state))
                    .collect();
                mend_default_policy::stage::plan_ids(input.mode, &ids, existing).len()
            })
        });
    }
    group.finish().report(|times| {
        let line = |what: &str, splits: &str, wasm: &str, native: &str| {
            let wasm = times[format!("{wasm}/{splits}").as_str()];
            let native = times[format!("{native}/{splits}").as_str()];
            format!(
                "{what} of {splits:>14} splits: wasm {:>9.1} us, native {:>9.1} us, wasm/native {:>6.1}x",
                micros(wasm),
                micros(native),
                wasm.as_secs_f64() / native.as_secs_f64()
            )
        };
        cases
            .iter()
            .flat_map(|(splits, _)| {
                [
                    line("stage decision         ", splits, "wasm", "native"),
                    line(
                        "stage decision by index",
                        splits,
                        "wasm by index",
                        "native by index",
                    ),
                    line(
                        "1.4 decision by index  ",
                        splits,
                        "wasm 1.4 by index",
                        "native by index",
                    ),
                ]
            })
            .collect()
    });
}

fn load_cost(bench: &mut Bench) {
    // Every first-time load is of a component no cache has seen, in a cache of its own.
    let components = AtomicUsize::new(0);
    let mut group = bench.group(
        "load a component",
        Sampling::Expensive {
            measurement: Duration::from_secs(2),
        },
    );
    group.bench("first time", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let cache = tempfile::tempdir().expect("cache dir");
                let options = LoadOptions {
                    cache_dir: Some(cache.path().to_path_buf()),
                    ..LoadOptions::default()
                };
                let n = components.fetch_add(1, Ordering::Relaxed);
                let bytes = rebadged(&format!("load-cost-{n}"));
                let started = Instant::now();
                PolicyRuntime::load_with(&bytes, &options).expect("loads");
                took += started.elapsed();
            }
            took
        })
    });
    let cache = tempfile::tempdir().expect("cache dir");
    let options = LoadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..LoadOptions::default()
    };
    let bytes = rebadged("load-cost-cached");
    PolicyRuntime::load_with(&bytes, &options).expect("loads");
    group.sampling(Sampling::Quick {
        measurement: Duration::from_secs(2),
    });
    group.bench("again", |b| {
        b.iter(|| PolicyRuntime::load_with(&bytes, &options).expect("loads"))
    });
    group.finish().report(|times| {
        vec![format!(
            "loading a component: first time (compile, write the cache) {:.1} ms; again (compiled form reused, handshake) {:.2} ms",
            millis(times["first time"]),
            millis(times["again"]),
        )]
    });
}

/// Ten in-doubt commits, each with its rows staged and its objects present: a roll forward.
fn recovery_input() -> mend_contract::RecoveryInput {
    let intents = (0..10)
        .map(|i| {
            let split = format!("split-{i}");
            mend_contract::IntentObservation {
                operation_id: format!("op-{i}"),
                kind: mend_contract::OperationKind::Commit,
                phase: mend_contract::IntentPhase::EffectsConfirmed,
                owner_lease_live: false,
                planned_rows: vec![split.clone()],
                rows: vec![ExistingRow {
                    split_id: split.clone(),
                    state: SplitState::Staged,
                }],
                objects: vec![mend_contract::ObjectObservation {
                    split_id: split.clone(),
                    present: true,
                    matches: true,
                }],
                publish_staged: vec![split],
                publish_replaced: Vec::new(),
                has_checkpoint_delta: false,
                checkpoint_at_from: false,
                checkpoint_at_to: false,
                checkpoint_reached_to: false,
                gc_splits: Vec::new(),
                mark_splits: Vec::new(),
                config_at_expected: false,
                config_applied: false,
            }
        })
        .collect();
    mend_contract::RecoveryInput {
        dataset_id: "bench".into(),
        mode: RecoveryMode::RollForward,
        now_ms: 1_000_000,
        intents,
    }
}

/// The default policy in Rust and in JavaScript (both engines): decisions, cached loads, and
/// each component's size, compiled size and first (compiling) load.
fn language_cost(bench: &mut Bench) {
    // The Rust component rebadged, so that its first load here compiles it as the others'.
    let components: Vec<(String, Vec<u8>)> =
        std::iter::once(("rust".to_string(), rebadged("languages")))
            .chain(JsEngine::ALL.map(|engine| {
                let name = match engine {
                    JsEngine::SpiderMonkey => "js-spidermonkey",
                    JsEngine::QuickJs => "js-quickjs",
                };
                (name.to_string(), js_policy(engine))
            }))
            .collect();
    // Each component's size, compiled size and first load: one timed load each, not criterion.
    let cache = tempfile::tempdir().expect("cache dir");
    let options = LoadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..LoadOptions::default()
    };
    let mut policies = Vec::new();
    for (name, bytes) in &components {
        let before = folder_bytes(cache.path());
        let started = Instant::now();
        let policy = PolicyRuntime::load_with(bytes, &options).expect("loads");
        let first_load = started.elapsed();
        let compiled = folder_bytes(cache.path()) - before;
        bench.report(format!(
            "{name:<16} component {:>6.2} MB, compiled {:>6.2} MB, first load (compile) {:>7.1} ms, needs {}",
            bytes.len() as f64 / 1e6,
            compiled as f64 / 1e6,
            millis(first_load),
            policy.shape()
        ));
        policies.push((name.clone(), policy));
    }
    let stage_1 = plan_input(1);
    let stage_100 = plan_input(100);
    let recovery = recovery_input();
    let mut group = bench.group(
        "policy languages",
        Sampling::Quick {
            measurement: Duration::from_secs(2),
        },
    );
    for ((name, policy), (_, bytes)) in policies.iter().zip(&components) {
        group.bench(&format!("{name}/stage 1"), |b| {
            b.iter(|| policy.plan_stage(&stage_1).expect("decides"))
        });
        group.bench(&format!("{name}/stage 100"), |b| {
            b.iter(|| policy.plan_stage(&stage_100).expect("decides"))
        });
        group.bench(&format!("{name}/recovery 10"), |b| {
            b.iter(|| policy.decide_recovery(&recovery).expect("decides"))
        });
        group.bench(&format!("{name}/load again"), |b| {
            b.iter(|| PolicyRuntime::load_with(bytes, &options).expect("loads"))
        });
    }
    let names: Vec<String> = policies.iter().map(|(name, _)| name.clone()).collect();
    group.finish().report(|times| {
        let mut lines = Vec::new();
        for case in ["stage 1", "stage 100", "recovery 10", "load again"] {
            let rust = times[format!("rust/{case}").as_str()];
            let mut line = format!("{case:<12} rust {:>9.1} us", micros(rust));
            for name in names.iter().skip(1) {
                let time = times[format!("{name}/{case}").as_str()];
                line.push_str(&format!(
                    ", {name} {:>9.1} us ({:.1}x rust)",
                    micros(time),
                    time.as_secs_f64() / rust.as_secs_f64()
                ));
            }
            lines.push(line);
        }
        lines
    });
}

/// Bytes of every file under `folder`.
fn folder_bytes(folder: &std::path::Path) -> u64 {
    std::fs::read_dir(folder)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| {
                    let path = entry.path();
                    if path.is_dir() {
                        folder_bytes(&path)
                    } else {
                        entry.metadata().map_or(0, |metadata| metadata.len())
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

fn swap_cost(bench: &mut Bench, runtime: &tokio::runtime::Runtime) {
    let h = runtime.block_on(Harness::new(Backend::Memory));
    runtime.block_on(async {
        let dataset_id = h.create_dataset("bench").await;
        // 1,000 recorded decisions to replay: each has two audit records, one written before
        // its effect (`executing`) and one after it, and replay decides each operation once.
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
            // Steps: begin, the object, then (crashed before) the publish.
            let crashing = h.engine.with_faults(Arc::new(CrashAt::new(3, false)));
            assert!(crashing.commit(&request).await.is_err());
        }
        h.clock.advance_ms(120_000);
        h.engine
            .recover(&dataset_id, RecoveryMode::RollForward)
            .await
            .expect("recover");
    });
    let candidate = PolicyRuntime::load(&rebadged("a"), Default::default()).expect("loads");
    let prepare = || {
        let prepared = runtime
            .block_on(
                h.engine
                    .prepare_policy_swap(candidate.clone(), 2 * 1_000, &[]),
            )
            .expect("prepare");
        assert_eq!(prepared.replay.replayed, 1_000);
        prepared
    };
    let prepared = prepare();
    let mut group = bench.group(
        "swap",
        Sampling::Expensive {
            measurement: Duration::from_secs(1),
        },
    );
    group.bench("prepare", |b| b.iter(&prepare));
    group.sampling(Sampling::Quick {
        measurement: Duration::from_secs(1),
    });
    // Publishing checks only the generation the swap was prepared against: a copy of one
    // prepared swap, brought to the current generation, is a swap prepared just now. One
    // setup per iteration: a batch of copies made up front would all carry the generation
    // the first publish of the batch moves on.
    group.bench("publish", |b| {
        b.iter_batched(
            || {
                let mut swap = prepared.clone();
                swap.generation = h.engine.active_policy().generation();
                swap
            },
            |swap| h.engine.publish_policy_swap(swap).expect("publish"),
            BatchSize::PerIteration,
        )
    });
    group.finish().report(|times| {
        vec![format!(
            "swap: prepare (capabilities, replay of 1000 recorded decisions) {:.1} ms, publish {:.2} us",
            millis(times["prepare"]),
            micros(times["publish"])
        )]
    });
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    micros(sorted[index])
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut bench = Bench::from_args();
    let policy = PolicyRuntime::default_policy().expect("default policy");
    let abi_1_4 = PolicyRuntime::load(ABI_1_4_WASM, Default::default()).expect("abi-1-4 loads");
    decision_cost(&mut bench, &policy, &abi_1_4);
    load_cost(&mut bench);
    swap_cost(&mut bench, &runtime);
    language_cost(&mut bench);

    // Percentiles are not criterion's: a plain timed loop, as long as MEND_BENCH_LATENCY_SECONDS.
    let seconds = std::env::var("MEND_BENCH_LATENCY_SECONDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(if common::test_mode() { 0.1 } else { 3.0 });
    for swapping in [false, true] {
        let (times, swaps) =
            runtime.block_on(latencies(swapping, Duration::from_secs_f64(seconds)));
        bench.report(format!(
            "decision latency, 100 splits, {}: p50 {:.1} us, p99 {:.1} us, max {:.1} us over {} decisions{} (a timed loop, not criterion)",
            if swapping {
                "swapping every 2 ms"
            } else {
                "no swaps          "
            },
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            percentile(&times, 1.0),
            times.len(),
            swaps.map_or(String::new(), |swaps| format!(", {swaps} swaps"))
        ));
    }
    bench.finish();
}
