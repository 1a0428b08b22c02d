//! The operation protocol for writers in other processes, on every backend: begin, upload,
//! heartbeat, publish, abort, show; every step sent twice answers what it answered once; bad
//! bytes write nothing; a writer may upload an object itself in the documented format; a
//! publish under an idempotency key answers its result again.

use bytes::Bytes;
use futures::stream;
use mend::catalog::CatalogExt;
use mend::engine::{
    BeginOperation, ExternalKind, ObjectStatus, ObjectToPut, OperationPhase, OperationView,
    PlannedSplit, SINGLE_PUT_BYTES,
};
use mend::model::{
    CheckpointDelta, PartitionDelta, PublishRequest, SplitState, StageMode, StageRequest,
    StageSplit,
};
use mend::objects::format::{self, sha256};
use mend::{MendError, OperationFound};
use mend_tests::{Backend, Harness};
use object_store::path::Path;

fn payload(split_id: &str, len: usize) -> Vec<u8> {
    split_id.bytes().cycle().take(len).collect()
}

fn plan(dataset_id: &str, operation_id: &str, splits: &[(&str, &[u8])], to: u64) -> BeginOperation {
    BeginOperation {
        dataset_id: dataset_id.into(),
        operation_id: Some(operation_id.into()),
        kind: ExternalKind::Commit,
        node: "indexer-7".into(),
        lease_ms: Some(60_000),
        splits: splits
            .iter()
            .map(|(id, bytes)| PlannedSplit {
                split_id: (*id).into(),
                metadata_json: r#"{"num_docs": 3}"#.into(),
                size: bytes.len() as u64,
                sha256: sha256(bytes),
            })
            .collect(),
        checkpoint_delta: Some(CheckpointDelta {
            source: "kafka".into(),
            partitions: vec![PartitionDelta {
                partition: "p0".into(),
                from_position: (to > 10).then_some(to - 10),
                to_position: to,
            }],
        }),
        replaced_split_ids: Vec::new(),
        publish_token: None,
    }
}

/// A merge of `splits` replacing `replaced` (no checkpoint delta), otherwise as [`plan`].
fn merge_plan(
    dataset_id: &str,
    operation_id: &str,
    splits: &[(&str, &[u8])],
    replaced: &[&str],
) -> BeginOperation {
    BeginOperation {
        kind: ExternalKind::Merge,
        checkpoint_delta: None,
        replaced_split_ids: replaced.iter().map(|id| (*id).into()).collect(),
        ..plan(dataset_id, operation_id, splits, 10)
    }
}

/// `bytes` as a body arriving in chunks of `chunk` bytes.
fn body(
    bytes: &[u8],
    chunk: usize,
) -> impl futures::Stream<Item = Result<Bytes, MendError>> + Send + Unpin + use<> {
    let chunks: Vec<Result<Bytes, MendError>> = bytes
        .chunks(chunk.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    stream::iter(chunks)
}

/// A split's whole object as a writer putting it straight into the store builds it: the
/// magic, the header's length, the header `begin` answered, the payload.
fn whole_object(split: &mend::engine::OperationSplit, payload: &[u8]) -> Vec<u8> {
    let mut object = b"MENDSPL1".to_vec();
    object.extend_from_slice(&(split.header_json.len() as u32).to_le_bytes());
    object.extend_from_slice(split.header_json.as_bytes());
    object.extend_from_slice(payload);
    object
}

/// Each row of the dataset as its id and state, in id order.
async fn row_states(h: &Harness, dataset_id: &str) -> Vec<(String, SplitState)> {
    h.rows(dataset_id)
        .await
        .into_iter()
        .map(|row| (row.split_id, row.state))
        .collect()
}

async fn object_payload(h: &Harness, dataset_id: &str, split_id: &str) -> Vec<u8> {
    let (store, _) = h.engine.objects().store();
    let path = h.engine.objects().path(dataset_id, split_id);
    let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
    let (header, payload) = format::decode(&bytes).expect("a whole split object");
    assert_eq!(header.split_id, split_id);
    payload.to_vec()
}

#[tokio::test]
async fn a_writer_commits_step_by_step_and_every_step_is_safe_to_send_again() {
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("ops").await;
        let (a, b) = (payload("a", 1000), payload("b", 70_000));
        let request = plan(&ds, "op-1", &[("s-a", &a), ("s-b", &b)], 10);

        let begun = engine.begin_operation(&request).await.unwrap();
        assert_eq!(begun.phase, OperationPhase::Armed, "{backend}");
        assert_eq!(begun.splits.len(), 2);
        // A begin sent again resumes the same operation.
        let again = engine.begin_operation(&request).await.unwrap();
        assert_eq!(again.splits, begun.splits, "{backend}");
        let rows = h.rows(&ds).await;
        assert!(rows.iter().all(|row| row.state == SplitState::Staged));

        // Publishing before the objects are in place names them and changes nothing.
        let error = engine.publish_operation(&ds, "op-1").await.unwrap_err();
        assert!(
            matches!(&error, MendError::FailedPrecondition { ids, .. } if ids == &["s-a", "s-b"]),
            "{backend}: {error:?}"
        );

        let uploaded = engine
            .upload_object(&ds, "op-1", "s-a", body(&a, 333))
            .await
            .unwrap();
        assert!(uploaded.written);
        let again = engine
            .upload_object(&ds, "op-1", "s-a", body(&a, 1000))
            .await
            .unwrap();
        assert!(
            !again.written,
            "{backend}: an upload in place writes nothing"
        );
        engine
            .upload_object(&ds, "op-1", "s-b", body(&b, 4096))
            .await
            .unwrap();
        h.clock.advance_ms(5_000);
        let heartbeat = engine
            .heartbeat_operation(&ds, "op-1", Some(120_000))
            .await
            .unwrap();
        assert_eq!(
            heartbeat.lease_expires_at_ms,
            Some(h.clock_now() + 120_000),
            "{backend}"
        );
        // Renewed in the catalog, from now, saying when: what recovery and an operator read.
        let stored = engine.catalog().list_intents(&ds).await.unwrap();
        assert_eq!(
            stored
                .iter()
                .map(|intent| (intent.lease_expires_at_ms, intent.updated_at_ms))
                .collect::<Vec<_>>(),
            [(h.clock_now() + 120_000, h.clock_now())],
            "{backend}"
        );

        let shown = engine.show_operation(&ds, "op-1").await.unwrap();
        assert!(
            shown
                .splits
                .iter()
                .all(|split| split.object == Some(ObjectStatus::Present)),
            "{backend}: {shown:?}"
        );
        assert!(
            shown.recovery.is_some(),
            "{backend}: show says what recovery would do"
        );

        let published = engine.publish_operation(&ds, "op-1").await.unwrap();
        assert_eq!(published.phase, OperationPhase::Published);
        let result = published.publish.clone().unwrap();
        assert_eq!(result.published, vec!["s-a", "s-b"]);
        // Sent again, the publish answers the same result: not "not staged".
        let again = engine.publish_operation(&ds, "op-1").await.unwrap();
        assert_eq!(again.publish, Some(result.clone()), "{backend}");
        let begun_again = engine.begin_operation(&request).await.unwrap();
        assert_eq!(begun_again.phase, OperationPhase::Published, "{backend}");
        assert_eq!(begun_again.publish, Some(result), "{backend}");
        let shown = engine.show_operation(&ds, "op-1").await.unwrap();
        assert_eq!(shown.phase, OperationPhase::Published, "{backend}");
        // Past its end, a heartbeat and an abort are refused, saying why.
        let error = engine
            .heartbeat_operation(&ds, "op-1", None)
            .await
            .unwrap_err();
        assert!(
            error.operation_found() == Some(OperationFound::Published),
            "{error}"
        );
        let error = engine.abort_operation(&ds, "op-1").await.unwrap_err();
        assert!(
            error.operation_found() == Some(OperationFound::Published),
            "{error}"
        );

        assert!(
            h.rows(&ds)
                .await
                .iter()
                .all(|row| row.state == SplitState::Published)
        );
        let dataset = engine.dataset(&ds).await.unwrap();
        assert_eq!(dataset.checkpoint["kafka"]["p0"], 10);
        assert!(engine.catalog().list_intents(&ds).await.unwrap().is_empty());
        assert_eq!(object_payload(&h, &ds, "s-a").await, a);
        assert_eq!(object_payload(&h, &ds, "s-b").await, b);
        checked += 1;
    }
    println!("step-by-step commits checked on {checked} backends");
    assert_eq!(checked, Backend::ALL.len());
}

#[tokio::test]
async fn bytes_that_are_not_the_plan_write_nothing() {
    let mut refusals = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("bad-bytes").await;
        let good = payload("g", 5000);
        engine
            .begin_operation(&plan(&ds, "op-bad", &[("s-1", &good)], 10))
            .await
            .unwrap();
        let mut flipped = good.clone();
        flipped[4999] ^= 1;
        let cases: [(&str, Vec<u8>, &str); 3] = [
            ("another checksum", flipped, "sha256"),
            ("too long", payload("g", 5001), "longer than"),
            ("too short", payload("g", 4999), "were planned"),
        ];
        for (case, bytes, says) in cases {
            let error = engine
                .upload_object(&ds, "op-bad", "s-1", body(&bytes, 1024))
                .await
                .unwrap_err();
            assert!(
                matches!(&error, MendError::InvalidArgument { message } if message.contains(says)),
                "{backend}, {case}: {error:?}"
            );
            let (status, _) = (
                engine.show_operation(&ds, "op-bad").await.unwrap().splits[0].object,
                (),
            );
            assert_eq!(status, Some(ObjectStatus::Missing), "{backend}, {case}");
            refusals += 1;
        }
        // A split the operation does not plan is refused too.
        let error = engine
            .upload_object(&ds, "op-bad", "s-other", body(&good, 1024))
            .await
            .unwrap_err();
        assert!(
            matches!(error, MendError::InvalidArgument { .. }),
            "{error:?}"
        );
        refusals += 1;
    }
    println!("{refusals} bad uploads refused with nothing written");
}

#[tokio::test]
async fn a_large_object_streams_through_a_multipart_upload() {
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("large").await;
        let big = payload("big", SINGLE_PUT_BYTES as usize + 3 * 1024 * 1024 + 17);
        engine
            .begin_operation(&plan(&ds, "op-big", &[("s-big", &big)], 10))
            .await
            .unwrap();
        // Wrong at the very end: the multipart upload is aborted, nothing is visible.
        let mut wrong = big.clone();
        *wrong.last_mut().unwrap() ^= 1;
        engine
            .upload_object(&ds, "op-big", "s-big", body(&wrong, 256 * 1024))
            .await
            .unwrap_err();
        assert!(
            engine
                .objects()
                .read_header(&ds, "s-big")
                .await
                .unwrap()
                .is_none(),
            "{backend}: a refused multipart upload left an object"
        );
        engine
            .upload_object(&ds, "op-big", "s-big", body(&big, 256 * 1024))
            .await
            .unwrap();
        engine.publish_operation(&ds, "op-big").await.unwrap();
        assert_eq!(object_payload(&h, &ds, "s-big").await, big, "{backend}");
        println!("{backend}: {} bytes streamed and published", big.len());
    }
}

#[tokio::test]
async fn a_writer_may_write_the_object_itself_in_the_documented_format() {
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("direct").await;
        let bytes = payload("d", 2048);
        let begun = engine
            .begin_operation(&plan(&ds, "op-direct", &[("s-d", &bytes)], 10))
            .await
            .unwrap();
        let split = &begun.splits[0];
        // What a writer in another language does: magic, header length, header, payload.
        let object = whole_object(split, &bytes);
        assert_eq!(object.len() as u64, split.object_size, "{backend}");
        let (store, _) = engine.objects().store();
        store
            .put(&Path::from(split.object_path.as_str()), object.into())
            .await
            .unwrap();
        let published = engine.publish_operation(&ds, "op-direct").await.unwrap();
        assert_eq!(published.phase, OperationPhase::Published, "{backend}");
        assert_eq!(object_payload(&h, &ds, "s-d").await, bytes);
    }
}

