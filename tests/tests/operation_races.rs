//! Steps of one operation that race each other, sent at once hundreds of times on every
//! backend: whichever lands first decides, and every other answer tells the truth about it.
//!
//! Each pair begins a fresh operation (one split, a checkpoint delta moving partition `p0` on by
//! one) and then runs its two steps at once, on two engines over the same storage (two
//! replicas, or a writer and a supervisor), each after a random number of yields drawn from a
//! seeded RNG (`MEND_RACE_SEED` replays a run; the seed is printed). Then it reads what became
//! of the operation (its rows, the checkpoint) and holds every answer to it:
//!
//! - an answer that says `published` (a publish's view, a roll-forward executed, a 412 naming
//!   the publish) needs the split published and the checkpoint moved on;
//! - an answer that says `ended` (an abort's view, an abandonment executed, a 412 saying it
//!   ended) needs the split never published and the checkpoint where it was;
//! - a pair in which one answer says published and the other ended is a false answer however
//!   the operation ended, and so is any other refusal (a 412 "nothing was confirmed" for an
//!   operation that published).
//!
//! Every race is two-sided, so each side must have won some pairs: a run in which one side
//! always won did not exercise the race, and fails.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream;
use mend::engine::{
    BeginOperation, ExternalKind, OperationPhase, OperationView, Outcome, PlannedSplit,
};
use mend::model::{CheckpointDelta, PartitionDelta, SplitState};
use mend::objects::format::sha256;
use mend::{Engine, MendError, OperationFound};
use mend_contract::{RecoveryDecision, RecoveryMode};
use mend_tests::{Backend, Harness};
use object_store::ObjectStore;

/// Pairs per race per backend, unless `MEND_RACE_PAIRS` says otherwise.
const PAIRS: usize = 200;
/// Pairs per race on the S3-compatible test server, whose requests cost milliseconds of Python
/// each (200 pairs per race took 9 minutes there, 100 took nearly 4 in the whole suite, the
/// longest test of all). S3 is here for its conditional writes, which every pair exercises;
/// the interleavings are searched by the 200 pairs on the other backends and by the simulator.
/// `MEND_RACE_PAIRS` runs more.
const S3_PAIRS: usize = 40;
/// The lease of the operations a supervisor races: run out before the race starts.
const SHORT_LEASE_MS: u64 = 1_000;
/// Yields before a side starts: enough to let the other side's step get under way, or not.
const MAX_YIELDS: u64 = 60;
/// The least span of the sleep before a side starts (one time in three): long enough for a
/// slow step (a sweep) on a fast store to run whole first.
const MIN_SLEEP_SPAN_MS: u64 = 10;

/// What two steps race.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Race {
    /// The writer publishes on one replica and aborts on another.
    PublishAbort,
    /// The writer's publish and its retry, on two replicas.
    PublishPublish,
    /// An abort and a heartbeat of a live operation.
    AbortHeartbeat,
    /// An abort and an upload of the operation's object.
    AbortUpload,
    /// A publish, and a supervisor that finds the lease run out and the object not in place
    /// (it observed before the upload): it abandons.
    PublishAbandon,
    /// An abort, and a supervisor that finds the lease run out and every object in place: it
    /// rolls forward.
    AbortRollForward,
    /// The writer's publish (sent again after its lease ran out), and a supervisor rolling it
    /// forward meanwhile.
    PublishRollForward,
    /// A show and a publish.
    ShowPublish,
}

impl Race {
    const ALL: [Race; 8] = [
        Self::PublishAbort,
        Self::PublishPublish,
        Self::AbortHeartbeat,
        Self::AbortUpload,
        Self::PublishAbandon,
        Self::AbortRollForward,
        Self::PublishRollForward,
        Self::ShowPublish,
    ];

    /// Whether the object is uploaded before the race.
    fn uploads_first(self) -> bool {
        !matches!(self, Self::AbortUpload | Self::PublishAbandon)
    }

    /// Whether the lease has run out when the race starts.
    fn lease_run_out(self) -> bool {
        matches!(
            self,
            Self::PublishAbandon | Self::AbortRollForward | Self::PublishRollForward
        )
    }
}

