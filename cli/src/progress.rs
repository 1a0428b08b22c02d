//! A progress line on the terminal for long runs: `observe intents  1200/5000`, or for bytes
//! `upload s1  12.0/20.0 MiB`, redrawn in place on stderr. Drawn only when stderr is a
//! terminal and a phase is big enough to last ([`SHOWN_FROM`] items, [`BYTES_SHOWN_FROM`]
//! bytes), so short runs, pipes and `--json` output stay clean.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mend::progress::Progress;

/// Phases with fewer items finish too fast to need a progress line.
pub const SHOWN_FROM: usize = 200;
/// Files smaller than this are hashed or uploaded too fast to need a progress line.
pub const BYTES_SHOWN_FROM: usize = 8 << 20;
/// Redraws at most this often.
const REDRAW_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub struct TerminalProgress {
    unit: Unit,
    phase: Mutex<Option<Phase>>,
}

/// What a phase counts.
#[derive(Debug, Clone, Copy)]
enum Unit {
    Items,
    Bytes,
}

#[derive(Debug)]
struct Phase {
    name: String,
    total: usize,
    drawn_at: Option<Instant>,
}

impl TerminalProgress {
    /// A progress line counting items, or `None` where one must not be drawn.
    pub fn for_stderr(json: bool) -> Option<Self> {
        Self::counting(Unit::Items, json)
    }

    /// A progress line counting bytes (of a file hashed or uploaded), or `None` where one must
    /// not be drawn.
    pub fn bytes_for_stderr(json: bool) -> Option<Self> {
        Self::counting(Unit::Bytes, json)
    }

    fn counting(unit: Unit, json: bool) -> Option<Self> {
        (!json && std::io::stderr().is_terminal()).then(|| Self {
            unit,
            phase: Mutex::new(None),
        })
    }

    fn draw(&self, name: &str, done: usize, total: usize) {
        let width = 30;
        let filled = (done.min(total) * width)
            .checked_div(total)
            .unwrap_or(width);
        let bar: String = "#".repeat(filled) + &"-".repeat(width - filled);
        let amount = match self.unit {
            Unit::Items => format!("{done}/{total}"),
            Unit::Bytes => {
                let mib = |bytes: usize| bytes as f64 / f64::from(1 << 20);
                format!("{:.1}/{:.1} MiB", mib(done), mib(total))
            }
        };
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r{name:<20} [{bar}] {amount}");
        let _ = stderr.flush();
    }
}

impl Progress for TerminalProgress {
    fn begin(&self, phase: &str, total: usize) {
        let shown_from = match self.unit {
            Unit::Items => SHOWN_FROM,
            Unit::Bytes => BYTES_SHOWN_FROM,
        };
        let mut current = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        *current = (total >= shown_from).then(|| Phase {
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
            self.draw(&phase.name, done, phase.total);
            phase.drawn_at = Some(Instant::now());
        }
    }

    fn end(&self) {
        let mut current = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(phase) = current.take() {
            self.draw(&phase.name, phase.total, phase.total);
            eprintln!();
        }
    }
}