/// A payload put straight into the store behind the header begin answered, of the planned
/// size, with one byte flipped, is never published: `show` says `different`, `publish`
/// refuses naming it, the supervisor's roll-forward (the writer gone, its lease run out)
/// reports it blocked, and a deep verify finds it; the same operation with the right bytes
/// publishes. The header is a claim; only the bytes hashed against the plan are proof.
#[tokio::test]
async fn a_payload_that_does_not_hash_to_its_plan_is_never_published() {
    let mut checks = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("flipped").await;
        let bytes = payload("f", 5000);
        let mut request = plan(&ds, "op-flip", &[("s-f", &bytes)], 10);
        request.lease_ms = Some(1_000);
        let begun = engine.begin_operation(&request).await.unwrap();
        let split = &begun.splits[0];
        let mut object = whole_object(split, &bytes);
        *object.last_mut().unwrap() ^= 0x20;
        assert_eq!(object.len() as u64, split.object_size, "{backend}");
        let (store, _) = engine.objects().store();
        store
            .put(&Path::from(split.object_path.as_str()), object.into())
            .await
            .unwrap();

        let shown = engine.show_operation(&ds, "op-flip").await.unwrap();
        assert_eq!(
            shown.splits[0].object,
            Some(ObjectStatus::Different),
            "{backend}"
        );
        let error = engine.publish_operation(&ds, "op-flip").await.unwrap_err();
        assert!(
            matches!(&error, MendError::FailedPrecondition { ids, .. } if ids == &["s-f"]),
            "{backend}: {error:?}"
        );
        // The writer is gone: its lease runs out, and the supervisor's sweep reads the payload
        // back rather than trusting the header.
        h.clock.advance_ms(2_000);
        let swept = engine
            .recover(&ds, mend_contract::RecoveryMode::RollForward)
            .await
            .unwrap();
        assert_eq!(
            swept.count(mend::engine::IntentStatus::Blocked),
            1,
            "{backend}: {swept:?}"
        );
        let rows = h.rows(&ds).await;
        assert!(
            rows.iter().all(|row| row.state == SplitState::Staged),
            "{backend}: {rows:?}"
        );
        assert!(
            engine.dataset(&ds).await.unwrap().checkpoint.is_empty(),
            "{backend}: the checkpoint moved"
        );
        // A plain verify reads headers only; a deep one hashes every payload.
        let plain = engine.verify(&ds).await.unwrap();
        assert!(plain.violations.is_empty(), "{backend}: {plain:?}");
        let deep = engine.verify_deep(&ds).await.unwrap();
        assert_eq!(deep.payloads_hashed, 1, "{backend}");
        assert_eq!(deep.violations.len(), 1, "{backend}: {deep:?}");
        assert!(
            deep.violations[0].message.contains("does not hash"),
            "{backend}: {deep:?}"
        );
        checks += 8;

        // The same plan with the right bytes, written the same way, publishes.
        let begun = engine
            .begin_operation(&plan(&ds, "op-right", &[("s-r", &bytes)], 10))
            .await
            .unwrap();
        let split = &begun.splits[0];
        let object = whole_object(split, &bytes);
        store
            .put(&Path::from(split.object_path.as_str()), object.into())
            .await
            .unwrap();
        let published = engine.publish_operation(&ds, "op-right").await.unwrap();
        assert_eq!(published.phase, OperationPhase::Published, "{backend}");
        checks += 1;
    }
    println!(
        "a flipped payload behind a correct header: {checks} checks on {} backends; shown \
         different, refused by publish, blocked in roll-forward, found by a deep verify",
        Backend::ALL.len()
    );
}

#[tokio::test]
async fn a_begin_that_loses_a_row_writes_nothing_and_an_abort_rolls_back_at_once() {
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("lose").await;
        // Another writer staged s-2 first.
        engine
            .stage(&StageRequest {
                dataset_id: ds.clone(),
                mode: StageMode::CreateOnly,
                node: "other".into(),
                splits: vec![StageSplit {
                    split_id: "s-2".into(),
                    metadata_json: "{}".into(),
                }],
            })
            .await
            .unwrap();
        let (one, two) = (payload("1", 10), payload("2", 10));
        let request = plan(&ds, "op-lose", &[("s-1", &one), ("s-2", &two)], 10);
        let error = engine.begin_operation(&request).await.unwrap_err();
        assert!(
            matches!(&error, MendError::FailedPrecondition { ids, .. } if ids == &["s-2"]),
            "{backend}: {error:?}"
        );
        let rows = h.rows(&ds).await;
        assert_eq!(
            rows.iter().map(|r| r.split_id.as_str()).collect::<Vec<_>>(),
            ["s-2"],
            "{backend}: only the other writer's row is left"
        );
        assert!(engine.catalog().list_intents(&ds).await.unwrap().is_empty());
        // The begin wrote nothing, so the same begin again is a new attempt, refused the same
        // way while the other writer holds the row, and again writing nothing.
        let before = h.write_fingerprint(&ds).await;
        let error = engine.begin_operation(&request).await.unwrap_err();
        assert!(
            matches!(&error, MendError::FailedPrecondition { ids, operation: None, .. } if ids == &["s-2"]),
            "{backend}: {error:?}"
        );
        assert!(error.to_string().contains("nothing was written"), "{error}");
        assert_eq!(h.write_fingerprint(&ds).await, before, "{backend}");

        let request = plan(&ds, "op-abort", &[("s-3", &one)], 10);
        engine.begin_operation(&request).await.unwrap();
        engine
            .upload_object(&ds, "op-abort", "s-3", body(&one, 4))
            .await
            .unwrap();
        let aborted = engine.abort_operation(&ds, "op-abort").await.unwrap();
        engine.wait_for_cleanups().await;
        assert_eq!(aborted.phase, OperationPhase::Ended);
        assert!(!h.rows(&ds).await.iter().any(|r| r.split_id == "s-3"));
        assert!(
            engine
                .objects()
                .read_header(&ds, "s-3")
                .await
                .unwrap()
                .is_none()
        );
        assert!(engine.catalog().list_intents(&ds).await.unwrap().is_empty());
        let again = engine.abort_operation(&ds, "op-abort").await.unwrap();
        assert_eq!(again.phase, OperationPhase::Ended, "{backend}");
        let error = engine.publish_operation(&ds, "op-abort").await.unwrap_err();
        assert!(
            error.operation_found() == Some(OperationFound::Ended),
            "{backend}: {error}"
        );
        let error = engine
            .upload_object(&ds, "op-abort", "s-3", body(&one, 4))
            .await
            .unwrap_err();
        assert!(
            error.operation_found() == Some(OperationFound::Ended),
            "{backend}: {error}"
        );
    }
}

#[tokio::test]
async fn a_keyed_publish_sent_again_answers_its_result_and_a_reused_key_is_refused() {
    let mut replays = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("keys").await;
        let stage = StageRequest {
            dataset_id: ds.clone(),
            mode: StageMode::CreateOnly,
            node: "w".into(),
            splits: ["k-1", "k-2"]
                .iter()
                .map(|id| StageSplit {
                    split_id: (*id).into(),
                    metadata_json: "{}".into(),
                })
                .collect(),
        };
        let staged = engine
            .stage(&stage)
            .idempotency_key("stage-key-1")
            .await
            .unwrap();
        let staged_again = engine
            .stage(&stage)
            .idempotency_key("stage-key-1")
            .await
            .unwrap();
        assert_eq!(
            staged, staged_again,
            "{backend}: a create-only stage retried still says inserted"
        );
        h.put_objects(&ds, ["k-1", "k-2"]).await;
        let publish = PublishRequest::staged(&ds, vec!["k-1".into(), "k-2".into()]);
        let first = engine
            .publish(&publish)
            .idempotency_key("publish-key-1")
            .await
            .unwrap();
        let second = engine
            .publish(&publish)
            .idempotency_key("publish-key-1")
            .await
            .unwrap();
        assert_eq!(first, second, "{backend}");
        replays += 2;
        // Unkeyed, the same publish is refused: its splits are no longer staged.
        assert!(matches!(
            engine.publish(&publish).await.unwrap_err(),
            MendError::FailedPrecondition { .. }
        ));
        let other = PublishRequest::staged(&ds, vec!["k-1".into()]);
        let error = engine
            .publish(&other)
            .idempotency_key("publish-key-1")
            .await
            .unwrap_err();
        assert!(
            matches!(&error, MendError::InvalidArgument { message } if message.contains("another request")),
            "{backend}: {error:?}"
        );
        let error = engine
            .publish(&publish)
            .idempotency_key("op:mine")
            .await
            .unwrap_err();
        assert!(
            matches!(error, MendError::InvalidArgument { .. }),
            "{error:?}"
        );
        // gc's retention forgets records; the catalog says how many.
        let forgotten = engine
            .catalog()
            .forget_recorded_requests(&ds, i64::MAX, h.clock_now())
            .await
            .unwrap();
        assert_eq!(forgotten, 2, "{backend}");
    }
    println!("{replays} keyed requests answered again with their first result");
}

#[tokio::test]
async fn a_publish_whose_delta_no_longer_applies_is_refused_in_its_step_and_ends() {
    let mut checks = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("stale-delta").await;
        let bytes = payload("x", 100);
        // The delta expects partition p0 at 10; it has no position yet.
        engine
            .begin_operation(&plan(&ds, "op-stale", &[("s-x", &bytes)], 20))
            .await
            .unwrap();
        engine
            .upload_object(&ds, "op-stale", "s-x", body(&bytes, 64))
            .await
            .unwrap();
        let before = engine.dataset(&ds).await.unwrap();
        let error = engine.publish_operation(&ds, "op-stale").await.unwrap_err();
        engine.wait_for_cleanups().await;
        assert!(
            matches!(&error, MendError::FailedPrecondition { ids, message, operation: Some(OperationFound::Ended) } if ids == &["p0"] && message.contains("rolled back")),
            "{backend}: {error:?}"
        );
        // Refused in the publish's own step, it can never publish: it ended there, so the
        // answer stays true whoever looks later. Nothing of it is left.
        let after = engine.dataset(&ds).await.unwrap();
        assert_eq!(after.checkpoint, before.checkpoint, "{backend}");
        assert!(h.rows(&ds).await.is_empty(), "{backend}");
        assert!(engine.catalog().list_intents(&ds).await.unwrap().is_empty());
        assert!(
            engine
                .objects()
                .read_header(&ds, "s-x")
                .await
                .unwrap()
                .is_none(),
            "{backend}"
        );
        let aborted = engine.abort_operation(&ds, "op-stale").await.unwrap();
        assert_eq!(aborted.phase, OperationPhase::Ended, "{backend}");
        let again = engine.publish_operation(&ds, "op-stale").await.unwrap_err();
        assert_eq!(
            again.operation_found(),
            Some(OperationFound::Ended),
            "{backend}: {again}"
        );
        checks += 7;
    }
    println!(
        "a publish refused for good in its step: {checks} checks; ended at once, nothing left"
    );
}

