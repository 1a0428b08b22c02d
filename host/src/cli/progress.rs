//! A progress line on the terminal for long runs: `observe intents  1200/5000`, redrawn in
//! place on stderr. Drawn only when stderr is a terminal and a phase has at least
//! [`SHOWN_FROM`] items, so short runs, pipes and `--json` output stay clean.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mend::progress::Progress;

/// Phases with fewer items finish too fast to need a progress line.
pub const SHOWN_FROM: usize = 200;
/// Redraws at most this often.
const REDRAW_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub struct TerminalProgress {
    phase: Mutex<Option<Phase>>,
}

#[derive(Debug)]
struct Phase {
    name: String,
    total: usize,
    drawn_at: Option<Instant>,
}

impl TerminalProgress {
    /// A progress line, or `None` where one must not be drawn.
    pub fn for_stderr(json: bool) -> Option<Self> {
        (!json && std::io::stderr().is_terminal()).then(|| Self {
            phase: Mutex::new(None),
        })
    }

    fn draw(name: &str, done: usize, total: usize) {
        let width = 30;
        let filled = (done * width).checked_div(total).unwrap_or(width);
        let bar: String = "#".repeat(filled) + &"-".repeat(width - filled);
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r{name:<20} [{bar}] {done}/{total}");
        let _ = stderr.flush();
    }
}

impl Progress for TerminalProgress {
    fn begin(&self, phase: &str, total: usize) {
        let mut current = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        *current = (total >= SHOWN_FROM).then(|| Phase {
            name: phase.to_string(),
            total,
            drawn_at: None,
        });
    }

    fn advance(&self, done: usize) {
        let mut current = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(phase) = current.as_mut()
            && phase.drawn_at.is_none_or(|at| at.elapsed() >= REDRAW_EVERY)
        {
            Self::draw(&phase.name, done, phase.total);
            phase.drawn_at = Some(Instant::now());
        }
    }

    fn end(&self) {
        let mut current = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(phase) = current.take() {
            Self::draw(&phase.name, phase.total, phase.total);
            eprintln!();
        }
    }
}
