//! mend's catalog conformance suite, as a library: the cases that mend's own backends pass
//! (Postgres, and the object-storage catalog on a local directory, in memory and on S3), to
//! run against a catalog backend of your own.
//!
//! A backend is anything that implements [`mend::Catalog`]. The cases drive it the way mend
//! does, through an [`Engine`](mend::Engine) with mend's default policy, and at the trait
//! itself where the engine adds nothing (intents, audit records, requests under an idempotency
//! key): staging in both modes, publish with its checkpoint deltas and fencing, mark, delete,
//! listing, racing create-only batches, intents and their abandonment, keyed retries, discovery
//! of the datasets with pending intents. Where the
//! protocol says a step writes nothing (a create-only batch of existing rows, a refused
//! publish, a retried keyed request), the case checks that it wrote nothing.
//!
//! # Running it on your backend
//!
//! Add the kit as a dev-dependency, implement [`BackendUnderTest`] for your backend, and call
//! [`run_all`] from a test on a multi-threaded tokio runtime:
//!
//! ```ignore
//! #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
//! async fn conformance() {
//!     mend_testkit::run_all(&MyBackend::new()).await.assert_passed();
//! }
//! ```
//!
//! [`BackendUnderTest`] asks for three things:
//!
//! - [`open`](BackendUnderTest::open): a fresh catalog for one case and where its split objects
//!   live ([`FreshCatalog`]);
//! - [`catalog_fingerprint`](BackendUnderTest::catalog_fingerprint): a value that changes
//!   whenever the catalog writes anything for a dataset. The kit counts the writes to the split
//!   objects itself (it wraps their store in a [`CountingStore`]); together they make the
//!   [`WriteFingerprint`] behind every "writes nothing" assertion. A count of the catalog's own
//!   writes will do ([`Fingerprint::writes`]);
//! - [`scale`](BackendUnderTest::scale), optional: how many tasks the concurrency cases race,
//!   for how many rounds ([`Scale::STANDARD`] unless you say otherwise; [`Scale::THOROUGH`]
//!   for a transactional database, [`Scale::LIGHT`] for a slow remote store).
//!
//! `host/examples/custom_backend.rs` in mend's repository is a complete, runnable example
//! (`cargo run -p mend --example custom_backend`); mend's own backends implement the trait in
//! `tests/src/conformance.rs`.
//!
//! # What a run prints and returns
//!
//! [`run_all`] runs every case one after another, each on a fresh catalog, and prints a line
//! per case, `conformance[NAME] CASE ... ok` (or `FAILED`, or `skipped: needs CAPABILITY`),
//! the counts some cases make (`conformance[NAME]: 8 workers x 200 rounds: 4800 ids each
//! inserted exactly once, 0 errors`), and a summary, `conformance[NAME]: 36 passed, 0
//! failed`. It returns the [`Summary`]; [`Summary::assert_passed`] panics naming each failed
//! case and its message. A failing case does not stop the others. [`cases`], [`case`] and
//! [`run_cases`] run a chosen few, for instance one per test function.
//!
//! # Capabilities
//!
//! The engine runs mend's default policy, which requires `stage.upsert`, `stage.create-only`,
//! `publish.checkpoint` and `publish.token`: on a backend whose
//! [`capabilities`](mend::Catalog::capabilities) lack one, the engine refuses to start and
//! every case fails saying so, as mend itself would refuse such a backend. A case that needs a
//! capability the policy does not require (`fencing_epoch` needs `publish.fencing-epoch`) is
//! skipped, and reported as skipped, on a backend without it ([`Case::needs`]).
//! [`WithoutCapability`] wraps a catalog so that it claims one capability fewer: how to see
//! what mend refuses on an older build of a backend.
//!
//! # Pending work
//!
//! The pending cases hold for every backend, whether it keeps an index of the datasets with
//! pending intents ([`mend::catalog::PENDING_INDEX`]) or keeps the trait's default discovery.
//! They call [`clear_pending`](mend::Catalog::clear_pending) and expect it to take a dataset
//! without intents off at once: a backend that keeps an entry for a grace period opens its
//! catalogs for the kit with the grace at zero (mend's object-storage catalog with
//! `ObjectStoreCatalogOptions::pending_marker_reuse` zero, as `tests/src/conformance.rs` does).
//!
//! # Time and data
//!
//! Each case's engine has a manual clock that starts at [`EPOCH_MS`] and moves only when the
//! case moves it, so catalog timestamps are the clock's, not the wall's. Dataset ids are a
//! label and a random suffix, so cases (and runs) can share one database or bucket. The one case
//! that reads the newest audit records of the whole catalog writes its records a century past
//! the wall clock, so that they are the newest of a shared catalog too.
#![warn(missing_docs)]

mod backend;
mod cases;
mod counting_store;
mod harness;
mod suite;
mod without_capability;

pub use backend::{BackendUnderTest, Fingerprint, FreshCatalog, Scale};
pub use counting_store::{CountingStore, RequestCounts};
pub use harness::{EPOCH_MS, Harness, MAX_STAGE_BATCH, WriteFingerprint};
pub use suite::{Case, CaseReport, Outcome, Summary, case, cases, run_all, run_cases};
pub use without_capability::WithoutCapability;
