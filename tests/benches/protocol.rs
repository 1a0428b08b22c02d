//! The operation protocol's upload path against writing the same bytes straight to the store,
//! measured by criterion (`common`).
//!
//!     cargo bench -p mend-tests --bench protocol
//!     scripts/with-s3 cargo bench -p mend-tests --bench protocol
//!     MEND_BENCH_CONCURRENCY=1 cargo bench -p mend-tests --bench protocol
//!
//! For objects in a local directory, and, when `MEND_TEST_S3_URL` names an S3-compatible
//! store (`scripts/with-s3`), for objects there (the catalog in a local directory either way),
//! one criterion group each (`protocol [local-directory]`, `protocol [s3]`) of two functions:
//!
//! - `mend`: one commit of [`SPLITS`] splits of 1 MiB through `mend serve`'s HTTP protocol:
//!   `begin`, each object streamed with `PUT .../splits/{split}` by [`CONCURRENCY`] clients at
//!   once (plain HTTP/1.1, a connection per request), then `publish`. The server checks each
//!   payload's size and sha256 and writes it with its recovery header put-if-absent; the
//!   publish checks every object it did not put itself;
//! - `floor`: the same bytes put straight into the same store with `object_store`,
//!   [`CONCURRENCY`] puts at once: no HTTP to mend, no checksum, no catalog. Each iteration's
//!   objects are deleted after it, untimed, so that the runs do not fill the disk or moto.
//!
//! - `direct`: the same commit with each object put straight into the store by the client (as
//!   a writer with credentials, or through a presigned URL, does): `begin`, [`CONCURRENCY`]
//!   puts at once of the whole object (prefix, the header `begin` answered, payload), then
//!   `publish`, which reads every object back and hashes its payload against the plan: mend
//!   did not receive those bytes, and a header is only a claim. Its publish step against
//!   `mend`'s is what the read-back costs.
//!
//! It prints the throughputs and the ratios mend/floor (target >= 0.8) and direct/floor from criterion's
//! estimates; beside them, not criterion's: each step's median time over the commits criterion
//! ran, the CPU time the server and this process (the client) used per commit against what the
//! cores had in that time, and the server's peak resident memory (`VmHWM` of
//! `/proc/<pid>/status`) once started, after the 1 MiB commits and after one commit of a
//! single [`LARGE_OBJECT_MIB`] MiB object, timed once: it is there for the memory, which one
//! commit shows. An upload is streamed, so the peak grows by a few parts in flight, not by the
//! object. (Objects up to 8 MiB are put in one request and so held, as the chunks that arrived,
//! while they are checked; larger ones go up in 8 MiB parts.)
//!
//! In test mode (`cargo test`) it commits [`TEST_MODE_SPLITS`] splits and a
//! [`TEST_MODE_LARGE_OBJECT_MIB`] MiB object instead: each function runs once, to show it works.
//!
//! It takes about half a minute for the local directory (about 20 commits and 40 floor runs in
//! 2 s of timed work each, `Sampling::Expensive`) and a minute more on moto (20 of each in
//! 6 s; 2 GiB of commits held in moto's memory). More: `-- --measurement-time 20`.
//!
//! The server is this binary run again with `MEND_PROTOCOL_BENCH_SERVE=DIR` (and
//! `MEND_PROTOCOL_BENCH_OBJECTS=URL`): `mend serve`'s own server ([`mend_server::serve`])
//! with the default limits, alone in its process so its memory and CPU are its own. (A bench
//! of this crate cannot name the `mend` binary.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::Throughput;
use futures::StreamExt;
use object_store::ObjectStore;
use serde_json::{Value, json};

mod common;
use common::{Bench, Sampling, millis};

