//! What the HTTP server costs over calling the engine in process, measured by criterion
//! (`tests/benches/common`).
//!
//!     cargo bench -p mend-cli --bench serve
//!
//! On the embedded default catalog (a local directory, on `/dev/shm` where there is one:
//! [`catalog_directory`] says why), in the criterion group `serve stage`,
//! each iteration `MEND_BENCH_BATCHES` (default 200) create-only batches of
//! `MEND_BENCH_SPLITS_PER_BATCH` (default 100, at most 10,000) new splits into a new dataset
//! (created outside the timed part):
//!
//! - `in-process`, the baseline: `Engine::stage`, one batch after another;
//! - `http-1`: the same batches as `POST /v1/datasets/{id}/stage` to `mend serve` over
//!   loopback, one request at a time on one keep-alive connection, as an HTTP client library
//!   does;
//! - `http-4`: the same with 4 clients at once, a connection each;
//! - `http-1-new-connection`: one client opening a new connection for every request (the
//!   simplest client, and what this bench measured before);
//! - `http-1-compact`, `http-4-compact`: `http-1` and `http-4` with the same requests as
//!   compact bodies (`Content-Type: application/vnd.mend.compact.v1`) instead of JSON, each
//!   asking for the answer by index (`Accept: application/vnd.mend.compact.v1`: one outcome
//!   byte per split, where JSON names every split);
//! - `http-1-compact-json-answer`: `http-1-compact` answered JSON, for what the answer by
//!   index saves.
//!
//! The requests are built before the timed part on both sides (`StageRequest`s in process,
//! JSON or compact bodies over HTTP), so the comparison is of what the server adds to the
//! engine: reading and parsing the request, the admitted write's task, and encoding the answer
//! (JSON, which the client parses, or the answer by index, which it compares).
//!
//! Then, outside criterion, the same comparison **paired** (`MEND_BENCH_PAIRED_ROUNDS`
//! rounds, 15 by default): every round stages the batches once in process and once by each of
//! `http-1`, `http-4`, `http-1-compact` and `http-4-compact`, in an order that rotates from
//! round to round, and each arm's ratio is taken against the in-process time of its own round;
//! it prints each arm's median ratio and its range. These medians are the row's numbers:
//! criterion's functions run one after another, seconds apart, and the engine's own speed
//! drifts between them on a shared 2-core machine (the in-process function alone moved 2x
//! between runs), where two times measured side by side drift together. Only the paired
//! rounds (and the memory below): `-- paired-only`, a filter no criterion function matches.
//!
//! In the group `serve round trip`, a keep-alive `GET /healthz`: the least any request costs.
//! In the group `serve list`, each iteration one page of 100 published splits:
//! `Engine::list_splits` (`in-process`) against `GET .../splits?limit=100` (`http-1`, on a
//! keep-alive connection).
//!
//! It prints batches (pages) per second and HTTP/in-process for each, from criterion's
//! estimates. Last, timed once: the server's resident memory (`/proc/PID/status`) after
//! staging 100,000 splits into one dataset, and 10 s after that load ended. It takes about
//! two minutes on the 2-core development machine: 20 to 30 iterations
//! of each stage function (`Sampling::Expensive`, 5 s of timed work each) and 3 s for each list
//! function. Smaller or larger: `MEND_BENCH_BATCHES=50` (per iteration), `-- --measurement-time
//! 10` (every group); larger batches, to see how far the hop amortizes:
//! `MEND_BENCH_SPLITS_PER_BATCH=1000 MEND_BENCH_BATCHES=20`.

use std::future::IntoFuture;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::Throughput;
use mend::model::{DatasetConfig, ListQuery, StageMode, StageRequest, StageSplit};
use mend::{Engine, EngineOptions};
use serde_json::{Value, json};

// Shared with mend-tests' benches; see its doc for why by path.
#[path = "../../tests/benches/common/mod.rs"]
mod common;
use common::{Bench, Sampling, per_second};

