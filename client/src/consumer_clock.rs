//! Where a trainer's time goes, measured on its side of `next()`: the time it waits
//! inside `next()` for an element, and the time it spends between calls (its own step).
//! [`ConsumerClock`] adds them up and hands them out as reports for the server
//! (`AcknowledgeRequest.consumer_time`) about once a second; the server tells from them
//! whether the trainer is input-bound.

use std::time::{Duration, Instant};

use readerd_proto::v1 as pb;

/// How often a stream reports its trainer's time.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct ConsumerClock {
    /// When the pending `next()` was called.
    called: Option<Instant>,
    /// When the last element reached the trainer.
    returned: Option<Instant>,
    /// Not reported yet.
    wait: Duration,
    step: Duration,
    elements: u64,
    last_report: Instant,
}

impl Default for ConsumerClock {
    fn default() -> Self {
        Self {
            called: None,
            returned: None,
            wait: Duration::ZERO,
            step: Duration::ZERO,
            elements: 0,
            last_report: Instant::now(),
        }
    }
}

impl ConsumerClock {
    /// The trainer called `next()`: the time since it got its last element was its step.
    pub fn next_called(&mut self) {
        let now = Instant::now();
        if let Some(returned) = self.returned.take() {
            self.step += now - returned;
        }
        self.called = Some(now);
    }

    /// `next()` returns, with an element or not: the time since it was called was
    /// waiting.
    pub fn next_returned(&mut self, element: bool) {
        let now = Instant::now();
        if let Some(called) = self.called.take() {
            self.wait += now - called;
        }
        self.elements += u64::from(element);
        self.returned = Some(now);
    }

    /// The element `next()` returned reached the trainer only now (a binding converted it
    /// first): that time was waiting too, not the trainer's step.
    pub fn handed_out(&mut self) {
        let now = Instant::now();
        if let Some(returned) = self.returned.replace(now) {
            self.wait += now - returned;
        }
    }

    /// The trainer spent `elapsed` in a call of the client between `next()` calls (an
    /// acknowledgement it asked for): waiting on the data service, not its own step.
    pub fn waited_in_call(&mut self, elapsed: Duration) {
        self.wait += elapsed;
        if let Some(returned) = &mut self.returned {
            *returned += elapsed;
        }
    }

    /// While `next()` still waits: the time since the last report, once
    /// [`REPORT_EVERY`] passed, with the wait so far counted (a trainer that waits a minute
    /// for its next element shows as waiting during that minute, not only after it).
    pub fn report_while_waiting(&mut self) -> Option<pb::ConsumerTime> {
        if self.last_report.elapsed() < REPORT_EVERY {
            return None;
        }
        let now = Instant::now();
        if let Some(called) = self.called.replace(now) {
            self.wait += now - called;
        }
        self.report_due()
    }

    /// The time since the last report, once [`REPORT_EVERY`] passed (and the trainer
    /// took an element or waited since).
    pub fn report_due(&mut self) -> Option<pb::ConsumerTime> {
        if self.last_report.elapsed() < REPORT_EVERY || (self.wait.is_zero() && self.step.is_zero()) {
            return None;
        }
        self.last_report = Instant::now();
        let micros = |spent: Duration| i64::try_from(spent.as_micros()).unwrap_or(i64::MAX);
        let report = pb::ConsumerTime {
            wait_us: micros(std::mem::take(&mut self.wait)),
            step_us: micros(std::mem::take(&mut self.step)),
            elements: i64::try_from(std::mem::take(&mut self.elements)).unwrap_or(i64::MAX),
        };
        Some(report)
    }
}

/// `time` added to a report not sent yet.
pub fn added(unsent: Option<pb::ConsumerTime>, time: pb::ConsumerTime) -> pb::ConsumerTime {
    let Some(unsent) = unsent else { return time };
    pb::ConsumerTime {
        wait_us: unsent.wait_us.saturating_add(time.wait_us),
        step_us: unsent.step_us.saturating_add(time.step_us),
        elements: unsent.elements.saturating_add(time.elements),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_wait_is_reported_while_it_lasts_and_counted_once() {
        let mut clock = ConsumerClock { last_report: Instant::now() - REPORT_EVERY, ..Default::default() };
        let started = Instant::now();
        clock.next_called();
        std::thread::sleep(Duration::from_millis(40));
        let during = clock.report_while_waiting().expect("a second passed since the last report");
        assert!(during.wait_us >= 40_000 && during.step_us == 0 && during.elements == 0, "{during:?}");
        // Not again within a second.
        assert_eq!(clock.report_while_waiting(), None);
        std::thread::sleep(Duration::from_millis(20));
        clock.next_returned(true);
        let waited = started.elapsed().as_micros() as i64;
        clock.last_report -= REPORT_EVERY;
        let after = clock.report_due().unwrap();
        // The rest of the wait only: the part reported during it is not counted twice.
        assert!(after.wait_us >= 20_000 && during.wait_us + after.wait_us <= waited, "{during:?} {after:?} {waited}");
        assert_eq!(after.elements, 1);
    }

    #[test]
    fn waits_and_steps_add_up_and_are_reported_once() {
        let mut clock = ConsumerClock::default();
        clock.next_called();
        std::thread::sleep(Duration::from_millis(30));
        clock.next_returned(true);
        std::thread::sleep(Duration::from_millis(50));
        clock.next_called();
        clock.next_returned(true);
        // Not a second yet since the clock started.
        assert_eq!(clock.report_due(), None);
        clock.last_report -= REPORT_EVERY;
        let report = clock.report_due().unwrap();
        assert_eq!(report.elements, 2);
        // Each sleep counted where it belongs (had one counted as the other, one would
        // be short).
        assert!(report.wait_us >= 30_000 && report.step_us >= 50_000, "{report:?}");
        clock.last_report -= REPORT_EVERY;
        assert_eq!(clock.report_due(), None, "nothing since");
    }
}
