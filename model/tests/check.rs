//! The exhaustive check: every reachable state of the protocol, each safety property held in
//! each; liveness under fairness with the writers stopping at any point; and, for each
//! deliberate bug, a counterexample the checker must find.

use std::time::Instant;

use mend_model::properties::{LIVENESS, REACHED, SAFETY};
#[allow(unused_imports)]
use mend_model::state::State;
use mend_model::{Bug, Config, Protocol};
use stateright::{Checker, HasDiscoveries, Model};

/// Runs the whole check of `protocol` (or until `finish` says), prints its counts, and
/// returns the checker.
fn check(
    label: &str,
    protocol: Protocol,
    finish: HasDiscoveries,
) -> impl Checker<Protocol> + use<> {
    let started = Instant::now();
    let checker = protocol
        .checker()
        .threads(2)
        .finish_when(finish)
        .spawn_bfs()
        .join();
    println!(
        "{label}: {} states ({} unique), max depth {}, {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    checker
}

/// The deployment checked: `config`, with writers acting up to `MEND_MODEL_CLOCK_MAX` units
/// of time when set (a deeper run: 2 takes about 20 times as many states).
fn checked(config: Config) -> Config {
    match std::env::var("MEND_MODEL_CLOCK_MAX") {
        Ok(units) => Config {
            clock_max: units.parse().expect("MEND_MODEL_CLOCK_MAX is a number"),
            ..config
        },
        Err(_) => config,
    }
}

/// Every safety property, in every reachable state. "An operation promised to publish never
/// ends unpublished" is the regression check of the engine bug this check found: exclusive
/// recovery rolled back an operation whose writer confirmed after the sweep observed it (an
/// abort had answered "it can no longer be aborted"). The roll-back now fences on the phase
/// it observed first, and is overtaken; `a_roll_back_without_its_fence_is_caught` shows the
/// check still finds the old behaviour, and `tests/replay`'s
/// `the_engine_keeps_the_promise_an_exclusive_roll_back_broke` replays that path against the
/// engine.
#[test]
fn every_reachable_state_holds_the_safety_properties() {
    let checker = check(
        "safety",
        Protocol::new(checked(Config::CHECKED)),
        HasDiscoveries::All,
    );
    for name in SAFETY {
        if let Some(path) = checker.discovery(name) {
            panic!("{name} fails:\n{:#?}", path.into_actions());
        }
    }
    for name in REACHED {
        assert!(
            checker.discovery(name).is_some(),
            "the check never reached: {name}"
        );
    }
}

#[test]
fn once_writers_stop_every_intent_settles_without_an_operator() {
    let checker = check(
        "liveness",
        Protocol::new(checked(Config::LIVENESS)),
        HasDiscoveries::All,
    );
    if let Some(path) = checker.discovery(LIVENESS) {
        panic!("{LIVENESS} fails:\n{:#?}", path.into_actions());
    }
    for name in SAFETY {
        assert!(checker.discovery(name).is_none(), "{name} fails");
    }
}

/// Checks `protocol` with `bug` planted and returns the properties the checker found broken,
/// printing the shortest counterexample of each.
fn broken_by(bug: Bug, config: Config) -> Vec<&'static str> {
    let checker = check(
        &format!("{bug:?}"),
        Protocol::with_bug(config, bug),
        HasDiscoveries::AnyOf(SAFETY.into_iter().collect()),
    );
    let mut broken = Vec::new();
    for name in SAFETY
        .into_iter()
        .chain(config.writers_stop.then_some(LIVENESS))
    {
        if let Some(path) = checker.discovery(name) {
            println!("  {name}: {:?}", path.into_actions());
            broken.push(name);
        }
    }
    broken
}

/// Every publish is conditional on its intent not being fenced, so an abort that fences a
/// confirmed operation no longer lets an abandoned intent publish; it ends an operation whose
/// view had promised that its publish was under way.
#[test]
fn an_abort_without_its_conditional_fence_is_caught() {
    let broken = broken_by(Bug::AbortWithoutConditionalFence, Config::CHECKED);
    assert!(broken.contains(&SAFETY[2]), "found only {broken:?}");
}

#[test]
fn a_confirm_without_its_phase_check_is_caught() {
    let broken = broken_by(Bug::ConfirmWithoutPhaseCheck, Config::CHECKED);
    assert!(broken.contains(&SAFETY[6]), "found only {broken:?}");
}

#[test]
fn a_takeover_before_the_lease_ran_out_is_caught() {
    let broken = broken_by(Bug::TakeoverBeforeLeaseEnd, Config::CHECKED);
    assert!(broken.contains(&SAFETY[4]), "found only {broken:?}");
}

#[test]
fn a_recovery_publish_without_its_epoch_check_is_caught() {
    // A stale sweep needs a lease that ran out before it observed and a gate lease that ran
    // out after: one more unit of time than the default check.
    let deeper = Config {
        clock_max: 2,
        ..Config::CHECKED
    };
    let broken = broken_by(Bug::PublishWithoutEpochCheck, deeper);
    assert!(broken.contains(&SAFETY[5]), "found only {broken:?}");
}

#[test]
fn a_roll_back_without_its_fence_is_caught() {
    let broken = broken_by(Bug::RollBackWithoutFence, Config::CHECKED);
    assert!(broken.contains(&SAFETY[2]), "found only {broken:?}");
}