/// What one side of a pair claims about the operation.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Claim {
    /// It published, or will: the answer of a winner, or of a loser naming the publish.
    Published,
    /// It ended without publishing and never will.
    Ended,
    /// Nothing about the end (a heartbeat or an upload that landed first, a show of a live
    /// operation, a supervisor deferring).
    Nothing,
    /// An answer no side may give in this race, with what it was.
    Wrong(String),
}

/// Who won, as the end state says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Published,
    Ended,
}

/// How one race went on one backend.
#[derive(Debug, Default)]
struct Tally {
    pairs: usize,
    /// Pairs whose end was a publish, or not.
    published: usize,
    ended: usize,
    /// Pairs won by the first side's step and by the second's.
    first_won: usize,
    second_won: usize,
    /// Pairs in which both sides claimed to have decided the operation, one each way.
    both_decided: usize,
    /// Every false answer, with its pair.
    false_answers: Vec<String>,
    /// The splits whose object an ended operation left (an upload that landed after its
    /// abort's roll-back), all of them discarded by reconcile at the end of the race.
    leftovers: Vec<String>,
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} pairs: {} published, {} ended; first side won {}, second {}; {} pairs where both \
             decided; {} false answers",
            self.pairs,
            self.published,
            self.ended,
            self.first_won,
            self.second_won,
            self.both_decided,
            self.false_answers.len()
        )?;
        if !self.leftovers.is_empty() {
            write!(
                f,
                "; {} objects of ended operations discarded by reconcile",
                self.leftovers.len()
            )?;
        }
        Ok(())
    }
}

/// A small seeded RNG (splitmix64): the schedule of yields, replayable from its seed.
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

fn payload(operation_id: &str) -> Vec<u8> {
    operation_id.bytes().cycle().take(3_000).collect()
}

fn body(bytes: &[u8]) -> impl futures::Stream<Item = Result<Bytes, MendError>> + Send + Unpin {
    stream::iter(vec![Ok(Bytes::copy_from_slice(bytes))])
}

/// A side's head start or delay: some yields (the other side's step is under way, or not
/// yet), and sometimes a few ms more (a slow step, such as a sweep, runs whole first).
#[derive(Debug, Clone, Copy)]
struct Delay {
    yields: u64,
    sleep_ms: u64,
}

impl Delay {
    /// A delay whose sleep, when there is one, spans up to a little more than the slowest
    /// step seen so far (`slowest_ms`): on a slow store a step takes tens of ms, and a delay
    /// shorter than the other side's step would never let it run whole first.
    fn draw(rng: &mut Rng, slowest_ms: u64) -> Delay {
        let span = (slowest_ms + slowest_ms / 4).max(MIN_SLEEP_SPAN_MS);
        Delay {
            yields: rng.below(MAX_YIELDS),
            sleep_ms: if rng.below(3) == 0 {
                rng.below(span)
            } else {
                0
            },
        }
    }

    async fn wait(self) {
        for _ in 0..self.yields {
            tokio::task::yield_now().await;
        }
        if self.sleep_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(self.sleep_ms)).await;
        }
    }
}

/// The answer of a publish, as a claim.
fn publish_claim(answer: &Result<OperationView, MendError>) -> Claim {
    match answer {
        Ok(view) if view.phase == OperationPhase::Published => Claim::Published,
        Ok(view) => Claim::Wrong(format!("publish answered phase {:?}", view.phase)),
        Err(error) => refusal_claim("publish", error),
    }
}

/// The answer of an abort, as a claim.
fn abort_claim(answer: &Result<OperationView, MendError>) -> Claim {
    match answer {
        Ok(view) if view.phase == OperationPhase::Ended => Claim::Ended,
        Ok(view) => Claim::Wrong(format!("abort answered phase {:?}", view.phase)),
        Err(error) => refusal_claim("abort", error),
    }
}

/// A 412 says, in structure, what the step found ([`MendError::operation_found`]): a publish
/// (or a confirmation, which in these races always publishes: nothing else publishes from the
/// same positions), or the end. Anything else (a refusal that says nothing of the operation,
/// such as "nothing was confirmed: abort it", or any other error) is not an answer a racing
/// step may give.
fn refusal_claim(step: &str, error: &MendError) -> Claim {
    match error.operation_found() {
        Some(OperationFound::Published | OperationFound::Confirmed) => Claim::Published,
        Some(OperationFound::Ended) => Claim::Ended,
        _ => Claim::Wrong(format!("{step} answered {error}")),
    }
}

