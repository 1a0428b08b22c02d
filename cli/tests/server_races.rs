//! A publish and an abort of one operation sent to `mend serve` at the same instant, on two
//! connections, hundreds of times (with the server's supervisors running): exactly one of them
//! decides, and the other answers what it did. Before this was fixed, 13 pairs in 60 both
//! answered 200 on a local directory: a publish that landed, and an abort that said "ended".
//!
//! Every verdict is read from structure, never from a message: the status, the phase of a
//! 200's view, and a losing 412's `error` and `operation` fields (`published` or `confirmed`
//! when the publish won, `ended` when the abort won); and each pair is held to what storage
//! ends with: the split's row and the checkpoint's partition.

use std::sync::{Arc, Barrier};

use serde_json::{Value, json};
use sha2::Digest;

use crate::common::server::{ServerOptions, TestServer};

/// Pairs sent, unless `MEND_RACE_PAIRS` says otherwise.
const PAIRS: usize = 200;

fn pairs() -> usize {
    std::env::var("MEND_RACE_PAIRS")
        .ok()
        .map(|text| text.parse().expect("MEND_RACE_PAIRS is a number"))
        .unwrap_or(PAIRS)
}

/// What one pair's answers say, and what the operation became.
#[derive(Debug, Default)]
struct Tally {
    publish_won: usize,
    abort_won: usize,
    both_decided: usize,
    false_answers: Vec<String>,
}

#[test]
fn a_publish_and_an_abort_sent_at_once_never_both_decide() {
    let dir = tempfile::tempdir().unwrap();
    let server = Arc::new(TestServer::start(dir.path(), ServerOptions::default()));
    let dataset = "races";
    let created = server.post("/v1/datasets", json!({"dataset_id": dataset}));
    assert_eq!(created.status, 201, "{:?}", created.body);
    let mut tally = Tally::default();
    let pairs = pairs();
    for pair in 0..pairs {
        let operation = format!("op-{pair}");
        let split = format!("{operation}-s");
        let payload = format!("payload of {operation}").into_bytes();
        let sha256 = hex(&sha2::Sha256::digest(&payload));
        let base = format!("/v1/datasets/{dataset}/operations");
        let begun = server.post(
            &base,
            json!({
                "operation_id": operation, "kind": "commit", "node": "racer",
                "splits": [{"split_id": split, "metadata_json": "{}", "size": payload.len(), "sha256": sha256}],
                "checkpoint_delta": {"source": "race", "partitions": [
                    {"partition": format!("p{pair}"), "from_position": null, "to_position": 1}
                ]}
            }),
        );
        assert_eq!(begun.status, 200, "begin {operation}: {:?}", begun.body);
        let uploaded = server.send(&crate::common::server::request_bytes(
            "PUT",
            &format!("{base}/{operation}/splits/{split}"),
            "application/octet-stream",
            None,
            &payload,
        ));
        assert_eq!(
            uploaded.status, 200,
            "upload {operation}: {:?}",
            uploaded.body
        );

        // Both requests are written at the same instant, each on its own connection.
        let start = Arc::new(Barrier::new(2));
        let send = |step: &'static str| {
            let (server, start, path) = (
                server.clone(),
                start.clone(),
                format!("{base}/{operation}/{step}"),
            );
            std::thread::spawn(move || {
                start.wait();
                server.post(&path, json!({}))
            })
        };
        let (publishing, aborting) = (send("publish"), send("abort"));
        let (published, aborted) = (publishing.join().unwrap(), aborting.join().unwrap());
        let shown = server.get(&format!("{base}/{operation}"));
        let phase = shown.body["phase"].as_str().unwrap_or_default().to_string();
        let stored = stored_end(&server, dataset, &split, &format!("p{pair}"));
        let answers = format!(
            "publish {} {}, abort {} {}, then show says {phase}, storage says {stored:?}",
            published.status, published.body, aborted.status, aborted.body,
        );
        let publish_won = published.status == 200
            && published.body["phase"] == "published"
            && losing_412_says(&aborted.body, &["published", "confirmed"])
            && phase == "published"
            && stored == (Some("published".into()), Some(1));
        let abort_won = aborted.status == 200
            && aborted.body["phase"] == "ended"
            && losing_412_says(&published.body, &["ended"])
            && phase == "ended"
            && stored.1.is_none()
            && stored.0.as_deref() != Some("published");
        match (published.status, aborted.status) {
            (200, 200) => {
                tally.both_decided += 1;
                tally
                    .false_answers
                    .push(format!("pair {pair}: both decided: {answers}"));
            }
            _ if publish_won => tally.publish_won += 1,
            _ if abort_won => tally.abort_won += 1,
            _ => tally.false_answers.push(format!("pair {pair}: {answers}")),
        }
    }
    println!(
        "publish and abort at once through mend serve: {pairs} pairs, publish won {}, abort won \
         {}, both decided {}, other false answers {}",
        tally.publish_won,
        tally.abort_won,
        tally.both_decided,
        tally.false_answers.len() - tally.both_decided
    );
    assert!(
        tally.false_answers.is_empty(),
        "{} false answers:\n{}",
        tally.false_answers.len(),
        tally.false_answers.join("\n")
    );
    assert_eq!(tally.publish_won + tally.abort_won, pairs);
    assert!(
        tally.publish_won > 0 && tally.abort_won > 0,
        "one side always won: the requests did not race ({tally:?})"
    );
}

/// Whether `body` is a 412's, `failed_precondition`, saying in its `operation` field one of
/// `states`: what the step that won made of the operation.
fn losing_412_says(body: &Value, states: &[&str]) -> bool {
    body["error"] == "failed_precondition"
        && body["operation"]
            .as_str()
            .is_some_and(|state| states.contains(&state))
}

/// What storage ends with for one pair: the split's row state (`None`: no row) and the
/// position of the pair's checkpoint partition (`None`: never moved).
fn stored_end(
    server: &TestServer,
    dataset: &str,
    split: &str,
    partition: &str,
) -> (Option<String>, Option<u64>) {
    let listed = server.get(&format!("/v1/datasets/{dataset}/splits?split={split}"));
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    let state = listed.body["splits"]
        .as_array()
        .and_then(|rows| rows.first())
        .and_then(|row| row["state"].as_str())
        .map(String::from);
    let shown = server.get(&format!("/v1/datasets/{dataset}"));
    assert_eq!(shown.status, 200, "{:?}", shown.body);
    let position = shown.body["checkpoint"]["race"][partition].as_u64();
    (state, position)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
