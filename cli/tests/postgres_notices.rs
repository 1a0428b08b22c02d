//! A command's stderr is its own on Postgres too: opening the catalog brings the schema up to
//! date at every command, and the migrations' `CREATE TABLE IF NOT EXISTS` used to reach
//! stderr as sqlx's INFO line for the server's notice (`relation "_sqlx_migrations" already
//! exists, skipping`) at every one of them.

use crate::common;

#[test]
fn a_command_on_postgres_prints_nothing_on_stderr() {
    let url = std::env::var("MEND_TEST_DATABASE_URL").expect(
        "MEND_TEST_DATABASE_URL is not set: run the Postgres tests under scripts/with-postgres",
    );
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    let objects = format!("file://{}", dir.join("objects").display());
    let dataset = format!("quiet-{}", uuid::Uuid::new_v4().simple());
    let run = |args: &[&str]| {
        let output = common::mend_command(dir)
            .env("MEND_CATALOG", &url)
            .env("MEND_OBJECTS", &objects)
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "mend {args:?}: {stderr}");
        assert_eq!(stderr, "", "mend {args:?} wrote on stderr");
    };
    // Twice each: the second run finds the schema in place, as every later command does.
    for _ in 0..2 {
        run(&["dataset", "list", "--json"]);
    }
    run(&["dataset", "create", &dataset, "--json"]);
    for _ in 0..2 {
        run(&["dataset", "show", &dataset, "--json"]);
    }
    println!("postgres notices: 5 commands on Postgres, stderr empty each time");
}