#[tokio::test]
async fn a_writer_that_dies_is_settled_by_roll_forward_alone_and_told_so_when_it_returns() {
    use mend_contract::RecoveryMode;
    let mut settled = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("dies").await;
        let (a, b) = (payload("a", 300), payload("b", 300));
        // One writer dies after uploading one of its two objects: never confirmed.
        let mut dead = plan(&ds, "op-dead", &[("d-a", &a), ("d-b", &b)], 10);
        dead.lease_ms = Some(5_000);
        engine.begin_operation(&dead).await.unwrap();
        engine
            .upload_object(&ds, "op-dead", "d-a", body(&a, 100))
            .await
            .unwrap();
        // Another dies after its publish confirmed but before it landed: recovery publishes
        // it, and records the result as the writer's own publish would have.
        let mut late = plan(&ds, "op-late", &[("l-a", &a)], 10);
        late.checkpoint_delta = None;
        late.lease_ms = Some(5_000);
        engine.begin_operation(&late).await.unwrap();
        engine
            .upload_object(&ds, "op-late", "l-a", body(&a, 100))
            .await
            .unwrap();
        let intent = engine
            .catalog()
            .list_intents(&ds)
            .await
            .unwrap()
            .into_iter()
            .find(|i| i.operation_id == "op-late")
            .unwrap();
        let confirmed = mend::intent::Intent {
            phase: mend::intent::IntentPhase::EffectsConfirmed,
            ..intent
        };
        engine
            .catalog()
            .update_intent(&confirmed, mend::intent::IntentPhase::Armed)
            .await
            .unwrap();

        // While the leases are live, roll-forward leaves both alone.
        let report = engine
            .recover(&ds, RecoveryMode::RollForward)
            .await
            .unwrap();
        assert!(
            report
                .intents
                .iter()
                .all(|i| i.status == mend::engine::IntentStatus::Deferred),
            "{backend}: {report:?}"
        );
        h.clock.advance_ms(6_000);
        engine
            .recover(&ds, RecoveryMode::RollForward)
            .await
            .unwrap();
        assert!(
            engine.catalog().list_intents(&ds).await.unwrap().is_empty(),
            "{backend}: roll-forward alone settles both"
        );
        let rows = h.rows(&ds).await;
        let state = |id: &str| rows.iter().find(|r| r.split_id == id).map(|r| r.state);
        assert_eq!(
            state("d-a"),
            Some(SplitState::MarkedForDeletion),
            "{backend}"
        );
        assert_eq!(
            state("d-b"),
            Some(SplitState::MarkedForDeletion),
            "{backend}"
        );
        assert_eq!(state("l-a"), Some(SplitState::Published), "{backend}");

        // The writers come back: each is told the truth.
        for step in ["publish", "heartbeat", "upload"] {
            let error = match step {
                "publish" => engine.publish_operation(&ds, "op-dead").await.unwrap_err(),
                "heartbeat" => engine
                    .heartbeat_operation(&ds, "op-dead", None)
                    .await
                    .unwrap_err(),
                _ => engine
                    .upload_object(&ds, "op-dead", "d-b", body(&b, 100))
                    .await
                    .unwrap_err(),
            };
            assert!(
                error.operation_found() == Some(OperationFound::Ended),
                "{backend}, {step}: {error}"
            );
        }
        let published = engine.publish_operation(&ds, "op-late").await.unwrap();
        assert_eq!(published.phase, OperationPhase::Published, "{backend}");
        assert_eq!(published.publish.unwrap().published, vec!["l-a"]);
        settled += 2;
    }
    println!("{settled} crashed writers settled by roll-forward alone");
}

/// An upload looks for its object first only where its write could not tell whether it is
/// there: an object of up to `SINGLE_PUT_BYTES` of payload (here exactly that) goes up in one
/// put-if-absent with no read before it; a larger one streams through a multipart upload,
/// which would overwrite, so it looks first, and sent again it writes nothing. Counted on
/// Postgres, whose store holds the split objects only.
#[tokio::test]
async fn an_upload_looks_for_its_object_first_only_where_its_write_cannot_tell() {
    let h = Harness::new(Backend::Postgres).await;
    let engine = &h.engine;
    let ds = h.create_dataset("look-first").await;
    let edge = payload("edge", SINGLE_PUT_BYTES as usize);
    let large = payload("large", SINGLE_PUT_BYTES as usize + 1);
    engine
        .begin_operation(&plan(
            &ds,
            "op-look",
            &[("at-edge", &edge), ("past-edge", &large)],
            10,
        ))
        .await
        .unwrap();
    async fn upload(
        h: &Harness,
        ds: &str,
        split: &str,
        bytes: &[u8],
    ) -> (bool, mend_tests::RequestCounts) {
        let store = h.store.as_ref().expect("the split objects' store");
        let before = store.requests();
        let result = h
            .engine
            .upload_object(ds, "op-look", split, body(bytes, 1 << 20))
            .await
            .unwrap();
        (result.written, store.requests().since(&before))
    }

    let (written, requests) = upload(&h, &ds, "at-edge", &edge).await;
    assert!(written);
    assert_eq!(
        (requests.gets + requests.heads, requests.writes),
        (0, 1),
        "an object at the single-put limit: one put-if-absent, nothing read first: {requests:?}"
    );
    let (written, requests) = upload(&h, &ds, "past-edge", &large).await;
    assert!(written);
    assert!(
        requests.gets + requests.heads >= 1 && requests.writes == 1,
        "an object past the limit: looked for, then one multipart upload: {requests:?}"
    );
    let (written, requests) = upload(&h, &ds, "past-edge", &large).await;
    assert!(!written, "the large object sent again is in place");
    assert_eq!(
        requests.writes, 0,
        "the large object sent again is found and nothing is streamed: {requests:?}"
    );
    let (written, _) = upload(&h, &ds, "at-edge", &edge).await;
    assert!(!written, "the put-if-absent finds the object in place");
    println!(
        "uploads: 0 reads before a single put at the limit; a larger object looked for first and not written again"
    );
}

/// A publish reads back only the objects this process did not upload itself
/// (`engine::uploaded`): none after every upload went through it, the one written straight to
/// the store when the other went through it, every one when another process publishes; and an
/// operation
/// another process aborted after the uploads still cannot publish. Counted on Postgres, whose
/// store holds the split objects only, so every request it sees is about them.
#[tokio::test]
async fn a_publish_reads_back_only_the_objects_this_process_did_not_upload() {
    let h = Harness::new(Backend::Postgres).await;
    let store = h.store.clone().expect("the split objects' store");
    let engine = &h.engine;
    let ds = h.create_dataset("read-back").await;
    let (a, b) = (payload("a", 3000), payload("b", 5000));
    let reads = |before: mend_tests::RequestCounts| {
        let since = store.requests().since(&before);
        since.gets + since.heads
    };

    // Every object uploaded through this engine: the publish reads none back.
    engine
        .begin_operation(&plan(&ds, "op-mine", &[("m-a", &a), ("m-b", &b)], 10))
        .await
        .unwrap();
    for (split, bytes) in [("m-a", &a), ("m-b", &b)] {
        engine
            .upload_object(&ds, "op-mine", split, body(bytes, 700))
            .await
            .unwrap();
    }
    let before = store.requests();
    let published = engine.publish_operation(&ds, "op-mine").await.unwrap();
    assert_eq!(published.phase, OperationPhase::Published);
    let own = reads(before);
    assert_eq!(own, 0, "objects this process put are not read back");

    // One object written straight to the store by the client: the publish reads both.
    let begun = engine
        .begin_operation(&plan(&ds, "op-mixed", &[("x-a", &a), ("x-b", &b)], 20))
        .await
        .unwrap();
    engine
        .upload_object(&ds, "op-mixed", "x-a", body(&a, 700))
        .await
        .unwrap();
    let direct = begun.splits.iter().find(|s| s.split_id == "x-b").unwrap();
    let object = whole_object(direct, &b);
    let (objects_store, _) = engine.objects().store();
    objects_store
        .put(&Path::from(direct.object_path.as_str()), object.into())
        .await
        .unwrap();
    let before = store.requests();
    engine.publish_operation(&ds, "op-mixed").await.unwrap();
    let mixed = reads(before);
    assert_eq!(
        mixed, 1,
        "only the object written straight to the store is read back (one GET, its payload \
         hashed): {mixed} reads"
    );

    // Uploaded here, published by another process: it reads every object back.
    engine
        .begin_operation(&plan(&ds, "op-moved", &[("v-a", &a), ("v-b", &b)], 30))
        .await
        .unwrap();
    for (split, bytes) in [("v-a", &a), ("v-b", &b)] {
        engine
            .upload_object(&ds, "op-moved", split, body(bytes, 700))
            .await
            .unwrap();
    }
    let other = h.another_process(store.clone()).await;
    let before = store.requests();
    other.publish_operation(&ds, "op-moved").await.unwrap();
    let elsewhere = reads(before);
    assert_eq!(
        elsewhere, 2,
        "another process reads both back, one GET each: {elsewhere} reads"
    );

    // Uploaded here, aborted by another process: this process's memory of the uploads does
    // not make its publish land.
    engine
        .begin_operation(&plan(&ds, "op-gone", &[("g-a", &a)], 40))
        .await
        .unwrap();
    engine
        .upload_object(&ds, "op-gone", "g-a", body(&a, 700))
        .await
        .unwrap();
    other.abort_operation(&ds, "op-gone").await.unwrap();
    other.wait_for_cleanups().await;
    let error = engine.publish_operation(&ds, "op-gone").await.unwrap_err();
    assert!(
        error.operation_found() == Some(OperationFound::Ended),
        "{error}"
    );
    assert!(!h.rows(&ds).await.iter().any(|row| row.split_id == "g-a"));
    let checkpoint = engine.dataset(&ds).await.unwrap().checkpoint;
    assert_eq!(
        checkpoint["kafka"]["p0"], 30,
        "the aborted commit moved nothing"
    );
    println!(
        "object reads at publish: {own} for an operation uploaded here, {mixed} with one object \
         written by the client, {elsewhere} from another process; an operation aborted \
         elsewhere is refused"
    );
}

/// `PUT url` with `headers` and `body` over plain HTTP (the test store listens on loopback);
/// the status. The `Host` header names the port, as every HTTP client sends it and as the
/// URL's signature covers it.
fn put_to(url: &str, headers: &std::collections::BTreeMap<String, String>, body: &[u8]) -> u16 {
    use std::io::{Read, Write};
    let parsed = url::Url::parse(url).unwrap();
    let address = format!(
        "{}:{}",
        parsed.host_str().unwrap(),
        parsed.port_or_known_default().unwrap()
    );
    let host = &parsed[url::Position::BeforeHost..url::Position::AfterPort];
    let mut target = parsed.path().to_string();
    if let Some(query) = parsed.query() {
        target = format!("{target}?{query}");
    }
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "PUT {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.write_all(body).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"))
}

/// An engine with its catalog and objects on a fresh prefix of the S3-compatible test server,
/// whose store presigns.
async fn engine_on_s3(options: mend::EngineOptions) -> mend::Engine {
    let url = format!(
        "{}/presign-{}",
        mend_tests::harness::s3_url(),
        uuid::Uuid::new_v4().simple()
    );
    let (catalog, objects) = mend::catalog::open(&url, None).await.unwrap();
    mend::Engine::new(
        catalog,
        objects,
        mend::runtime::PolicyRuntime::default_policy().unwrap(),
        options,
    )
    .unwrap()
}

