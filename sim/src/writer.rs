//! The writers through the operation protocol: begin, upload, perhaps heartbeat or stop, then
//! publish, abort, or both at once from two replicas; an operation whose end a writer does not
//! know is resolved before the next (or forgotten, by a forgetful writer), and some requests
//! land a second time, late ([`Echoes`]). Every answer's claim about its operation's end goes
//! in the history.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, stream};
use mend::engine::{BeginOperation, ExternalKind, OperationPhase, OperationView, PlannedSplit};
use mend::model::{CheckpointDelta, PartitionDelta};
use mend::objects::format::sha256;
use mend::{Engine, MendError, OperationFound};

use crate::check::{Claim, History, OperationRecord};
use crate::client::with_retries;
use crate::replica::Replica;
use crate::rng::SimRng;
use crate::schedule::{Config, DATASET, OPERATION_LEASE_MS, SOURCE, pause, read_position};
use crate::trace::Trace;

pub(crate) fn payload_of(split_id: &str) -> Vec<u8> {
    split_id.bytes().cycle().take(64).collect()
}

fn body(bytes: &[u8]) -> impl futures::Stream<Item = Result<Bytes, MendError>> + Send + Unpin {
    stream::iter(vec![Ok(Bytes::copy_from_slice(bytes))])
}

/// `bytes` arriving slowly: in [`SLOW_UPLOAD_CHUNKS`] pieces over `over_ms` simulated ms, as
/// a large object's upload takes its time.
fn slow_body(
    bytes: &[u8],
    over_ms: u64,
) -> impl futures::Stream<Item = Result<Bytes, MendError>> + Send + Unpin {
    let pieces: Vec<Bytes> = bytes
        .chunks(bytes.len().div_ceil(SLOW_UPLOAD_CHUNKS).max(1))
        .map(Bytes::copy_from_slice)
        .collect();
    let gap = Duration::from_millis(over_ms / pieces.len().max(1) as u64);
    Box::pin(stream::iter(pieces).then(move |piece| async move {
        tokio::time::sleep(gap).await;
        Ok(piece)
    }))
}

/// Percent of a writer's operations that are merges, when it has a published operation to
/// replace.
const MERGE_PCT: u64 = 30;

/// Percent of operations whose uploads are slow (each object takes half a lease to two leases
/// to arrive), their writers heartbeating meanwhile, as the writers' guide says.
const SLOW_UPLOAD_PCT: u64 = 20;
/// The pieces a slow upload arrives in.
const SLOW_UPLOAD_CHUNKS: usize = 8;

/// What an answer to a step that ends an operation claims about it.
fn claim_of(answer: &Result<OperationView, MendError>) -> Claim {
    match answer {
        Ok(view) => match view.phase {
            OperationPhase::Published => Claim::Published,
            OperationPhase::Ended => Claim::Ended,
            OperationPhase::Armed | OperationPhase::EffectsConfirmed => Claim::Nothing,
        },
        Err(error) => refusal_claim(error),
    }
}

/// What a begin's answer claims, for a begin sent at `sent_ms`: begun (the operation is live,
/// and may publish), or what a refusal names.
fn begin_claim(answer: &Result<OperationView, MendError>, sent_ms: u64) -> Claim {
    match answer {
        Ok(view)
            if matches!(
                view.phase,
                OperationPhase::Armed | OperationPhase::EffectsConfirmed
            ) =>
        {
            Claim::Begun { sent_ms }
        }
        answer => claim_of(answer),
    }
}

/// A 412 says, in structure, what the step found of its operation: the publish, a
/// confirmation (which publishes unless another operation publishes from the same positions
/// first), or the end ([`MendError::operation_found`]); any other answer claims nothing about
/// the end.
fn refusal_claim(error: &MendError) -> Claim {
    match error.operation_found() {
        Some(OperationFound::Published) => Claim::Published,
        Some(OperationFound::Confirmed) => Claim::PublishesUnlessOvertaken,
        Some(OperationFound::Ended) => Claim::Ended,
        Some(_) | None => Claim::Nothing,
    }
}