const SPLITS: usize = 100;
const SPLIT_BYTES: usize = 1 << 20;
/// Uploads (and floor puts) at once; `MEND_BENCH_CONCURRENCY` overrides it.
const CONCURRENCY: usize = 4;
const LARGE_OBJECT_MIB: usize = 64;
/// In test mode (`cargo test`, where each function runs once to show it still works): fewer
/// splits and a smaller large object, still over the 8 MiB above which an upload goes in parts.
const TEST_MODE_SPLITS: usize = 10;
const TEST_MODE_LARGE_OBJECT_MIB: usize = 17;
const SERVE_VARIABLE: &str = "MEND_PROTOCOL_BENCH_SERVE";

const OBJECTS_VARIABLE: &str = "MEND_PROTOCOL_BENCH_OBJECTS";

fn main() {
    // The server's process: no criterion, no arguments.
    if let Ok(dir) = std::env::var(SERVE_VARIABLE) {
        serve(Path::new(&dir), std::env::var(OBJECTS_VARIABLE).ok());
        return;
    }
    let mut bench = Bench::from_args();
    let (splits, large_object_mib) = if common::test_mode() {
        (TEST_MODE_SPLITS, TEST_MODE_LARGE_OBJECT_MIB)
    } else {
        (SPLITS, LARGE_OBJECT_MIB)
    };
    let payloads: Vec<Bytes> = (0..splits).map(|n| payload(n, SPLIT_BYTES)).collect();
    let started = Instant::now();
    for bytes in &payloads {
        std::hint::black_box(mend::objects::format::sha256(bytes));
    }
    let hash_rate = mib(payloads.len() * SPLIT_BYTES) / started.elapsed().as_secs_f64();
    bench.report(format!(
        "commit {splits} splits of 1 MiB, {} uploads at once; for scale, sha256 (which mend \
         computes of every byte) runs at {hash_rate:.1} MiB/s in one thread here (a timed loop)",
        concurrency()
    ));

    let floor_dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn ObjectStore> =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(floor_dir.path()).unwrap());
    let objects_dir = tempfile::tempdir().unwrap();
    let direct: Arc<dyn ObjectStore> = Arc::new(
        object_store::local::LocalFileSystem::new_with_prefix(objects_dir.path()).unwrap(),
    );
    measure(
        &mut bench,
        Store {
            name: "local-directory",
            what: "objects in a local directory",
            objects_url: Some(format!("file://{}", objects_dir.path().display())),
            floor: local,
            direct,
            measurement: Duration::from_secs(2),
        },
        &payloads,
        large_object_mib,
    );

    // Objects on an S3-compatible server, as in a deployment: mend's server and the floor put
    // to the same store, through the network stack.
    if let Ok(url) = std::env::var("MEND_TEST_S3_URL") {
        let prefix = format!("protocol-bench-{}", std::process::id());
        let bucket = url.trim_start_matches("s3://").trim_end_matches('/');
        let s3 = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .unwrap();
        let s3: Arc<dyn ObjectStore> = Arc::new(s3);
        let floor: Arc<dyn ObjectStore> = Arc::new(object_store::prefix::PrefixStore::new(
            s3.clone(),
            format!("{prefix}/floor"),
        ));
        // `begin` answers each object's path from the bucket's root, the server's prefix in it.
        let direct = s3;
        measure(
            &mut bench,
            Store {
                name: "s3",
                what: "objects on the S3-compatible server (MEND_TEST_S3_URL)",
                objects_url: Some(format!("{}/{prefix}/mend", url.trim_end_matches('/'))),
                floor,
                direct,
                // A commit takes about 0.45 s on moto: two per sample.
                measurement: Duration::from_secs(6),
            },
            &payloads,
            large_object_mib,
        );
    } else {
        bench.report("(set MEND_TEST_S3_URL, or run under scripts/with-s3, to measure on S3 too)");
    }
    bench.finish();
}