/// A heartbeat's or an upload's answer: landing first claims nothing; refused, it says why.
fn live_step_claim(step: &str, answer: Result<(), MendError>) -> Claim {
    match answer {
        Ok(()) => Claim::Nothing,
        Err(error) => refusal_claim(step, &error),
    }
}

/// A show's answer: the phase it saw, if the operation had ended one way or the other.
fn show_claim(answer: &Result<OperationView, MendError>) -> Claim {
    match answer {
        Ok(view) => match view.phase {
            OperationPhase::Published => Claim::Published,
            OperationPhase::Ended => Claim::Ended,
            OperationPhase::Armed | OperationPhase::EffectsConfirmed => Claim::Nothing,
        },
        Err(error) => Claim::Wrong(format!("show answered {error}")),
    }
}

/// A supervisor's sweep, as a claim about the operation.
fn sweep_claim(
    operation_id: &str,
    answer: &Result<mend::engine::RecoveryReport, MendError>,
) -> Claim {
    let report = match answer {
        Ok(report) => report,
        Err(error) => return Claim::Wrong(format!("the sweep failed: {error}")),
    };
    let Some(intent) = report
        .intents
        .iter()
        .find(|intent| intent.operation_id == operation_id)
    else {
        // Settled before the sweep listed the intents.
        return Claim::Nothing;
    };
    match (&intent.outcome, &intent.decision) {
        (Outcome::Executed, RecoveryDecision::RollForward) => Claim::Published,
        (Outcome::Executed, RecoveryDecision::Abandon(_)) => Claim::Ended,
        (Outcome::Executed, RecoveryDecision::Stale) => Claim::Nothing,
        (Outcome::Reported, RecoveryDecision::Defer(_)) => Claim::Nothing,
        // The other side landed after the sweep observed and before it executed: nothing done.
        (Outcome::Overtaken(_), _) => Claim::Nothing,
        (outcome, decision) => Claim::Wrong(format!(
            "the sweep decided {decision:?} and reported {outcome:?}"
        )),
    }
}

/// Begins the pair's operation on `engine`: one split, partition `p0` moved on by one.
async fn begin(h: &Harness, dataset_id: &str, operation_id: &str, lease_ms: u64) -> (u64, String) {
    let dataset = h.engine.dataset(dataset_id).await.unwrap();
    let from = dataset
        .checkpoint
        .get("race")
        .and_then(|positions| positions.get("p0"))
        .copied();
    let split_id = format!("{operation_id}-s");
    let payload = payload(operation_id);
    let request = BeginOperation {
        dataset_id: dataset_id.into(),
        operation_id: Some(operation_id.into()),
        kind: ExternalKind::Commit,
        node: "racer".into(),
        lease_ms: Some(lease_ms),
        splits: vec![PlannedSplit {
            split_id: split_id.clone(),
            metadata_json: "{}".into(),
            size: payload.len() as u64,
            sha256: sha256(&payload),
        }],
        checkpoint_delta: Some(CheckpointDelta {
            source: "race".into(),
            partitions: vec![PartitionDelta {
                partition: "p0".into(),
                from_position: from,
                to_position: from.unwrap_or(0) + 1,
            }],
        }),
        replaced_split_ids: Vec::new(),
        publish_token: None,
    };
    h.engine.begin_operation(&request).await.unwrap();
    (from.unwrap_or(0), split_id)
}

/// The end of an operation as storage says it: its split published and the checkpoint moved
/// on, or neither. Half of one is a violation of its own, returned as an error.
async fn end_of(h: &Harness, dataset_id: &str, split_id: &str, from: u64) -> Result<End, String> {
    let dataset = h.engine.dataset(dataset_id).await.unwrap();
    let position = dataset
        .checkpoint
        .get("race")
        .and_then(|positions| positions.get("p0"))
        .copied()
        .unwrap_or(0);
    let published = h
        .rows(dataset_id)
        .await
        .iter()
        .any(|row| row.split_id == split_id && row.state == SplitState::Published);
    match (published, position == from + 1, position == from) {
        (true, true, _) => Ok(End::Published),
        (false, _, true) => Ok(End::Ended),
        _ => Err(format!(
            "split {split_id} published: {published}, checkpoint p0 at {position} (was {from})"
        )),
    }
}

