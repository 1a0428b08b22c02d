//! Shrinking a failing run to a short schedule that still fails the same way (one of the checks
//! it failed fails again). The seed stays: it decides the schedule; the config decides how much
//! of it there is. Three passes, repeated until none takes anything more away:
//!
//! 1. **fewer actors and less of each**: the config one step smaller at a time (a writer, a
//!    committer, a replica, the operator, the readers fewer; half the operations, then one
//!    fewer; no crashes, no faults of a kind, no clock skew, no fleet);
//! 2. **faults removed one at a time**: every fault the run draws is numbered
//!    ([`crate::faults`]); each is suppressed in turn and stays suppressed while the run still
//!    fails;
//! 3. the first pass again, on what the second left.
//!
//! The report ends with the shortest trace found and its length.

use std::collections::BTreeSet;

use crate::check::Check;
use crate::schedule::{Config, RunReport, run};
use crate::store::FaultRates;

/// What shrinking found: the smallest config under which the seed still fails, that run's
/// report (its trace kept), and how many runs the search took.
#[derive(Debug)]
pub struct Shrunk {
    pub config: Config,
    pub report: RunReport,
    pub runs: usize,
}

impl Shrunk {
    /// The shortest trace's length, in lines.
    pub fn trace_lines(&self) -> u64 {
        self.report.trace_lines
    }
}

/// Shrinks `seed`'s failing run under `config` (see the module doc).
pub fn shrink(seed: u64, config: &Config) -> Shrunk {
    let mut search = Search {
        seed,
        wanted: BTreeSet::new(),
        runs: 0,
    };
    let start = Config {
        keep_trace: false,
        ..config.clone()
    };
    let first = search.run(&start);
    search.wanted = first.violations.iter().map(|v| v.check).collect();
    let mut smallest = start;
    loop {
        let before = (smallest.clone(), search.runs);
        smallest = search.fewer_actors(smallest);
        smallest = search.fewer_faults(smallest);
        if smallest == before.0 {
            break;
        }
    }
    let report = search.run(&Config {
        keep_trace: true,
        ..smallest.clone()
    });
    Shrunk {
        config: smallest,
        report,
        runs: search.runs,
    }
}

struct Search {
    seed: u64,
    /// The checks the original run failed: a smaller run must fail one of them.
    wanted: BTreeSet<Check>,
    runs: usize,
}

impl Search {
    fn run(&mut self, config: &Config) -> RunReport {
        self.runs += 1;
        run(self.seed, config)
    }

    /// Whether `config` still fails one of the wanted checks.
    fn fails(&mut self, config: &Config) -> bool {
        let report = self.run(config);
        report
            .violations
            .iter()
            .any(|violation| self.wanted.contains(&violation.check))
    }

    /// The config one step smaller at a time, while it still fails.
    fn fewer_actors(&mut self, mut smallest: Config) -> Config {
        loop {
            let smaller = candidates(&smallest)
                .into_iter()
                .find(|candidate| self.fails(candidate));
            match smaller {
                Some(candidate) => smallest = candidate,
                None => return smallest,
            }
        }
    }

    /// Each fault the run draws suppressed in turn, kept suppressed while the run still fails.
    /// Suppressing one changes what follows it (the faults drawn after it may fall elsewhere),
    /// so the count is read again after each step.
    fn fewer_faults(&mut self, mut smallest: Config) -> Config {
        let mut number = 0;
        loop {
            let drawn = self.run(&smallest).faults_drawn;
            while number < drawn && smallest.suppressed_faults.contains(&number) {
                number += 1;
            }
            if number >= drawn {
                return smallest;
            }
            let mut candidate = smallest.clone();
            candidate.suppressed_faults.push(number);
            if self.fails(&candidate) {
                smallest = candidate;
            }
            number += 1;
        }
    }
}

/// Each config one step smaller than `config`.
fn candidates(config: &Config) -> Vec<Config> {
    // A fault numbering belongs to the schedule it was read from: a smaller schedule draws
    // its own, so candidates start with none suppressed, and are compared without.
    let unmasked = Config {
        suppressed_faults: Vec::new(),
        ..config.clone()
    };
    let config = &unmasked;
    let mut smaller = Vec::new();
    let mut push = |candidate: Config| {
        if candidate != *config
            && candidate.protocol_writers + candidate.committers + candidate.stagers > 0
        {
            smaller.push(candidate);
        }
    };
    push(Config {
        faults: FaultRates::NONE,
        ..config.clone()
    });
    // Only the stalls, or everything but them.
    push(Config {
        faults: FaultRates {
            stall_per_mille: config.faults.stall_per_mille,
            stall_ms: config.faults.stall_ms,
            ..FaultRates::NONE
        },
        ..config.clone()
    });
    push(Config {
        faults: FaultRates {
            stall_per_mille: 0,
            ..config.faults
        },
        ..config.clone()
    });
    push(Config {
        operator: false,
        ..config.clone()
    });
    push(Config {
        readers: 0,
        ..config.clone()
    });
    push(Config {
        forgetful_writers: 0,
        ..config.clone()
    });
    push(Config {
        unkeyed_writers: 0,
        ..config.clone()
    });
    push(Config {
        crash_pct: 0,
        ..config.clone()
    });
    push(Config {
        protocol_writers: config.protocol_writers.saturating_sub(1),
        forgetful_writers: config
            .forgetful_writers
            .min(config.protocol_writers.saturating_sub(1)),
        unkeyed_writers: config
            .unkeyed_writers
            .min(config.protocol_writers.saturating_sub(1)),
        ..config.clone()
    });
    push(Config {
        committers: config.committers.saturating_sub(1),
        ..config.clone()
    });
    push(Config {
        stagers: config.stagers.saturating_sub(1),
        ..config.clone()
    });
    push(Config {
        operations_each: config.operations_each / 2,
        ..config.clone()
    });
    push(Config {
        operations_each: config.operations_each.saturating_sub(1).max(1),
        ..config.clone()
    });
    push(Config {
        replicas: config.replicas.saturating_sub(1).max(1),
        ..config.clone()
    });
    push(Config {
        max_skew_ms: 0,
        ..config.clone()
    });
    push(Config {
        beyond_allowance_pct: 0,
        ..config.clone()
    });
    push(Config {
        replica_fault_pct: 0,
        ..config.clone()
    });
    push(Config {
        fleet_pct: 0,
        ..config.clone()
    });
    smaller
}