/// Where one group's objects go.
struct Store {
    /// The group's name: `protocol [<name>]`.
    name: &'static str,
    /// The heading of its lines.
    what: &'static str,
    /// The server's objects (its catalog's own directory when `None`).
    objects_url: Option<String>,
    /// The floor's store.
    floor: Arc<dyn ObjectStore>,
    /// The store the server's objects are in, at the root `begin`'s object paths start from,
    /// for a writer putting them itself.
    direct: Arc<dyn ObjectStore>,
    /// Criterion's measurement time for each function.
    measurement: Duration,
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// One server with its objects in `store`, commits against floor runs in one criterion group,
/// then one large object.
fn measure(bench: &mut Bench, store: Store, payloads: &[Bytes], large_object_mib: usize) {
    let served = tempfile::tempdir().unwrap();
    let server = Server::start(served.path(), store.objects_url.as_deref());
    let started_hwm = server.peak_resident_kib();
    server.call("POST", "/v1/datasets", &json!({"dataset_id": "bench"}));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let runs = AtomicUsize::new(0);
    let mut commits: Vec<Steps> = Vec::new();
    let (mut server_cpu, mut client_cpu) = (Duration::ZERO, Duration::ZERO);

    let mut group = bench.group(
        &format!("protocol [{}]", store.name),
        Sampling::Expensive {
            measurement: store.measurement,
        },
    );
    group.throughput(Throughput::Bytes((payloads.len() * SPLIT_BYTES) as u64));
    group.bench("mend", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let run = format!("run{}", runs.fetch_add(1, Ordering::Relaxed));
                let (server_before, client_before) = (server.cpu_time(), own_cpu_time());
                let steps = server.commit("bench", &run, payloads);
                server_cpu += server.cpu_time() - server_before;
                client_cpu += own_cpu_time() - client_before;
                took += steps.total();
                commits.push(steps);
            }
            took
        })
    });
    let direct_store = store.direct.clone();
    let mut directs: Vec<Steps> = Vec::new();
    group.bench("direct", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let run = format!("run{}", runs.fetch_add(1, Ordering::Relaxed));
                let steps =
                    runtime.block_on(server.commit_direct(&*direct_store, "bench", &run, payloads));
                took += steps.total();
                directs.push(steps);
            }
            took
        })
    });
    group.bench("floor", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let run = format!("run{}", runs.fetch_add(1, Ordering::Relaxed));
                took += runtime.block_on(floor(&*store.floor, &run, payloads));
            }
            took
        })
    });
    let median_steps = Steps::medians(&commits);
    let direct_steps = Steps::medians(&directs);
    let mib = mib(payloads.len() * SPLIT_BYTES);
    group.finish().report(|times| {
        let (mend, floor, direct) = (times["mend"], times["floor"], times["direct"]);
        let (mend_rate, floor_rate) = (mib / mend.as_secs_f64(), mib / floor.as_secs_f64());
        let direct_rate = mib / direct.as_secs_f64();
        let read_back = direct_steps.publish.saturating_sub(median_steps.publish);
        vec![
            format!("{}:", store.what),
            format!(
                "  mend protocol over HTTP (begin, uploads, publish): {:7.1} ms, {mend_rate:7.1} MiB/s \
                 (medians of its {} commits: begin {:.1} ms, uploads {:.1} ms, publish {:.1} ms)",
                millis(mend),
                commits.len(),
                millis(median_steps.begin),
                millis(median_steps.uploads),
                millis(median_steps.publish)
            ),
            format!(
                "  floor (the same puts straight to the store)      : {:7.1} ms, {floor_rate:7.1} MiB/s",
                millis(floor)
            ),
            format!(
                "  direct puts, then publish reading each back     : {:7.1} ms, {direct_rate:7.1} MiB/s \
                 (medians of its {} commits: begin {:.1} ms, puts {:.1} ms, publish {:.1} ms)",
                millis(direct),
                directs.len(),
                millis(direct_steps.begin),
                millis(direct_steps.uploads),
                millis(direct_steps.publish)
            ),
            format!("  mend/floor = {:.2} (target >= 0.8)", mend_rate / floor_rate),
            format!(
                "  direct/floor = {:.2}; the read-back (publish of direct puts less publish of \
                 uploads through mend) {:.1} ms for {} MiB, {:.0} MiB/s",
                direct_rate / floor_rate,
                millis(read_back),
                mib,
                mib / read_back.as_secs_f64().max(1e-9)
            ),
        ]
    });
    let after_commits_hwm = server.peak_resident_kib();

    // A deep verify of a dataset holding one commit: every object read back and hashed.
    server.call("POST", "/v1/datasets", &json!({"dataset_id": "deep"}));
    server.commit("deep", "verified", payloads);
    let started = Instant::now();
    let verified = server.call("GET", "/v1/datasets/deep/verify?deep=true", &Value::Null);
    let deep_took = started.elapsed();
    assert_eq!(verified["payloads_hashed"], payloads.len(), "{verified}");
    assert_eq!(verified["violations"], json!([]), "{verified}");

    let large = vec![payload(payloads.len(), large_object_mib << 20)];
    let large_took = server.commit("bench", "large", &large);
    let after_large_hwm = server.peak_resident_kib();

    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let count = commits.len().max(1) as u32;
    let wall = commits.iter().map(Steps::total).sum::<Duration>() / count;
    bench.report(format!(
        "  CPU per mend commit (mean of {count}): server {:.1} ms, this client {:.1} ms, of {:.1} ms \
         available ({cores} cores x {:.1} ms wall)",
        millis(server_cpu / count),
        millis(client_cpu / count),
        cores as f64 * millis(wall),
        millis(wall),
    ));
    let hashed_mib = self::mib(verified["bytes_hashed"].as_u64().unwrap_or_default() as usize);
    bench.report(format!(
        "  a deep verify of {} objects ({:.1} MiB), each read back and hashed: {:.1} ms, {:.1} MiB/s (one timed run)",
        payloads.len(),
        hashed_mib,
        millis(deep_took),
        hashed_mib / deep_took.as_secs_f64()
    ));
    bench.report(format!(
        "  one commit of a single {large_object_mib} MiB object: {:.1} ms, {:.1} MiB/s (one timed run)",
        millis(large_took.total()),
        large_object_mib as f64 / large_took.total().as_secs_f64()
    ));
    bench.report(format!(
        "  server peak resident memory (VmHWM): {} MiB started, {} MiB after the 1 MiB commits, \
         {} MiB after the {large_object_mib} MiB object",
        started_hwm / 1024,
        after_commits_hwm / 1024,
        after_large_hwm / 1024
    ));
}

