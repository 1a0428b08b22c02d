//! What the HTTP server costs over calling the engine in process.
//!
//!     cargo bench -p mend-cli --bench serve
//!
//! On the embedded default catalog (a local directory), in one run:
//!
//! - the baseline: `Engine::stage` in process, `MEND_BENCH_BATCHES` (default 200)
//!   create-only batches of 100 new splits, one after another;
//! - the same batches as `POST /v1/datasets/{id}/stage` to `mend serve` over loopback, one
//!   request at a time (a new connection each, as the simplest client does);
//! - the same with 4 clients at once;
//! - a page of 100 published splits: `Engine::list_splits` against `GET .../splits?limit=100`.
//!
//! It prints requests per second and HTTP/in-process for each.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mend::model::{DatasetConfig, ListQuery, StageMode, StageRequest, StageSplit};
use mend::{Engine, EngineOptions};
use serde_json::{Value, json};

const SPLITS_PER_BATCH: usize = 100;
const CLIENTS: usize = 4;
const LIST_ROUNDS: usize = 200;

fn main() {
    let batches: usize = std::env::var("MEND_BENCH_BATCHES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(200);
    let runtime = tokio::runtime::Runtime::new().unwrap();

    // The baseline, in process.
    let local = tempfile::tempdir().unwrap();
    let engine = runtime.block_on(open_engine(local.path()));
    runtime
        .block_on(engine.create_dataset("bench", &DatasetConfig::default()))
        .unwrap();
    let started = Instant::now();
    for batch in 0..batches {
        runtime
            .block_on(engine.stage(&stage_request("bench", batch)))
            .unwrap();
    }
    let in_process = per_second(batches, started.elapsed());

    // The same over HTTP.
    let served = tempfile::tempdir().unwrap();
    let server = Server::start(served.path());
    server.call("POST", "/v1/datasets", &json!({"dataset_id": "bench"}));
    let started = Instant::now();
    for batch in 0..batches {
        server.stage("bench", batch);
    }
    let over_http = per_second(batches, started.elapsed());

    server.call("POST", "/v1/datasets", &json!({"dataset_id": "bench4"}));
    let started = Instant::now();
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            let server = &server;
            scope.spawn(move || {
                for batch in (client..batches).step_by(CLIENTS) {
                    server.stage("bench4", batch);
                }
            });
        }
    });
    let over_http_concurrent = per_second(batches, started.elapsed());

    // Reads: a page of 100 published splits.
    let ids: Vec<String> = (0..SPLITS_PER_BATCH).map(|i| split_id(0, i)).collect();
    // Their objects first: a publish refuses a split without one (invariant 1).
    for (catalog, id) in [local.path(), served.path()]
        .into_iter()
        .flat_map(|dir| ids.iter().map(move |id| (dir, id)))
    {
        let splits = catalog.join("datasets/bench/splits");
        std::fs::create_dir_all(&splits).unwrap();
        std::fs::write(splits.join(id), b"object").unwrap();
    }
    runtime
        .block_on(engine.publish(&mend::model::PublishRequest {
            dataset_id: "bench".into(),
            staged_split_ids: ids.clone(),
            replaced_split_ids: vec![],
            checkpoint_delta: None,
            publish_token: None,
            fencing_epoch: None,
        }))
        .unwrap();
    server.call(
        "POST",
        "/v1/datasets/bench/publish",
        &json!({"staged_split_ids": ids}),
    );
    let query = ListQuery {
        states: vec![mend::model::SplitState::Published],
        limit: Some(SPLITS_PER_BATCH),
        ..ListQuery::default()
    };
    let started = Instant::now();
    for _ in 0..LIST_ROUNDS {
        let page = runtime
            .block_on(engine.list_splits("bench", &query))
            .unwrap();
        assert_eq!(page.splits.len(), SPLITS_PER_BATCH);
    }
    let list_in_process = per_second(LIST_ROUNDS, started.elapsed());
    let started = Instant::now();
    for _ in 0..LIST_ROUNDS {
        let page = server.call(
            "GET",
            "/v1/datasets/bench/splits?state=published&limit=100",
            &Value::Null,
        );
        assert_eq!(page["splits"].as_array().unwrap().len(), SPLITS_PER_BATCH);
    }
    let list_over_http = per_second(LIST_ROUNDS, started.elapsed());

    println!(
        "stage, {batches} create-only batches of {SPLITS_PER_BATCH} splits on a local directory:"
    );
    println!("  in process (Engine::stage)      : {in_process:8.1} batches/s");
    println!(
        "  HTTP, 1 client                  : {over_http:8.1} batches/s, http/in-process = {:.2}",
        over_http / in_process
    );
    println!(
        "  HTTP, {CLIENTS} clients                 : {over_http_concurrent:8.1} batches/s, http/in-process = {:.2}",
        over_http_concurrent / in_process
    );
    println!("list a page of {SPLITS_PER_BATCH} published splits, {LIST_ROUNDS} times:");
    println!("  in process (Engine::list_splits): {list_in_process:8.1} pages/s");
    println!(
        "  HTTP, 1 client                  : {list_over_http:8.1} pages/s, http/in-process = {:.2}",
        list_over_http / list_in_process
    );
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

fn per_second(count: usize, took: Duration) -> f64 {
    count as f64 / took.as_secs_f64()
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
