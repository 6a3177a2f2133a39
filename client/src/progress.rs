//! A one-line progress report on stderr for long operations: count and rate, redrawn at
//! most five times a second, only when stderr is a terminal (and not `--quiet`). With a
//! total of elements known beforehand (`readerctl read` of a spec whose element count the
//! server describes), the elements out of it too.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Progress {
    what: &'static str,
    start: Instant,
    last_draw: Instant,
    shown: bool,
    count: u64,
    /// Elements handed over, and how many there will be in all, when known.
    elements: u64,
    total: Option<u64>,
}

impl Progress {
    /// A report of `what` (e.g. "records"); drawn only when `enabled` and stderr is a terminal.
    pub fn new(what: &'static str, enabled: bool) -> Self {
        let now = Instant::now();
        let shown = enabled && std::io::stderr().is_terminal();
        Self { what, start: now, last_draw: now, shown, count: 0, elements: 0, total: None }
    }

    /// Whether the report is drawn (worth asking for a total).
    pub fn shown(&self) -> bool {
        self.shown
    }

    /// The elements there will be in all.
    pub fn with_total(mut self, total: Option<u64>) -> Self {
        self.total = total;
        self
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

    /// One element of `n` of `what` handed over.
    pub fn element(&mut self, n: u64) {
        self.elements += 1;
        self.add(n);
    }

    fn line(&self, seconds: f64) -> String {
        let seconds = seconds.max(1e-9);
        let rate = self.count as f64 / seconds;
        let counted = format!("{} {} in {seconds:.1} s ({rate:.0} {}/s)", self.count, self.what, self.what);
        match self.total {
            Some(total) => {
                let percent = if total == 0 { 100.0 } else { 100.0 * self.elements as f64 / total as f64 };
                format!("{}/{total} elements ({percent:.0}%), {counted}", self.elements)
            }
            None => counted,
        }
    }

    fn draw(&self, end: &str) {
        eprint!("\r\x1b[2K{}{end}", self.line(self.start.elapsed().as_secs_f64()));
        let _ = std::io::stderr().flush();
    }

    /// Draws the final line (when shown).
    pub fn finish(&self) {
        if self.shown {
            self.draw("\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_counts_and_shows_the_total_when_known() {
        let mut progress = Progress::new("records", false);
        progress.element(32);
        progress.element(32);
        assert_eq!(progress.line(2.0), "64 records in 2.0 s (32 records/s)");
        let progress = progress.with_total(Some(8));
        assert_eq!(progress.line(2.0), "2/8 elements (25%), 64 records in 2.0 s (32 records/s)");
    }
}