/// The floor: the same payloads put into the store, [`CONCURRENCY`] at once; how long the puts
/// took. The objects are deleted afterwards, untimed.
async fn floor(store: &dyn ObjectStore, run: &str, payloads: &[Bytes]) -> Duration {
    let path = |n: usize| object_store::path::Path::from(format!("floor/{run}/split-{n:03}"));
    let started = Instant::now();
    futures::stream::iter(payloads.iter().enumerate())
        .map(|(n, bytes)| async move {
            store.put(&path(n), bytes.clone().into()).await.unwrap();
        })
        .buffer_unordered(concurrency())
        .collect::<Vec<()>>()
        .await;
    let took = started.elapsed();
    futures::stream::iter(0..payloads.len())
        .map(|n| async move { store.delete(&path(n)).await.unwrap() })
        .buffer_unordered(concurrency())
        .collect::<Vec<()>>()
        .await;
    took
}

/// How long each step of a commit took.
#[derive(Debug, Clone, Copy, Default)]
struct Steps {
    begin: Duration,
    uploads: Duration,
    publish: Duration,
}

impl Steps {
    fn total(&self) -> Duration {
        self.begin + self.uploads + self.publish
    }

    /// Each step's median over `commits` (zero when there are none).
    fn medians(commits: &[Steps]) -> Steps {
        let median = |step: fn(&Steps) -> Duration| {
            let mut times: Vec<Duration> = commits.iter().map(step).collect();
            times.sort();
            times.get(times.len() / 2).copied().unwrap_or_default()
        };
        Steps {
            begin: median(|steps| steps.begin),
            uploads: median(|steps| steps.uploads),
            publish: median(|steps| steps.publish),
        }
    }
}