/// Where the store presigns (S3), a writer asks for an upload URL per object it puts itself,
/// giving the whole object's sha256; each URL is signed over `If-None-Match: *` and that
/// checksum, and valid until the lease ends. The S3-compatible test server (moto) enforces
/// put-if-absent: a second `PUT` through the URL is refused, so an object read back and
/// published can never be replaced through it. It does not verify the checksum (real S3
/// answers 400 `BadDigest`) nor the signature (real S3 answers 403): an object whose payload
/// does not hash to the plan still lands there, and mend's read-back refuses it at publish
/// and in recovery. A local directory presigns nothing.
#[tokio::test]
async fn a_writer_puts_objects_through_presigned_urls_where_the_store_presigns() {
    use sha2::Digest;
    let engine = engine_on_s3(mend::EngineOptions::default()).await;
    engine
        .create_dataset("presigned", &Default::default())
        .await
        .unwrap();
    let (a, b) = (payload("a", 4000), payload("b", 6000));
    let begun = engine
        .begin_operation(&plan(
            "presigned",
            "op-url",
            &[("u-a", &a), ("u-b", &b)],
            10,
        ))
        .await
        .unwrap();
    let lease_end = begun.lease_expires_at_ms.unwrap();
    let object = whole_object;
    let hex = |bytes: &[u8]| -> String {
        sha2::Sha256::digest(bytes)
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    };
    let (split_a, split_b) = (&begun.splits[0], &begun.splits[1]);
    assert_eq!(split_a.split_id, "u-a");
    let good_a = object(split_a, &a);
    // u-b goes up with its header as begin answered it, the planned size, one byte flipped.
    let mut bad_b = object(split_b, &b);
    *bad_b.last_mut().unwrap() ^= 1;
    let urls = engine
        .upload_urls(
            "presigned",
            "op-url",
            &[
                ObjectToPut {
                    split_id: "u-a".into(),
                    object_sha256: hex(&good_a),
                },
                ObjectToPut {
                    split_id: "u-b".into(),
                    object_sha256: hex(&bad_b),
                },
            ],
        )
        .await
        .unwrap();
    for signed in &urls {
        assert!(signed.expires_at_ms <= lease_end + 1000, "{signed:?}");
        assert_eq!(signed.headers["If-None-Match"], "*", "{signed:?}");
        let query: std::collections::BTreeMap<String, String> = url::Url::parse(&signed.url)
            .unwrap()
            .query_pairs()
            .map(|(key, value)| (key.into_owned(), value.into_owned()))
            .collect();
        assert_eq!(
            query["X-Amz-SignedHeaders"], "host;if-none-match;x-amz-checksum-sha256",
            "the URL's signature covers put-if-absent and the checksum"
        );
    }
    assert_eq!(
        urls[0].headers["x-amz-checksum-sha256"],
        mend::objects::presign::base64(&sha2::Sha256::digest(&good_a)),
    );
    assert_eq!(put_to(&urls[0].url, &urls[0].headers, &good_a), 200);
    // The URL cannot put the path again: the store refuses, the object stays.
    assert_eq!(
        put_to(&urls[0].url, &urls[0].headers, &object(split_a, &b[..4000])),
        412,
        "a second PUT through the URL is refused by If-None-Match"
    );
    assert_eq!(put_to(&urls[1].url, &urls[1].headers, &bad_b), 200);

    // u-b's header is the planned one, its size too; its payload is not: show says so,
    // publish refuses naming it, and nothing can replace it through the URL.
    let shown = engine.show_operation("presigned", "op-url").await.unwrap();
    let statuses: Vec<(&str, Option<ObjectStatus>)> = shown
        .splits
        .iter()
        .map(|split| (split.split_id.as_str(), split.object))
        .collect();
    assert_eq!(
        statuses,
        [
            ("u-a", Some(ObjectStatus::Present)),
            ("u-b", Some(ObjectStatus::Different))
        ]
    );
    let error = engine
        .publish_operation("presigned", "op-url")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, MendError::FailedPrecondition { ids, .. } if ids == &["u-b"]),
        "{error:?}"
    );
    assert_eq!(
        put_to(&urls[1].url, &urls[1].headers, &object(split_b, &b)),
        412,
        "the damaged object cannot be replaced through its URL either"
    );
    let rows = engine
        .list_splits("presigned", &Default::default())
        .await
        .unwrap()
        .splits;
    assert!(rows.iter().all(|row| row.state == SplitState::Staged));
    engine.abort_operation("presigned", "op-url").await.unwrap();

    // A store that cannot presign says so, and the writer uploads through mend.
    let h = Harness::new(Backend::LocalDirectory).await;
    let ds = h.create_dataset("no-urls").await;
    h.engine
        .begin_operation(&plan(&ds, "op-local", &[("l-a", &a)], 10))
        .await
        .unwrap();
    let refused = h
        .engine
        .upload_urls(
            &ds,
            "op-local",
            &[ObjectToPut {
                split_id: "l-a".into(),
                object_sha256: hex(&a),
            }],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, MendError::CapabilityMissing { .. }),
        "{refused:?}"
    );
    println!(
        "presigned: 2 URLs signed over If-None-Match and the checksum; a second PUT refused \
         (412) twice; a payload that does not hash to its plan shown different and refused by \
         publish; none on a local directory"
    );
}

/// A begun operation's intent records what it expected of its dataset (the manifest version
/// it began at, no row for each split it stages, each split it replaces published: what an
/// operator reading the intent is shown) and plans each object as it will be written: the
/// size of the header begin answered, carrying the dataset's incarnation and the operation,
/// and the payload.
#[tokio::test]
async fn a_begun_intent_records_what_it_expected_and_plans_objects_as_written() {
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("expected").await;
        let old = payload("old", 500);
        engine
            .begin_operation(&plan(&ds, "op-old", &[("old", &old)], 10))
            .await
            .unwrap();
        engine
            .upload_object(&ds, "op-old", "old", body(&old, 100))
            .await
            .unwrap();
        engine.publish_operation(&ds, "op-old").await.unwrap();
        let at_begin = engine
            .catalog()
            .dataset(&ds)
            .await
            .unwrap()
            .manifest_version;
        assert!(
            at_begin > 0,
            "{backend}: the first publish moved the manifest"
        );

        let (a, b) = (payload("a", 300), payload("b", 4000));
        let request = merge_plan(&ds, "op-new", &[("n-a", &a), ("n-b", &b)], &["old"]);
        let begun = engine.begin_operation(&request).await.unwrap();
        let intents = engine.catalog().list_intents(&ds).await.unwrap();
        let [intent] = intents.as_slice() else {
            panic!("{backend}: one intent, the open operation's: {intents:?}")
        };
        assert_eq!(intent.operation_id, "op-new");
        assert_eq!(intent.expected.manifest_version, at_begin, "{backend}");
        assert_eq!(
            intent.expected.split_states,
            [
                ("n-a".to_string(), None),
                ("n-b".to_string(), None),
                ("old".to_string(), Some(SplitState::Published)),
            ],
            "{backend}"
        );
        let planned: Vec<(&str, u64)> = intent
            .effects
            .objects
            .iter()
            .map(|object| (object.split_id.as_str(), object.size))
            .collect();
        let written: Vec<(&str, u64)> = begun
            .splits
            .iter()
            .zip([&a, &b])
            .map(|(split, bytes)| {
                let header: format::SplitObjectHeader =
                    serde_json::from_str(&split.header_json).unwrap();
                assert_eq!(header.operation_id.as_deref(), Some("op-new"), "{backend}");
                assert!(!header.dataset_uid.is_empty(), "{backend}");
                let whole = whole_object(split, bytes).len() as u64;
                (split.split_id.as_str(), whole)
            })
            .collect();
        assert_eq!(
            planned, written,
            "{backend}: the objects planned as written"
        );
        checked += 1;
    }
    println!(
        "{checked} backends: the intent records what begin expected and plans objects as written"
    );
    assert_eq!(checked, Backend::ALL.len());
}

/// A publish is one atomic step: cut off before it lands, it leaves the operation armed with
/// nothing published; cut off after it landed (its answer lost), it leaves the operation
/// published with no intent. Either way the publish sent again answers published, and the
/// operation published once.
#[tokio::test]
async fn a_publish_cut_off_before_or_after_its_step_finishes_when_sent_again() {
    use mend::intent::IntentPhase;
    let mut checked = 0;
    for backend in Backend::ALL {
        for landed in [false, true] {
            let h = Harness::new(backend).await;
            let ds = h.create_dataset("cut-off").await;
            let bytes = payload("c", 300);
            h.engine
                .begin_operation(&plan(&ds, "op-cut", &[("s-c", &bytes)], 10))
                .await
                .unwrap();
            h.engine
                .upload_object(&ds, "op-cut", "s-c", body(&bytes, 100))
                .await
                .unwrap();
            let at = h.engine.dataset(&ds).await.unwrap().manifest_version;
            let crash = std::sync::Arc::new(mend::faults::CrashAt::new(1, landed));
            let error = h
                .engine
                .with_faults(crash.clone())
                .publish_operation(&ds, "op-cut")
                .await
                .unwrap_err();
            assert_eq!(
                crash.steps(),
                [mend::faults::DurableStep::PublishCommit],
                "{backend}: one step, {error:?}"
            );
            let intents = h.engine.catalog().list_intents(&ds).await.unwrap();
            let manifest = h.engine.dataset(&ds).await.unwrap().manifest_version;
            if landed {
                assert!(intents.is_empty(), "{backend}: settled with the publish");
                assert_eq!(manifest, at + 1, "{backend}");
            } else {
                assert_eq!(
                    intents.iter().map(|i| i.phase).collect::<Vec<_>>(),
                    [IntentPhase::Armed],
                    "{backend}: nothing was confirmed"
                );
                assert_eq!(manifest, at, "{backend}: nothing was published");
            }
            let published = h.engine.publish_operation(&ds, "op-cut").await.unwrap();
            assert_eq!(published.phase, OperationPhase::Published, "{backend}");
            assert_eq!(
                published.publish.as_ref().map(|p| p.manifest_version),
                Some(at + 1),
                "{backend}: published once"
            );
            assert!(
                h.engine
                    .catalog()
                    .list_intents(&ds)
                    .await
                    .unwrap()
                    .is_empty()
            );
            checked += 1;
        }
    }
    println!(
        "{checked} cut-off publishes (before and after their step, on every backend): each finished when sent again, published once"
    );
    assert_eq!(checked, 2 * Backend::ALL.len());
}

/// Upload URLs are signed only for what the operation can take: at most a stage batch of
/// objects (`limits.max_stage_batch`, here 2: two are signed, three refused), each split once,
/// each planned, each with a sha256 of 64 hex digits, and only while the lease runs. Each
/// refusal says which rule it broke, and none signs a URL or changes the operation.
#[tokio::test]
async fn upload_urls_are_signed_only_for_what_the_operation_can_take() {
    let clock = std::sync::Arc::new(mend::clock::ManualClock::new(1_800_000_000_000));
    let engine = engine_on_s3(mend::EngineOptions {
        max_stage_batch: 2,
        clock: clock.clone(),
        ..Default::default()
    })
    .await;
    engine
        .create_dataset("limits", &Default::default())
        .await
        .unwrap();
    let (a, b) = (payload("a", 100), payload("b", 200));
    let begun = engine
        .begin_operation(&plan("limits", "op-edge", &[("e-a", &a), ("e-b", &b)], 10))
        .await
        .unwrap();
    let put = |split_id: &str| ObjectToPut {
        split_id: split_id.into(),
        object_sha256: "ab".repeat(32),
    };

    let signed = engine
        .upload_urls("limits", "op-edge", &[put("e-a"), put("e-b")])
        .await
        .unwrap();
    assert_eq!(signed.len(), 2, "a batch of exactly the limit is signed");

    let mut refused = 0;
    let mut refuse = |objects: Vec<ObjectToPut>, says: &str, error: MendError| {
        assert!(
            matches!(&error, MendError::InvalidArgument { message } if message.contains(says)),
            "{objects:?}: expected InvalidArgument saying {says:?}, got {error:?}"
        );
        refused += 1;
    };
    let cases = [
        (
            vec![put("e-a"), put("e-b"), put("e-c")],
            "limits.max_stage_batch",
        ),
        (vec![put("e-a"), put("e-a")], "split e-a is asked for twice"),
        (vec![put("e-z")], "plans no split e-z"),
        (
            vec![ObjectToPut {
                split_id: "e-a".into(),
                object_sha256: "not hex".into(),
            }],
            "objects[0]",
        ),
    ];
    for (objects, says) in cases {
        let error = engine
            .upload_urls("limits", "op-edge", &objects)
            .await
            .unwrap_err();
        refuse(objects, says, error);
    }

    // Past the lease: a heartbeat first, then the URLs again.
    let lease_end = begun.lease_expires_at_ms.unwrap();
    clock.set_ms(lease_end);
    let error = engine
        .upload_urls("limits", "op-edge", &[put("e-a")])
        .await
        .unwrap_err();
    assert!(
        matches!(&error, MendError::FailedPrecondition { message, ids, .. }
            if message.contains("lease ran out") && ids == &["op-edge"]),
        "{error:?}"
    );
    refused += 1;

    let shown = engine.show_operation("limits", "op-edge").await.unwrap();
    assert_eq!(shown.phase, OperationPhase::Armed, "{shown:?}");
    assert!(
        shown
            .splits
            .iter()
            .all(|split| split.object == Some(ObjectStatus::Missing)),
        "no refusal put anything: {shown:?}"
    );
    println!("upload URLs: 2 signed at the batch limit, {refused} refusals each naming its rule");
    assert_eq!(refused, 5);
}

