//! Progress of long runs (a sweep over thousands of intents, a reconcile reading thousands of
//! objects), reported to whoever drives the engine: the CLI draws a line on a terminal; a
//! server could export it. The engine reports; it never decides how to show it.

use std::fmt;

/// Told about each phase of a long run as it goes.
pub trait Progress: Send + Sync + fmt::Debug {
    /// A phase of `total` items begins, e.g. "observe intents".
    fn begin(&self, phase: &str, total: usize);
    /// `done` of the phase's items are finished.
    fn advance(&self, done: usize);
    /// The phase is over.
    fn end(&self);
}

/// Reports nowhere: what libraries and tests use.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn begin(&self, _phase: &str, _total: usize) {}
    fn advance(&self, _done: usize) {}
    fn end(&self) {}
}