/// The CPU time this process has used, its exited threads included (user and system time
/// of `/proc/self/stat`, in clock ticks of 10 ms).
fn own_cpu_time() -> Duration {
    const TICK: Duration = Duration::from_millis(10);
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat (Linux)");
    // The command name may hold spaces; the fields counted here follow its closing parenthesis.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("a stat line") + 2..]
        .split_whitespace()
        .collect();
    let ticks: u32 = fields[11].parse::<u32>().unwrap() + fields[12].parse::<u32>().unwrap();
    TICK * ticks
}

fn concurrency() -> usize {
    std::env::var("MEND_BENCH_CONCURRENCY")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(CONCURRENCY)
}

/// Deterministic bytes, different for each split.
fn payload(n: usize, len: usize) -> Bytes {
    let mut state = (n as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut bytes = Vec::with_capacity(len);
    while bytes.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(len);
    Bytes::from(bytes)
}

/// The id of a commit's `n`th split.
fn split_id_of(run: &str, n: usize) -> String {
    format!("{run}-split-{n:03}")
}

/// A begin's `splits` for `payloads`, one split each.
fn planned_splits(run: &str, payloads: &[Bytes]) -> Vec<Value> {
    payloads
        .iter()
        .enumerate()
        .map(|(n, bytes)| {
            json!({"split_id": split_id_of(run, n), "metadata_json": "{\"num_docs\": 1000}",
                   "size": bytes.len(), "sha256": sha256_hex(bytes)})
        })
        .collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    mend::objects::format::sha256(bytes)
        .trim_start_matches("sha256:")
        .to_string()
}

/// The server side: `mend serve`'s server on a local-directory catalog in `dir`, its objects in
/// `objects_url` when given, until killed.
fn serve(dir: &Path, objects_url: Option<String>) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let url = format!("file://{}", dir.display());
        let (catalog, objects) = mend::catalog::open(&url, objects_url.as_deref())
            .await
            .unwrap();
        let engine = mend::Engine::new(
            catalog,
            objects,
            mend::runtime::PolicyRuntime::default_policy().unwrap(),
            mend::EngineOptions::default(),
        )
        .unwrap();
        let options = mend_server::ServeOptions {
            credentials: Default::default(),
            insecure: false,
            tls: None,
            probe_listen: None,
            supervisor: mend_server::supervisor::SupervisorOptions::default(),
            load: mend::runtime::LoadOptions::default(),
            dataset_defaults: mend::model::DatasetConfig::default(),
            membership: None,
            limits: mend_server::ServeLimits::default(),
        };
        let listen = SocketAddr::from(([127, 0, 0, 1], 0));
        mend_server::serve(
            engine,
            options,
            listen,
            std::future::pending(),
            |listening| {
                let address = listening.address;
                println!("listening on {address}");
            },
        )
        .await
        .unwrap();
    });
}

/// The server process; killed when dropped.
struct Server {
    child: Child,
    address: SocketAddr,
}

