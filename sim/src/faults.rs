//! Every fault a run injects, numbered in the order it is injected, so that a shrinker can
//! take them away one at a time ([`crate::shrink`]).
//!
//! A fault is anything the seed draws to go wrong: a store request failing before or after its
//! effect or stalling, a request cut off or its process crashed at an aimed write, a request's
//! late copy, a writer or stager dying part way, a whole replica paused or crashed. Each site
//! draws as it always does, then asks [`allow`]: the answer is yes unless the run's config
//! suppresses that fault's number. The draws stay the same whether a fault is suppressed or
//! not, so a suppressed fault moves no other draw; what it changes is what happens next.
//!
//! A schedule runs on one thread (a current-thread runtime), so the plan is that thread's:
//! [`install`] sets it for a run, and the run's tasks, all on that thread, see it. A thread
//! with no plan (the stress mode's workers) allows every fault.

use std::cell::RefCell;
use std::collections::BTreeSet;

thread_local! {
    static PLAN: RefCell<Option<Plan>> = const { RefCell::new(None) };
}

/// The faults of one run: how many were drawn, and which are suppressed.
struct Plan {
    drawn: u64,
    suppressed: BTreeSet<u64>,
}

/// Installs a plan suppressing the faults numbered in `suppressed` on this thread, until the
/// guard is dropped.
pub fn install(suppressed: &[u64]) -> Installed {
    PLAN.with(|plan| {
        *plan.borrow_mut() = Some(Plan {
            drawn: 0,
            suppressed: suppressed.iter().copied().collect(),
        });
    });
    Installed(())
}

/// While alive, this thread's runs number their faults.
#[derive(Debug)]
#[must_use = "the plan is removed when the guard is dropped"]
pub struct Installed(());

impl Installed {
    /// How many faults were drawn so far (suppressed ones included): the numbers a shrinker
    /// may suppress are `0..drawn()`.
    pub fn drawn(&self) -> u64 {
        PLAN.with(|plan| plan.borrow().as_ref().map_or(0, |plan| plan.drawn))
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        PLAN.with(|plan| *plan.borrow_mut() = None);
    }
}

/// Whether the fault just drawn is injected: it takes the next number, and is, unless the
/// run suppresses that number.
pub fn allow() -> bool {
    PLAN.with(|plan| match plan.borrow_mut().as_mut() {
        Some(plan) => {
            let number = plan.drawn;
            plan.drawn += 1;
            !plan.suppressed.contains(&number)
        }
        None => true,
    })
}

/// `drawn` (a fault the seed drew), if [`allow`] lets it through.
pub fn gate(drawn: bool) -> bool {
    drawn && allow()
}
