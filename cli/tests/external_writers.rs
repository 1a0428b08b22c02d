//! Writers in other processes commit through `mend serve` while everything around them is
//! killed: the operation protocol, proven crash-safe end to end.
//!
//! ```text
//! scripts/with-s3 cargo test --locked -p mend-cli --test cli external_writers -- --show-output
//! MEND_CRASH_FULL=1 scripts/with-s3 cargo test --locked -p mend-cli --test cli external_writers -- --show-output
//! MEND_CRASH_SEED=1234 ...   replays the schedule a run printed
//! ```
//!
//! Two runs, one after the other (each is several processes; at once they would only starve
//! each other on a small machine):
//!
//! - [`postgres_catalog_objects_on_s3`]: the catalog on a throwaway PostgreSQL this test starts
//!   itself (the system's binaries, as `scripts/with-postgres` finds them, run as `postgres`
//!   when the test runs as root), *durable*: `fsync`, `synchronous_commit` and
//!   `full_page_writes` on, and mend checks it (`MEND_POSTGRES_ACCEPT_UNSAFE_DURABILITY` is
//!   removed from every `mend` this test runs). So it can be restarted in immediate mode, a
//!   crash, and every acknowledged commit must still be there. Objects on the S3-compatible
//!   server of `MEND_TEST_S3_URL` (`scripts/with-s3`).
//! - [`s3_catalog`]: the object-storage catalog on that server, under a prefix of its own.
//!
//! In each: one `mend serve`, always on the same loopback port (picked free at the start;
//! every restart listens on it again, so a writer keeps one URL and retries while the server
//! is down); four writers running `examples/python/mend_writer.py --loop`, each on a
//! partition of its own, logging every acknowledged commit, two of them with `--direct` (their
//! objects go straight into the store through presigned URLs, which publish reads back and
//! hashes) and two (one of them direct) with `--compact` (their begins are compact bodies,
//! encoded by the script from the book's layout); and a fifth writer, a thread of
//! this test, committing with `mend commit` straight to the catalog ([`cli_commit`]). At
//! moments drawn from a seeded RNG (the seed is printed; `MEND_CRASH_SEED` replays it) the
//! server is killed with SIGKILL and restarted, a writer is killed with SIGKILL and restarted,
//! and (Postgres run) PostgreSQL is stopped in immediate mode and started again once. Small by
//! default: 5 server kills and 5 writer kills in about 30 s. `MEND_CRASH_FULL=1`: 24 of each in
//! about 150 s. A Python writer that cannot make progress (a commit without an answer that
//! settles it for 30 s, or 5 operations in a row that ended unpublished) exits with the reason,
//! and the test fails naming it; a build without `mend commit` fails the test at once.
//!
//! After the last crash the writers go on until each has acknowledged a commit since (at
//! least 3 s, at most 2 minutes). Then every Python writer is killed one last time and left
//! dead (what it had in flight is for recovery to settle), the CLI writer finishes its commit,
//! the server's supervisors get until the writers' leases have run out and a few intervals
//! more, and `mend recover --mode roll-forward` runs if an intent is left. What is asserted:
//!
//! 1. Every acknowledged commit (a line its writer fsynced after the answer) is Published: all
//!    its splits, each object present, written by that operation, and intact (the payload's
//!    size and sha256 are those the writer derived from the split id).
//! 2. No commit is half applied: an operation has all its splits Published, or none.
//! 3. Exactly once: on each partition, the Published operations' target positions are exactly
//!    1, 2, ..., checkpoint, each once. So the checkpoint equals the number of commits
//!    Published on the partition and no position (no batch of source data) was published
//!    twice. It may exceed the number *acknowledged*: a commit that landed but whose writer
//!    was killed before it logged the answer moved the checkpoint too. The writer resolves
//!    that: restarted, it settles its last operation by its id (publish, or abort, or find
//!    it ended) and only then re-reads the checkpoint, so it never commits a position twice.
//!    Every acknowledged commit is among the Published ones (1), so acknowledged <= checkpoint.
//! 4. `mend verify` finds no violation.
//! 5. No intent is left without exclusive mode: the supervisors and one roll-forward settled
//!    every operation, those of the writers killed for good included.
//! 6. The run tested something: every writer (each Python writer and the CLI writer)
//!    acknowledged commits, after the last crash too; some writer kill found its writer
//!    inside an operation (a Python writer whose log shows an operation begun and not
//!    settled, or a `mend commit` running); and some server kill found the server with writes
//!    in flight (`writes_in_flight` of `/v1/status`, asked just before the kill). Without
//!    them, 1 to 5 hold of nothing.
//!
//! Every failure is collected and reported together, after the counts.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::server::{Answer, parse_answer, request_bytes};
use common::{ACCEPT_UNSAFE_DURABILITY, mend_command};
use serde_json::{Value, json};

