//! A progress bar on the terminal for long runs (`observe intents  [####----] 1200/5000`, or
//! for bytes `upload s1  [####----] 12.0 MiB/20.0 MiB`), drawn by `indicatif` on stderr. Drawn
//! only when stderr is a terminal and a phase is big enough to last ([`SHOWN_FROM`] items,
//! [`BYTES_SHOWN_FROM`] bytes), so short runs, pipes and `--json` output stay clean.
//!
//! The engine reports progress through the library's small [`Progress`] trait (begin a phase,
//! advance, end); this is the command line's implementation of it.

use std::io::IsTerminal;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use mend::progress::Progress;

/// Phases with fewer items finish too fast to need a progress bar.
pub const SHOWN_FROM: usize = 200;
/// Files smaller than this are hashed or uploaded too fast to need a progress bar.
pub const BYTES_SHOWN_FROM: usize = 8 << 20;

/// Draws each phase of a run as one progress bar; see the module doc.
pub struct TerminalProgress {
    unit: Unit,
    /// Where each phase's bar draws: stderr, or a test's in-memory terminal.
    target: Box<dyn Fn() -> ProgressDrawTarget + Send + Sync>,
    // A std mutex: held to start, move or finish the bar, never across an await.
    bar: Mutex<Option<ProgressBar>>,
}

impl std::fmt::Debug for TerminalProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalProgress")
            .field("unit", &self.unit)
            .finish_non_exhaustive()
    }
}

/// What a phase counts.
#[derive(Debug, Clone, Copy)]
enum Unit {
    Items,
    Bytes,
}

impl Unit {
    fn shown_from(self) -> usize {
        match self {
            Unit::Items => SHOWN_FROM,
            Unit::Bytes => BYTES_SHOWN_FROM,
        }
    }

    fn style(self) -> ProgressStyle {
        let template = match self {
            Unit::Items => "{msg:<20} [{bar:30}] {pos}/{len}",
            Unit::Bytes => "{msg:<20} [{bar:30}] {bytes}/{total_bytes}",
        };
        ProgressStyle::with_template(template)
            .expect("the templates are valid")
            .progress_chars("#-")
    }
}

impl TerminalProgress {
    /// A progress bar counting items, or `None` where one must not be drawn.
    pub fn for_stderr(json: bool) -> Option<Self> {
        Self::counting(Unit::Items, json)
    }

    /// A progress bar counting bytes (of a file hashed or uploaded), or `None` where one must
    /// not be drawn.
    pub fn bytes_for_stderr(json: bool) -> Option<Self> {
        Self::counting(Unit::Bytes, json)
    }

    fn counting(unit: Unit, json: bool) -> Option<Self> {
        (!json && std::io::stderr().is_terminal()).then(|| Self {
            unit,
            target: Box::new(ProgressDrawTarget::stderr),
            bar: Mutex::new(None),
        })
    }
}

impl Progress for TerminalProgress {
    fn begin(&self, phase: &str, total: usize) {
        let mut bar = self.bar.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(unfinished) = bar.take() {
            unfinished.finish();
        }
        *bar = (total >= self.unit.shown_from()).then(|| {
            ProgressBar::with_draw_target(Some(total as u64), (self.target)())
                .with_style(self.unit.style())
                .with_message(phase.to_string())
        });
    }

    fn advance(&self, done: usize) {
        let bar = self.bar.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bar) = bar.as_ref() {
            bar.set_position(done as u64);
        }
    }

    fn end(&self) {
        let mut bar = self.bar.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bar) = bar.take() {
            bar.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use indicatif::InMemoryTerm;

    use super::*;

    fn on(term: &InMemoryTerm, unit: Unit) -> TerminalProgress {
        let term = term.clone();
        TerminalProgress {
            unit,
            target: Box::new(move || ProgressDrawTarget::term_like(Box::new(term.clone()))),
            bar: Mutex::new(None),
        }
    }

    #[test]
    fn a_long_phase_is_drawn_to_its_end_and_a_short_one_not_at_all() {
        let term = InMemoryTerm::new(4, 80);
        let progress = on(&term, Unit::Items);
        progress.begin("observe intents", SHOWN_FROM - 1);
        progress.advance(10);
        progress.end();
        assert_eq!(term.contents(), "", "a short phase draws nothing");

        progress.begin("observe intents", 1000);
        progress.advance(400);
        progress.end();
        let drawn = term.contents();
        assert!(drawn.starts_with("observe intents"), "{drawn:?}");
        assert!(
            drawn.contains("1000/1000"),
            "finished at its total: {drawn:?}"
        );
        assert!(drawn.contains("[####"), "{drawn:?}");
    }

    #[test]
    fn bytes_are_shown_in_binary_units() {
        let term = InMemoryTerm::new(4, 80);
        let progress = on(&term, Unit::Bytes);
        progress.begin("upload s1", 20 << 20);
        progress.advance(12 << 20);
        progress.end();
        let drawn = term.contents();
        assert!(drawn.contains("20.00 MiB/20.00 MiB"), "{drawn:?}");
    }
}