/// A publish's answer: its view, or a refusal. A refusal that names neither the publish nor
/// the end says the operation has not published, and, in this run's writers (which give an
/// operation up once its publish is refused), never will.
fn publish_claim(answer: &Result<OperationView, MendError>) -> Claim {
    match answer {
        Err(error @ (MendError::FailedPrecondition { .. } | MendError::NotFound { .. })) => {
            match refusal_claim(error) {
                Claim::Nothing => Claim::NotPublished,
                claim => claim,
            }
        }
        answer => claim_of(answer),
    }
}

/// Percent of the operations a writer resolves that it first asks about by sending their
/// begin again.
const RESOLVE_BY_BEGIN_PCT: u64 = 40;
/// Percent of a keyed writer's aborts answered ended that it checks by sending the begin
/// again: the begin must answer that the operation ended, never begin it anew.
const RECHECK_BY_BEGIN_PCT: u64 = 30;

/// Percent of a protocol writer's requests that reach a replica a second time, later: a copy
/// the network duplicated, or a client's retry layer sent again after the writer had moved
/// on. The copy lands 0 to [`ECHO_DELAY_MS`] after the request, so it is reordered with the
/// writer's next steps (a begin landing after its publish, an upload or a publish after the
/// abort, an abort after the publish).
const ECHO_PCT: u64 = 5;
/// How late an echo lands at most, in simulated ms.
const ECHO_DELAY_MS: u64 = 4_000;

/// The copies of requests in flight (see [`ECHO_PCT`]): each answers as the request would, and
/// what it claims about its operation's end is held to storage as any answer is. The run waits
/// for every copy before its quiet phase.
#[derive(Clone, Default)]
pub(crate) struct Echoes {
    in_flight: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    sent: Arc<std::sync::atomic::AtomicUsize>,
}

