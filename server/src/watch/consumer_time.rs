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
        self.wait = self.wait.saturating_add(other.wait);
        self.step = self.step.saturating_add(other.step);
        self.elements = self.elements.saturating_add(other.elements);
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

/// Most reports kept (a client reports about once a second).
const MOST_REPORTS: usize = 64;

/// Consumers' time together (`None` when none reported): a reader's figures.
pub fn together(times: impl IntoIterator<Item = TimeSpent>) -> Option<TimeSpent> {
    times.into_iter().reduce(|mut sum, time| {
        sum.add(&time);
        sum
    })
}

/// The share of consumers' time spent waiting inside `next()`, all together (`None`
/// before any reported): a reader's input-bound figure.
pub fn input_bound(times: impl IntoIterator<Item = TimeSpent>) -> Option<f64> {
    together(times).and_then(|time| time.input_bound())
}

/// A stream's reports, the last [`WINDOW`] of them.
#[derive(Debug)]
pub struct ConsumerTime {
    /// When the stream opened, or last reported.
    since: Mutex<Instant>,
    reports: Mutex<VecDeque<(Instant, TimeSpent)>>,
}

impl Default for ConsumerTime {
    fn default() -> Self {
        Self { since: Mutex::new(Instant::now()), reports: Mutex::default() }
    }
}

impl ConsumerTime {
    /// A client's report. It may claim no more time than passed since the stream opened
    /// or last reported (a second's leeway): a client's numbers are not trusted further.
    pub fn report(&self, spent: TimeSpent) {
        let now = Instant::now();
        let passed = std::mem::replace(&mut *self.since.lock_unpoisoned(), now).elapsed() + Duration::from_secs(1);
        let claimed = spent.wait.saturating_add(spent.step);
        let spent = if claimed > passed {
            let scale = passed.as_secs_f64() / claimed.as_secs_f64();
            TimeSpent { wait: spent.wait.mul_f64(scale), step: spent.step.mul_f64(scale), elements: spent.elements }
        } else {
            spent
        };
        let mut reports = self.reports.lock_unpoisoned();
        reports.push_back((now, spent));
        while reports.len() > MOST_REPORTS
            || (reports.len() > 1 && reports.front().is_some_and(|(at, _)| now.duration_since(*at) > WINDOW))
        {
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

    #[test]
    fn a_report_claiming_more_time_than_passed_is_scaled_down_to_it() {
        let time = ConsumerTime::default();
        // An hour claimed a moment after the stream opened: at most about a second counts,
        // in the same shares.
        time.report(spent(3_000_000, 600_000, 10));
        let recent = time.recent().unwrap();
        assert!(recent.wait + recent.step <= Duration::from_millis(1100), "{recent:?}");
        assert!((recent.input_bound().unwrap() - 3.0 / 3.6).abs() < 1e-6);
        // Sums saturate instead of overflowing.
        let mut sum = TimeSpent { wait: Duration::MAX, ..TimeSpent::default() };
        sum.add(&spent(1, 1, 1));
        assert_eq!(sum.wait, Duration::MAX);
    }
}
