//! Shrinking a failing run: the same seed under smaller configs (fewer writers, operations,
//! replicas, no crashes, no faults), kept while it still fails, until no smaller one does.
//! The seed stays: it decides the schedule; the config decides how much of it there is.

use crate::schedule::{Config, RunReport, run};
use crate::store::FaultRates;

/// The smallest config under which `seed` still fails (starting from `config`, which fails),
/// and that run's report, its trace kept.
pub fn shrink(seed: u64, config: &Config) -> (Config, RunReport) {
    let mut smallest = Config {
        keep_trace: false,
        ..config.clone()
    };
    loop {
        let smaller = candidates(&smallest)
            .into_iter()
            .find(|candidate| !run(seed, candidate).passed());
        match smaller {
            Some(candidate) => smallest = candidate,
            None => break,
        }
    }
    let kept = Config {
        keep_trace: true,
        ..smallest.clone()
    };
    let report = run(seed, &kept);
    (smallest, report)
}

/// Each config one step smaller than `config`.
fn candidates(config: &Config) -> Vec<Config> {
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
