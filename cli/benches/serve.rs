//! What the HTTP server costs over calling the engine in process, measured by criterion
//! (`tests/benches/common`).
//!
//!     cargo bench -p mend-cli --bench serve
//!
//! On the embedded default catalog (a local directory), in the criterion group `serve stage`,
//! each iteration `MEND_BENCH_BATCHES` (default 200) create-only batches of 100 new splits into
//! a new dataset (created outside the timed part):
//!
//! - `in-process`, the baseline: `Engine::stage`, one batch after another;
//! - `http-1`: the same batches as `POST /v1/datasets/{id}/stage` to `mend serve` over
//!   loopback, one request at a time (a new connection each, as the simplest client does);
//! - `http-4`: the same with 4 clients at once;
//!
//! and in the group `serve list`, each iteration one page of 100 published splits:
//! `Engine::list_splits` (`in-process`) against `GET .../splits?limit=100` (`http-1`).
//!
//! It prints batches (pages) per second and HTTP/in-process for each, from criterion's
//! estimates. It takes about a minute on the 2-core development machine: 20 to 30 iterations
//! of each stage function (`Sampling::Expensive`, 5 s of timed work each) and 3 s for each list
//! function. Smaller or larger: `MEND_BENCH_BATCHES=50` (per iteration), `-- --measurement-time
//! 10` (every group).

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

const SPLITS_PER_BATCH: usize = 100;
const CLIENTS: usize = 4;

fn main() {
    let batches: usize = std::env::var("MEND_BENCH_BATCHES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(if common::test_mode() { 10 } else { 200 });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut bench = Bench::from_args();

    let local = tempfile::tempdir().unwrap();
    let engine = runtime.block_on(open_engine(local.path()));
    let served = tempfile::tempdir().unwrap();
    let server = Server::start(served.path());
    // Every iteration stages into a dataset of its own.
    let datasets = AtomicUsize::new(0);
    let next_dataset = || format!("bench-{}", datasets.fetch_add(1, Ordering::Relaxed));

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
                let dataset_id = next_dataset();
                runtime
                    .block_on(engine.create_dataset(&dataset_id, &DatasetConfig::default()))
                    .unwrap();
                let started = Instant::now();
                for batch in 0..batches {
                    runtime
                        .block_on(engine.stage(&stage_request(&dataset_id, batch)))
                        .unwrap();
                }
                took += started.elapsed();
            }
            took
        })
    });
    group.bench("http-1", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let dataset_id = next_dataset();
                server.call("POST", "/v1/datasets", &json!({"dataset_id": dataset_id}));
                let started = Instant::now();
                for batch in 0..batches {
                    server.stage(&dataset_id, batch);
                }
                took += started.elapsed();
            }
            took
        })
    });
    group.bench(&format!("http-{CLIENTS}"), |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let dataset_id = next_dataset();
                server.call("POST", "/v1/datasets", &json!({"dataset_id": dataset_id}));
                let started = Instant::now();
                std::thread::scope(|scope| {
                    for client in 0..CLIENTS {
                        let (server, dataset_id) = (&server, &dataset_id);
                        scope.spawn(move || {
                            for batch in (client..batches).step_by(CLIENTS) {
                                server.stage(dataset_id, batch);
                            }
                        });
                    }
                });
                took += started.elapsed();
            }
            took
        })
    });
    group.finish().report(|times| {
        let in_process = per_second(batches, times["in-process"]);
        let over_http = per_second(batches, times["http-1"]);
        let concurrent = per_second(batches, times[format!("http-{CLIENTS}").as_str()]);
        vec![
            format!(
                "stage, {batches} create-only batches of {SPLITS_PER_BATCH} splits on a local directory:"
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
        ]
    });

    // Reads: a page of 100 published splits of a dataset of its own, both ways.
    let ids: Vec<String> = (0..SPLITS_PER_BATCH).map(|i| split_id(0, i)).collect();
    runtime
        .block_on(engine.create_dataset("listed", &DatasetConfig::default()))
        .unwrap();
    runtime
        .block_on(engine.stage(&stage_request("listed", 0)))
        .unwrap();
    server.call("POST", "/v1/datasets", &json!({"dataset_id": "listed"}));
    server.stage("listed", 0);
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
        .block_on(engine.publish(&mend::model::PublishRequest {
            dataset_id: "listed".into(),
            staged_split_ids: ids.clone(),
            replaced_split_ids: vec![],
            checkpoint_delta: None,
            publish_token: None,
            fencing_epoch: None,
        }))
        .unwrap();
    server.call(
        "POST",
        "/v1/datasets/listed/publish",
        &json!({"staged_split_ids": ids}),
    );
    let query = ListQuery {
        states: vec![mend::model::SplitState::Published],
        limit: Some(SPLITS_PER_BATCH),
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
            assert_eq!(page.splits.len(), SPLITS_PER_BATCH);
        })
    });
    group.bench("http-1", |b| {
        b.iter(|| {
            let page = server.call(
                "GET",
                "/v1/datasets/listed/splits?state=published&limit=100",
                &Value::Null,
            );
            assert_eq!(page["splits"].as_array().unwrap().len(), SPLITS_PER_BATCH);
        })
    });
    group.finish().report(|times| {
        let in_process = per_second(1, times["in-process"]);
        let over_http = per_second(1, times["http-1"]);
        vec![
            format!("list a page of {SPLITS_PER_BATCH} published splits:"),
            format!("  in process (Engine::list_splits): {in_process:8.1} pages/s"),
            format!(
                "  HTTP, 1 client                  : {over_http:8.1} pages/s, http/in-process = {:.2}",
                over_http / in_process
            ),
        ]
    });
    bench.finish();
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
        splits: (0..SPLITS_PER_BATCH)
            .map(|index| StageSplit {
                split_id: split_id(batch, index),
                metadata_json: metadata().to_string(),
            })
            .collect(),
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

    fn stage(&self, dataset_id: &str, batch: usize) {
        let splits: Vec<Value> = (0..SPLITS_PER_BATCH)
            .map(|index| json!({"split_id": split_id(batch, index), "metadata": metadata()}))
            .collect();
        let answer = self.call(
            "POST",
            &format!("/v1/datasets/{dataset_id}/stage"),
            &json!({"mode": "create-only", "node": "bench", "splits": splits}),
        );
        assert_eq!(answer["splits"].as_array().unwrap().len(), SPLITS_PER_BATCH);
    }

    /// One request on a new connection; panics unless the answer is 2xx.
    fn call(&self, method: &str, path: &str, body: &Value) -> Value {
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
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
