//! Where a reader's time goes, by stage ([`Stage`]): cumulative seconds per reader
//! ([`StageTimes`]), as `/status.json`, the status page and `/metrics` show them.
//!
//! - **reading**: blocked on bytes: `read` calls on a file, or waiting for an object
//!   store's GETs ([`TimedRead`] around every source's bytes).
//! - **framing**: the pipeline taking records (framing, decompressing, shuffling),
//!   without the reading inside it.
//! - **decoding**: records into tensors, on the decoding threads.
//! - **sendWait**: a stream waiting for room in its buffer: the network or the trainer
//!   is slower than the reader.
//! - **queueing**: a chunk asked for and not yet being made: waiting for a blocking
//!   thread, or for another stream's chunk of the same reader.
//!
//! Reading and framing are timed where they happen, deep in the source and on the
//! pipeline's file threads, which know no reader: a thread doing a reader's work names
//! its [`StageTimes`] for that while ([`StageTimes::working_on_this_thread`]; the
//! pipeline's file threads inherit their starter's, [`current`]), and spans of taking
//! records ([`counted`]) count the reads inside them ([`TimedRead`]) as reading, time
//! blocked on another thread's records ([`waiting`]) as nothing (that thread counts its
//! own), and the rest as framing.

use std::cell::{Cell, RefCell};
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The stages, in the order the status page shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Reading,
    Framing,
    Decoding,
    SendWait,
    Queueing,
}

impl Stage {
    pub const ALL: [Stage; 5] = [Stage::Reading, Stage::Framing, Stage::Decoding, Stage::SendWait, Stage::Queueing];

    /// Its name in `/status.json` and in the `stage` label of `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Reading => "reading",
            Stage::Framing => "framing",
            Stage::Decoding => "decoding",
            Stage::SendWait => "sendWait",
            Stage::Queueing => "queueing",
        }
    }
}

/// A reader's time in each stage so far, in nanoseconds (summed over its streams and
/// threads: stages that overlap each count in full).
#[derive(Debug, Default)]
pub struct StageTimes {
    nanos: [AtomicU64; Stage::ALL.len()],
}

impl StageTimes {
    pub fn add(&self, stage: Stage, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.nanos[stage as usize].fetch_add(nanos, Ordering::Relaxed);
    }

    /// Runs `work`, counting its time in `stage`.
    pub fn time<T>(&self, stage: Stage, work: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let result = work();
        self.add(stage, started.elapsed());
        result
    }

    /// Seconds in each stage so far, in [`Stage::ALL`]'s order.
    pub fn seconds(&self) -> [(Stage, f64); Stage::ALL.len()] {
        Stage::ALL.map(|stage| (stage, self.nanos[stage as usize].load(Ordering::Relaxed) as f64 / 1e9))
    }

    /// Runs `work` with this thread doing this reader's work: the [`counted`] spans in it
    /// count here.
    pub fn working_on_this_thread<T>(self: &Arc<Self>, work: impl FnOnce() -> T) -> T {
        let _restored = Restore::working_for(WORKING_FOR.replace(Some(self.clone())));
        work()
    }
}

thread_local! {
    /// The reader whose work this thread does now.
    static WORKING_FOR: RefCell<Option<Arc<StageTimes>>> = const { RefCell::new(None) };
    /// Inside a [`counted`] span: its reads' time, and its time blocked on other threads.
    static SPAN: Cell<Option<(Duration, Duration)>> = const { Cell::new(None) };
    /// The figures of the span that just ended.
    static SPAN_ENDED: Cell<(Duration, Duration)> = const { Cell::new((Duration::ZERO, Duration::ZERO)) };
}

/// The reader whose work this thread does, for a thread it starts to do it too.
pub fn current() -> Option<Arc<StageTimes>> {
    WORKING_FOR.with_borrow(Clone::clone)
}