/// Bytes that are not a split object, put in an operation's place by its writer (an empty
/// object, a few bytes, the magic with a header that is not JSON), are "an object, not the
/// one planned" to every step, never a failure of the dataset: show says `different`,
/// publish and upload refuse naming the split, and a recovery sweep of the dataset still
/// settles its other operations.
#[tokio::test]
async fn bytes_that_are_not_a_split_object_are_refused_without_failing_the_dataset() {
    let mut refused = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = h.engine.with_intent_lease(1_000);
        let ds = h.create_dataset("garbage").await;
        let garbage: [(&str, Vec<u8>); 3] = [
            ("empty", Vec::new()),
            ("short", b"MEND".to_vec()),
            (
                "bad-header",
                [&b"MENDSPL1"[..], &5u32.to_le_bytes(), b"{oops"].concat(),
            ),
        ];
        let (store, _) = engine.objects().store();
        for (label, bytes) in &garbage {
            let operation = format!("op-{label}");
            let split = format!("g-{label}");
            let payload = payload(label, 100);
            let begun = engine
                .begin_operation(&BeginOperation {
                    lease_ms: Some(1_000),
                    checkpoint_delta: None,
                    ..plan(&ds, &operation, &[(&split, &payload)], 10)
                })
                .await
                .unwrap();
            store
                .put(
                    &Path::from(begun.splits[0].object_path.as_str()),
                    bytes.clone().into(),
                )
                .await
                .unwrap();
            let shown = engine.show_operation(&ds, &operation).await.unwrap();
            assert_eq!(
                shown.splits[0].object,
                Some(ObjectStatus::Different),
                "{backend} {label}"
            );
            let error = engine.publish_operation(&ds, &operation).await.unwrap_err();
            assert!(
                matches!(&error, MendError::FailedPrecondition { ids, .. } if ids.as_slice() == [split.as_str()]),
                "{backend} {label}: {error:?}"
            );
            let error = engine
                .upload_object(&ds, &operation, &split, body(&payload, 50))
                .await
                .unwrap_err();
            assert!(
                matches!(&error, MendError::AlreadyExists { .. }),
                "{backend} {label}: {error:?}"
            );
            refused += 3;
        }
        // A healthy operation of the same dataset, left by a writer that died after its
        // uploads: the sweep settles it although the others' objects are garbage.
        let good = payload("good", 100);
        engine
            .begin_operation(&BeginOperation {
                lease_ms: Some(1_000),
                ..plan(&ds, "op-good", &[("ok", &good)], 10)
            })
            .await
            .unwrap();
        engine
            .upload_object(&ds, "op-good", "ok", body(&good, 50))
            .await
            .unwrap();
        h.clock.advance_ms(10_000);
        let report = engine
            .recover(&ds, mend_contract::RecoveryMode::RollForward)
            .await
            .unwrap();
        assert_eq!(report.intents.len(), 4, "{backend}: {report:?}");
        let rows = h.rows(&ds).await;
        let ok = rows.iter().find(|row| row.split_id == "ok").unwrap();
        assert_ne!(
            ok.state,
            SplitState::Staged,
            "{backend}: the healthy one was settled"
        );
    }
    println!(
        "{refused} steps refused over 3 kinds of bytes that are not split objects, on every backend; the sweep settled the dataset's healthy operation each time"
    );
}

/// Moves an operation's intent to `to` just before the engine's `step`: another party acting
/// between a step's read of the intent and its conditional write. Before a publish's confirm:
/// recovery, as when the writer's lease ran out while its publish was on its way (abandoned)
/// or recovery rolled it forward (confirmed). Before an abort's fence: a publish confirming.
#[derive(Debug)]
struct IntentMovedBefore {
    step: mend::faults::DurableStep,
    catalog: std::sync::Arc<dyn mend::Catalog>,
    dataset_id: String,
    to: mend::intent::IntentPhase,
}

impl mend::faults::Faults for IntentMovedBefore {
    fn before(&self, step: &mend::faults::DurableStep) -> mend::Result<()> {
        if *step != self.step {
            return Ok(());
        }
        // `before` is synchronous; the test runs on a multi-threaded runtime.
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                let intents = self.catalog.list_intents(&self.dataset_id).await?;
                let [intent] = intents.as_slice() else {
                    panic!("one intent: {intents:?}");
                };
                let moved = mend::intent::Intent {
                    phase: self.to,
                    ..intent.clone()
                };
                self.catalog.update_intent(&moved, intent.phase).await
            })
        })
    }

    fn after(&self, _step: &mend::faults::DurableStep) -> mend::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_that_loses_its_intent_to_recovery_answers_what_recovery_made_of_it() {
    use mend::intent::IntentPhase;
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        for (to, operation_id) in [
            (IntentPhase::Abandoned, "op-abandoned"),
            (IntentPhase::EffectsConfirmed, "op-confirmed"),
        ] {
            let ds = h.create_dataset("raced").await;
            let bytes = payload(operation_id, 100);
            h.engine
                .begin_operation(&plan(&ds, operation_id, &[("s-r", &bytes)], 10))
                .await
                .unwrap();
            h.engine
                .upload_object(&ds, operation_id, "s-r", body(&bytes, 64))
                .await
                .unwrap();
            let racing = h.engine.with_faults(std::sync::Arc::new(IntentMovedBefore {
                step: mend::faults::DurableStep::PublishCommit,
                catalog: h.engine.catalog().clone(),
                dataset_id: ds.clone(),
                to,
            }));
            let answer = racing.publish_operation(&ds, operation_id).await;
            match to {
                // The writer is told its operation ended, as any later step would tell it,
                // and starts over; nothing of it is visible.
                IntentPhase::Abandoned => {
                    let error = answer.unwrap_err();
                    assert!(
                        error.operation_found() == Some(OperationFound::Ended),
                        "{backend}: {error:?}"
                    );
                    assert!(
                        h.rows(&ds)
                            .await
                            .iter()
                            .all(|row| row.state != SplitState::Published),
                        "{backend}"
                    );
                }
                // Confirmed by recovery: this publish finishes it.
                _ => {
                    let view = answer.unwrap_or_else(|e| panic!("{backend}: {e:?}"));
                    assert_eq!(view.phase, OperationPhase::Published, "{backend}");
                    assert!(
                        h.engine
                            .catalog()
                            .list_intents(&ds)
                            .await
                            .unwrap()
                            .is_empty()
                    );
                }
            }
            checked += 1;
        }
        // An abort racing the confirm of an older mend's publish (which confirmed in a write
        // of its own), which lands first: the abort's step is refused, and the abort says the
        // operation was confirmed (it publishes); its publish finishes.
        let ds = h.create_dataset("raced-abort").await;
        let bytes = payload("late-abort", 100);
        h.engine
            .begin_operation(&plan(&ds, "op-late-abort", &[("s-l", &bytes)], 10))
            .await
            .unwrap();
        h.engine
            .upload_object(&ds, "op-late-abort", "s-l", body(&bytes, 64))
            .await
            .unwrap();
        let racing = h.engine.with_faults(std::sync::Arc::new(IntentMovedBefore {
            step: mend::faults::DurableStep::EndOperation,
            catalog: h.engine.catalog().clone(),
            dataset_id: ds.clone(),
            to: IntentPhase::EffectsConfirmed,
        }));
        let error = racing
            .abort_operation(&ds, "op-late-abort")
            .await
            .unwrap_err();
        assert!(
            error.operation_found() == Some(OperationFound::Confirmed),
            "{backend}: {error:?}"
        );
        let view = h
            .engine
            .publish_operation(&ds, "op-late-abort")
            .await
            .unwrap();
        assert_eq!(view.phase, OperationPhase::Published, "{backend}");
        checked += 1;
    }
    println!(
        "{checked} steps whose intent another party moved before their write: publishes of \
         abandoned ones told they ended, of confirmed ones finished; aborts of confirmed ones \
         told so"
    );
    assert_eq!(checked, 3 * Backend::ALL.len());
}

/// Begins `operation_id` with one split moving p0 on to `to` (see [`plan`]) and uploads its
/// object.
async fn begin_and_upload(
    engine: &mend::Engine,
    dataset_id: &str,
    operation_id: &str,
    split_id: &str,
    bytes: &[u8],
    to: u64,
) {
    engine
        .begin_operation(&plan(dataset_id, operation_id, &[(split_id, bytes)], to))
        .await
        .unwrap();
    engine
        .upload_object(dataset_id, operation_id, split_id, body(bytes, 64))
        .await
        .unwrap();
}

/// Fails one kind of durable step before its write, every time: a process that dies there.
#[derive(Debug)]
struct DiesBefore(mend::faults::DurableStep);

impl mend::faults::Faults for DiesBefore {
    fn before(&self, step: &mend::faults::DurableStep) -> mend::Result<()> {
        if *step == self.0 {
            return Err(MendError::Unavailable {
                message: format!("the process died before {step}"),
                source: None,
            });
        }
        Ok(())
    }

    fn after(&self, _step: &mend::faults::DurableStep) -> mend::Result<()> {
        Ok(())
    }
}

/// Confirms an operation's intent (`Armed` to `EffectsConfirmed`) as the publish of an older
/// mend did, in a write of its own before the publish: its process died between the two. A
/// publish is one atomic step now; intents such an older mend left are still settled.
async fn confirm_as_an_older_mend(engine: &mend::Engine, dataset_id: &str, operation_id: &str) {
    use mend::intent::IntentPhase;
    let intent = engine
        .catalog()
        .list_intents(dataset_id)
        .await
        .unwrap()
        .into_iter()
        .find(|intent| intent.operation_id == operation_id)
        .expect("the operation's intent");
    let confirmed = mend::intent::Intent {
        phase: IntentPhase::EffectsConfirmed,
        ..intent
    };
    engine
        .catalog()
        .update_intent(&confirmed, IntentPhase::Armed)
        .await
        .unwrap();
}

