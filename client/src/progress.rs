//! A one-line progress report on stderr for long operations: count and rate, redrawn at
//! most five times a second, only when stderr is a terminal (and not `--quiet`).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Progress {
    what: &'static str,
    start: Instant,
    last_draw: Instant,
    shown: bool,
    count: u64,
}

impl Progress {
    /// A report of `what` (e.g. "records"); drawn only when `enabled` and stderr is a terminal.
    pub fn new(what: &'static str, enabled: bool) -> Self {
        let now = Instant::now();
        Self { what, start: now, last_draw: now, shown: enabled && std::io::stderr().is_terminal(), count: 0 }
    }

    pub fn set(&mut self, count: u64) {
        self.count = count;
        if self.shown && self.last_draw.elapsed() >= Duration::from_millis(200) {
            self.last_draw = Instant::now();
            self.draw("");
        }
    }

    pub fn add(&mut self, n: u64) {
        self.set(self.count + n);
    }

    fn draw(&self, end: &str) {
        let seconds = self.start.elapsed().as_secs_f64().max(1e-9);
        let rate = self.count as f64 / seconds;
        eprint!("\r\x1b[2K{} {} in {seconds:.1} s ({rate:.0} {}/s){end}", self.count, self.what, self.what);
        let _ = std::io::stderr().flush();
    }

    /// Draws the final line (when shown).
    pub fn finish(&self) {
        if self.shown {
            self.draw("\n");
        }
    }
}