/// Runs `take` (taking records: reading, framing, the pipeline's work), counting for the
/// reader whose work the thread does its reads as reading and the rest, but for the time
/// blocked on other threads ([`waiting`]), as framing. Without one (or inside another
/// span), it only runs.
pub fn counted<T>(take: impl FnOnce() -> T) -> T {
    let Some(times) = current() else { return take() };
    if SPAN.get().is_some() {
        return take();
    }
    SPAN.set(Some((Duration::ZERO, Duration::ZERO)));
    let span = Restore::Span;
    let started = Instant::now();
    let result = take();
    let took = started.elapsed();
    drop(span);
    let (read, waited) = SPAN_ENDED.take();
    times.add(Stage::Reading, read);
    times.add(Stage::Framing, took.saturating_sub(read).saturating_sub(waited));
    result
}

/// Puts this thread's figures back as they were when the work or span it guards ends,
/// however it ends: a panic caught further up (a decoder's) leaves the thread, which a
/// pool reuses, counting for nobody.
enum Restore {
    /// The reader the thread worked for before.
    WorkingFor(Option<Arc<StageTimes>>),
    /// A span: it ends (its figures kept in `SPAN_ENDED` for the caller).
    Span,
}

impl Restore {
    fn working_for(outer: Option<Arc<StageTimes>>) -> Self {
        Restore::WorkingFor(outer)
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        match self {
            Restore::WorkingFor(outer) => WORKING_FOR.set(outer.take()),
            Restore::Span => SPAN_ENDED.set(SPAN.replace(None).unwrap_or_default()),
        }
    }
}

/// Runs `wait` (blocking on records another thread reads, which counts its own time),
/// leaving its time out of the span it is in.
pub fn waiting<T>(wait: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let result = wait();
    if let Some((read, waited)) = SPAN.get() {
        SPAN.set(Some((read, waited + started.elapsed())));
    }
    result
}

/// A source's bytes, each `read` timed as reading in the [`counted`] span it is in
/// (none: not counted).
pub struct TimedRead<R> {
    inner: R,
}

impl<R> TimedRead<R> {
    pub fn new(inner: R) -> Self {
        Self { inner }
    }
}

impl<R: Read> Read for TimedRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let started = Instant::now();
        let read = self.inner.read(buf);
        if let Some((so_far, waited)) = SPAN.get() {
            SPAN.set(Some((so_far + started.elapsed(), waited)));
        }
        read
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that take `delay` per read.
    struct Slow(std::time::Duration);

    impl Read for Slow {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            std::thread::sleep(self.0);
            buf[0] = 1;
            Ok(1)
        }
    }

    #[test]
    fn reads_inside_a_span_count_as_reading_waits_as_nothing_and_the_rest_as_framing() {
        let times = Arc::new(StageTimes::default());
        let mut bytes = TimedRead::new(Slow(Duration::from_millis(20)));
        times.working_on_this_thread(|| {
            counted(|| {
                let mut buf = [0u8; 4];
                bytes.read_exact(&mut buf).unwrap();
                std::thread::sleep(Duration::from_millis(30));
                waiting(|| std::thread::sleep(Duration::from_millis(200)));
            })
        });
        // At least the reads' 80 ms as reading, and at least the other 30 ms as framing
        // (had the reads counted as framing, or the rest as reading, one would be short).
        let [(_, reading), (_, framing), ..] = times.seconds();
        assert!(reading >= 0.08, "4 reads of 20 ms: {reading}");
        assert!(framing >= 0.03, "30 ms besides: {framing}");
        // Had the 200 ms blocked on another thread counted, the two would reach 0.31 s.
        assert!(reading + framing < 0.3, "the 200 ms blocked on another thread left out: {reading} {framing}");
        // Outside a span, reads count nowhere.
        let mut buf = [0u8; 1];
        bytes.read_exact(&mut buf).unwrap();
        assert_eq!(times.seconds()[0].1, reading);
    }

    #[test]
    fn a_panic_inside_a_span_leaves_the_thread_counting_for_nobody() {
        let times = Arc::new(StageTimes::default());
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            times.working_on_this_thread(|| counted(|| panic!("a decoder's bug")))
        }));
        assert!(panicked.is_err());
        assert!(current().is_none() && SPAN.get().is_none(), "the thread's figures put back");
        // The next reader's span on this thread counts, and for it alone.
        let next = Arc::new(StageTimes::default());
        next.working_on_this_thread(|| counted(|| std::thread::sleep(Duration::from_millis(5))));
        assert!(next.seconds()[1].1 > 0.0 && times.seconds()[1].1 == 0.0);
    }
}