/// A page of the `serve list` group.
const PAGE: usize = 100;
const CLIENTS: usize = 4;
/// mend's compact encoding, version 1: compact request bodies and the answer by index.
const COMPACT: &str = "application/vnd.mend.compact.v1";

/// A new directory for a local catalog: on the memory file system `/dev/shm` where there is
/// one. On this machine's ext4 disk, creating a log version's file spent most of both sides'
/// time in the kernel's inode allocator (`find_inode_bit`, `recently_deleted`), which moved
/// 2x with the disk's history between runs: noise on both sides of every ratio, and none of
/// it the server's.
fn catalog_directory() -> tempfile::TempDir {
    let memory = Path::new("/dev/shm");
    if memory.is_dir() {
        tempfile::tempdir_in(memory).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// Rounds of the paired comparison: `MEND_BENCH_PAIRED_ROUNDS`, 15 by default (1 in test
/// mode), 1 to 1,000.
fn paired_rounds() -> usize {
    match std::env::var("MEND_BENCH_PAIRED_ROUNDS") {
        Err(_) if common::test_mode() => 1,
        Err(_) => 15,
        Ok(text) => match text.parse::<usize>() {
            Ok(rounds) if (1..=1_000).contains(&rounds) => rounds,
            _ => panic!("MEND_BENCH_PAIRED_ROUNDS must be a number from 1 to 1000, not {text:?}"),
        },
    }
}

/// Splits per stage batch: `MEND_BENCH_SPLITS_PER_BATCH`, 100 by default, 1 to 10,000 (the
/// engine's largest batch).
fn splits_per_batch() -> usize {
    static SPLITS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SPLITS.get_or_init(|| match std::env::var("MEND_BENCH_SPLITS_PER_BATCH") {
        Err(_) => 100,
        Ok(text) => match text.parse::<usize>() {
            Ok(splits) if (1..=10_000).contains(&splits) => splits,
            _ => {
                panic!("MEND_BENCH_SPLITS_PER_BATCH must be a number from 1 to 10000, not {text:?}")
            }
        },
    })
}

fn main() {
    let batches: usize = std::env::var("MEND_BENCH_BATCHES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(if common::test_mode() { 10 } else { 200 });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut bench = Bench::from_args();

    let local = catalog_directory();
    let engine = runtime.block_on(open_engine(local.path()));
    let served = catalog_directory();
    let server = Server::start(served.path());
    // Every iteration stages into a dataset of its own.
    let datasets = AtomicUsize::new(0);
    let next_dataset = || format!("bench-{}", datasets.fetch_add(1, Ordering::Relaxed));

    // Seconds per in-process batch, for the round trip's comparison below.
    let in_process_batch = std::cell::OnceCell::new();
    // A new dataset, created in process, and the requests of its batches.
    let new_dataset_in_process = || {
        let dataset_id = next_dataset();
        runtime
            .block_on(
                engine
                    .create_dataset(&dataset_id, &DatasetConfig::default())
                    .into_future(),
            )
            .unwrap();
        (0..batches)
            .map(|batch| stage_request(&dataset_id, batch))
            .collect::<Vec<StageRequest>>()
    };
    let mut group = bench.group(
        "serve stage",
        Sampling::Expensive {
            measurement: Duration::from_secs(5),
        },
    );
    group.throughput(Throughput::Elements(batches as u64));
    group.bench("in-process", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                took += stage_in_process(&runtime, &engine, &new_dataset_in_process());
            }
            took
        })
    });
    // A new dataset, created through `client`, and the bodies of its batches.
    let new_dataset = |client: &mut Client, encoding: Encoding| {
        let dataset_id = next_dataset();
        client.call(
            "POST",
            "/v1/datasets",
            &json!({"dataset_id": dataset_id}).to_string(),
        );
        let bodies: Vec<Body> = (0..batches)
            .map(|batch| encoding.stage_body(batch))
            .collect();
        (dataset_id, bodies)
    };
    // The JSON answer before the answer by index: a server holding more datasets as the
    // run goes on is, if anything, slower for the later function.
    for encoding in [
        Encoding::Json,
        Encoding::CompactAnsweredJson,
        Encoding::Compact,
    ] {
        group.bench(&format!("http-1{}", encoding.suffix()), |b| {
            let mut client = server.client();
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let (dataset_id, bodies) = new_dataset(&mut client, encoding);
                    took +=
                        stage_over_http(std::slice::from_mut(&mut client), &dataset_id, &bodies);
                }
                took
            })
        });
        if matches!(encoding, Encoding::CompactAnsweredJson) {
            // Beside `http-1-compact`, what the answer by index saves; once is enough.
            continue;
        }
        group.bench(&format!("http-{CLIENTS}{}", encoding.suffix()), |b| {
            let mut clients: Vec<Client> = (0..CLIENTS).map(|_| server.client()).collect();
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let (dataset_id, bodies) = new_dataset(&mut clients[0], encoding);
                    took += stage_over_http(&mut clients, &dataset_id, &bodies);
                }
                took
            })
        });
    }
    group.bench("http-1-new-connection", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let dataset_id = next_dataset();
                server.call("POST", "/v1/datasets", &json!({"dataset_id": dataset_id}));
                let bodies: Vec<String> = (0..batches)
                    .map(|batch| String::from_utf8(Encoding::Json.stage_body(batch).bytes).unwrap())
                    .collect();
                let started = Instant::now();
                for body in &bodies {
                    let answer =
                        server.call_raw("POST", &format!("/v1/datasets/{dataset_id}/stage"), body);
                    assert_eq!(
                        answer["splits"].as_array().unwrap().len(),
                        splits_per_batch()
                    );
                }
                took += started.elapsed();
            }
            took
        })
    });
    group.finish().report(|times| {
        let in_process = per_second(batches, times["in-process"]);
        let _ = in_process_batch.set(times["in-process"].as_secs_f64() / batches as f64);
        let over_http = per_second(batches, times["http-1"]);
        let concurrent = per_second(batches, times[format!("http-{CLIENTS}").as_str()]);
        let new_connections = per_second(batches, times["http-1-new-connection"]);
        let compact = per_second(batches, times["http-1-compact"]);
        let compact_concurrent = per_second(batches, times[format!("http-{CLIENTS}-compact").as_str()]);
        let answered_json = per_second(batches, times["http-1-compact-json-answer"]);
        vec![
            format!(
                "stage, {batches} create-only batches of {} splits on a local directory:",
                splits_per_batch()
            ),
            format!("  in process (Engine::stage)      : {in_process:8.1} batches/s"),
            format!(
                "  HTTP, 1 client                  : {over_http:8.1} batches/s, http/in-process = {:.2}",
                over_http / in_process
            ),
            format!(
                "  HTTP, {CLIENTS} clients                 : {concurrent:8.1} batches/s, http/in-process = {:.2}",
                concurrent / in_process
            ),
            format!(
                "  HTTP, 1 client, new connection each: {new_connections:8.1} batches/s, http/in-process = {:.2}",
                new_connections / in_process
            ),
            format!(
                "  HTTP, 1 client, compact bodies : {compact:8.1} batches/s, http/in-process = {:.2}",
                compact / in_process
            ),
            format!(
                "  HTTP, {CLIENTS} clients, compact bodies: {compact_concurrent:8.1} batches/s, http/in-process = {:.2}",
                compact_concurrent / in_process
            ),
            format!(
                "  HTTP, 1 client, compact bodies answered JSON: {answered_json:8.1} batches/s, http/in-process = {:.2} (the answer by index: {:.2}x)",
                answered_json / in_process,
                compact / answered_json
            ),
        ]
    });

    // The same arms, paired: every round stages once by each arm, in an order that rotates
    // from round to round, and each HTTP arm's ratio is taken against the in-process time of
    // its own round. Criterion's functions above run one after another, seconds apart, and on
    // a shared 2-core machine the engine's own speed drifts between them (the in-process
    // function alone moved 2x between runs); a ratio of two times measured side by side
    // moves far less, so the row's numbers are these medians.
    let rounds = paired_rounds();
    let arms = [
        ("HTTP, 1 client", 1, Encoding::Json),
        ("HTTP, 4 clients", CLIENTS, Encoding::Json),
        ("HTTP, 1 client, compact bodies", 1, Encoding::Compact),
        (
            "HTTP, 4 clients, compact bodies",
            CLIENTS,
            Encoding::Compact,
        ),
    ];
    let mut clients: Vec<Client> = (0..CLIENTS).map(|_| server.client()).collect();
    let mut ratios: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); arms.len()];
    let mut in_process_times = Vec::with_capacity(rounds);
    for round in 0..rounds {
        // Index 0 is in process; arm `i` of `arms` is index `i + 1`.
        let mut times = [Duration::ZERO; 5];
        for turn in 0..times.len() {
            let index = (round + turn) % times.len();
            times[index] = match index.checked_sub(1).map(|arm| arms[arm]) {
                None => stage_in_process(&runtime, &engine, &new_dataset_in_process()),
                Some((_, clients_at_once, encoding)) => {
                    let (dataset_id, bodies) = new_dataset(&mut clients[0], encoding);
                    stage_over_http(&mut clients[..clients_at_once], &dataset_id, &bodies)
                }
            };
        }
        for (arm, ratios) in ratios.iter_mut().enumerate() {
            ratios.push(times[0].as_secs_f64() / times[arm + 1].as_secs_f64());
        }
        in_process_times.push(times[0]);
    }
    in_process_times.sort();
    bench.report(format!(
        "stage, paired ({rounds} rounds, each staging {batches} batches of {} splits by every arm in \
         rotating order; http/in-process of the same round, median (least to most)); in process \
         {:.3} ms a batch (the median round)",
        splits_per_batch(),
        in_process_times[rounds / 2].as_secs_f64() * 1e3 / batches as f64
    ));
    for ((name, _, _), mut ratios) in arms.into_iter().zip(ratios) {
        ratios.sort_by(f64::total_cmp);
        bench.report(format!(
            "  {name:<32}: http/in-process = {:.2} ({:.2} to {:.2})",
            ratios[ratios.len() / 2],
            ratios[0],
            ratios[ratios.len() - 1]
        ));
    }

    // What any request costs on a keep-alive connection: the floor under the lines above.
    let mut group = bench.group(
        "serve round trip",
        Sampling::Quick {
            measurement: Duration::from_secs(2),
        },
    );
    group.throughput(Throughput::Elements(1));
    group.bench("healthz", |b| {
        let mut client = server.client();
        b.iter(|| client.call("GET", "/healthz", ""))
    });
    group.finish().report(|times| {
        vec![format!(
            "a keep-alive round trip of GET /healthz (the least a request costs): {:.1} us, {:.2} of the in-process batch",
            times["healthz"].as_secs_f64() * 1e6,
            times["healthz"].as_secs_f64() / in_process_batch.get().copied().unwrap_or(f64::NAN)
        )]
    });

    // Reads: a page of 100 published splits of a dataset of its own, both ways.
    let ids: Vec<String> = (0..PAGE).map(|i| split_id(0, i)).collect();
    runtime
        .block_on(
            engine
                .create_dataset("listed", &DatasetConfig::default())
                .into_future(),
        )
        .unwrap();
    runtime
        .block_on(engine.stage(&stage_request("listed", 0)).into_future())
        .unwrap();
    server.call("POST", "/v1/datasets", &json!({"dataset_id": "listed"}));
    server
        .client()
        .stage("listed", &Encoding::Json.stage_body(0));
    // Their objects first: a publish refuses a split without one (invariant 1).
    for (catalog, id) in [local.path(), served.path()]
        .into_iter()
        .flat_map(|dir| ids.iter().map(move |id| (dir, id)))
    {
        let splits = catalog.join("datasets/listed/splits");
        std::fs::create_dir_all(&splits).unwrap();
        std::fs::write(splits.join(id), b"object").unwrap();
    }
    runtime
        .block_on(
            engine
                .publish(&mend::model::PublishRequest {
                    dataset_id: "listed".into(),
                    staged_split_ids: ids.clone(),
                    replaced_split_ids: vec![],
                    checkpoint_delta: None,
                    publish_token: None,
                    fencing_epoch: None,
                })
                .into_future(),
        )
        .unwrap();
    server.call(
        "POST",
        "/v1/datasets/listed/publish",
        &json!({"staged_split_ids": ids}),
    );
    let query = ListQuery {
        states: vec![mend::model::SplitState::Published],
        limit: Some(PAGE),
        ..ListQuery::default()
    };
    let mut group = bench.group(
        "serve list",
        Sampling::Quick {
            measurement: Duration::from_secs(2),
        },
    );
    group.throughput(Throughput::Elements(1));
    group.bench("in-process", |b| {
        b.iter(|| {
            let page = runtime
                .block_on(engine.list_splits("listed", &query))
                .unwrap();
            assert_eq!(page.splits.len(), PAGE);
        })
    });
    group.bench("http-1", |b| {
        let mut client = server.client();
        b.iter(|| {
            let page = client.call(
                "GET",
                "/v1/datasets/listed/splits?state=published&limit=100",
                "",
            );
            assert_eq!(page["splits"].as_array().unwrap().len(), PAGE);
        })
    });
    group.finish().report(|times| {
        let in_process = per_second(1, times["in-process"]);
        let over_http = per_second(1, times["http-1"]);
        vec![
            format!("list a page of {PAGE} published splits:"),
            format!("  in process (Engine::list_splits): {in_process:8.1} pages/s"),
            format!(
                "  HTTP, 1 client                  : {over_http:8.1} pages/s, http/in-process = {:.2}",
                over_http / in_process
            ),
        ]
    });
    // A fresh server's memory after staging many splits into one dataset, and once the load
    // ends. (The server above holds every dataset the stage group made.)
    drop(server);
    let fresh = catalog_directory();
    let server = Server::start(fresh.path());
    let splits = if common::test_mode() { 1_000 } else { 100_000 };
    let before = server.memory();
    let mut client = server.client();
    client.call(
        "POST",
        "/v1/datasets",
        &json!({"dataset_id": "memory"}).to_string(),
    );
    let started = Instant::now();
    for batch in 0..splits / splits_per_batch() {
        client.stage("memory", &Encoding::Json.stage_body(batch));
    }
    let staged_in = started.elapsed();
    let loaded = server.memory();
    let idle_seconds = if common::test_mode() { 0 } else { 10 };
    std::thread::sleep(Duration::from_secs(idle_seconds));
    let idle = server.memory();
    bench.report(format!(
        "server memory: resident {} MiB started (a new server), {} MiB after staging {splits} splits into one dataset \
         ({:.1} s, batches of {}), {} MiB {idle_seconds} s later; peak {} MiB (a timed run, not criterion)",
        before.resident_mib,
        loaded.resident_mib,
        staged_in.as_secs_f64(),
        splits_per_batch(),
        idle.resident_mib,
        idle.peak_mib
    ));
    bench.finish();
}