impl Echoes {
    /// Waits for every copy sent to be answered; returns how many were.
    pub(crate) async fn landed(&self) -> usize {
        let handles = std::mem::take(
            &mut *self
                .in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for handle in handles {
            handle.await.expect("a request's copy panicked");
        }
        self.sent.load(Ordering::SeqCst)
    }
}

/// What an upload's answer claims: only what a refusal names.
fn upload_claim(answer: &Result<(), MendError>) -> Claim {
    match answer {
        Ok(()) => Claim::Nothing,
        Err(error) => refusal_claim(error),
    }
}

/// A writer through the operation protocol: begin, upload, perhaps heartbeat or stop, then
/// publish, abort, or both at once from two replicas.
pub(crate) async fn protocol_writer(
    index: usize,
    replicas: Vec<Replica>,
    mut rng: SimRng,
    config: Config,
    history: Arc<Mutex<History>>,
    trace: Trace,
    echoes: Echoes,
) {
    let client = Client {
        replicas: &replicas,
        trace: &trace,
        history: &history,
        echoes: &echoes,
    };
    let partition = format!("w{index}");
    let forgetful = index + config.forgetful_writers >= config.protocol_writers;
    let unkeyed = index < config.unkeyed_writers;
    // The operation whose end this writer does not know (it crashed, or its last answer was
    // unknown): as the exactly-once loop of docs/src/writers.md says, the writer sends it again until it
    // knows, and only then reads the position it continues from.
    // With it, the begin that began it (a keyed writer's: sent again, it asks where the
    // operation stands).
    let mut in_doubt: Option<(String, Option<BeginOperation>)> = None;
    // Operations this writer was told published and no merge of it replaced yet, with their
    // splits.
    let mut mergeable: Vec<(String, Vec<String>)> = Vec::new();
    for number in 0..config.operations_each {
        pause(&mut rng, 0, 400).await;
        if let Some((operation_id, begun_by)) = in_doubt.take() {
            if forgetful {
                trace.line(format!("{operation_id}: forgotten by its writer"));
            } else {
                resolve(&client, &mut rng, &operation_id, begun_by.as_ref()).await;
            }
        }
        let operation_id = format!("w{index}-{number}");
        let reader = replicas[rng.below(replicas.len() as u64) as usize].engine();
        let from = match read_position(&reader, &partition, &mut rng, &history, &trace).await {
            Ok(from) => from,
            Err(error) => {
                trace.line(format!(
                    "{operation_id}: cannot read the checkpoint: {error}"
                ));
                continue;
            }
        };
        let splits: Vec<String> = (0..rng.between(1, 2))
            .map(|split| format!("{operation_id}-s{split}"))
            .collect();
        let mut request = begin_request(index, &partition, &operation_id, unkeyed, &splits, from);
        // Sometimes a merge: the new splits replace every split of one operation this writer
        // saw publish, which become marked (and, after the deletion grace period, go).
        let merging = (!mergeable.is_empty() && rng.chance(MERGE_PCT))
            .then(|| mergeable.swap_remove(rng.below(mergeable.len() as u64) as usize));
        if let Some((replaced_operation, replaced)) = &merging {
            trace.line(format!(
                "{operation_id}: a merge replacing {replaced_operation}'s {replaced:?}"
            ));
            // A merge moves no data in, so it carries no checkpoint delta.
            request.kind = ExternalKind::Merge;
            request.replaced_split_ids = replaced.clone();
            request.checkpoint_delta = None;
        }
        let operation_id = match begin(
            &client,
            &mut rng,
            operation_id,
            &partition,
            from,
            &splits,
            &request,
            unkeyed,
        )
        .await
        {
            Ok(operation_id) => operation_id,
            Err(unknown) => {
                if unknown.is_none() {
                    mergeable.extend(merging);
                }
                in_doubt = unknown.map(|id| (id, Some(request.clone())));
                continue;
            }
        };
        let claim = |claim: Claim, by: String| {
            history
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .claim(&operation_id, claim, by, trace.now_ms());
        };
        let uploaded_all =
            upload_all(&client, &mut rng, &config, &operation_id, &splits, &claim).await;
        if crate::faults::gate(rng.chance(config.crash_pct)) {
            trace.line(format!("{operation_id}: the writer crashes"));
            in_doubt = Some((operation_id.clone(), (!unkeyed).then(|| request.clone())));
            continue;
        }
        maybe_slow(&client, &mut rng, &operation_id, &claim).await;
        let begun_by = (!unkeyed).then_some(&request);
        match end_operation(
            &client,
            &mut rng,
            &operation_id,
            uploaded_all,
            begun_by,
            &claim,
        )
        .await
        {
            Some(true) => mergeable.push((operation_id.clone(), splits.clone())),
            // Ended: what it would have replaced is still published.
            Some(false) => mergeable.extend(merging),
            None => {
                in_doubt = Some((operation_id.clone(), (!unkeyed).then(|| request.clone())));
            }
        }
    }
}

/// A protocol writer's begin, recorded in the history and sent until it is answered. Answers
/// the operation's id to go on with (an unkeyed writer's is the one the engine gave), or,
/// when it cannot go on, the id of an operation whose end it does not know (`None`: it was
/// not begun, or it is left to recovery unnamed).
#[allow(clippy::too_many_arguments)]
async fn begin(
    client: &Client<'_>,
    rng: &mut SimRng,
    mut operation_id: String,
    partition: &str,
    from: Option<u64>,
    splits: &[String],
    request: &BeginOperation,
    unkeyed: bool,
) -> Result<String, Option<String>> {
    let (replicas, history, trace) = (client.replicas, client.history, client.trace);
    history
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .operations
        .push(OperationRecord {
            operation_id: operation_id.clone(),
            partition: partition.to_string(),
            from: from.unwrap_or(0),
            split_ids: splits.to_vec(),
            replaced_split_ids: request.replaced_split_ids.clone(),
            merge: request.kind == ExternalKind::Merge,
            invoked_ms: trace.now_ms(),
            ..OperationRecord::default()
        });
    trace.line(format!(
        "{operation_id}: begin from {from:?} with {splits:?}"
    ));
    let begin = |engine: Engine| {
        let request = request.clone();
        async move { engine.begin_operation(&request).await }
    };
    let sent_ms = trace.now_ms();
    let begun = with_retries(replicas, rng, trace, &operation_id, begin).await;
    if !unkeyed && begun.is_ok() {
        let mut history = history.lock().unwrap_or_else(PoisonError::into_inner);
        let claim = begin_claim(&begun, sent_ms);
        if matches!(claim, Claim::Begun { .. }) {
            history.grant(&operation_id, sent_ms, OPERATION_LEASE_MS);
        }
        history.claim(
            &operation_id,
            claim,
            format!("begin answered {:?}", begun.as_ref().map(|view| view.phase)),
            trace.now_ms(),
        );
    }
    // An unkeyed begin sent again is another operation, not a copy (see `unkeyed_writers`).
    if !unkeyed {
        client.maybe_echo(rng, &operation_id, "begin", begin, begin_claim);
    }
    match begun {
        Err(error) => {
            trace.line(format!("{operation_id}: begin answered {error}"));
            if error.certainly_not_applied() {
                history
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .claim(
                        &operation_id,
                        Claim::NotBegun,
                        format!("begin answered {error}"),
                        trace.now_ms(),
                    );
                return Err(None);
            }
            if unkeyed {
                // Its name unknown, nobody can end it but recovery.
                trace.line(format!("{operation_id}: left to recovery, unnamed"));
                return Err(None);
            }
            return Err(Some(operation_id));
        }
        Ok(view) if unkeyed => {
            // From here on the operation is known by the name the engine gave it.
            trace.line(format!("{operation_id}: named {}", view.operation_id));
            let mut history = history.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(record) = history
                .operations
                .iter_mut()
                .find(|record| record.operation_id == operation_id)
            {
                record.operation_id = view.operation_id.clone();
            }
            operation_id = view.operation_id;
        }
        Ok(_) => {}
    }
    Ok(operation_id)
}

/// A protocol writer's uploads, in order; a crash may come between any two (then it stops
/// uploading). Answers whether every object was uploaded.
async fn upload_all(
    client: &Client<'_>,
    rng: &mut SimRng,
    config: &Config,
    operation_id: &str,
    splits: &[String],
    claim: &impl Fn(Claim, String),
) -> bool {
    let mut uploaded_all = true;
    let slow_ms = rng
        .chance(SLOW_UPLOAD_PCT)
        .then(|| rng.between(OPERATION_LEASE_MS / 2, OPERATION_LEASE_MS * 2));
    for split_id in splits {
        if crate::faults::gate(rng.chance(config.crash_pct / 2)) {
            break;
        }
        let payload = payload_of(split_id);
        let upload = |engine: Engine| {
            let (operation_id, split_id, payload) =
                (operation_id.to_string(), split_id.clone(), payload.clone());
            async move {
                let uploaded = match slow_ms {
                    None => {
                        engine
                            .upload_object(DATASET, &operation_id, &split_id, body(&payload))
                            .await
                    }
                    Some(ms) => {
                        engine
                            .upload_object(
                                DATASET,
                                &operation_id,
                                &split_id,
                                slow_body(&payload, ms),
                            )
                            .await
                    }
                };
                uploaded.map(|_| ())
            }
        };
        let uploaded = match slow_ms {
            None => with_retries(client.replicas, rng, client.trace, operation_id, upload).await,
            Some(_) => {
                // Heartbeats through the upload, each a third to two thirds of a lease after
                // the one before, drawn apart so that the upload's own draws do not move.
                let mut beats = SimRng::new(rng.next_u64());
                let done = AtomicBool::new(false);
                let uploading = async {
                    let uploaded =
                        with_retries(client.replicas, rng, client.trace, operation_id, upload)
                            .await;
                    done.store(true, Ordering::SeqCst);
                    uploaded
                };
                let heartbeating = async {
                    loop {
                        pause(
                            &mut beats,
                            OPERATION_LEASE_MS / 3,
                            OPERATION_LEASE_MS * 2 / 3,
                        )
                        .await;
                        if done.load(Ordering::SeqCst)
                            || heartbeat(client, &mut beats, operation_id, claim)
                                .await
                                .is_err()
                        {
                            return;
                        }
                    }
                };
                futures::join!(uploading, heartbeating).0
            }
        };
        client.maybe_echo(rng, operation_id, "upload", upload, |answer, _| {
            upload_claim(answer)
        });
        client
            .trace
            .line(format!("{operation_id}: upload {split_id}: {uploaded:?}"));
        if let Err(error) = uploaded {
            uploaded_all = false;
            claim(refusal_claim(&error), format!("upload answered {error}"));
            break;
        }
    }
    uploaded_all
}

/// Sometimes a writer is slow: past the lease (the supervisor may settle its operation
/// first), with or without a heartbeat before.
async fn maybe_slow(
    client: &Client<'_>,
    rng: &mut SimRng,
    operation_id: &str,
    claim: &impl Fn(Claim, String),
) {
    if rng.chance(25) {
        if rng.chance(50) {
            let _ = heartbeat(client, rng, operation_id, claim).await;
        }
        pause(rng, OPERATION_LEASE_MS / 2, OPERATION_LEASE_MS * 2).await;
    }
}

/// One heartbeat of `operation_id`, for a lease of [`OPERATION_LEASE_MS`], sent until it is
/// answered: a renewal is recorded as the lease it grants, a refusal as what it claims.
async fn heartbeat(
    client: &Client<'_>,
    rng: &mut SimRng,
    operation_id: &str,
    claim: &impl Fn(Claim, String),
) -> Result<OperationView, MendError> {
    let heartbeat = |engine: Engine| {
        let operation_id = operation_id.to_string();
        async move {
            engine
                .heartbeat_operation(DATASET, &operation_id, Some(OPERATION_LEASE_MS))
                .await
        }
    };
    let sent_ms = client.trace.now_ms();
    let beat = with_retries(client.replicas, rng, client.trace, operation_id, heartbeat).await;
    client.maybe_echo(rng, operation_id, "heartbeat", heartbeat, |answer, _| {
        claim_of(answer)
    });
    client.trace.line(format!(
        "{operation_id}: heartbeat: {:?}",
        beat.as_ref().map(|v| v.phase)
    ));
    match &beat {
        Ok(view) if view.phase == OperationPhase::Armed => client
            .history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .grant(operation_id, sent_ms, OPERATION_LEASE_MS),
        Ok(_) => {}
        Err(error) => claim(refusal_claim(error), format!("heartbeat answered {error}")),
    }
    beat
}

/// The begin a protocol writer sends: its splits, each a payload derived from its id, and a
/// checkpoint delta moving its partition on by one from `from`.
fn begin_request(
    index: usize,
    partition: &str,
    operation_id: &str,
    unkeyed: bool,
    splits: &[String],
    from: Option<u64>,
) -> BeginOperation {
    BeginOperation {
        dataset_id: DATASET.into(),
        // An unkeyed writer lets the engine name the operation: a begin sent again after
        // an unknown answer is another operation.
        operation_id: (!unkeyed).then(|| operation_id.to_string()),
        kind: ExternalKind::Commit,
        node: format!("writer-{index}"),
        lease_ms: Some(OPERATION_LEASE_MS),
        splits: splits
            .iter()
            .map(|split_id| {
                let payload = payload_of(split_id);
                PlannedSplit {
                    split_id: split_id.clone(),
                    metadata_json: "{}".into(),
                    size: payload.len() as u64,
                    sha256: sha256(&payload),
                }
            })
            .collect(),
        checkpoint_delta: Some(CheckpointDelta {
            source: SOURCE.into(),
            partitions: vec![PartitionDelta {
                partition: partition.to_string(),
                from_position: from,
                to_position: from.unwrap_or(0) + 1,
            }],
        }),
        replaced_split_ids: Vec::new(),
        publish_token: None,
    }
}

/// How a protocol writer ends its operation, drawn: an abort (more often when an upload
/// failed), a publish and an abort at once from two replicas, or a publish (given up with an
/// abort when refused without a word on its end). Answers how the writer was told it ended
/// (`Some(true)`: published), if it was.
async fn end_operation(
    client: &Client<'_>,
    rng: &mut SimRng,
    operation_id: &str,
    uploaded_all: bool,
    begun_by: Option<&BeginOperation>,
    claim: &impl Fn(Claim, String),
) -> Option<bool> {
    let (replicas, trace) = (client.replicas, client.trace);
    let ending = rng.below(100);
    if ending < 10 || !uploaded_all && ending < 50 {
        let aborted = send_end(End::Abort, client, rng, operation_id).await;
        claim(claim_of(&aborted), format!("abort answered {aborted:?}"));
        let told = told_end(&aborted);
        if let (Some(false), Some(request)) = (told, begun_by)
            && rng.chance(RECHECK_BY_BEGIN_PCT)
        {
            recheck_by_begin(client, rng, operation_id, request, claim).await;
        }
        told
    } else if ending < 18 {
        // A publish and an abort sent at once, from two replicas.
        let (first, second) = (
            &replicas[rng.below(replicas.len() as u64) as usize],
            &replicas[rng.below(replicas.len() as u64) as usize],
        );
        let id = operation_id;
        let (published, aborted) = futures::join!(
            first.serve(|engine| async move { engine.publish_operation(DATASET, id).await }),
            second.serve(|engine| async move { engine.abort_operation(DATASET, id).await })
        );
        trace.line(format!(
            "{operation_id}: publish and abort at once: {:?} / {:?}",
            published.as_ref().map(|v| v.phase),
            aborted.as_ref().map(|v| v.phase)
        ));
        claim(
            publish_claim(&published),
            "a publish racing an abort".into(),
        );
        claim(claim_of(&aborted), "an abort racing a publish".into());
        told_end(&published).or(told_end(&aborted))
    } else {
        let published = send_end(End::Publish, client, rng, operation_id).await;
        claim(
            publish_claim(&published),
            format!("publish answered {published:?}"),
        );
        // Refused without a word on its end (objects missing, the checkpoint moved): the
        // writer gives it up, as a client is told to.
        match &published {
            Err(error) if refusal_claim(error) == Claim::Nothing && !error.is_retryable() => {
                let aborted = send_end(End::Abort, client, rng, operation_id).await;
                claim(claim_of(&aborted), format!("abort answered {aborted:?}"));
                told_end(&aborted)
            }
            answer => told_end(answer),
        }
    }
}

/// The step that ends an operation.
#[derive(Debug, Clone, Copy)]
enum End {
    Publish,
    Abort,
}

/// What a protocol writer sends its requests through: the replicas, and where their answers
/// and late copies go.
#[derive(Clone, Copy)]
struct Client<'a> {
    replicas: &'a [Replica],
    trace: &'a Trace,
    history: &'a Arc<Mutex<History>>,
    echoes: &'a Echoes,
}