/// mend-sim seed 33: an operation confirmed (by an older mend's publish, which confirmed in a
/// write of its own), then another operation published from the same checkpoint positions
/// before it did. Its publish can never apply; it used to stay confirmed for good, its abort
/// answering "being published" and recovery blocking on it. Its publish (and an abort) now
/// end it.
#[tokio::test]
async fn a_confirmed_operation_overtaken_from_its_own_positions_ends() {
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("overtaken").await;
        let (a, b) = (payload("a", 100), payload("b", 100));
        // Both start from p0 at 10, as a writer that lost track of its first one would.
        begin_and_upload(engine, &ds, "op-a", "s-a", &a, 20).await;
        begin_and_upload(engine, &ds, "op-b", "s-b", &b, 20).await;
        // Their deltas need p0 at 10: a first operation puts it there.
        begin_and_upload(engine, &ds, "op-first", "s-first", &payload("f", 10), 10).await;
        engine.publish_operation(&ds, "op-first").await.unwrap();
        // op-a's publish by an older mend confirms it, and its process dies before the
        // publish.
        confirm_as_an_older_mend(engine, &ds, "op-a").await;
        let shown = engine.show_operation(&ds, "op-a").await.unwrap();
        assert_eq!(shown.phase, OperationPhase::EffectsConfirmed, "{backend}");
        // op-b publishes from the same positions first.
        let b_view = engine.publish_operation(&ds, "op-b").await.unwrap();
        assert_eq!(b_view.phase, OperationPhase::Published, "{backend}");
        // op-a's publish, sent again, is told it ended; its process dies while rolling it
        // back, before the end is recorded: the intent is left fenced, stamped when, for
        // recovery to finish (never confirmed, which recovery would try to publish); an
        // abort agrees and finishes it; nothing is left.
        h.clock.advance_ms(3_000);
        let dies_rolling_back = engine.with_faults(std::sync::Arc::new(DiesBefore(
            mend::faults::DurableStep::RecordEnd,
        )));
        let refused = dies_rolling_back
            .publish_operation(&ds, "op-a")
            .await
            .unwrap_err();
        assert!(
            refused.operation_found() == Some(OperationFound::Ended)
                && refused.to_string().contains("overtaken"),
            "{backend}: {refused:?}"
        );
        let left: Vec<_> = engine
            .catalog()
            .list_intents(&ds)
            .await
            .unwrap()
            .into_iter()
            .map(|intent| (intent.operation_id, intent.phase, intent.updated_at_ms))
            .collect();
        assert_eq!(
            left,
            [(
                "op-a".to_string(),
                mend::intent::IntentPhase::Abandoned,
                h.clock_now()
            )],
            "{backend}"
        );
        let aborted = engine.abort_operation(&ds, "op-a").await.unwrap();
        assert_eq!(aborted.phase, OperationPhase::Ended, "{backend}");
        let rows = h.rows(&ds).await;
        assert!(
            rows.iter()
                .all(|row| row.split_id != "s-a" || row.state != SplitState::Published),
            "{backend}: {rows:?}"
        );
        assert!(
            engine.catalog().list_intents(&ds).await.unwrap().is_empty(),
            "{backend}: an intent is left"
        );
    }
}

/// mend-sim seeds 73 and 496: as in seed 33, an operation confirmed and another published
/// from the same checkpoint positions first; but its writer never came back (it lost track of
/// it). Its lease runs out: a roll-forward sweep, which used to block on it until an operator
/// ran exclusive recovery, abandons it (its publish can never apply), marking its row; its
/// writer, asking later, is told it ended.
#[tokio::test]
async fn recovery_ends_a_confirmed_operation_whose_delta_was_overtaken() {
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("overtaken-sweep").await;
        begin_and_upload(engine, &ds, "op-a", "s-a", &payload("a", 100), 20).await;
        begin_and_upload(engine, &ds, "op-b", "s-b", &payload("b", 100), 20).await;
        begin_and_upload(engine, &ds, "op-first", "s-first", &payload("f", 10), 10).await;
        engine.publish_operation(&ds, "op-first").await.unwrap();
        confirm_as_an_older_mend(engine, &ds, "op-a").await;
        engine.publish_operation(&ds, "op-b").await.unwrap();
        // While op-a's lease is live, the sweep waits for its writer.
        let report = engine
            .recover(&ds, mend_contract::RecoveryMode::RollForward)
            .await
            .unwrap();
        assert!(
            matches!(
                report.intents.as_slice(),
                [intent] if matches!(intent.decision, mend_contract::RecoveryDecision::Defer(_))
            ),
            "{backend}: {report:?}"
        );
        h.clock.advance_ms(600_000);
        let report = engine
            .recover(&ds, mend_contract::RecoveryMode::RollForward)
            .await
            .unwrap();
        let [settled] = report.intents.as_slice() else {
            panic!("{backend}: one intent: {report:?}");
        };
        assert!(
            matches!(
                settled.decision,
                mend_contract::RecoveryDecision::Abandon(_)
            ),
            "{backend}: {settled:?}"
        );
        assert_eq!(
            settled.outcome,
            mend::engine::Outcome::Executed,
            "{backend}: {settled:?}"
        );
        assert!(
            engine.catalog().list_intents(&ds).await.unwrap().is_empty(),
            "{backend}: an intent is left"
        );
        let rows = h.rows(&ds).await;
        let a = rows.iter().find(|row| row.split_id == "s-a").unwrap();
        assert_eq!(a.state, SplitState::MarkedForDeletion, "{backend}");
        let refused = engine.publish_operation(&ds, "op-a").await.unwrap_err();
        assert!(
            refused.operation_found() == Some(OperationFound::Ended),
            "{backend}: {refused:?}"
        );
        let aborted = engine.abort_operation(&ds, "op-a").await.unwrap();
        assert_eq!(aborted.phase, OperationPhase::Ended, "{backend}");
        let verified = engine.verify(&ds).await.unwrap();
        assert!(verified.violations.is_empty(), "{backend}: {verified:?}");
    }
}

/// mend-sim seed 35's shape: an abort that arrives before its operation's begin (a writer
/// giving up on a begin whose answer was lost, and the begin still on its way) is recorded, so
/// the begin landing after it is refused as ended and stages nothing; the abort sent again
/// answers ended too.
#[tokio::test]
async fn an_abort_before_its_begin_makes_the_begin_refuse_as_ended() {
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("abort-first").await;
        let aborted = engine.abort_operation(&ds, "op-early").await.unwrap();
        assert_eq!(aborted.phase, OperationPhase::Ended, "{backend}");
        let bytes = payload("early", 64);
        let refused = engine
            .begin_operation(&plan(&ds, "op-early", &[("s-early", &bytes)], 10))
            .await;
        let ended = match &refused {
            Ok(view) => view.phase == OperationPhase::Ended,
            Err(error) => error.operation_found() == Some(OperationFound::Ended),
        };
        assert!(ended, "{backend}: the begin after its abort: {refused:?}");
        assert!(h.rows(&ds).await.is_empty(), "{backend}: nothing staged");
        assert!(engine.catalog().list_intents(&ds).await.unwrap().is_empty());
        let again = engine.abort_operation(&ds, "op-early").await.unwrap();
        assert_eq!(again.phase, OperationPhase::Ended, "{backend}");
        checked += 1;
    }
    println!("{checked} backends: a begin after its abort was refused as ended, nothing staged");
    assert_eq!(checked, Backend::ALL.len());
}

/// An abort rolls back its own rows and nothing else: a split another request marked for
/// deletion (gc's to collect, its object still in the store, and the row what tells gc so) keeps
/// its row and its object through the abort of an operation beside it.
#[tokio::test]
async fn an_abort_rolls_back_only_its_own_rows() {
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("own-rows").await;
        begin_and_upload(engine, &ds, "op-old", "s-old", &payload("old", 64), 10).await;
        engine.publish_operation(&ds, "op-old").await.unwrap();
        engine
            .mark_for_deletion(&ds, &["s-old".into()])
            .await
            .unwrap();
        begin_and_upload(engine, &ds, "op-new", "s-new", &payload("new", 64), 20).await;
        let aborted = engine.abort_operation(&ds, "op-new").await.unwrap();
        engine.wait_for_cleanups().await;
        assert_eq!(aborted.phase, OperationPhase::Ended, "{backend}");
        let rows = row_states(&h, &ds).await;
        assert_eq!(
            rows,
            [("s-old".to_string(), SplitState::MarkedForDeletion)],
            "{backend}: the abort took its own row and left the other's"
        );
        assert_eq!(object_payload(&h, &ds, "s-old").await, payload("old", 64));
        checked += 1;
    }
    println!("{checked} backends: an abort left another split's marked row and object");
    assert_eq!(checked, Backend::ALL.len());
}

/// mend-sim seed 215: an operation's publish landed while its intent stayed, confirmed (a
/// writer's publish used to delete its intent in a step after the publish, and a process
/// that died between them left this; a catalog may still hold such intents). The checkpoint
/// has moved past the delta's start, by the publish itself: an abort must not take that for
/// another operation overtaking it. It answers that the operation published.
#[tokio::test]
async fn an_abort_of_an_operation_whose_own_publish_landed_answers_published() {
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("own-publish").await;
        begin_and_upload(engine, &ds, "op-x", "s-x", &payload("x", 100), 10).await;
        h.publish_leaving_intent(&ds, "op-x").await;
        let refused = engine.abort_operation(&ds, "op-x").await.unwrap_err();
        assert!(
            refused.operation_found() == Some(OperationFound::Published),
            "{backend}: {refused:?}"
        );
        let rows = h.rows(&ds).await;
        assert!(
            rows.iter()
                .any(|row| row.split_id == "s-x" && row.state == SplitState::Published),
            "{backend}: {rows:?}"
        );
        let published = engine.publish_operation(&ds, "op-x").await.unwrap();
        assert_eq!(published.phase, OperationPhase::Published, "{backend}");
    }
}

/// mend-sim seed 13329079666074005667: a copy of a writer's upload (a duplicated request)
/// passed its look at the live operation, then stalled while the operation published, a
/// merge replaced its split and gc collected the row and the object; its put landed after
/// that, and reconcile adopted the object, publishing a split the merge had replaced. An
/// object whose operation's publish is recorded, with no row for its split, was published and
/// removed since: reconcile discards it whatever the policy says, and says why.
#[tokio::test]
async fn an_upload_landing_after_its_split_was_replaced_and_collected_is_discarded() {
    const HOUR_MS: i64 = 60 * 60 * 1000;
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("late-copy").await;
        let uid = engine.dataset(&ds).await.unwrap().uid;
        // On the store's clock from the start: what published is recorded for a week.
        h.set_clock_past_wall_clock(0);
        begin_and_upload(
            engine,
            &ds,
            "op-first",
            "s-first",
            &payload("first", 64),
            10,
        )
        .await;
        engine.publish_operation(&ds, "op-first").await.unwrap();
        let merged = payload("merged", 64);
        let merge = merge_plan(&ds, "op-merge", &[("s-merged", &merged)], &["s-first"]);
        engine.begin_operation(&merge).await.unwrap();
        engine
            .upload_object(&ds, "op-merge", "s-merged", body(&merged, 64))
            .await
            .unwrap();
        engine.publish_operation(&ds, "op-merge").await.unwrap();
        // A gc sees the merge's mark; the next, past the grace period, collects the split.
        let seeing = engine.gc(&ds, "gc").await.unwrap();
        assert_eq!(seeing.seen, ["s-first"], "{backend}: {seeing:?}");
        h.set_clock_past_wall_clock(HOUR_MS);
        engine.gc(&ds, "gc").await.unwrap();
        let rows = h.rows(&ds).await;
        assert!(
            rows.iter().all(|row| row.split_id != "s-first"),
            "{backend}: gc collected the replaced split: {rows:?}"
        );
        // The copy of op-first's upload lands now.
        h.plant_orphan_of(&ds, "s-first", &uid, "op-first").await;
        h.set_clock_past_wall_clock(3 * HOUR_MS);

        let report = engine.reconcile(&ds, "operator").await.unwrap();
        assert!(report.adopted.is_empty(), "{backend}: {report:?}");
        assert_eq!(report.discarded.len(), 1, "{backend}: {report:?}");
        let (discarded, why) = &report.discarded[0];
        assert_eq!(discarded, "s-first", "{backend}");
        assert!(
            why.contains("op-first, which published it"),
            "{backend}: {why}"
        );
        let rows = h.rows(&ds).await;
        assert!(
            rows.iter()
                .all(|row| row.split_id != "s-first" || row.state != SplitState::Published),
            "{backend}: the replaced split stays removed: {rows:?}"
        );
        checked += 1;
    }
    println!(
        "{checked} backends: a late copy of a replaced, collected split's upload discarded, never adopted"
    );
    assert_eq!(checked, Backend::ALL.len());
}