/// Runs `pairs` pairs of `race` on `backend`.
async fn run_race(backend: Backend, race: Race, pairs: usize, rng: &mut Rng) -> Tally {
    let h = Harness::new(backend).await;
    let store: Arc<dyn ObjectStore> = h.store.clone().expect("every backend counts its store");
    let replica = Arc::new(h.another_process(store).await);
    let writer = Arc::new(h.engine.clone());
    let dataset_id = h.create_dataset("race").await;
    let mut tally = Tally::default();
    let mut slowest_ms = 0;
    for pair in 0..pairs {
        let operation_id = format!("op-{pair}");
        let lease_ms = if race.lease_run_out() {
            SHORT_LEASE_MS
        } else {
            60_000
        };
        let (from, split_id) = begin(&h, &dataset_id, &operation_id, lease_ms).await;
        let payload = payload(&operation_id);
        if race.uploads_first() {
            writer
                .upload_object(&dataset_id, &operation_id, &split_id, body(&payload))
                .await
                .unwrap();
        }
        if race.lease_run_out() {
            h.clock.advance_ms(SHORT_LEASE_MS as i64 + 1);
        }
        let (first_delay, second_delay) =
            (Delay::draw(rng, slowest_ms), Delay::draw(rng, slowest_ms));
        let first = {
            let (engine, ds, op, split, payload) = (
                writer.clone(),
                dataset_id.clone(),
                operation_id.clone(),
                split_id.clone(),
                payload.clone(),
            );
            tokio::spawn(async move {
                first_delay.wait().await;
                let started = std::time::Instant::now();
                let claim = first_side(race, &engine, &ds, &op, &split, &payload).await;
                (claim, started.elapsed())
            })
        };
        let second = {
            let (engine, ds, op, split, payload) = (
                replica.clone(),
                dataset_id.clone(),
                operation_id.clone(),
                split_id.clone(),
                payload.clone(),
            );
            tokio::spawn(async move {
                second_delay.wait().await;
                let started = std::time::Instant::now();
                let claim = second_side(race, &engine, &ds, &op, &split, &payload).await;
                (claim, started.elapsed())
            })
        };
        let ((first, first_took), (second, second_took)) =
            (first.await.unwrap(), second.await.unwrap());
        slowest_ms = slowest_ms.max(first_took.max(second_took).as_millis() as u64);
        // A supervisor's sweep may leave an operation it deferred, or one whose settlement
        // lost: the writer's own next step (here, a publish sent again) finishes it, as a
        // live writer would.
        settle_leftover(race, &writer, &dataset_id, &operation_id).await;
        tally.pairs += 1;
        let end = match end_of(&h, &dataset_id, &split_id, from).await {
            Ok(end) => end,
            Err(half) => {
                tally.false_answers.push(format!(
                    "{race:?} pair {pair}: half applied: {half}; answers {first:?} / {second:?}"
                ));
                continue;
            }
        };
        match end {
            End::Published => tally.published += 1,
            End::Ended => tally.ended += 1,
        }
        let claims = [&first, &second];
        if claims.contains(&&Claim::Published) && claims.contains(&&Claim::Ended) {
            tally.both_decided += 1;
        }
        for (side, claim) in [("first", &first), ("second", &second)] {
            let false_answer = match (claim, end) {
                (Claim::Wrong(what), _) => Some(what.clone()),
                (Claim::Published, End::Ended) => Some("claimed published, but it ended".into()),
                (Claim::Ended, End::Published) => Some("claimed ended, but it published".into()),
                _ => None,
            };
            if let Some(what) = false_answer {
                tally.false_answers.push(format!(
                    "{race:?} pair {pair} ({side} side, ended {end:?}): {what}; answers \
                     {first:?} / {second:?}"
                ));
            }
        }
        if race == Race::AbortUpload && end == End::Ended {
            // An upload that lands after its abort's roll-back leaves its object (deleting it
            // could take the object of a row a reconcile staged meanwhile): the ended
            // operation's leftover, which reconcile must discard, never adopt (below). Looked
            // for once the abort's clean-up, which runs after its answer, is done.
            h.engine.wait_for_cleanups().await;
            let left = h
                .engine
                .objects()
                .inspect(&dataset_id, &split_id)
                .await
                .unwrap();
            if left != mend::objects::FoundObject::Missing {
                tally.leftovers.push(split_id.clone());
            }
        }
        if let Some(first_won) = winner(race, &second, end) {
            if first_won {
                tally.first_won += 1;
            } else {
                tally.second_won += 1;
            }
        }
    }
    if !tally.leftovers.is_empty() {
        discard_leftovers(&h, &dataset_id, race, &mut tally).await;
    }
    tally
}