impl Client<'_> {
    /// Sometimes sends `step` again later, to a replica drawn anew, and records what its
    /// answer claims about `operation_id` (judged by `claim`).
    fn maybe_echo<T, F, Fut>(
        &self,
        rng: &mut SimRng,
        operation_id: &str,
        what: &'static str,
        step: F,
        claim: fn(&Result<T, MendError>, u64) -> Claim,
    ) where
        F: FnOnce(Engine) -> Fut,
        Fut: std::future::Future<Output = Result<T, MendError>> + Send + 'static,
        T: std::fmt::Debug + Send + 'static,
    {
        if !rng.chance(ECHO_PCT) {
            return;
        }
        // Its draws are made whether or not the copy is let through.
        let send = crate::faults::allow();
        let delay_ms = rng.between(0, ECHO_DELAY_MS);
        // Served by the process running when it was sent: cut off if that one crashes first.
        let replica = &self.replicas[rng.below(self.replicas.len() as u64) as usize];
        if !send {
            return;
        }
        let (process, index) = (replica.process(), replica.index);
        let copy = step(process.engine.clone());
        let (trace, history, operation_id) = (
            self.trace.clone(),
            self.history.clone(),
            operation_id.to_string(),
        );
        trace.line(format!(
            "{operation_id}: a copy of its {what} lands in {delay_ms} ms"
        ));
        let handle = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            // The copy is sent now: as a new request, for what its answer claims.
            let sent_ms = trace.now_ms();
            let answer = process
                .unless_crashed(copy)
                .await
                .unwrap_or_else(|| Err(crate::replica::crash_error(index)));
            trace.line(format!(
                "{operation_id}: the late copy of its {what} answered {answer:?}"
            ));
            history
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .claim(
                    &operation_id,
                    claim(&answer, sent_ms),
                    format!("a late copy of its {what} answered {answer:?}"),
                    trace.now_ms(),
                );
        });
        self.echoes.sent.fetch_add(1, Ordering::SeqCst);
        self.echoes
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(handle);
    }
}