/// mend-sim seed 22 (a store request stalled past every lease): a writer's upload was under
/// way when recovery abandoned its operation, and landed after gc had collected the row and
/// the object; reconcile found the object with no row and adopted it, publishing an operation
/// its writer had been told ended. The object is that operation's leftover: reconcile discards
/// it whatever the policy says (the default policy would adopt it), and says why. Seed
/// 1083818128378677243: the upload itself must not delete it (a reconcile may have staged a row
/// for it meanwhile), so before this the object was refused and left for good.
#[tokio::test]
async fn an_upload_landing_after_its_operation_ended_is_discarded_never_adopted() {
    const HOUR_MS: i64 = 60 * 60 * 1000;
    let mut checks = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("late-upload").await;
        let uid = engine.dataset(&ds).await.unwrap().uid;
        let bytes = payload("late", 64);
        engine
            .begin_operation(&plan(&ds, "op-late", &[("s-late", &bytes)], 10))
            .await
            .unwrap();
        let aborted = engine.abort_operation(&ds, "op-late").await.unwrap();
        engine.wait_for_cleanups().await;
        assert_eq!(aborted.phase, OperationPhase::Ended, "{backend}");
        // The upload lands now, after everything else of its operation is gone; beside it, an
        // orphan of an operation mend knows nothing of, which reconcile adopts.
        h.plant_orphan_of(&ds, "s-late", &uid, "op-late").await;
        h.plant_orphan(&ds, "s-lost", &uid, false).await;
        h.set_clock_past_wall_clock(2 * HOUR_MS);

        let report = engine.reconcile(&ds, "operator").await.unwrap();
        assert_eq!(report.adopted, ["s-lost"], "{backend}: {report:?}");
        assert!(report.refused.is_empty(), "{backend}: {report:?}");
        assert_eq!(report.discarded.len(), 1, "{backend}: {report:?}");
        let (discarded, why) = &report.discarded[0];
        assert_eq!(discarded, "s-late", "{backend}");
        assert!(
            why.contains("op-late, which ended without publishing"),
            "{backend}: {why}"
        );
        let rows = h.rows(&ds).await;
        let late = rows.iter().find(|row| row.split_id == "s-late");
        assert_eq!(
            late.map(|row| row.state),
            Some(SplitState::MarkedForDeletion),
            "{backend}: nothing of the ended operation is visible, and gc will take it: {rows:?}"
        );
        let audit = engine.catalog().list_audit(&ds, None).await.unwrap();
        assert!(
            audit
                .iter()
                .any(|record| record.outcome.as_str().is_some_and(|outcome| {
                    outcome.starts_with("discarded: written by operation op-late")
                })),
            "{backend}: the audit says what the host did instead of the policy's adoption: {audit:?}"
        );
        // The abort's answer stands.
        let refused = engine.publish_operation(&ds, "op-late").await.unwrap_err();
        assert!(
            refused.operation_found() == Some(OperationFound::Ended),
            "{backend}: {refused}"
        );
        // Gc deletes the leftover after the deletion grace period.
        h.set_clock_past_wall_clock(2 * HOUR_MS + 8 * 24 * HOUR_MS);
        let collected = engine.gc(&ds, "gc").await.unwrap();
        assert_eq!(collected.deleted, ["s-late"], "{backend}: {collected:?}");
        assert!(
            engine
                .objects()
                .read_header(&ds, "s-late")
                .await
                .unwrap()
                .is_none(),
            "{backend}"
        );
        checks += 9;
    }
    println!(
        "late upload: {checks} checks on {} backends: the object of an ended operation \
         discarded by reconcile (not adopted, not left) and collected by gc, an unknown one adopted",
        Backend::ALL.len()
    );
}

/// Simulator seed 7 with `--unkeyed-writers 1`: a begin sent again without an operation id
/// is a second operation with the same split ids. The first (begun by an older mend, which
/// wrote the intent and staged in two writes) had died after writing its intent, before
/// staging; the second staged the rows the first planned, wrote its own object
/// where the first's would go, and died too. Recovery took that object for damage to the
/// first, blocking every roll-forward sweep on the first until an operator ran exclusive
/// recovery. The object is the other operation's: roll-forward alone abandons the first
/// (which answers "ended", though its begin never staged) and publishes the second.
#[tokio::test]
async fn an_operation_whose_split_ids_another_took_over_is_abandoned_not_blocked() {
    use mend::engine::Outcome;
    use mend_contract::{RecoveryDecision, RecoveryMode};
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("taken-over").await;
        let bytes = payload("t", 64);
        let mut first = plan(&ds, "op-first", &[("s-1", &bytes)], 10);
        first.lease_ms = Some(5_000);
        // An older mend's begin wrote its intent in a write of its own and died before staging
        // its rows (its writer never learns its name, and begins again as another operation).
        // A begin is one atomic step now: the state is made by beginning it and taking back
        // its row and the record of its begin.
        engine.begin_operation(&first).await.unwrap();
        let (catalog, now) = (engine.catalog(), h.clock_now());
        let row = ["s-1".to_string()];
        catalog
            .mark_for_deletion(&ds, &row, now, None)
            .await
            .unwrap();
        catalog.delete_splits(&ds, &row, now, None).await.unwrap();
        catalog
            .forget_recorded_requests(&ds, now + 1, now)
            .await
            .unwrap();
        assert!(
            !engine
                .operation_ledger(&ds, "op-first")
                .await
                .unwrap()
                .begun
        );
        let mut second = plan(&ds, "op-second", &[("s-1", &bytes)], 10);
        second.lease_ms = Some(5_000);
        engine.begin_operation(&second).await.unwrap();
        engine
            .upload_object(&ds, "op-second", "s-1", body(&bytes, 16))
            .await
            .unwrap();

        h.clock.advance_ms(6_000);
        let report = engine
            .recover(&ds, RecoveryMode::RollForward)
            .await
            .unwrap();
        let settled = |operation_id: &str| {
            report
                .intents
                .iter()
                .find(|intent| intent.operation_id == operation_id)
                .map(|intent| (intent.decision.clone(), intent.outcome.clone()))
                .unwrap_or_else(|| panic!("{backend}: {report:?}"))
        };
        assert!(
            matches!(
                settled("op-first"),
                (RecoveryDecision::Abandon(_), Outcome::Executed)
            ),
            "{backend}: {report:?}"
        );
        // The second's effects were all in place: recovery published it.
        assert_eq!(
            settled("op-second"),
            (RecoveryDecision::RollForward, Outcome::Executed),
            "{backend}"
        );
        let refused = engine.publish_operation(&ds, "op-first").await.unwrap_err();
        assert!(
            refused.operation_found() == Some(OperationFound::Ended),
            "{backend}: {refused}"
        );
        let published = engine.publish_operation(&ds, "op-second").await.unwrap();
        assert_eq!(published.phase, OperationPhase::Published, "{backend}");
        assert!(
            engine.catalog().list_intents(&ds).await.unwrap().is_empty(),
            "{backend}: roll-forward alone settled both"
        );
        let rows = h.rows(&ds).await;
        assert_eq!(
            rows.iter()
                .map(|row| (row.split_id.as_str(), row.state))
                .collect::<Vec<_>>(),
            [("s-1", SplitState::Published)],
            "{backend}: the second operation's row"
        );
        let (header, _) = engine
            .objects()
            .read_header(&ds, "s-1")
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{backend}: the second operation's object is gone"));
        assert_eq!(
            header.operation_id.as_deref(),
            Some("op-second"),
            "{backend}: the first's abandonment touched nothing of the second"
        );
    }
    println!(
        "taken over: on {} backends, two operations with one split id, the second's object \
         where the first's would go: the first abandoned, the second published, by \
         roll-forward alone",
        Backend::ALL.len()
    );
}

/// A writer's step names a writer's operation: one naming gc's running operation (whose intent
/// is in the catalog like a writer's) is refused with `InvalidArgument`, naming what the
/// operation is, and leaves its intent as it was: a heartbeat would have moved gc's lease, a
/// publish confirmed gc's intent as a writer's.
#[tokio::test]
async fn a_writers_step_naming_another_kind_of_operation_is_refused() {
    let h = Harness::new(Backend::Memory).await;
    let engine = &h.engine;
    let ds = h.create_dataset("not-a-writer").await;
    let gc = mend::intent::Intent::armed(
        "op-gc".to_string(),
        mend::intent::OperationKind::Gc,
        &ds,
        "gc-node",
        mend::clock::Clock::now_ms(h.clock.as_ref()),
        60_000,
    );
    engine.catalog().put_intent(&gc).await.unwrap();
    let refused = |step: &str, result: Result<OperationView, MendError>| match result {
        Err(MendError::InvalidArgument { message }) => assert!(
            message.contains("operation op-gc is a Gc, not a writer's commit or merge"),
            "{step}: {message}"
        ),
        other => panic!("{step} was not refused: {other:?}"),
    };
    h.clock.advance_ms(1_000);
    refused(
        "heartbeat",
        engine
            .heartbeat_operation(&ds, "op-gc", Some(120_000))
            .await,
    );
    refused("publish", engine.publish_operation(&ds, "op-gc").await);
    let upload = engine
        .upload_object(&ds, "op-gc", "s-1", body(&payload("s-1", 8), 8))
        .await;
    match upload {
        Err(MendError::InvalidArgument { message }) => {
            assert!(message.contains("is a Gc"), "upload: {message}")
        }
        other => panic!("upload was not refused: {other:?}"),
    }
    assert_eq!(
        engine.catalog().list_intents(&ds).await.unwrap(),
        [gc],
        "gc's intent moved"
    );
    assert!(h.rows(&ds).await.is_empty());
    println!(
        "a heartbeat, a publish and an upload naming gc's operation: 3 refused, nothing moved"
    );
}

/// Aborts an operation through the catalog (as its writer's abort fences it) just before the
/// first of the engine's `step`s: the writer ending its operation between a sweep's look and
/// the sweep's write.
#[derive(Debug)]
struct AbortedBeforeOnce {
    step: mend::faults::DurableStep,
    catalog: std::sync::Arc<dyn mend::Catalog>,
    dataset_id: String,
    operation_id: String,
    now_ms: i64,
    done: std::sync::atomic::AtomicBool,
}

impl mend::faults::Faults for AbortedBeforeOnce {
    fn before(&self, step: &mend::faults::DurableStep) -> mend::Result<()> {
        if *step != self.step || self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                self.catalog
                    .abandon_intent(&self.dataset_id, &self.operation_id, None, self.now_ms)
                    .await
                    .map(|_| ())
            })
        })
    }

    fn after(&self, _step: &mend::faults::DurableStep) -> mend::Result<()> {
        Ok(())
    }
}

/// A sweep that observed an operation armed with its lease run out, and whose writer fenced
/// it (its abort) before the sweep's abandonment landed, answers that it was overtaken, not
/// that it took the operation over because its owner's lease ran out: the owner ended it.
/// Taken for its own, the abandonment reported a takeover of an operation whose writer had
/// just renewed its lease and then aborted it (found by `mend-sim`, seed
/// 8115394297526634718, `leases-respected`). The writer's abort then finishes it. On every
/// backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_overtaken_by_the_writers_abort_says_so() {
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("abort-first").await;
        // One of its two objects uploaded: never confirmed, the sweep abandons it.
        let (bytes, other) = (payload("s-a", 100), payload("s-b", 100));
        let mut begin = plan(&ds, "op-a", &[("s-a", &bytes), ("s-b", &other)], 10);
        begin.lease_ms = Some(1_000);
        engine.begin_operation(&begin).await.unwrap();
        engine
            .upload_object(&ds, "op-a", "s-a", body(&bytes, 64))
            .await
            .unwrap();
        h.clock.advance_ms(2_000);
        let racing = engine.with_faults(std::sync::Arc::new(AbortedBeforeOnce {
            step: mend::faults::DurableStep::SettleIntents,
            catalog: engine.catalog().clone(),
            dataset_id: ds.clone(),
            operation_id: "op-a".into(),
            now_ms: mend::clock::Clock::now_ms(h.clock.as_ref()),
            done: std::sync::atomic::AtomicBool::new(false),
        }));
        let report = racing
            .recover(&ds, mend_contract::RecoveryMode::RollForward)
            .await
            .unwrap();
        let [intent] = report.intents.as_slice() else {
            panic!("{backend}: {report:?}");
        };
        assert!(
            matches!(intent.decision, mend_contract::RecoveryDecision::Abandon(_)),
            "{backend}: {intent:?}"
        );
        match &intent.outcome {
            mend::engine::Outcome::Overtaken(why) => assert!(
                why.contains("Abandoned") && why.contains("abandoned already"),
                "{backend}: {why}"
            ),
            other => panic!("{backend}: the sweep claimed the abandonment: {other:?}"),
        }
        // Nothing of the sweep's: the intent is the abort's, fenced, its rows still staged.
        let intents = engine.catalog().list_intents(&ds).await.unwrap();
        assert_eq!(intents.len(), 1, "{backend}");
        assert_eq!(
            intents[0].phase,
            mend::intent::IntentPhase::Abandoned,
            "{backend}"
        );
        let rows = h.rows(&ds).await;
        assert!(
            rows.len() == 2 && rows.iter().all(|row| row.state == SplitState::Staged),
            "{backend}: {rows:?}"
        );
        // The writer's abort finishes what it began.
        let aborted = engine.abort_operation(&ds, "op-a").await.unwrap();
        assert_eq!(aborted.phase, OperationPhase::Ended, "{backend}");
        assert!(engine.catalog().list_intents(&ds).await.unwrap().is_empty());
        checked += 1;
    }
    println!(
        "{checked} backends: a sweep overtaken by its writer's abort answered overtaken, and \
         the abort finished"
    );
    assert_eq!(checked, Backend::ALL.len());
}