/// A process's resident memory now and at its peak, from `/proc/PID/status`.
struct Memory {
    resident_mib: u64,
    peak_mib: u64,
}

async fn open_engine(dir: &Path) -> Engine {
    let url = format!("file://{}", dir.display());
    let (catalog, objects) = mend::catalog::open(&url, None).await.unwrap();
    Engine::new(
        catalog,
        objects,
        mend::runtime::PolicyRuntime::default_policy().unwrap(),
        EngineOptions::default(),
    )
    .unwrap()
}

/// Stages `requests` in process, one after another; how long that took.
fn stage_in_process(
    runtime: &tokio::runtime::Runtime,
    engine: &Engine,
    requests: &[StageRequest],
) -> Duration {
    let started = Instant::now();
    for request in requests {
        runtime
            .block_on(engine.stage(request).into_future())
            .unwrap();
    }
    started.elapsed()
}

/// Stages `bodies` into `dataset_id` over `clients` at once, client `i` sending bodies `i`,
/// `i + clients.len()`, ...; how long that took.
fn stage_over_http(clients: &mut [Client], dataset_id: &str, bodies: &[Body]) -> Duration {
    let step = clients.len();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for (first, client) in clients.iter_mut().enumerate() {
            scope.spawn(move || {
                for body in bodies.iter().skip(first).step_by(step) {
                    client.stage(dataset_id, body);
                }
            });
        }
    });
    started.elapsed()
}