/// Sends `step` of `operation_id` (with retries) and traces its answer; sometimes a copy of it
/// lands later ([`Echoes`]).
async fn send_end(
    step: End,
    client: &Client<'_>,
    rng: &mut SimRng,
    operation_id: &str,
) -> Result<OperationView, MendError> {
    let Client {
        replicas, trace, ..
    } = *client;
    let end = |engine: Engine| {
        let operation_id = operation_id.to_string();
        async move {
            match step {
                End::Publish => engine.publish_operation(DATASET, &operation_id).await,
                End::Abort => engine.abort_operation(DATASET, &operation_id).await,
            }
        }
    };
    let answer = with_retries(replicas, rng, trace, operation_id, end).await;
    let what = match step {
        End::Publish => "publish",
        End::Abort => "abort",
    };
    // A late copy claims only what it names: a publish refused for another reason than the
    // end says nothing, since its writer may publish after it.
    client.maybe_echo(rng, operation_id, what, end, |answer, _| claim_of(answer));
    trace.line(format!(
        "{operation_id}: {step:?}: {:?}",
        answer.as_ref().map(|v| v.phase)
    ));
    answer
}

/// Whether `answer` tells its writer how the operation ended: published, or ended without
/// publishing. "Confirmed" does not (another operation may overtake it); a writer sends the
/// publish again until it is told.
fn knows_end(answer: &Result<OperationView, MendError>) -> bool {
    told_end(answer).is_some()
}

