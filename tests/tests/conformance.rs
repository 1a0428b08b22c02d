//! The conformance suite, once per backend.

use mend_tests::{Backend, conformance};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres() {
    conformance::run_all(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_directory() {
    conformance::run_all(Backend::LocalDirectory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory() {
    conformance::run_all(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3() {
    conformance::run_all(Backend::S3).await;
}
