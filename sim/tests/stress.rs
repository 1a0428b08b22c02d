//! The stress mode against the real Postgres the test suite provides: one schedule of the
//! simulator's workloads on a Postgres catalog, in real time, held to the same checks.
//!
//! Run it under `scripts/with-postgres`, which starts a throwaway server and sets
//! `MEND_TEST_DATABASE_URL`; without it the test fails, it does not skip. The run works in a
//! database of its own, so it shares the server with the other tests. It takes about half a
//! minute; `--show-output` prints what it did.

use mend::catalog::PostgresOptions;
use mend_sim::Config;
use mend_sim::stress;

/// The Postgres server of the tests; fails, with instructions, when there is none.
fn postgres_url() -> String {
    std::env::var("MEND_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "MEND_TEST_DATABASE_URL is not set. The stress test needs a real Postgres server: run \
             it under `scripts/with-postgres`, e.g. `scripts/with-postgres cargo test -p mend-sim \
             --test stress`, or point MEND_TEST_DATABASE_URL at a server you own whose user may \
             create databases"
        )
    })
}

/// `scripts/with-postgres` starts a non-durable cluster and says so in the environment.
fn postgres_options() -> PostgresOptions {
    PostgresOptions {
        accept_unsafe_durability: std::env::var("MEND_POSTGRES_ACCEPT_UNSAFE_DURABILITY")
            .is_ok_and(|value| value == "true"),
    }
}

#[test]
fn the_standard_schedule_holds_against_postgres() {
    let url = postgres_url();
    let seed = 7;
    let stressed = stress::run(&url, postgres_options(), seed, &Config::standard())
        .unwrap_or_else(|error| panic!("the stress run of seed {seed} could not start: {error}"));
    println!("{stressed}");
    let report = &stressed.report;
    assert!(
        report.passed(),
        "stress seed {seed} failed (not replayable bit for bit; database left: {:?}):\n{}",
        stressed.database_left,
        report
            .violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(report.published > 0, "no operation published: {stressed}");
    assert!(report.claims_checked > 0, "no answer checked: {stressed}");
    assert!(report.sweeps > 0, "no supervisor swept: {stressed}");
    assert_eq!(
        stressed.database_left, None,
        "a passing run drops its database"
    );
}
