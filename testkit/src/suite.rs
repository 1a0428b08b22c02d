//! Running the cases: [`run_all`], [`run_cases`], one [`Case`] at a time, and the
//! [`Summary`] they print and return.

use std::any::Any;
use std::fmt;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::backend::BackendUnderTest;
use crate::harness::Harness;

/// A case's body: a plain async function of the harness.
pub(crate) type CaseBody = for<'h, 'b> fn(&'h Harness<'b>) -> BoxFuture<'h, ()>;

/// One conformance case: a behaviour of the catalog protocol, run on a fresh catalog.
#[derive(Clone, Copy)]
pub struct Case {
    name: &'static str,
    needs: &'static [&'static str],
    body: CaseBody,
}

/// What became of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every assertion held.
    Passed,
    /// An assertion failed, or the case could not run (the backend could not be opened, the
    /// engine refused to start): the panic's message.
    Failed(String),
    /// Not run: the engine on this backend lacks these capabilities, which the case needs.
    /// A backend says what it provides in [`Catalog::capabilities`](mend::Catalog::capabilities).
    Skipped(Vec<String>),
}

/// A case's name and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseReport {
    /// The case's name, as [`Case::name`] gives it.
    pub name: &'static str,
    /// What became of it.
    pub outcome: Outcome,
}

/// What a run of cases on one backend came to: what [`run_all`] and [`run_cases`] return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    backend: String,
    reports: Vec<CaseReport>,
}

/// Runs every case against `backend`, one after another, each on a fresh catalog; prints a
/// line per case (`conformance[NAME] CASE ... ok`) and the summary, and returns it. A failing
/// case does not stop the run. Call [`Summary::assert_passed`] to fail a test on it.
///
/// Run it on a multi-threaded tokio runtime: the concurrency cases spawn racing tasks.
pub async fn run_all<B: BackendUnderTest>(backend: &B) -> Summary {
    run_cases(backend, cases()).await
}

/// [`run_all`], for the cases given (from [`cases`] or [`case`]).
pub async fn run_cases<B: BackendUnderTest>(
    backend: &B,
    cases: impl IntoIterator<Item = Case>,
) -> Summary {
    let mut reports = Vec::new();
    for case in cases {
        reports.push(case.run(backend).await);
    }
    let summary = Summary {
        backend: backend.name(),
        reports,
    };
    println!("{summary}");
    summary
}

/// Every case of the suite, in the order [`run_all`] runs them.
pub fn cases() -> Vec<Case> {
    crate::cases::ALL.to_vec()
}

/// The case called `name`, if there is one.
pub fn case(name: &str) -> Option<Case> {
    crate::cases::ALL
        .iter()
        .find(|case| case.name == name)
        .copied()
}

impl Case {
    pub(crate) const fn new(
        name: &'static str,
        needs: &'static [&'static str],
        body: CaseBody,
    ) -> Self {
        Self { name, needs, body }
    }

    /// The case's name: the behaviour it checks, such as
    /// `create_only_batch_of_existing_rows_writes_nothing`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The capabilities the case needs (`stage.create-only`, `publish.fencing-epoch`, ...);
    /// on an engine without one of them the case is skipped.
    pub fn needs(&self) -> &'static [&'static str] {
        self.needs
    }

    /// Runs the case on a fresh catalog of `backend` and prints its line. A panic, in the
    /// case or in opening the backend, is caught and reported as [`Outcome::Failed`].
    pub async fn run<B: BackendUnderTest>(&self, backend: &B) -> CaseReport {
        let run = async {
            let harness = Harness::open(backend).await;
            let capabilities = harness.engine.capabilities();
            let missing: Vec<String> = self
                .needs
                .iter()
                .filter(|name| !capabilities.contains(name))
                .map(|name| name.to_string())
                .collect();
            if !missing.is_empty() {
                return Outcome::Skipped(missing);
            }
            (self.body)(&harness).await;
            Outcome::Passed
        };
        let outcome = match AssertUnwindSafe(run).catch_unwind().await {
            Ok(outcome) => outcome,
            Err(panic) => Outcome::Failed(panic_message(panic.as_ref())),
        };
        let shown = match &outcome {
            Outcome::Passed => "ok".to_string(),
            Outcome::Failed(_) => "FAILED".to_string(),
            Outcome::Skipped(missing) => format!("skipped: needs {}", missing.join(", ")),
        };
        println!("conformance[{}] {} ... {shown}", backend.name(), self.name);
        CaseReport {
            name: self.name,
            outcome,
        }
    }
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .field("needs", &self.needs)
            .finish_non_exhaustive()
    }
}

impl Summary {
    /// The backend's name.
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// Every case run, in order, with its outcome.
    pub fn reports(&self) -> &[CaseReport] {
        &self.reports
    }

    /// How many cases passed.
    pub fn passed(&self) -> usize {
        self.named(|outcome| matches!(outcome, Outcome::Passed))
            .len()
    }

    /// The cases that failed.
    pub fn failed(&self) -> Vec<&'static str> {
        self.named(|outcome| matches!(outcome, Outcome::Failed(_)))
    }

    /// The cases skipped for a capability the backend lacks.
    pub fn skipped(&self) -> Vec<&'static str> {
        self.named(|outcome| matches!(outcome, Outcome::Skipped(_)))
    }

    /// Whether no case failed.
    pub fn is_success(&self) -> bool {
        self.failed().is_empty()
    }

    /// Panics, naming every case that failed and why, if any did.
    pub fn assert_passed(&self) {
        let failures: Vec<String> = self
            .reports
            .iter()
            .filter_map(|report| match &report.outcome {
                Outcome::Failed(message) => Some(format!("  {}: {message}", report.name)),
                _ => None,
            })
            .collect();
        assert!(
            failures.is_empty(),
            "conformance[{}] failed: {:?}\n{}",
            self.backend,
            self.failed(),
            failures.join("\n")
        );
    }

    fn named(&self, matching: impl Fn(&Outcome) -> bool) -> Vec<&'static str> {
        self.reports
            .iter()
            .filter(|report| matching(&report.outcome))
            .map(|report| report.name)
            .collect()
    }
}

/// `conformance[NAME]: 36 passed, 0 failed`, and how many were skipped if any were.
impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "conformance[{}]: {} passed, {} failed",
            self.backend,
            self.passed(),
            self.failed().len()
        )?;
        match self.skipped().len() {
            0 => Ok(()),
            skipped => write!(f, ", {skipped} skipped"),
        }
    }
}

/// What a caught panic said: `panic!` and failed assertions carry a `String` or a `&str`.
fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else if let Some(message) = panic.downcast_ref::<&str>() {
        message.to_string()
    } else {
        "a panic without a message".to_string()
    }
}
