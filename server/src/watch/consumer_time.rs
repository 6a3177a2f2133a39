//! How a trainer spends its time, as its client reports it
//! (`AcknowledgeRequest.consumer_time`, about once a second): waiting inside `next()`
//! for elements, or in its own step between calls. Kept per stream over the last
//! [`WINDOW`]: a consumer's input-bound fraction is its wait over its wait and step
//! there, and its elements per second the elements it took over that time.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use readerd_common::sync::MutexUnpoisoned;

/// The reports a consumer's figures are made of: those of the last 10 seconds (or the
/// newest one, when it reported nothing since).
pub const WINDOW: Duration = Duration::from_secs(10);

/// One report: the trainer's time since its previous one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeSpent {
    /// Inside `next()`, waiting for elements.
    pub wait: Duration,
    /// Between calls: its own step.
    pub step: Duration,
    /// Elements it took.
    pub elements: u64,
}

impl TimeSpent {
    /// A client's report; negative numbers count as none.
    pub fn from_pb(time: &readerd_proto::v1::ConsumerTime) -> Self {
        let micros = |us: i64| Duration::from_micros(u64::try_from(us).unwrap_or(0));
        Self {
            wait: micros(time.wait_us),
            step: micros(time.step_us),
            elements: u64::try_from(time.elements).unwrap_or(0),
        }
    }

    pub fn add(&mut self, other: &TimeSpent) {
        self.wait += other.wait;
        self.step += other.step;
        self.elements += other.elements;
    }

    /// Its wait over its wait and step (0: the data was always there; 1: the trainer only
    /// waited); `None` over no time.
    pub fn input_bound(&self) -> Option<f64> {
        let total = (self.wait + self.step).as_secs_f64();
        (total > 0.0).then(|| self.wait.as_secs_f64() / total)
    }

    /// Elements taken per second of the trainer's time.
    pub fn elements_per_second(&self) -> Option<f64> {
        let total = (self.wait + self.step).as_secs_f64();
        (total > 0.0).then(|| self.elements as f64 / total)
    }
}

/// A stream's reports, the last [`WINDOW`] of them.
#[derive(Debug, Default)]
pub struct ConsumerTime {
    reports: Mutex<VecDeque<(Instant, TimeSpent)>>,
}

impl ConsumerTime {
    pub fn report(&self, spent: TimeSpent) {
        let now = Instant::now();
        let mut reports = self.reports.lock_unpoisoned();
        reports.push_back((now, spent));
        while reports.len() > 1 && reports.front().is_some_and(|(at, _)| now.duration_since(*at) > WINDOW) {
            reports.pop_front();
        }
    }

    /// The trainer's time over the window; `None` before its first report.
    pub fn recent(&self) -> Option<TimeSpent> {
        let now = Instant::now();
        let reports = self.reports.lock_unpoisoned();
        let newest = reports.back()?.1;
        let mut recent = TimeSpent::default();
        reports.iter().filter(|(at, _)| now.duration_since(*at) <= WINDOW).for_each(|(_, spent)| recent.add(spent));
        Some(if recent == TimeSpent::default() { newest } else { recent })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(wait_ms: u64, step_ms: u64, elements: u64) -> TimeSpent {
        TimeSpent { wait: Duration::from_millis(wait_ms), step: Duration::from_millis(step_ms), elements }
    }

    #[test]
    fn a_consumers_figures_sum_its_reports() {
        let time = ConsumerTime::default();
        assert_eq!(time.recent(), None);
        time.report(spent(100, 900, 20));
        time.report(spent(300, 700, 30));
        let recent = time.recent().unwrap();
        assert_eq!(recent, spent(400, 1600, 50));
        assert!((recent.input_bound().unwrap() - 0.2).abs() < 1e-9);
        assert!((recent.elements_per_second().unwrap() - 25.0).abs() < 1e-9);
        assert_eq!(spent(0, 0, 0).input_bound(), None);
    }
}