fn split_id(batch: usize, index: usize) -> String {
    format!("split-{batch:05}-{index:03}")
}

fn metadata() -> Value {
    json!({"num_docs": 1000, "time_range": {"start": 0, "end": 60000}})
}

fn stage_request(dataset_id: &str, batch: usize) -> StageRequest {
    StageRequest {
        dataset_id: dataset_id.into(),
        mode: StageMode::CreateOnly,
        node: "bench".into(),
        splits: (0..splits_per_batch())
            .map(|index| StageSplit {
                split_id: split_id(batch, index),
                metadata_json: metadata().to_string(),
            })
            .collect(),
    }
}

/// How a stage request's body is written.
#[derive(Clone, Copy)]
enum Encoding {
    Json,
    /// mend's compact body, `application/vnd.mend.compact.v1`, asking for the answer by index.
    Compact,
    /// The compact body answered JSON, as before the answer by index.
    CompactAnsweredJson,
}

/// A request body, its content type and the answer's type it asks for (`Accept`).
struct Body {
    content_type: &'static str,
    accept: Option<&'static str>,
    bytes: Vec<u8>,
}

impl Encoding {
    /// What the bench function's name ends with.
    fn suffix(self) -> &'static str {
        match self {
            Encoding::Json => "",
            Encoding::Compact => "-compact",
            Encoding::CompactAnsweredJson => "-compact-json-answer",
        }
    }

    /// The body of batch `batch`'s create-only stage request.
    fn stage_body(self, batch: usize) -> Body {
        match self {
            Encoding::Json => {
                let splits: Vec<Value> = (0..splits_per_batch())
                    .map(
                        |index| json!({"split_id": split_id(batch, index), "metadata": metadata()}),
                    )
                    .collect();
                Body::json(
                    json!({"mode": "create-only", "node": "bench", "splits": splits}).to_string(),
                )
            }
            Encoding::Compact | Encoding::CompactAnsweredJson => {
                // The layout in the book's HTTP API page: mode, node, then each split.
                let metadata = metadata().to_string();
                let mut out = mend::compact::Writer::default();
                out.byte(1);
                out.option(Some(&"bench"), |out, node| out.string(node));
                out.number(splits_per_batch() as u64);
                for index in 0..splits_per_batch() {
                    out.string(&split_id(batch, index));
                    out.string(&metadata);
                }
                Body {
                    content_type: COMPACT,
                    accept: matches!(self, Encoding::Compact).then_some(COMPACT),
                    bytes: out.into_bytes(),
                }
            }
        }
    }
}

