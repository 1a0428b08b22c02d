//! The S3-compatible server the tests run on is held to what mend needs of S3: a conditional
//! put decided atomically. moto's own server checks `If-None-Match: *` and then writes without
//! a lock, so two racing puts-if-absent of one key could both answer 200 (the second
//! overwriting the first), which S3 never does; every test of the object-storage catalog's
//! commits on S3 would then be testing moto, not mend. (Seen: the conformance kit's abandon
//! and heartbeat race had both win on moto's own server under load; a Python client racing 8
//! puts-if-absent of 4 MiB had two winners in 1 round of 200 there, and in none of 200 behind
//! the lock.) `scripts/with-s3` serves moto behind a lock for writes
//! (`scripts/moto-server.py`), which marks its answers; the first test fails if the server is
//! not that one, the second if its conditional puts are not decided one at a time.

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutPayload};

/// Rounds of racing puts, and puts per round.
const ROUNDS: usize = 100;
const RACERS: usize = 8;
/// Each put's body: large enough that moto spends a while between its check and its write
/// (it hashes the body in between), which is where its unlocked check lost.
const BODY_BYTES: usize = 256 << 10;

/// The server answering `AWS_ENDPOINT` is `scripts/moto-server.py`, which marks its answers.
#[test]
fn the_test_server_decides_its_writes_one_at_a_time() {
    use std::io::{Read, Write};
    mend_tests::harness::s3_url();
    let endpoint = std::env::var("AWS_ENDPOINT").expect("AWS_ENDPOINT names the test server");
    let address = endpoint
        .strip_prefix("http://")
        .expect("the test server speaks plain HTTP on loopback");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET / HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let head = answer.split("\r\n\r\n").next().unwrap_or_default();
    assert!(
        head.lines()
            .any(|line| line.eq_ignore_ascii_case("x-mend-test-server: writes-one-at-a-time")),
        "the S3 test server at {endpoint} is not scripts/moto-server.py (moto's own server \
         decides conditional puts without a lock); its answer began:\n{head}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_puts_if_absent_of_one_key_let_exactly_one_land() {
    let url = mend_tests::harness::s3_url();
    let bucket = url
        .strip_prefix("s3://")
        .expect("MEND_TEST_S3_URL is s3://BUCKET");
    let store: Arc<dyn ObjectStore> = Arc::new(
        object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .expect("configure the test store"),
    );
    let prefix = format!("put-race-{}", uuid::Uuid::new_v4().simple());
    let mut overwritten = 0;
    for round in 0..ROUNDS {
        let path = Path::from(format!("{prefix}/{round}"));
        let puts: Vec<_> = (0..RACERS)
            .map(|racer| {
                let (store, path) = (store.clone(), path.clone());
                tokio::spawn(async move {
                    let mut bytes = format!("racer {racer}").into_bytes();
                    bytes.resize(BODY_BYTES, b'.');
                    let body = PutPayload::from(bytes);
                    store
                        .put_opts(&path, body, PutMode::Create.into())
                        .await
                        .map(|_| racer)
                })
            })
            .collect();
        let mut landed = Vec::new();
        for put in puts {
            match put.await.unwrap() {
                Ok(racer) => landed.push(racer),
                Err(object_store::Error::AlreadyExists { .. }) => {}
                Err(error) => panic!("round {round}: {error}"),
            }
        }
        let stored = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert!(!landed.is_empty(), "round {round}: no put landed");
        if landed.len() > 1 {
            overwritten += 1;
        }
        assert_eq!(
            landed.len(),
            1,
            "round {round}: {} puts-if-absent of one key all answered success ({landed:?}); the \
             object holds {:?}. The store's conditional writes are not atomic",
            landed.len(),
            String::from_utf8_lossy(&stored[..16])
        );
        assert!(stored.starts_with(format!("racer {}.", landed[0]).as_bytes()));
    }
    println!(
        "S3 test server: {ROUNDS} rounds of {RACERS} racing puts-if-absent, exactly one landed in \
         each ({overwritten} overwritten)"
    );
}
