//! The replicas' fleet memberships, held to what they promise: `fleet-epochs`,
//! `counted-gone-stays-gone`, `counted-gone-had-stopped` and `fleet-liveness`; and the
//! sweeps that overlapped (`one-sweep-at-a-time`).

use std::collections::{BTreeMap, BTreeSet};

use super::{Check, Found, HeartbeatRecord, History, SweepRecord};

/// Holds the replicas' heartbeats (in the order answered) to what the membership promises,
/// and `last` (each replica's view from one more heartbeat once the faults stopped and every
/// replica had joined again) to liveness:
///
/// - no epoch is held by two replicas;
/// - a replica's epoch never goes back, and a rejoin takes a higher one;
/// - a joining answered before another joining started has the lower epoch;
/// - each view lists its own replica among the live members;
/// - a member one replica counted gone (expired) never comes back under the epoch it held:
///   the others may have taken its datasets over, so it must join again;
/// - a member one replica counted gone had stopped acting by then: its own view of its lease
///   under that epoch had run out before the view that counted it gone was answered;
/// - at the end, every replica's view lists all of them, and all name the same owner.
///
/// The membership is timed by the store's stamps, so these hold whatever the replicas' clocks
/// say, beyond the gates' allowance too.
pub(super) fn fleet(history: &History, last: &[Option<HeartbeatRecord>], found: &mut Found) {
    epochs(history, last, found);
    no_renewal_once_expired(history, last, found);
    stopped_before_counted_gone(history, last, found);
    // Takeovers: a member in a replica's view that its next view has expired.
    let mut before: BTreeMap<&str, &HeartbeatRecord> = BTreeMap::new();
    for beat in &history.heartbeats {
        if let Some(previous) = before.insert(&beat.replica_id, beat) {
            found.takeovers += previous
                .members
                .iter()
                .filter(|member| beat.expired.contains(member))
                .count();
        }
    }
    if !last.is_empty() {
        fleet_liveness(last, found);
    }
}

/// No epoch is held by two replicas; a replica's epoch never goes back and a rejoin takes a
/// higher one; a joining answered before another began has the lower epoch; each view lists
/// its own replica.
fn epochs(history: &History, last: &[Option<HeartbeatRecord>], found: &mut Found) {
    let mut holders: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
    let mut latest: BTreeMap<&str, u64> = BTreeMap::new();
    // (started, answered, epoch, member) of each joining: a member's first view, or one with
    // a new epoch.
    let mut joinings: Vec<(u64, u64, u64, &str)> = Vec::new();
    for beat in history.heartbeats.iter().chain(last.iter().flatten()) {
        found.heartbeats_checked += 1;
        for (id, epoch) in &beat.members {
            holders.entry(*epoch).or_default().insert(id);
        }
        let me = beat.replica_id.as_str();
        if !beat
            .members
            .iter()
            .any(|(id, epoch)| *id == me && *epoch == beat.epoch)
        {
            found.push(
                Check::FleetEpochs,
                format!(
                    "fleet: {me}'s view at {} ms does not list itself at epoch {}: {:?}",
                    beat.answered_ms, beat.epoch, beat.members
                ),
            );
        }
        match latest.insert(me, beat.epoch) {
            Some(before) if beat.epoch < before || (beat.rejoined && beat.epoch == before) => {
                found.push(
                    Check::FleetEpochs,
                    format!(
                        "fleet: {me} went from epoch {before} to {}{} at {} ms",
                        beat.epoch,
                        if beat.rejoined { " (rejoined)" } else { "" },
                        beat.answered_ms
                    ),
                );
            }
            Some(before) if before == beat.epoch => {}
            _ => joinings.push((beat.started_ms, beat.answered_ms, beat.epoch, me)),
        }
    }
    for (epoch, ids) in &holders {
        if ids.len() > 1 {
            found.push(
                Check::FleetEpochs,
                format!("fleet: epoch {epoch} is held by {ids:?}"),
            );
        }
    }
    for earlier in &joinings {
        for later in &joinings {
            if earlier.1 < later.0 && earlier.2 >= later.2 {
                found.push(
                    Check::FleetEpochs,
                    format!(
                        "fleet: {} joined with epoch {} at {} ms, before {} began \
                     the joining (at {} ms) that got epoch {}",
                        earlier.3, earlier.2, earlier.1, later.3, later.0, later.2
                    ),
                );
            }
        }
    }
}