impl Body {
    fn json(text: String) -> Body {
        Body {
            content_type: "application/json",
            accept: None,
            bytes: text.into_bytes(),
        }
    }
}

/// A client on one keep-alive connection: requests one after another, each answer read to
/// the end of its `Content-Length` before the next request is written.
struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    fn connect(address: SocketAddr) -> Client {
        let writer = TcpStream::connect(address).unwrap();
        writer.set_nodelay(true).unwrap();
        let reader = BufReader::new(writer.try_clone().unwrap());
        Client { reader, writer }
    }

    /// A stage of new splits, answered JSON or, where the body asks, by index (one outcome
    /// byte per split: all 0, inserted).
    fn stage(&mut self, dataset_id: &str, body: &Body) {
        let path = format!("/v1/datasets/{dataset_id}/stage");
        if body.accept.is_some() {
            let answer = self.send_raw("POST", &path, body);
            let mut expected = mend::compact::Writer::default();
            expected.byte(1);
            expected.list(&vec![0u8; splits_per_batch()], |out, outcome| {
                out.byte(*outcome)
            });
            assert_eq!(answer, expected.into_bytes(), "all inserted, by index");
        } else {
            let answer = self.send("POST", &path, body);
            assert_eq!(
                answer["splits"].as_array().unwrap().len(),
                splits_per_batch()
            );
        }
    }

    /// One JSON request on the connection; panics unless the answer is 2xx with a length.
    fn call(&mut self, method: &str, path: &str, body: &str) -> Value {
        self.send(method, path, &Body::json(body.to_owned()))
    }

    /// [`Client::call`] with a body of any type.
    fn send(&mut self, method: &str, path: &str, body: &Body) -> Value {
        serde_json::from_slice(&self.send_raw(method, path, body)).unwrap()
    }

    /// One request, its answer's bytes.
    fn send_raw(&mut self, method: &str, path: &str, body: &Body) -> Vec<u8> {
        let accept = body
            .accept
            .map(|accept| format!("Accept: {accept}\r\n"))
            .unwrap_or_default();
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{accept}Content-Type: {}\r\nContent-Length: {}\r\n\r\n",
            body.content_type,
            body.bytes.len()
        )
        .into_bytes();
        request.extend_from_slice(&body.bytes);
        self.writer.write_all(&request).unwrap();
        let mut status = String::new();
        self.reader.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 2"), "{status}");
        let mut length = None;
        loop {
            let mut header = String::new();
            self.reader.read_line(&mut header).unwrap();
            if header == "\r\n" {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = Some(value.trim().parse::<usize>().unwrap());
            }
        }
        let mut answer = vec![0; length.expect("the server sends a Content-Length")];
        self.reader.read_exact(&mut answer).unwrap();
        answer
    }
}