/// Reconcile, past the staged grace period, finds every object the race's ended operations
/// left and discards each (its header names an operation whose end is recorded), adopting
/// none: nothing of an ended operation ever becomes visible.
async fn discard_leftovers(h: &Harness, dataset_id: &str, race: Race, tally: &mut Tally) {
    use mend::clock::Clock;
    let grace = mend::model::DatasetConfig::default().staged_grace_period_ms as i64;
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    h.clock.set_ms(h.clock.now_ms().max(wall + grace + 1));
    let report = h
        .engine
        .reconcile(dataset_id, "operator")
        .await
        .unwrap_or_else(|error| panic!("{race:?}: reconcile the leftovers: {error}"));
    let mut discarded: Vec<&String> = report.discarded.iter().map(|(id, _)| id).collect();
    discarded.sort();
    let mut expected: Vec<&String> = tally.leftovers.iter().collect();
    expected.sort();
    if !report.adopted.is_empty() || discarded != expected {
        tally.false_answers.push(format!(
            "{race:?}: reconcile did not discard exactly the objects ended operations left \
             ({expected:?}): {report:?}"
        ));
    }
}

/// The step the first side (the writer, on the first engine) sends.
async fn first_side(
    race: Race,
    engine: &Engine,
    dataset_id: &str,
    operation_id: &str,
    split_id: &str,
    payload: &[u8],
) -> Claim {
    match race {
        Race::PublishAbort
        | Race::PublishPublish
        | Race::PublishRollForward
        | Race::ShowPublish => {
            publish_claim(&engine.publish_operation(dataset_id, operation_id).await)
        }
        Race::PublishAbandon => {
            // The object goes up, then the publish: the supervisor observed before either.
            let uploaded = engine
                .upload_object(dataset_id, operation_id, split_id, body(payload))
                .await
                .map(|_| ());
            match live_step_claim("upload", uploaded) {
                Claim::Nothing => {
                    publish_claim(&engine.publish_operation(dataset_id, operation_id).await)
                }
                refused => refused,
            }
        }
        Race::AbortHeartbeat | Race::AbortUpload | Race::AbortRollForward => {
            abort_claim(&engine.abort_operation(dataset_id, operation_id).await)
        }
    }
}

/// The step the second side (a replica, or its supervisor) sends.
async fn second_side(
    race: Race,
    engine: &Engine,
    dataset_id: &str,
    operation_id: &str,
    split_id: &str,
    payload: &[u8],
) -> Claim {
    match race {
        Race::PublishAbort => abort_claim(&engine.abort_operation(dataset_id, operation_id).await),
        Race::PublishPublish => {
            publish_claim(&engine.publish_operation(dataset_id, operation_id).await)
        }
        Race::AbortHeartbeat => live_step_claim(
            "heartbeat",
            engine
                .heartbeat_operation(dataset_id, operation_id, Some(60_000))
                .await
                .map(|_| ()),
        ),
        Race::AbortUpload => live_step_claim(
            "upload",
            engine
                .upload_object(dataset_id, operation_id, split_id, body(payload))
                .await
                .map(|_| ()),
        ),
        Race::PublishAbandon | Race::AbortRollForward | Race::PublishRollForward => sweep_claim(
            operation_id,
            &engine.recover(dataset_id, RecoveryMode::RollForward).await,
        ),
        Race::ShowPublish => show_claim(&engine.show_operation(dataset_id, operation_id).await),
    }
}