/// The source every writer's checkpoint delta names.
const SOURCE: &str = "crash";
const PYTHON_WRITERS: usize = 4;
const SPLITS_PER_COMMIT: usize = 2;
/// Each split's payload; small, so that the run is about commits, not bytes.
const PAYLOAD_BYTES: usize = 4096;
/// The Python writers' lease: the supervisors may settle a dead writer's operation this long
/// after its last heartbeat.
const WRITER_LEASE_MS: u64 = 5_000;
/// How long a Python writer retries one commit whose steps get no answer that settles it
/// before it gives up: longer than any restart of the server or of PostgreSQL takes here,
/// even with the whole suite loading both cores (30 s was not: a fresh clone's run saw a
/// server restart against a moto answering 500s outlast it, seed 1796365760321000462, which
/// passes in 42 s on an idle machine), as long as the CLI writer's, so that a writer stuck on
/// an answer that never changes (a 503 that is no restart) still fails the run with the
/// answer it got.
const WRITER_RETRY_FOR_S: u64 = 60;
/// A Python writer gives up after this many operations in a row ended without publishing.
const WRITER_MAX_ENDED_IN_A_ROW: u32 = 5;
/// The CLI writer gives up on a commit whose outcome stayed unknown this long.
const CLI_RETRY_FOR: Duration = Duration::from_secs(60);
/// The longest the calm after the crashes waits for every writer to acknowledge a commit.
const CALM_DEADLINE: Duration = Duration::from_secs(120);

/// Only one of these runs at a time: each is a server, five writers and a store.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn postgres_catalog_objects_on_s3() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let postgres = DurablePostgres::start();
    let catalogs = Catalogs {
        catalog: postgres.url(),
        objects: Some(format!(
            "{}/{}",
            common::s3_url(),
            uuid::Uuid::new_v4().simple()
        )),
    };
    run("postgres catalog, objects on s3", catalogs, Some(&postgres));
}

#[test]
fn s3_catalog() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let catalogs = Catalogs {
        catalog: format!("{}/{}", common::s3_url(), uuid::Uuid::new_v4().simple()),
        objects: None,
    };
    run("s3 catalog", catalogs, None);
}

/// How big a run is.
#[derive(Debug, Clone, Copy)]
struct Size {
    server_kills: usize,
    writer_kills: usize,
    chaos: Duration,
}

impl Size {
    fn from_env() -> Size {
        if std::env::var("MEND_CRASH_FULL").is_ok_and(|v| !v.is_empty() && v != "0") {
            Size {
                server_kills: 24,
                writer_kills: 24,
                chaos: Duration::from_secs(150),
            }
        } else {
            Size {
                server_kills: 5,
                writer_kills: 5,
                chaos: Duration::from_secs(30),
            }
        }
    }
}

