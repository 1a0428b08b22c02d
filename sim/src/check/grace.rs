//! `grace-periods-kept`: a split marked for deletion keeps its object for the deletion grace
//! period after its mark, so that a reader still serving a generation that showed it can read
//! it until then.
//!
//! A generation known current at `t` showed the split published then, so its mark came after
//! `t` and its object must stay until at least `t` plus the shortest deletion grace period the
//! run's configs had, less how far apart the replicas' clocks read (the mark is stamped by one
//! replica's clock, the deletion judged by another's). A read answered before then that found
//! no object is a reader that lost data it was owed.

use super::{Check, End, Found, History};

pub(super) fn kept(history: &History, end: &End, found: &mut Found) {
    let shortest = history
        .config_applies
        .iter()
        .map(|apply| &apply.config)
        .chain(std::iter::once(&end.initial_config))
        .chain(end.dataset.as_ref().map(|dataset| &dataset.config))
        .map(|config| config.deletion_grace_period_ms)
        .min()
        .unwrap_or(0);
    for read in &history.object_reads {
        found.object_reads_checked += 1;
        let owed_until = (read.shown_current_at_ms + shortest).saturating_sub(end.clock_spread_ms);
        if !read.found && read.answered_ms < owed_until {
            found.push(
                Check::GracePeriodsKept,
                format!(
                    "reader {} found the object of {} gone at {} ms, yet a generation known \
                     current at {} ms showed it published, and deletions wait {shortest} ms \
                     after the mark (the replicas' clocks differ by up to {} ms): it was owed \
                     until {owed_until} ms",
                    read.reader,
                    read.split_id,
                    read.answered_ms,
                    read.shown_current_at_ms,
                    end.clock_spread_ms
                ),
            );
        }
    }
}