/// Finishes what a pair left in flight, as its writer would: an operation still armed or
/// confirmed after both sides answered (a heartbeat or an upload won, a show or a deferring
/// sweep claimed nothing) is published, or aborted if it cannot be.
async fn settle_leftover(race: Race, writer: &Engine, dataset_id: &str, operation_id: &str) {
    // The intent itself, not `show` (which also runs a probe sweep: a pair's worth of reads).
    let in_flight = writer
        .catalog()
        .list_intents(dataset_id)
        .await
        .unwrap_or_else(|error| panic!("{race:?}: list the intents after the pair: {error}"))
        .iter()
        .any(|intent| {
            intent.operation_id == operation_id
                && intent.phase != mend::intent::IntentPhase::Abandoned
        });
    if in_flight
        && writer
            .publish_operation(dataset_id, operation_id)
            .await
            .is_err()
    {
        writer
            .abort_operation(dataset_id, operation_id)
            .await
            .unwrap_or_else(|error| panic!("{race:?}: abort after the pair: {error}"));
    }
}

/// Whether the first side's step landed first (`Some(true)`), the second's, or whether the
/// race has no order to tell (two publishes of one operation both answer its publish).
fn winner(race: Race, second: &Claim, end: End) -> Option<bool> {
    match race {
        // The writer's publish (first) or the replica's abort decided.
        Race::PublishAbort => Some(end == End::Published),
        Race::PublishPublish => None,
        // The abort decides either way; the live step landed first if it claims nothing.
        Race::AbortHeartbeat | Race::AbortUpload => Some(*second != Claim::Nothing),
        // The writer published, or the supervisor abandoned first.
        Race::PublishAbandon => Some(end == End::Published),
        // The writer aborted, or the supervisor rolled forward first.
        Race::AbortRollForward => Some(end == End::Ended),
        // The writer's publish, or the supervisor's roll-forward, published it.
        Race::PublishRollForward => Some(*second != Claim::Published),
        // The publish landed before the show looked, or not.
        Race::ShowPublish => Some(*second == Claim::Published),
    }
}

fn winner_told(race: Race) -> bool {
    race != Race::PublishPublish
}