impl Server {
    fn start(dir: &Path, objects_url: Option<&str>) -> Server {
        let mut command = Command::new(std::env::current_exe().unwrap());
        if let Some(url) = objects_url {
            command.env(OBJECTS_VARIABLE, url);
        }
        let mut child = command
            .env(SERVE_VARIABLE, dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the server did not start: {line:?}"))
            .parse()
            .unwrap();
        Server { child, address }
    }

    /// The CPU time the server's threads have used so far (the scheduler's count, in ns, of
    /// every thread alive now: the server's threads live as long as it does).
    fn cpu_time(&self) -> Duration {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.child.id()))
            .expect("/proc/<pid>/task (Linux)");
        let nanos: u64 = tasks
            .filter_map(|task| {
                let path = task.ok()?.path().join("schedstat");
                let text = std::fs::read_to_string(path).ok()?;
                text.split_whitespace().next()?.parse::<u64>().ok()
            })
            .sum();
        Duration::from_nanos(nanos)
    }

    /// The server's peak resident memory so far, in KiB.
    fn peak_resident_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc/<pid>/status (Linux)");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status")
    }

    /// One commit of `payloads` through the protocol; how long each step took.
    fn commit(&self, dataset: &str, run: &str, payloads: &[Bytes]) -> Steps {
        let split_id = |n: usize| split_id_of(run, n);
        let splits = planned_splits(run, payloads);
        let operation = format!("/v1/datasets/{dataset}/operations/{run}");
        let started = Instant::now();
        self.call(
            "POST",
            &format!("/v1/datasets/{dataset}/operations"),
            &json!({"operation_id": run, "kind": "commit", "node": "bench", "splits": splits}),
        );
        let begin = started.elapsed();
        let next = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..concurrency() {
                scope.spawn(|| {
                    loop {
                        let n = next.fetch_add(1, Ordering::SeqCst);
                        let Some(bytes) = payloads.get(n) else {
                            return;
                        };
                        self.put(&format!("{operation}/splits/{}", split_id(n)), bytes);
                    }
                });
            }
        });
        let uploads = started.elapsed() - begin;
        let published = self.call("POST", &format!("{operation}/publish"), &Value::Null);
        assert_eq!(published["phase"], "published", "{published}");
        Steps {
            begin,
            uploads,
            publish: started.elapsed() - begin - uploads,
        }
    }

    /// One commit of `payloads` whose objects the client puts itself into `objects` (the
    /// server's objects store), [`CONCURRENCY`] at once; how long each step took.
    async fn commit_direct(
        &self,
        objects: &dyn ObjectStore,
        dataset: &str,
        run: &str,
        payloads: &[Bytes],
    ) -> Steps {
        let splits = planned_splits(run, payloads);
        let operation = format!("/v1/datasets/{dataset}/operations/{run}");
        let started = Instant::now();
        let begun = self.call(
            "POST",
            &format!("/v1/datasets/{dataset}/operations"),
            &json!({"operation_id": run, "kind": "commit", "node": "bench", "splits": splits}),
        );
        let begin = started.elapsed();
        let planned = begun["splits"].as_array().unwrap().clone();
        futures::stream::iter(planned.iter().zip(payloads))
            .map(|(split, payload)| async move {
                let header = split["header_json"].as_str().unwrap().as_bytes();
                let mut object = Vec::with_capacity(12 + header.len() + payload.len());
                object.extend_from_slice(b"MENDSPL1");
                object.extend_from_slice(&(header.len() as u32).to_le_bytes());
                object.extend_from_slice(header);
                object.extend_from_slice(payload);
                let path = object_store::path::Path::from(split["object_path"].as_str().unwrap());
                objects
                    .put_opts(&path, object.into(), object_store::PutMode::Create.into())
                    .await
                    .unwrap();
            })
            .buffer_unordered(concurrency())
            .collect::<Vec<()>>()
            .await;
        let uploads = started.elapsed() - begin;
        let published = self.call("POST", &format!("{operation}/publish"), &Value::Null);
        assert_eq!(published["phase"], "published", "{published}");
        Steps {
            begin,
            uploads,
            publish: started.elapsed() - begin - uploads,
        }
    }

    /// A streamed upload: the head, then the body in 64 KiB writes.
    fn put(&self, path: &str, body: &[u8]) {
        let mut stream = TcpStream::connect(self.address).unwrap();
        write!(
            stream,
            "PUT {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        for chunk in body.chunks(64 << 10) {
            stream.write_all(chunk).unwrap();
        }
        Self::answer(stream, path);
    }

    /// One JSON request on a new connection; panics unless the answer is 2xx.
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
        Self::answer(stream, path)
    }

    fn answer(mut stream: TcpStream, path: &str) -> Value {
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 2"), "{path}: {head}\n{body}");
        serde_json::from_str(body).unwrap_or(Value::Null)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
