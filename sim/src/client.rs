//! How every actor sends a request: to a replica drawn anew each time (a client behind a load
//! balancer), sent again while its outcome is unknown, sometimes cut off part way (the
//! client's connection drops and the server drops the request's future wherever it was), and
//! sometimes crashed at a write chosen in advance ([`crate::store::AimedCrash`]: the request
//! stops dead at its `k`th put or delete, before or after its effect, as when the process
//! serving it dies there; the replica's process itself lives on, its memory kept).

use std::time::Duration;

use mend::{Engine, MendError};

use crate::replica::Replica;
use crate::rng::SimRng;
use crate::schedule::pause;
use crate::store::{AimedCrash, with_aimed_crash};
use crate::trace::Trace;

/// Percent of requests cut off part way (see [`with_retries`]).
pub(crate) const CUT_PCT: u64 = 4;
/// Percent of requests whose serving process crashes at a write chosen in advance: the
/// `1..=AIM_MAX_WRITE`th put or delete the request makes, before or after its effect
/// ([`crate::store::AimedCrash`]). A request making fewer writes is not crashed.
const AIM_PCT: u64 = 8;
const AIM_MAX_WRITE: u64 = 8;
/// How many times a writer sends a step again after an answer whose outcome is unknown.
pub(crate) const RETRIES: usize = 4;

/// Sends `step` until its answer's outcome is known, at most [`RETRIES`] times more, each time
/// to a replica drawn anew (a client retrying through a load balancer).
pub(crate) async fn with_retries<T, F, Fut>(
    replicas: &[Replica],
    rng: &mut SimRng,
    trace: &Trace,
    what: &str,
    mut step: F,
) -> Result<T, MendError>
where
    F: FnMut(Engine) -> Fut,
    Fut: std::future::Future<Output = Result<T, MendError>>,
{
    let mut attempt = 0;
    loop {
        let replica = &replicas[rng.below(replicas.len() as u64) as usize];
        // Sometimes the request is cut off part way (the client's connection drops, and the
        // server drops the request's future at whatever await point it had reached): the
        // client sees an unknown outcome.
        let cut_after_ms = rng
            .chance(CUT_PCT)
            .then(|| rng.between(1, 120))
            .filter(|_| crate::faults::allow());
        let answer = match cut_after_ms {
            None => serve_aimed(replica, rng, trace, what, &mut step).await,
            Some(ms) => {
                match tokio::time::timeout(Duration::from_millis(ms), replica.serve(&mut step))
                    .await
                {
                    Ok(answer) => answer,
                    Err(_) => {
                        trace.line(format!("{what}: cut off after {ms} ms"));
                        Err(MendError::Unavailable {
                            message: format!("{what}: the request was cut off after {ms} ms"),
                            source: None,
                        })
                    }
                }
            }
        };
        match &answer {
            Err(error) if error.is_retryable() && attempt < RETRIES => {
                trace.line(format!("{what}: {error}; sending it again"));
                attempt += 1;
                pause(rng, 5, 300).await;
            }
            _ => return answer,
        }
    }
}

/// A crash aimed at one write of a request, drawn: `None` for most requests ([`AIM_PCT`]).
pub(crate) fn aim(rng: &mut SimRng) -> Option<AimedCrash> {
    aim_at(rng, AIM_PCT)
}

/// A crash aimed at one write of a request in `pct` percent of requests.
pub(crate) fn aim_at(rng: &mut SimRng, pct: u64) -> Option<AimedCrash> {
    let crash = rng
        .chance(pct)
        .then(|| AimedCrash::new(rng.between(1, AIM_MAX_WRITE) as usize, rng.chance(50)));
    crash.filter(|_| crate::faults::allow())
}

/// Serves `step` on `replica`, sometimes with a crash aimed at one of its writes ([`aim`]):
/// then the client is told the outcome is unknown, whatever the step made of a store that
/// stopped answering.
pub(crate) async fn serve_aimed<T, F, Fut>(
    replica: &Replica,
    rng: &mut SimRng,
    trace: &Trace,
    what: &str,
    step: F,
) -> Result<T, MendError>
where
    F: FnOnce(Engine) -> Fut,
    Fut: std::future::Future<Output = Result<T, MendError>>,
{
    let Some(crash) = aim(rng) else {
        return replica.serve(step).await;
    };
    let (answer, crashed) = with_aimed_crash(crash, replica.serve(step)).await;
    if !crashed {
        return answer;
    }
    trace.line(format!(
        "{what}: replica {}'s process crashed at a write aimed at",
        replica.index
    ));
    Err(MendError::Unavailable {
        message: format!(
            "{what}: replica {}'s process crashed while it served the request",
            replica.index
        ),
        source: None,
    })
}
