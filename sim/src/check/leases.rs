//! `leases-respected`: recovery never takes over a writer whose lease has not run out.
//!
//! A lease granted by a request sent at `t` for `L` ms runs, by the engine's clock, until at
//! least `t + L` as the granting replica's clock read it; recovery abandons an operation only
//! once every lease it was granted ran out by the sweeping replica's clock. The two clocks may
//! differ by up to the spread of the replicas' skews, so a takeover answered before
//! `t + L - spread` (in simulated time) took over a writer whose lease still ran, and the
//! writer, heartbeating as it was told to, lost its operation.

use super::{Check, End, Found, History};

pub(super) fn respected(history: &History, end: &End, found: &mut Found) {
    for takeover in &history.takeovers {
        let Some(record) = history
            .operations
            .iter()
            .find(|record| record.operation_id == takeover.operation_id)
        else {
            continue;
        };
        for grant in &record.leases {
            found.leases_checked += 1;
            if grant.sent_ms >= takeover.at_ms {
                continue;
            }
            let runs_until = (grant.sent_ms + grant.lease_ms).saturating_sub(end.clock_spread_ms);
            if takeover.at_ms < runs_until {
                found.push(
                    Check::LeasesRespected,
                    format!(
                        "replica {}'s sweep took {} over at {} ms, yet a lease of {} ms asked for \
                         at {} ms still ran until at least {runs_until} ms (the replicas' clocks \
                         differ by up to {} ms)",
                        takeover.replica,
                        takeover.operation_id,
                        takeover.at_ms,
                        grant.lease_ms,
                        grant.sent_ms,
                        end.clock_spread_ms
                    ),
                );
            }
        }
    }
}