/// `mend serve` on `dir`'s local catalog, on a free loopback port; killed when dropped.
struct Server {
    child: Child,
    address: SocketAddr,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mend"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .current_dir(dir)
            .env("MEND_CATALOG", format!("file://{}", dir.display()))
            .env("MEND_CACHE_DIR", dir.join("cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mend serve");
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let address = rest.split_whitespace().next().unwrap_or_default();
                    let _ = tx.send(address.parse::<SocketAddr>().unwrap());
                }
            }
        });
        let address = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("mend serve starts");
        Server { child, address }
    }

    /// The server process's memory.
    fn memory(&self) -> Memory {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("read the server's /proc status");
        let kib = |field: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|value| value.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{field} in /proc status"))
        };
        Memory {
            resident_mib: kib("VmRSS:") / 1024,
            peak_mib: kib("VmHWM:") / 1024,
        }
    }

    /// A keep-alive client of this server.
    fn client(&self) -> Client {
        Client::connect(self.address)
    }

    /// One request on a new connection; panics unless the answer is 2xx.
    fn call(&self, method: &str, path: &str, body: &Value) -> Value {
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        self.call_raw(method, path, &body)
    }

    /// [`Server::call`] with the body as text.
    fn call_raw(&self, method: &str, path: &str, body: &str) -> Value {
        let mut stream = TcpStream::connect(self.address).unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 2"), "{head}\n{body}");
        serde_json::from_str(body).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