fn race_seed() -> u64 {
    std::env::var("MEND_RACE_SEED")
        .ok()
        .map(|text| text.parse().expect("MEND_RACE_SEED is a u64"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

fn race_pairs(backend: Backend) -> usize {
    std::env::var("MEND_RACE_PAIRS")
        .ok()
        .map(|text| text.parse().expect("MEND_RACE_PAIRS is a number"))
        .unwrap_or(if backend == Backend::S3 {
            S3_PAIRS
        } else {
            PAIRS
        })
}

async fn every_race_on(backend: Backend) {
    let seed = race_seed();
    let pairs = race_pairs(backend);
    println!("operation races on {backend}: MEND_RACE_SEED={seed} MEND_RACE_PAIRS={pairs}");
    let mut rng = Rng(seed);
    let mut failures = Vec::new();
    let mut decisive = 0;
    for race in Race::ALL {
        let tally = run_race(backend, race, pairs, &mut rng).await;
        println!("  {race:?}: {tally}");
        decisive += tally.pairs;
        assert_eq!(tally.pairs, pairs, "{backend} {race:?}: every pair ran");
        if tally.both_decided > 0 {
            failures.push(format!(
                "{race:?}: {} pairs where both sides claimed to have decided",
                tally.both_decided
            ));
        }
        failures.extend(tally.false_answers.iter().take(5).cloned());
        // A race where one side never won did not race.
        if winner_told(race) && (tally.first_won == 0 || tally.second_won == 0) {
            failures.push(format!(
                "{race:?}: one side never won ({tally}); the race was not exercised"
            ));
        }
    }
    println!(
        "operation races on {backend}: {decisive} pairs checked, {} failures",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "operation races on {backend} (MEND_RACE_SEED={seed}):\n- {}",
        failures.join("\n- ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_steps_answer_the_truth_on_memory() {
    every_race_on(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_steps_answer_the_truth_on_a_local_directory() {
    every_race_on(Backend::LocalDirectory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_steps_answer_the_truth_on_postgres() {
    every_race_on(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_steps_answer_the_truth_on_s3() {
    every_race_on(Backend::S3).await;
}

/// The write that races a begin staging the same new split: each as `mend serve` sends it,
/// refused when an unresolved operation names one of its splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Racer {
    /// [`Engine::stage_unless_in_the_way`], create-only and upsert in turn.
    Stage,
    /// [`Engine::publish_unless_in_the_way`] of the split, its object written before.
    Publish,
    /// [`Engine::mark_unless_in_the_way`] of the split.
    Mark,
}

impl fmt::Display for Racer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Racer::Stage => "stage",
            Racer::Publish => "publish",
            Racer::Mark => "mark",
        })
    }
}

/// How a write that refuses operations in its way and a begin naming the same split went, on
/// one backend.
#[derive(Debug, Default)]
struct WriteBeginTally {
    pairs: usize,
    /// The begin landed first: it holds the row, and the write was refused naming it.
    begin_won: usize,
    /// The write landed first, and the other side's answer says so.
    write_won: usize,
    false_answers: Vec<String>,
}

/// A write sent as `mend serve` sends it (`racer`) and a begin staging the same new split, on
/// two engines at once, held to one of the two serial orders. The begin first: the write is
/// refused with `RecoveryRequired` naming the operation, and the row is the begin's, staged,
/// its intent there. The write first: a stage inserts the row and the begin is refused with
/// `FailedPrecondition` naming the split, leaving no intent; a publish or a mark finds no row
/// (`NotFound`) and the begin takes it. Anything else (both taking the row, a stage answering
/// "existing" or overwriting the operation's row, a publish or a mark of the operation's row
/// while its intent names it) is a false answer.
async fn write_and_begin_race_on(
    backend: Backend,
    racer: Racer,
    pairs: usize,
    rng: &mut Rng,
) -> WriteBeginTally {
    use mend::model::{PublishRequest, StageMode, StageOutcome, StageRequest, StageSplit};

    let h = Harness::new(backend).await;
    let store: Arc<dyn ObjectStore> = h.store.clone().expect("every backend counts its store");
    let replica = Arc::new(h.another_process(store).await);
    let writer = Arc::new(h.engine.clone());
    let dataset_id = h.create_dataset(&format!("{racer}-begin")).await;
    let mut tally = WriteBeginTally::default();
    let mut slowest_ms = 0;
    for pair in 0..pairs {
        let mode = if pair % 2 == 0 {
            StageMode::CreateOnly
        } else {
            StageMode::Upsert
        };
        let operation_id = format!("op-{racer}-{pair}");
        let split_id = format!("{racer}-{pair}");
        if racer == Racer::Publish {
            // A publish looks for the split's object before its atomic step.
            h.put_objects(&dataset_id, [&split_id]).await;
        }
        let payload = payload(&operation_id);
        let begin = BeginOperation {
            dataset_id: dataset_id.clone(),
            operation_id: Some(operation_id.clone()),
            kind: ExternalKind::Commit,
            node: "writer".into(),
            lease_ms: Some(60_000),
            splits: vec![PlannedSplit {
                split_id: split_id.clone(),
                metadata_json: "{}".into(),
                size: payload.len() as u64,
                sha256: sha256(&payload),
            }],
            checkpoint_delta: None,
            replaced_split_ids: Vec::new(),
            publish_token: None,
        };
        let (begin_delay, write_delay) =
            (Delay::draw(rng, slowest_ms), Delay::draw(rng, slowest_ms));
        let begun = {
            let engine = writer.clone();
            tokio::spawn(async move {
                begin_delay.wait().await;
                let started = std::time::Instant::now();
                (engine.begin_operation(&begin).await, started.elapsed())
            })
        };
        // What the write answered: `Ok(true)` for a stage that inserted the row, `Ok(false)`
        // for any other write that landed.
        let written = {
            let engine = replica.clone();
            let (dataset_id, split_id) = (dataset_id.clone(), split_id.clone());
            tokio::spawn(async move {
                write_delay.wait().await;
                let started = std::time::Instant::now();
                let answer = match racer {
                    Racer::Stage => {
                        let stage = StageRequest {
                            dataset_id,
                            mode,
                            node: "stager".into(),
                            splits: vec![StageSplit {
                                split_id,
                                metadata_json: "{}".into(),
                            }],
                        };
                        engine.stage_unless_in_the_way(&stage).await.map(|result| {
                            result.splits.len() == 1
                                && result.splits[0].outcome == StageOutcome::Inserted
                        })
                    }
                    Racer::Publish => {
                        let publish = PublishRequest::staged(dataset_id, vec![split_id]);
                        engine
                            .publish_unless_in_the_way(&publish)
                            .await
                            .map(|_| false)
                    }
                    Racer::Mark => engine
                        .mark_unless_in_the_way(&dataset_id, &[split_id])
                        .await
                        .map(|_| false),
                };
                (answer, started.elapsed())
            })
        };
        let ((begun, begin_took), (written, write_took)) =
            (begun.await.unwrap(), written.await.unwrap());
        slowest_ms = slowest_ms.max(begin_took.max(write_took).as_millis() as u64);
        tally.pairs += 1;
        let row = h
            .rows(&dataset_id)
            .await
            .into_iter()
            .find(|row| row.split_id == split_id);
        // Each side stages under a node of its own.
        let holder = row.as_ref().map(|row| row.node.as_str());
        let state = row.as_ref().map(|row| row.state);
        let intent_left = writer
            .catalog()
            .list_intents(&dataset_id)
            .await
            .unwrap()
            .iter()
            .any(|intent| intent.operation_id == operation_id);
        let begins_row = holder == Some("writer") && state == Some(SplitState::Staged);
        match (racer, &begun, &written) {
            (
                _,
                Ok(_),
                Err(MendError::RecoveryRequired {
                    operation_id: named,
                }),
            ) if *named == operation_id && begins_row && intent_left => {
                tally.begin_won += 1;
            }
            (Racer::Stage, Err(MendError::FailedPrecondition { ids, .. }), Ok(true))
                if *ids == [split_id.clone()] && holder == Some("stager") && !intent_left =>
            {
                tally.write_won += 1;
            }
            (Racer::Publish | Racer::Mark, Ok(_), Err(MendError::NotFound { .. }))
                if begins_row && intent_left =>
            {
                tally.write_won += 1;
            }
            _ => tally.false_answers.push(format!(
                "pair {pair} ({mode:?}): begin {:?}; {racer} {:?}; the row holds {holder:?} \
                 ({state:?}), the intent {}",
                begun.as_ref().map(|view| view.phase),
                written,
                if intent_left { "is there" } else { "is not" }
            )),
        }
        if begun.is_ok() {
            // The row's operation ends, so the dataset's intents stay few.
            writer
                .abort_operation(&dataset_id, &operation_id)
                .await
                .unwrap_or_else(|error| panic!("abort {operation_id} after the pair: {error}"));
        }
    }
    tally
}

async fn write_and_begin_on(backend: Backend, racer: Racer) {
    let seed = race_seed();
    let pairs = race_pairs(backend);
    let tally = write_and_begin_race_on(backend, racer, pairs, &mut Rng(seed)).await;
    println!(
        "a {racer} unless in the way and a begin of one split on {backend} \
         (MEND_RACE_SEED={seed}): {} pairs: begin first {}, {racer} first {}, {} false answers",
        tally.pairs,
        tally.begin_won,
        tally.write_won,
        tally.false_answers.len()
    );
    assert_eq!(tally.pairs, pairs, "every pair ran");
    assert!(
        tally.false_answers.is_empty(),
        "{racer} on {backend} (MEND_RACE_SEED={seed}):\n- {}",
        tally
            .false_answers
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n- ")
    );
    assert!(
        tally.begin_won > 0 && tally.write_won > 0,
        "{racer} on {backend} (MEND_RACE_SEED={seed}): one side never won (begin {}, {racer} \
         {}): the race was not exercised",
        tally.begin_won,
        tally.write_won
    );
}

/// Each write `mend serve` refuses when an operation is in its way, raced in turn.
async fn writes_and_begins_on(backend: Backend) {
    for racer in [Racer::Stage, Racer::Publish, Racer::Mark] {
        write_and_begin_on(backend, racer).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_and_a_begin_of_one_split_answer_the_truth_on_memory() {
    writes_and_begins_on(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_and_a_begin_of_one_split_answer_the_truth_on_a_local_directory() {
    writes_and_begins_on(Backend::LocalDirectory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_and_a_begin_of_one_split_answer_the_truth_on_postgres() {
    writes_and_begins_on(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_and_a_begin_of_one_split_answer_the_truth_on_s3() {
    writes_and_begins_on(Backend::S3).await;
}