/// How `answer` tells its writer the operation ended: `Some(true)` published, `Some(false)`
/// ended without publishing, `None` not said.
fn told_end(answer: &Result<OperationView, MendError>) -> Option<bool> {
    match claim_of(answer) {
        Claim::Published => Some(true),
        Claim::Ended => Some(false),
        _ => None,
    }
}

/// Sends `operation_id`'s begin again after its abort answered ended, as a writer checking
/// where its operation stands: what the answer claims goes in the history.
async fn recheck_by_begin(
    client: &Client<'_>,
    rng: &mut SimRng,
    operation_id: &str,
    request: &BeginOperation,
    claim: &impl Fn(Claim, String),
) {
    let sent_ms = client.trace.now_ms();
    let begin = |engine: Engine| {
        let request = request.clone();
        async move { engine.begin_operation(&request).await }
    };
    let begun = with_retries(client.replicas, rng, client.trace, operation_id, begin).await;
    client.trace.line(format!(
        "{operation_id}: its begin sent again after its abort: {:?}",
        begun.as_ref().map(|view| view.phase)
    ));
    claim(
        begin_claim(&begun, sent_ms),
        format!("a begin sent again after the abort answered {begun:?}"),
    );
}

/// Sends an operation whose end its writer does not know again until it does: sometimes first
/// its begin (`begun_by`, a keyed writer's: it answers where the operation stands, and never
/// begins one that ended), then its publish (which answers published, or why not), then,
/// refused for another reason than its end, its abort. Faults are drawn per request, so this
/// ends; a bound keeps a broken run finite.
async fn resolve(
    client: &Client<'_>,
    rng: &mut SimRng,
    operation_id: &str,
    begun_by: Option<&BeginOperation>,
) {
    let Client { trace, history, .. } = *client;
    let claim = |claim: Claim, by: String| {
        history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .claim(operation_id, claim, by, trace.now_ms());
    };
    if let Some(request) = begun_by
        && rng.chance(RESOLVE_BY_BEGIN_PCT)
    {
        let sent_ms = trace.now_ms();
        let begin = |engine: Engine| {
            let request = request.clone();
            async move { engine.begin_operation(&request).await }
        };
        let begun = with_retries(client.replicas, rng, trace, operation_id, begin).await;
        claim(
            begin_claim(&begun, sent_ms),
            format!(
                "a resolving begin answered {:?}",
                begun.as_ref().map(|v| v.phase)
            ),
        );
        if knows_end(&begun) {
            return;
        }
    }
    for _ in 0..20 {
        let published = send_end(End::Publish, client, rng, operation_id).await;
        claim(
            publish_claim(&published),
            format!("a resolving publish answered {published:?}"),
        );
        if knows_end(&published) {
            return;
        }
        if matches!(&published, Err(error) if refusal_claim(error) == Claim::Nothing && !error.is_retryable())
        {
            let aborted = send_end(End::Abort, client, rng, operation_id).await;
            claim(
                claim_of(&aborted),
                format!("a resolving abort answered {aborted:?}"),
            );
            if knows_end(&aborted) {
                return;
            }
        }
        pause(rng, 50, 500).await;
    }
    trace.line(format!("{operation_id}: still unresolved after 20 rounds"));
}