/// A member one replica counted gone never renews under the epoch it held.
fn no_renewal_once_expired(history: &History, last: &[Option<HeartbeatRecord>], found: &mut Found) {
    let beats: Vec<&HeartbeatRecord> = history
        .heartbeats
        .iter()
        .chain(last.iter().flatten())
        .collect();
    for gone_in in &beats {
        for (id, epoch) in &gone_in.expired {
            // Its own view, from a heartbeat begun after it was counted gone: by its own
            // clock, too, its lease had run out then.
            let back = beats.iter().find(|later| {
                later.replica_id == *id
                    && later.started_ms > gone_in.answered_ms
                    && later.epoch == *epoch
            });
            if let Some(back) = back {
                found.push(
                    Check::CountedGoneStaysGone,
                    format!(
                        "fleet: replica {} counted {id} (epoch {epoch}) gone at {} ms, and \
                     {id} renewed its membership under the same epoch at {} ms",
                        gone_in.replica, gone_in.answered_ms, back.answered_ms
                    ),
                );
            }
        }
    }
}

/// A member counted gone had stopped acting: every view it had under the epoch it was counted
/// gone with says its lease ran out no later than the view that counted it gone was answered.
fn stopped_before_counted_gone(
    history: &History,
    last: &[Option<HeartbeatRecord>],
    found: &mut Found,
) {
    let beats: Vec<&HeartbeatRecord> = history
        .heartbeats
        .iter()
        .chain(last.iter().flatten())
        .collect();
    // The latest end of its lease each member's own views gave it, per epoch.
    let mut live_until: BTreeMap<(&str, u64), (u64, u64)> = BTreeMap::new();
    for beat in &beats {
        let latest = live_until
            .entry((beat.replica_id.as_str(), beat.epoch))
            .or_insert((0, 0));
        if beat.lease_live_until_ms > latest.0 {
            *latest = (beat.lease_live_until_ms, beat.answered_ms);
        }
    }
    for gone_in in &beats {
        for (id, epoch) in &gone_in.expired {
            if let Some((until_ms, answered_ms)) = live_until.get(&(id.as_str(), *epoch))
                && *until_ms > gone_in.answered_ms
            {
                found.push(
                    Check::CountedGoneHadStopped,
                    format!(
                        "fleet: replica {} counted {id} (epoch {epoch}) gone at {} ms, while \
                     {id}'s own view answered at {answered_ms} ms had its lease live until \
                     {until_ms} ms",
                        gone_in.replica, gone_in.answered_ms
                    ),
                );
            }
        }
    }
}

/// Once the faults stopped, every replica's view lists all of them, and all name one owner.
fn fleet_liveness(last: &[Option<HeartbeatRecord>], found: &mut Found) {
    // Each replica as its running process heartbeats (a crashed one's old id has expired).
    let everyone: BTreeSet<String> = last
        .iter()
        .flatten()
        .map(|view| view.replica_id.clone())
        .collect();
    let mut owners = BTreeSet::new();
    for (replica, view) in last.iter().enumerate() {
        let Some(view) = view else {
            found.push(
                Check::FleetLiveness,
                format!("liveness: replica {replica}'s heartbeat failed after the faults stopped"),
            );
            continue;
        };
        let members: BTreeSet<String> = view.members.iter().map(|(id, _)| id.clone()).collect();
        if members != everyone {
            found.push(
                Check::FleetLiveness,
                format!(
                    "liveness: once the faults stopped, replica {replica} sees the members \
                 {members:?}, not {everyone:?}"
                ),
            );
        }
        owners.insert(view.owner.clone());
    }
    if owners.len() > 1 {
        found.push(
            Check::FleetLiveness,
            format!(
                "liveness: once the faults stopped, the replicas name different owners: {owners:?}"
            ),
        );
    }
}

/// Every pair of gated sweeps of two replicas that overlapped in simulated time: none while
/// the replicas' clocks are within the gates' allowance.
pub fn overlapping_sweeps(history: &History) -> Vec<String> {
    let mut overlaps = Vec::new();
    // A sweep whose hold ran out before it began held nothing (it wrote nothing either: every
    // durable write checks the hold first).
    let mut sweeps: Vec<SweepRecord> = history
        .sweeps
        .iter()
        .filter(|sweep| sweep.until_ms > sweep.from_ms)
        .cloned()
        .collect();
    sweeps.sort_by_key(|sweep| (sweep.from_ms, sweep.until_ms));
    for (index, earlier) in sweeps.iter().enumerate() {
        for later in &sweeps[index + 1..] {
            if later.from_ms >= earlier.until_ms {
                break;
            }
            if later.replica != earlier.replica {
                overlaps.push(format!(
                    "two sweeps at once: replica {} ({}..{} ms, gate epoch {}) and replica {} \
                     ({}..{} ms, gate epoch {})",
                    earlier.replica,
                    earlier.from_ms,
                    earlier.until_ms,
                    earlier.gate_epoch,
                    later.replica,
                    later.from_ms,
                    later.until_ms,
                    later.gate_epoch
                ));
            }
        }
    }
    overlaps
}