fn run(label: &str, catalogs: Catalogs, postgres: Option<&DurablePostgres>) {
    let size = Size::from_env();
    let seed = std::env::var("MEND_CRASH_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("external writers ({label}): MEND_CRASH_SEED={seed} {size:?}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let dataset = "crash";

    let mut server = Server::new(dir.path(), &catalogs);
    server.start();
    let created = server.call(
        "POST",
        "/v1/datasets",
        Some(&json!({"dataset_id": dataset})),
    );
    assert_eq!(
        created.status, 201,
        "create the dataset: {:?}",
        created.body
    );

    // Before any writer starts: a build without `mend commit` fails here.
    let cli = Arc::new(CliWriter::new(dir.path(), &catalogs, dataset));
    let mut writers: Vec<PythonWriter> = (0..PYTHON_WRITERS)
        // Half put their objects straight into the store, and half send compact begins: one
        // of each pairing.
        .map(|n| PythonWriter::new(dir.path(), &format!("p{n}"), n % 2 == 1, n >= 2))
        .collect();
    for writer in &mut writers {
        writer.spawn(&server.url(), dataset);
    }
    let cli_thread = std::thread::spawn({
        let cli = cli.clone();
        move || cli.run()
    });

    // The schedule: every kill and restart at a moment of its own.
    let mut events: Vec<(Duration, Event)> = Vec::new();
    let at = |rng: &mut Rng| {
        Duration::from_millis(1_000 + rng.below(size.chaos.as_millis() as u64 - 1_000))
    };
    for _ in 0..size.server_kills {
        events.push((at(&mut rng), Event::KillServer));
    }
    for _ in 0..size.writer_kills {
        events.push((at(&mut rng), Event::KillWriter));
    }
    if postgres.is_some() {
        events.push((at(&mut rng), Event::RestartPostgres));
    }
    events.sort_by_key(|(at, _)| *at);

    let mut failures: Vec<String> = Vec::new();
    let mut counts = Counts::default();
    let started = Instant::now();
    // When the server was last killed: the dataset gate it may have held outlives it.
    let mut last_server_kill = started;
    for (at, event) in events {
        while started.elapsed() < at {
            std::thread::sleep(Duration::from_millis(20));
            watch(&mut writers, &server.url(), dataset, &mut failures);
        }
        match event {
            Event::KillServer => {
                // What the kill interrupts: writes the server admitted and has not answered,
                // and operations the writers began and have not settled.
                let writes = server.writes_in_flight();
                let operations = writers.iter().filter(|w| w.in_flight().is_some()).count();
                server.kill();
                last_server_kill = Instant::now();
                std::thread::sleep(Duration::from_millis(rng.below(500)));
                server.start();
                counts.server_kills += 1;
                counts.server_kills_with_writes += usize::from(writes.is_some_and(|n| n > 0));
                counts.server_kills_inside_operations += usize::from(operations > 0);
            }
            Event::KillWriter => {
                let pick = rng.below(PYTHON_WRITERS as u64 + 1) as usize;
                // A `mend commit` killed is always inside its operation.
                if pick == PYTHON_WRITERS && cli.kill() {
                    counts.cli_kills += 1;
                    counts.writer_kills_inside_operations += 1;
                } else {
                    let writer = &mut writers[pick % PYTHON_WRITERS];
                    let inside = writer.in_flight().is_some();
                    writer.kill();
                    std::thread::sleep(Duration::from_millis(rng.below(300)));
                    writer.spawn(&server.url(), dataset);
                    counts.python_kills += 1;
                    counts.writer_kills_inside_operations += usize::from(inside);
                }
            }
            Event::RestartPostgres => {
                postgres
                    .expect("scheduled only with Postgres")
                    .restart_immediate();
                counts.postgres_restarts += 1;
            }
        }
    }
    // A last stretch without crashes, so that commits flow after the last restart too: at
    // least 3 s, and until every writer has acknowledged a commit since the last crash (a
    // slow store under a loaded machine takes many seconds per commit).
    let after_chaos = acknowledged_by(&writers, &cli);
    let calm = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(20));
        watch(&mut writers, &server.url(), dataset, &mut failures);
        if calm.elapsed() < Duration::from_secs(3) {
            continue;
        }
        let now = acknowledged_by(&writers, &cli);
        let stalled: Vec<&String> = after_chaos
            .iter()
            .filter(|(writer, before)| now.get(*writer) <= Some(before))
            .map(|(writer, _)| writer)
            .collect();
        if stalled.is_empty() || cli.failure.lock().unwrap().is_some() {
            break;
        }
        if calm.elapsed() > CALM_DEADLINE {
            failures.push(format!(
                "writers {stalled:?} acknowledged no commit in the {CALM_DEADLINE:?} after the \
                 last crash"
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    // The end: the Python writers die for good, the CLI writer finishes its commit.
    for writer in &mut writers {
        writer.kill();
    }
    cli.stop.store(true, Ordering::SeqCst);
    cli_thread.join().expect("the CLI writer's thread");
    failures.extend(cli.failure.lock().unwrap().clone());

    // The supervisors settle what was in flight once its lease has run out, and once the
    // dataset gate a killed server held has: on object storage its lease runs out only 60 s
    // after its last renewal, and nobody may sweep the dataset before (seed
    // 1796403574761398600: a server killed holding the gate 13 s before the writers stopped
    // left it held past this wait and the roll-forward's 30 s gate timeout both).
    let settle_by = (Instant::now() + Duration::from_millis(WRITER_LEASE_MS + 10_000))
        .max(last_server_kill + mend::gates::DEFAULT_LEASE_DURATION + Duration::from_secs(10));
    let mut intents = probe_intents(dir.path(), &catalogs, dataset);
    while !intents.is_empty() && Instant::now() < settle_by {
        std::thread::sleep(Duration::from_millis(500));
        intents = probe_intents(dir.path(), &catalogs, dataset);
    }
    counts.intents_after_supervisors = intents.len();
    if !intents.is_empty() {
        let output = catalog_mend(dir.path(), &catalogs)
            .args(["recover", dataset, "--mode", "roll-forward", "--json"])
            .output()
            .unwrap();
        println!(
            "  mend recover --mode roll-forward: exit {:?}\n{}{}",
            output.status.code(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        intents = probe_intents(dir.path(), &catalogs, dataset);
    }
    counts.intents_after_roll_forward = intents.len();

    // What the writers were told, and what the catalog holds.
    let mut acknowledged: Vec<Commit> = Vec::new();
    for writer in &writers {
        counts.direct_puts += writer.direct_puts();
        let commits = writer.acknowledged();
        counts
            .acknowledged_by
            .insert(writer.partition.clone(), commits.len());
        acknowledged.extend(commits);
    }
    counts.acknowledged_python = acknowledged.len();
    acknowledged.extend(cli.acknowledged.lock().unwrap().iter().cloned());
    counts.acknowledged_cli = acknowledged.len() - counts.acknowledged_python;
    counts
        .acknowledged_by
        .insert("cli".into(), counts.acknowledged_cli);
    let rows = server.splits(dataset);
    let checkpoint = server.checkpoint(dataset);
    check(
        &catalogs,
        dataset,
        &acknowledged,
        &rows,
        &checkpoint,
        &mut counts,
        &mut failures,
    );

    let verify = catalog_mend(dir.path(), &catalogs)
        .args(["verify", dataset, "--json"])
        .output()
        .unwrap();
    let verified: Value = serde_json::from_slice(&verify.stdout).unwrap_or(Value::Null);
    if !verify.status.success() || verified["violations"] != json!([]) {
        failures.push(format!(
            "mend verify found violations (exit {:?}): {}{}",
            verify.status.code(),
            String::from_utf8_lossy(&verify.stdout),
            String::from_utf8_lossy(&verify.stderr)
        ));
    }
    if !intents.is_empty() {
        // The operations the writers killed for good had in flight are the ones recovery must
        // abandon on its own once their leases run out; anything else is a leak of its own.
        let in_flight: BTreeSet<String> =
            writers.iter().filter_map(PythonWriter::in_flight).collect();
        let left: Vec<String> = intents
            .iter()
            .map(|intent| {
                let id = intent["operation_id"].as_str().unwrap_or_default();
                let whose = if in_flight.contains(id) {
                    "in flight when its writer was killed for good"
                } else {
                    "NOT a final writer's"
                };
                format!("{id} ({whose}): {intent}")
            })
            .collect();
        failures.push(format!(
            "{} intent(s) left after the supervisors and a roll-forward (exclusive mode would be \
             needed):\n    {}",
            intents.len(),
            left.join("\n    ")
        ));
    }

    // 6: the run tested something.
    for (writer, acknowledged) in &counts.acknowledged_by {
        if *acknowledged == 0 {
            let why = writers
                .iter()
                .find(|w| &w.partition == writer)
                .map_or_else(String::new, |w| {
                    format!("; its stderr ends: {}", w.stderr_tail())
                });
            failures.push(format!(
                "writer {writer} acknowledged no commit: nothing it wrote was checked{why}"
            ));
        }
    }
    // Half the Python writers put their objects through presigned URLs (objects are on the
    // S3-compatible server in both runs): those objects were read back at publish.
    if counts.direct_puts == 0 {
        failures.push(
            "the --direct writers acknowledged no commit whose objects went through presigned URLs"
                .to_string(),
        );
    }
    if counts.writer_kills_inside_operations == 0 {
        failures.push(format!(
            "none of the {} writer kills found its writer inside an operation: no kill \
             interrupted a commit",
            counts.python_kills + counts.cli_kills
        ));
    }
    if counts.server_kills_with_writes == 0 {
        failures.push(format!(
            "none of the {} server kills found the server with writes in flight: no kill \
             interrupted a request",
            counts.server_kills
        ));
    }

    println!(
        "  {} server kills ({} with writes in flight, {} with a writer's operation in flight), \
         {} writer kills ({} python, {} cli; {} inside an operation), {} postgres restarts in \
         {:.1} s",
        counts.server_kills,
        counts.server_kills_with_writes,
        counts.server_kills_inside_operations,
        counts.python_kills + counts.cli_kills,
        counts.python_kills,
        counts.cli_kills,
        counts.writer_kills_inside_operations,
        counts.postgres_restarts,
        started.elapsed().as_secs_f64()
    );
    println!(
        "  acknowledged commits: {} ({} python, {} cli; by writer {:?}); published commits: {}; \
         checkpoint: {}",
        counts.acknowledged_python + counts.acknowledged_cli,
        counts.acknowledged_python,
        counts.acknowledged_cli,
        counts.acknowledged_by,
        counts.published_commits,
        serde_json::to_string(&checkpoint).unwrap()
    );
    println!(
        "  objects checked: {}; put through presigned URLs by the --direct writers: {}; intents \
         after the supervisors: {}, after roll-forward: {}",
        counts.objects_checked,
        counts.direct_puts,
        counts.intents_after_supervisors,
        counts.intents_after_roll_forward
    );
    if !failures.is_empty() {
        let tail = server.log_tail();
        drop(server);
        let kept = dir.keep();
        panic!(
            "{} failure(s) ({label}, MEND_CRASH_SEED={seed}):\n- {}\nthe writers' logs and the \
             server's are kept in {}; the server log ends:\n{tail}",
            failures.len(),
            failures.join("\n- "),
            kept.display()
        );
    }
}

/// How many commits each writer (its partition) has acknowledged so far.
fn acknowledged_by(writers: &[PythonWriter], cli: &CliWriter) -> BTreeMap<String, usize> {
    let mut counts: BTreeMap<String, usize> = writers
        .iter()
        .map(|writer| (writer.partition.clone(), writer.acknowledged().len()))
        .collect();
    counts.insert("cli".into(), cli.acknowledged.lock().unwrap().len());
    counts
}

/// Notes each Python writer that stopped without being killed (it never should), and starts
/// it again so that the run goes on with four writers.
fn watch(writers: &mut [PythonWriter], url: &str, dataset: &str, failures: &mut Vec<String>) {
    for writer in writers.iter_mut() {
        if let Some(failure) = writer.exited_on_its_own() {
            failures.push(failure);
            writer.spawn(url, dataset);
        }
    }
}

/// Assertions 1 to 3 of the module doc.
fn check(
    catalogs: &Catalogs,
    dataset: &str,
    acknowledged: &[Commit],
    rows: &[(String, String)],
    checkpoint: &BTreeMap<String, u64>,
    counts: &mut Counts,
    failures: &mut Vec<String>,
) {
    let states: BTreeMap<&str, &str> = rows
        .iter()
        .map(|(id, state)| (id.as_str(), state.as_str()))
        .collect();
    // 2: every operation's splits all published or none.
    let mut published_by_operation: BTreeMap<&str, usize> = BTreeMap::new();
    for (split_id, state) in rows {
        let operation = operation_of(split_id);
        let count = published_by_operation.entry(operation).or_default();
        if state == "published" {
            *count += 1;
        }
    }
    for (operation, published) in &published_by_operation {
        if *published != 0 && *published != SPLITS_PER_COMMIT {
            failures.push(format!(
                "operation {operation} is half applied: {published} of {SPLITS_PER_COMMIT} splits published"
            ));
        }
    }
    // 3: on each partition, positions 1..=checkpoint, each published once.
    let mut positions: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (operation, published) in &published_by_operation {
        if *published == SPLITS_PER_COMMIT {
            let (partition, position) = partition_and_position(operation);
            positions.entry(partition).or_default().push(position);
        }
    }
    counts.published_commits = positions.values().map(Vec::len).sum();
    let partitions: BTreeSet<&str> = positions
        .keys()
        .copied()
        .chain(checkpoint.keys().map(String::as_str))
        .collect();
    for partition in partitions {
        let mut published = positions.get(partition).cloned().unwrap_or_default();
        published.sort_unstable();
        let at = checkpoint.get(partition).copied().unwrap_or(0);
        let expected: Vec<u64> = (1..=at).collect();
        if published != expected {
            failures.push(format!(
                "partition {partition}: checkpoint {at}, but the published commits' positions are \
                 {published:?} (each of 1..={at} exactly once expected)"
            ));
        }
    }
    // 1: every acknowledged commit published, objects present, its own and intact.
    let mut to_read = Vec::new();
    for commit in acknowledged {
        for split_id in &commit.split_ids {
            match states.get(split_id.as_str()) {
                Some(&"published") => to_read.push((commit.operation_id.clone(), split_id.clone())),
                other => failures.push(format!(
                    "acknowledged commit {} (partition {}, position {}): split {split_id} is {other:?}, not published",
                    commit.operation_id, commit.partition, commit.to_position
                )),
            }
        }
    }
    counts.objects_checked = to_read.len();
    failures.extend(check_objects(catalogs, dataset, to_read));
}

/// Reads each `(operation, split)`'s object: present, written by the operation, intact.
fn check_objects(catalogs: &Catalogs, dataset: &str, splits: Vec<(String, String)>) -> Vec<String> {
    use futures::StreamExt;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (_catalog, objects) = mend::catalog::open_with(
            &catalogs.catalog,
            catalogs.objects.as_deref(),
            mend::catalog::PostgresOptions::default(),
        )
        .await
        .expect("open the catalog to read objects");
        let objects = &objects;
        futures::stream::iter(splits)
            .map(|(operation_id, split_id)| async move {
                let expected = mend::objects::format::sha256(&payload_for(&split_id));
                match objects.read_split(dataset, &split_id).await {
                    Ok(Some((header, true)))
                        if header.payload_sha256 == expected
                            && header.operation_id.as_deref() == Some(operation_id.as_str()) =>
                    {
                        None
                    }
                    Ok(Some((header, intact))) => Some(format!(
                        "object of split {split_id}: intact {intact}, sha256 {} (expected {expected}), operation {:?} (expected {operation_id})",
                        header.payload_sha256, header.operation_id
                    )),
                    Ok(None) => Some(format!("published split {split_id} has no object")),
                    Err(error) => Some(format!("object of split {split_id}: {error}")),
                }
            })
            .buffer_unordered(16)
            .filter_map(|failure| async move { failure })
            .collect()
            .await
    })
}

/// A commit a writer was told landed.
#[derive(Debug, Clone)]
struct Commit {
    operation_id: String,
    partition: String,
    split_ids: Vec<String>,
    to_position: u64,
}

#[derive(Debug, Default)]
struct Counts {
    server_kills: usize,
    /// Server kills that found writes admitted and not answered.
    server_kills_with_writes: usize,
    /// Server kills while some Python writer had an operation begun and not settled.
    server_kills_inside_operations: usize,
    python_kills: usize,
    cli_kills: usize,
    /// Writer kills that found the writer inside an operation.
    writer_kills_inside_operations: usize,
    postgres_restarts: usize,
    acknowledged_python: usize,
    acknowledged_cli: usize,
    /// Acknowledged commits per writer (its partition).
    acknowledged_by: BTreeMap<String, usize>,
    /// Objects the `--direct` writers put through presigned URLs, in acknowledged commits.
    direct_puts: usize,
    published_commits: usize,
    objects_checked: usize,
    intents_after_supervisors: usize,
    intents_after_roll_forward: usize,
}

#[derive(Debug, Clone, Copy)]
enum Event {
    KillServer,
    KillWriter,
    RestartPostgres,
}

/// Operation ids are `{partition}-{position}-{random}`; split ids `{operation}.s{n}`.
fn operation_of(split_id: &str) -> &str {
    split_id
        .rsplit_once(".s")
        .map_or(split_id, |(operation, _)| operation)
}

fn partition_and_position(operation: &str) -> (&str, u64) {
    let mut parts = operation.splitn(3, '-');
    let partition = parts.next().unwrap_or_default();
    let position = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (partition, position)
}

/// The payload of a split: the writers and this test derive it from the split id alone
/// (`payload_for` in the Python example).
fn payload_for(split_id: &str) -> Vec<u8> {
    use sha2::Digest;
    let seed = sha2::Sha256::digest(split_id.as_bytes());
    seed.iter().copied().cycle().take(PAYLOAD_BYTES).collect()
}

/// The catalog (and objects) URLs a run uses.
#[derive(Debug, Clone)]
struct Catalogs {
    catalog: String,
    objects: Option<String>,
}

/// `mend` on the run's catalog, checking the catalog's durability (the variable that would
/// accept a non-durable Postgres is removed).
fn catalog_mend(dir: &Path, catalogs: &Catalogs) -> Command {
    let mut command = mend_command(dir);
    command
        .env_remove(ACCEPT_UNSAFE_DURABILITY)
        .env("MEND_CATALOG", &catalogs.catalog);
    if let Some(objects) = &catalogs.objects {
        command.env("MEND_OBJECTS", objects);
    }
    command
}

/// The intents a probe reports (reads only).
fn probe_intents(dir: &Path, catalogs: &Catalogs, dataset: &str) -> Vec<Value> {
    for _ in 0..100 {
        let output = catalog_mend(dir, catalogs)
            .args(["recover", dataset, "--mode", "probe", "--json"])
            .output()
            .unwrap();
        if output.status.success() {
            let report: Value = serde_json::from_slice(&output.stdout).unwrap();
            return report["intents"].as_array().cloned().unwrap_or_default();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("mend recover --mode probe kept failing");
}

/// A seeded RNG (splitmix64): the schedule replays from the seed alone.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `mend serve` on a fixed port, killed and started again at will; killed when dropped.
#[derive(Debug)]
struct Server {
    dir: PathBuf,
    port: u16,
    catalogs: Catalogs,
    child: Option<Child>,
}

impl Server {
    fn new(dir: &Path, catalogs: &Catalogs) -> Server {
        Server {
            dir: dir.to_path_buf(),
            port: free_port(),
            catalogs: catalogs.clone(),
            child: None,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Starts it and waits until it is ready; a start that fails (the catalog down while
    /// PostgreSQL restarts) is tried again, for up to two minutes.
    fn start(&mut self) {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(120) {
            let log = File::options()
                .append(true)
                .create(true)
                .open(self.log_path())
                .unwrap();
            let mut child = catalog_mend(&self.dir, &self.catalogs)
                .args([
                    "--set",
                    "serve.supervisor_interval_ms=200",
                    "--set",
                    "serve.supervisor_max_backoff_ms=1000",
                    "serve",
                    "--listen",
                    &format!("127.0.0.1:{}", self.port),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start mend serve");
            let waiting = Instant::now();
            while waiting.elapsed() < Duration::from_secs(30) {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                if http(self.port, "GET", "/readyz", None).is_ok_and(|a| a.status == 200) {
                    self.child = Some(child);
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("mend serve did not start: {}", self.log_tail());
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The writes the server has admitted and not answered (`writes_in_flight` of
    /// `/v1/status`); `None` if it did not answer at once.
    fn writes_in_flight(&self) -> Option<u64> {
        let answer = http(self.port, "GET", "/v1/status", None).ok()?;
        (answer.status == 200)
            .then(|| answer.body["writes_in_flight"].as_u64())
            .flatten()
    }

    /// A request, retried while the server does not answer (at most 60 s).
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Answer {
        let started = Instant::now();
        loop {
            match http(self.port, method, path, body) {
                Ok(answer) if answer.status != 503 => return answer,
                outcome if started.elapsed() > Duration::from_secs(60) => {
                    panic!("{method} {path}: {outcome:?}")
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Every split of the dataset with its state, page by page.
    fn splits(&self, dataset: &str) -> Vec<(String, String)> {
        let mut rows = Vec::new();
        let mut after = String::new();
        loop {
            let mut path = format!("/v1/datasets/{dataset}/splits?limit=1000");
            if !after.is_empty() {
                path.push_str(&format!("&after={after}"));
            }
            let page = self.call("GET", &path, None);
            assert_eq!(page.status, 200, "{:?}", page.body);
            for row in page.body["splits"].as_array().unwrap() {
                rows.push((
                    row["split_id"].as_str().unwrap().to_string(),
                    row["state"].as_str().unwrap().to_string(),
                ));
            }
            match page.body["next_after_split_id"].as_str() {
                Some(next) => after = next.to_string(),
                None => return rows,
            }
        }
    }

    /// Each partition's position of the writers' source.
    fn checkpoint(&self, dataset: &str) -> BTreeMap<String, u64> {
        let shown = self.call("GET", &format!("/v1/datasets/{dataset}"), None);
        serde_json::from_value(shown.body["checkpoint"][SOURCE].clone()).unwrap_or_default()
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One request on a connection of its own; an error if nothing (or half an answer) came back.
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> std::io::Result<Answer> {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let body = body.map(Value::to_string).unwrap_or_default();
    stream.write_all(&request_bytes(
        method,
        path,
        "application/json",
        None,
        body.as_bytes(),
    ))?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    if !answer.starts_with(b"HTTP/1.1 ") || !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        return Err(std::io::Error::other("no whole answer"));
    }
    Ok(parse_answer(&answer))
}

/// `examples/python/mend_writer.py --loop` on one partition.
#[derive(Debug)]
struct PythonWriter {
    partition: String,
    /// Puts its objects straight into the store through presigned URLs (`--direct`).
    direct: bool,
    /// Sends its begins as compact bodies (`--compact`).
    compact: bool,
    log: PathBuf,
    stderr: PathBuf,
    child: Option<Child>,
}

impl PythonWriter {
    fn new(dir: &Path, partition: &str, direct: bool, compact: bool) -> PythonWriter {
        PythonWriter {
            partition: partition.to_string(),
            direct,
            compact,
            log: dir.join(format!("writer-{partition}.jsonl")),
            stderr: dir.join(format!("writer-{partition}.stderr")),
            child: None,
        }
    }

    fn spawn(&mut self, url: &str, dataset: &str) {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python/mend_writer.py");
        let stderr = File::options()
            .append(true)
            .create(true)
            .open(&self.stderr)
            .unwrap();
        let child = Command::new("python3")
            .arg(script)
            .args([url, dataset, "--loop", "--source", SOURCE, "--partition"])
            .arg(&self.partition)
            .arg("--log")
            .arg(&self.log)
            .args(["--lease-ms", &WRITER_LEASE_MS.to_string()])
            .args(["--retry-for-s", &WRITER_RETRY_FOR_S.to_string()])
            .args([
                "--max-ended-in-a-row",
                &WRITER_MAX_ENDED_IN_A_ROW.to_string(),
            ])
            .args(self.direct.then_some("--direct"))
            .args(self.compact.then_some("--compact"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("run python3 (the Python writers need it)");
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Why the writer stopped, if it stopped without being killed (it never should).
    fn exited_on_its_own(&mut self) -> Option<String> {
        let status = self.child.as_mut()?.try_wait().unwrap()?;
        self.child = None;
        Some(format!(
            "python writer {} exited on its own ({status}): {}",
            self.partition,
            self.stderr_tail()
        ))
    }

    /// The last lines the writer wrote to stderr, newest first.
    fn stderr_tail(&self) -> String {
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        match stderr.trim().is_empty() {
            true => "(nothing)".to_string(),
            false => stderr.lines().rev().take(5).collect::<Vec<_>>().join(" | "),
        }
    }

    /// The operation its log says it began last, if no outcome follows.
    fn in_flight(&self) -> Option<String> {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut pending = None;
        for record in log
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        {
            let id = record["operation_id"].as_str().map(str::to_string);
            if record["event"] == "begun" {
                pending = id;
            } else if pending == id {
                pending = None;
            }
        }
        pending
    }

    /// The commits its log says were acknowledged.
    /// The objects its acknowledged commits put through presigned URLs.
    fn direct_puts(&self) -> usize {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|record| record["event"] == "acknowledged")
            .filter_map(|record| record["direct_puts"].as_u64())
            .sum::<u64>() as usize
    }

    fn acknowledged(&self) -> Vec<Commit> {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|record| record["event"] == "acknowledged")
            .map(|record| Commit {
                operation_id: record["operation_id"].as_str().unwrap().to_string(),
                partition: record["partition"].as_str().unwrap().to_string(),
                split_ids: serde_json::from_value(record["split_ids"].clone()).unwrap(),
                to_position: record["to_position"].as_u64().unwrap(),
            })
            .collect()
    }
}

/// A test that fails part way leaves no writer running.
impl Drop for PythonWriter {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The fifth writer: `mend commit` in a loop, straight to the catalog, on partition `cli`.
/// Like the Python writers it settles a commit it lost track of (killed) by running the same
/// command with the same operation id again, before it reads the checkpoint for the next; a
/// commit whose outcome stays unknown for [`CLI_RETRY_FOR`] is a failure.
#[derive(Debug)]
struct CliWriter {
    dir: PathBuf,
    catalogs: Catalogs,
    dataset: String,
    stop: AtomicBool,
    running: Mutex<Option<Child>>,
    acknowledged: Mutex<Vec<Commit>>,
    failure: Mutex<Option<String>>,
}

impl CliWriter {
    /// Panics if this build's `mend commit --help` fails: the run needs its fifth writer.
    fn new(dir: &Path, catalogs: &Catalogs, dataset: &str) -> CliWriter {
        let help = mend_command(dir)
            .args(["commit", "--help"])
            .output()
            .expect("run mend commit --help");
        assert!(
            help.status.success(),
            "the CLI writer cannot run: `mend commit --help` failed ({}): {}",
            help.status,
            String::from_utf8_lossy(&help.stderr)
        );
        CliWriter {
            dir: dir.to_path_buf(),
            catalogs: catalogs.clone(),
            dataset: dataset.to_string(),
            stop: AtomicBool::new(false),
            running: Mutex::new(None),
            acknowledged: Mutex::new(Vec::new()),
            failure: Mutex::new(None),
        }
    }

    /// Kills the `mend commit` running now, if one is.
    fn kill(&self) -> bool {
        let mut running = self.running.lock().unwrap();
        match running.as_mut() {
            Some(child) => {
                let _ = child.kill();
                true
            }
            None => false,
        }
    }

    fn run(&self) {
        let mut pending: Option<(Commit, Value)> = None;
        // Since when the pending commit's outcome has been unknown.
        let mut unknown_since: Option<Instant> = None;
        loop {
            if pending.is_none() {
                unknown_since = None;
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Some(position) = self.position() else {
                    continue;
                };
                let to_position = position.unwrap_or(0) + 1;
                let operation_id = format!(
                    "cli-{to_position}-{}",
                    &uuid::Uuid::new_v4().simple().to_string()[..8]
                );
                let commit = Commit {
                    split_ids: (0..SPLITS_PER_COMMIT)
                        .map(|n| format!("{operation_id}.s{n}"))
                        .collect(),
                    operation_id,
                    partition: "cli".into(),
                    to_position,
                };
                let delta = json!({"source": SOURCE, "partitions": [
                    {"partition": "cli", "from_position": position, "to_position": to_position}]});
                pending = Some((commit, delta));
            }
            let (commit, delta) = pending.clone().expect("set above");
            let files: Vec<(String, PathBuf)> = commit
                .split_ids
                .iter()
                .map(|id| {
                    let path = self.dir.join(format!("{id}.bin"));
                    std::fs::write(&path, payload_for(id)).unwrap();
                    (id.clone(), path)
                })
                .collect();
            let command = cli_commit(
                self.command(),
                &self.dataset,
                &commit.operation_id,
                &files,
                &delta,
            );
            let Some(output) = self.run_killable(command) else {
                continue; // killed: the same command again answers what became of it
            };
            let stderr = String::from_utf8_lossy(&output.stderr);
            match output.status.code() {
                Some(0) => {
                    self.acknowledged.lock().unwrap().push(commit);
                    pending = None;
                }
                Some(4) if stderr.contains("already published") => {
                    self.acknowledged.lock().unwrap().push(commit);
                    pending = None;
                }
                // Rolled back (abandoned after its lease): nothing of it is visible.
                Some(4) if stderr.contains("has ended") => pending = None,
                // Outcome unknown (the catalog restarting): the same id again, for a while.
                Some(5) => {
                    let since = *unknown_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > CLI_RETRY_FOR {
                        *self.failure.lock().unwrap() = Some(format!(
                            "the CLI writer's mend commit of {} answered outcome unknown for \
                             {CLI_RETRY_FOR:?}: {stderr}",
                            commit.operation_id
                        ));
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                code => {
                    *self.failure.lock().unwrap() = Some(format!(
                        "the CLI writer's mend commit of {} failed (exit {code:?}): {stderr}",
                        commit.operation_id
                    ));
                    return;
                }
            }
        }
    }

    fn command(&self) -> Command {
        let mut command = catalog_mend(&self.dir, &self.catalogs);
        command.stdin(Stdio::null());
        command
    }

    /// The partition's position (`None`: none yet); `None` outside if it could not be read.
    fn position(&self) -> Option<Option<u64>> {
        let output = self
            .command()
            .args(["dataset", "show", &self.dataset, "--json"])
            .output()
            .unwrap();
        if !output.status.success() {
            std::thread::sleep(Duration::from_millis(200));
            return None;
        }
        let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
        Some(shown["checkpoint"][SOURCE]["cli"].as_u64())
    }

    /// Runs `command` where [`kill`](Self::kill) can reach it; `None` if it was killed.
    fn run_killable(&self, mut command: Command) -> Option<Output> {
        let child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        *self.running.lock().unwrap() = Some(child);
        loop {
            std::thread::sleep(Duration::from_millis(10));
            let mut running = self.running.lock().unwrap();
            let child = running.as_mut().expect("only this thread takes it");
            if child.try_wait().unwrap().is_some() {
                let output = running.take().unwrap().wait_with_output().unwrap();
                return output.status.code().map(|_| output);
            }
        }
    }
}

/// `mend commit DATASET --split ID=FILE... --checkpoint-delta JSON --operation-id ID`: one
/// crash-safe commit by the command line, straight to the catalog.
fn cli_commit(
    mut command: Command,
    dataset: &str,
    operation_id: &str,
    splits: &[(String, PathBuf)],
    delta: &Value,
) -> Command {
    command.args(["commit", dataset]);
    for (split_id, file) in splits {
        command
            .arg("--split")
            .arg(format!("{split_id}={}", file.display()));
    }
    command
        .args(["--checkpoint-delta", &delta.to_string()])
        .args(["--operation-id", operation_id]);
    command
}

/// A throwaway PostgreSQL that keeps what it acknowledges (fsync, synchronous_commit and
/// full_page_writes on), restartable in immediate mode; stopped and removed when dropped.
#[derive(Debug)]
struct DurablePostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// PostgreSQL refuses to run as root: as root, it runs as the `postgres` user.
    as_postgres: bool,
}

impl DurablePostgres {
    fn start() -> DurablePostgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .into_iter()
            .flatten()
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.path().join("bin"))
            .filter(|bin| bin.join("initdb").exists())
            .max_by_key(|bin| {
                bin.parent()
                    .and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok())
                    .unwrap_or(0)
            })
            .unwrap_or_else(|| {
                panic!(
                    "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin: install the \
                     system's postgresql package (scripts/with-postgres does it)"
                )
            });
        let as_postgres = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|output| output.stdout.trim_ascii() == b"0");
        let dir = tempfile::Builder::new()
            .prefix("mend-durable-pg.")
            .tempdir()
            .unwrap();
        if as_postgres {
            let exists = Command::new("id").arg("postgres").output().unwrap();
            if !exists.status.success() {
                succeed(Command::new("useradd").args([
                    "--system",
                    "--home-dir",
                    "/var/lib/postgresql",
                    "postgres",
                ]));
            }
            succeed(Command::new("chown").arg("postgres").arg(dir.path()));
        }
        let postgres = DurablePostgres {
            bin,
            dir,
            port: free_port(),
            as_postgres,
        };
        succeed(
            postgres
                .pg("initdb")
                .arg("-D")
                .arg(postgres.cluster())
                .args(["-U", "postgres", "--auth=trust", "-E", "UTF8"]),
        );
        postgres.start_cluster();
        postgres
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn cluster(&self) -> PathBuf {
        self.dir.path().join("cluster")
    }

    fn pg(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    fn start_cluster(&self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=200 -c fsync=on \
             -c synchronous_commit=on -c full_page_writes=on",
            self.port,
            self.dir.path().display()
        );
        succeed(
            self.pg("pg_ctl")
                .arg("-D")
                .arg(self.cluster())
                .arg("-l")
                .arg(self.dir.path().join("server.log"))
                .args(["-w", "-t", "120", "-o", &options, "start"]),
        );
    }

    /// A crash: stopped without a checkpoint, then started (it replays its WAL).
    fn restart_immediate(&self) {
        succeed(self.pg("pg_ctl").arg("-D").arg(self.cluster()).args([
            "-m",
            "immediate",
            "-w",
            "stop",
        ]));
        self.start_cluster();
    }
}

impl Drop for DurablePostgres {
    fn drop(&mut self) {
        let _ = self
            .pg("pg_ctl")
            .arg("-D")
            .arg(self.cluster())
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

fn succeed(command: &mut Command) {
    let output = command.output().expect("run a PostgreSQL command");
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