/// A begin whose kind and replaced splits disagree is refused with `InvalidArgument` naming
/// the rule, and writes nothing: a commit replaces nothing, a merge replaces at least one split
/// and moves no data in (no checkpoint delta).
#[tokio::test]
async fn a_begin_whose_kind_and_replaced_splits_disagree_is_refused() {
    let h = Harness::new(Backend::Memory).await;
    let engine = &h.engine;
    let ds = h.create_dataset("kinds").await;
    let bytes = payload("s-k", 16);
    let commit_replacing = BeginOperation {
        replaced_split_ids: vec!["s-old".into()],
        ..plan(&ds, "op-commit", &[("s-k", &bytes)], 10)
    };
    let merge_replacing_nothing = BeginOperation {
        kind: ExternalKind::Merge,
        checkpoint_delta: None,
        ..plan(&ds, "op-merge-1", &[("s-k", &bytes)], 10)
    };
    let merge_with_delta = BeginOperation {
        kind: ExternalKind::Merge,
        replaced_split_ids: vec!["s-old".into()],
        ..plan(&ds, "op-merge-2", &[("s-k", &bytes)], 10)
    };
    let before = h.write_fingerprint(&ds).await;
    let mut refused = 0;
    for (request, rule) in [
        (commit_replacing, "a commit replaces nothing"),
        (
            merge_replacing_nothing,
            "a merge replaces at least one split",
        ),
        (merge_with_delta, "a merge carries no checkpoint delta"),
    ] {
        match engine.begin_operation(&request).await {
            Err(MendError::InvalidArgument { message }) => {
                assert!(message.contains(rule), "{message}")
            }
            other => panic!("{rule}: not refused: {other:?}"),
        }
        refused += 1;
    }
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "a refused begin wrote"
    );
    assert!(engine.catalog().list_intents(&ds).await.unwrap().is_empty());
    println!("begins whose kind and replaced splits disagree: {refused} refused, nothing written");
    assert_eq!(refused, 3);
}

/// A begin sent again resumes its operation only if it plans the same operation: the same
/// kind, owner, rows, publish and objects. Sent again with any of them changed, it is refused
/// with `InvalidArgument` (an operation id names one operation), and the stored intent stays.
#[tokio::test]
async fn a_begin_sent_again_with_another_plan_is_refused() {
    let h = Harness::new(Backend::Memory).await;
    let engine = &h.engine;
    let ds = h.create_dataset("again").await;
    let (a, b) = (payload("s-a", 16), payload("s-b", 16));
    let first = plan(&ds, "op-1", &[("s-a", &a)], 10);
    engine.begin_operation(&first).await.unwrap();
    let stored = engine.catalog().list_intents(&ds).await.unwrap();
    // The same plan, later: resumed.
    h.clock.advance_ms(1_000);
    engine.begin_operation(&first).await.unwrap();

    let mut other_metadata = first.clone();
    other_metadata.splits[0].metadata_json = r#"{"num_docs": 4}"#.into();
    let mut other_size = first.clone();
    other_size.splits[0].size += 1;
    let mut other_checksum = first.clone();
    other_checksum.splits[0].sha256 = sha256(&b);
    let changed = [
        (
            "another kind",
            BeginOperation {
                kind: ExternalKind::Merge,
                replaced_split_ids: vec!["s-old".into()],
                checkpoint_delta: None,
                ..first.clone()
            },
        ),
        (
            "another owner",
            BeginOperation {
                node: "indexer-8".into(),
                ..first.clone()
            },
        ),
        ("another row", other_metadata),
        ("another publish", plan(&ds, "op-1", &[("s-a", &a)], 20)),
        ("another object size", other_size),
        ("another object checksum", other_checksum),
        ("another split", plan(&ds, "op-1", &[("s-b", &b)], 10)),
    ];
    let mut refused = 0;
    for (what, request) in changed {
        match engine.begin_operation(&request).await {
            Err(MendError::InvalidArgument { message }) => assert!(
                message.contains("was begun with another plan"),
                "{what}: {message}"
            ),
            other => panic!("{what}: not refused: {other:?}"),
        }
        refused += 1;
    }
    assert_eq!(engine.catalog().list_intents(&ds).await.unwrap(), stored);
    println!("a begin sent again: the same plan resumed, {refused} other plans refused");
    assert_eq!(refused, 7);
}

/// An abort rolls back the rows its begin inserted that are still staged, and their objects;
/// a row of the operation published meanwhile (here by a plain publish naming it) is no
/// longer the operation's to undo: it keeps its row and its object, while its sibling, still
/// staged, loses both.
#[tokio::test]
async fn an_abort_keeps_a_row_published_meanwhile_and_its_object() {
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("kept").await;
        let (a, b) = (payload("s-a", 64), payload("s-b", 64));
        engine
            .begin_operation(&plan(&ds, "op-two", &[("s-a", &a), ("s-b", &b)], 10))
            .await
            .unwrap();
        for (split_id, bytes) in [("s-a", &a), ("s-b", &b)] {
            engine
                .upload_object(&ds, "op-two", split_id, body(bytes, 64))
                .await
                .unwrap();
        }
        engine
            .publish(&PublishRequest::staged(ds.clone(), vec!["s-a".into()]))
            .await
            .unwrap();
        let aborted = engine.abort_operation(&ds, "op-two").await.unwrap();
        engine.wait_for_cleanups().await;
        assert_eq!(aborted.phase, OperationPhase::Ended, "{backend}");
        let rows = row_states(&h, &ds).await;
        assert_eq!(
            rows,
            [("s-a".to_string(), SplitState::Published)],
            "{backend}: the abort took the staged row and kept the published one"
        );
        assert_eq!(object_payload(&h, &ds, "s-a").await, a, "{backend}");
        let (store, _) = engine.objects().store();
        let gone = store.head(&engine.objects().path(&ds, "s-b")).await;
        assert!(
            matches!(gone, Err(object_store::Error::NotFound { .. })),
            "{backend}: the staged row's object stayed: {gone:?}"
        );
        checked += 3;
    }
    println!("an abort beside a published row: {checked} checks on every backend");
    assert_eq!(checked, 3 * Backend::ALL.len());
}

/// An object in place is the planned one only if its size, its checksum and its operation
/// all match the plan; any one of them different, whole and readable under its own header,
/// is shown as `Different` and refused by publish, naming it and saying how it differs (and
/// one not there at all as missing).
#[tokio::test]
async fn an_object_in_place_is_the_planned_one_only_if_size_checksum_and_operation_match() {
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("in-place").await;
        let planned = [
            ("s-checksum", payload("s-checksum", 64)),
            ("s-operation", payload("s-operation", 64)),
            ("s-size", payload("s-size", 64)),
            ("s-unwritten", payload("s-unwritten", 64)),
        ];
        let splits: Vec<(&str, &[u8])> = planned
            .iter()
            .map(|(id, bytes)| (*id, bytes.as_slice()))
            .collect();
        let begun = engine
            .begin_operation(&plan(&ds, "op-3", &splits, 10))
            .await
            .unwrap();
        let (store, _) = engine.objects().store();
        for split in begun
            .splits
            .iter()
            .filter(|split| split.split_id != "s-unwritten")
        {
            let mut header: format::SplitObjectHeader =
                serde_json::from_str(&split.header_json).unwrap();
            // Each object is whole under its own header, and differs from the plan in one way.
            let bytes = match split.split_id.as_str() {
                "s-checksum" => payload("other", 64),
                "s-operation" => {
                    header.operation_id = Some("op-else".into());
                    payload("s-operation", 64)
                }
                _ => payload("s-size", 65),
            };
            header.payload_size = bytes.len() as u64;
            header.payload_sha256 = sha256(&bytes);
            store
                .put(
                    &Path::from(split.object_path.as_str()),
                    format::encode(&header, &bytes).into(),
                )
                .await
                .unwrap();
        }
        let shown = engine.show_operation(&ds, "op-3").await.unwrap();
        for split in &shown.splits {
            let expected = match split.split_id.as_str() {
                "s-unwritten" => ObjectStatus::Missing,
                _ => ObjectStatus::Different,
            };
            assert_eq!(
                split.object,
                Some(expected),
                "{backend}: {}",
                split.split_id
            );
            checked += 1;
        }
        let error = engine.publish_operation(&ds, "op-3").await.unwrap_err();
        let MendError::FailedPrecondition { message, ids, .. } = &error else {
            panic!("{backend}: {error:?}");
        };
        assert_eq!(ids, &["s-checksum", "s-operation", "s-size", "s-unwritten"]);
        let different = "(different: another size, checksum or operation";
        for said in [
            format!("s-checksum {different}"),
            format!("s-operation {different}"),
            format!("s-size {different}"),
            "s-unwritten (missing)".to_string(),
        ] {
            assert!(message.contains(&said), "{backend}: {said} in {message}");
        }
        checked += 1;
    }
    println!("objects differing from the plan in one way each, and one missing: {checked} checks");
    assert_eq!(checked, 5 * Backend::ALL.len());
}

/// A merge's operation is shown as a merge: by its begin, by show, by its publish; a
/// commit's as a commit.
#[tokio::test]
async fn a_merge_is_shown_as_a_merge_and_a_commit_as_a_commit() {
    let h = Harness::new(Backend::Memory).await;
    let engine = &h.engine;
    let ds = h.create_dataset("kinds-shown").await;
    let old = payload("s-old", 32);
    begin_and_upload(engine, &ds, "op-commit", "s-old", &old, 10).await;
    assert_eq!(
        engine.show_operation(&ds, "op-commit").await.unwrap().kind,
        ExternalKind::Commit
    );
    let committed = engine.publish_operation(&ds, "op-commit").await.unwrap();
    assert_eq!(committed.kind, ExternalKind::Commit);

    let merged = payload("s-merged", 32);
    let begun = engine
        .begin_operation(&merge_plan(
            &ds,
            "op-merge",
            &[("s-merged", &merged)],
            &["s-old"],
        ))
        .await
        .unwrap();
    assert_eq!(begun.kind, ExternalKind::Merge);
    engine
        .upload_object(&ds, "op-merge", "s-merged", body(&merged, 64))
        .await
        .unwrap();
    let shown = engine.show_operation(&ds, "op-merge").await.unwrap();
    assert_eq!(shown.kind, ExternalKind::Merge);
    let published = engine.publish_operation(&ds, "op-merge").await.unwrap();
    assert_eq!(published.kind, ExternalKind::Merge);
    assert_eq!(published.phase, OperationPhase::Published);
    println!("kinds shown: a commit's three views say commit, a merge's three say merge");
}
