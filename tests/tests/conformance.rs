//! The conformance kit (`mend-testkit`), once per backend: every case passes, and none is
//! skipped, since each of mend's backends provides every capability a case needs.

use mend_tests::Backend;

async fn run(backend: Backend) {
    let summary = mend_testkit::run_all(&backend).await;
    summary.assert_passed();
    assert_eq!(
        summary.skipped(),
        Vec::<&str>::new(),
        "{backend} lacks a capability: cases were skipped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres() {
    run(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_directory() {
    run(Backend::LocalDirectory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory() {
    run(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3() {
    run(Backend::S3).await;
}
