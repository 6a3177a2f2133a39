//! A reader's counters as they stood when its state's lock was last released
//! ([`StateGuard`] publishes them as it drops), read without that lock: its producer
//! holds the lock while it reads a chunk, and a chunk may wait a minute on a stalled
//! object store. Stats, `/metrics` and the status page read these, so they answer at
//! once, most of all when a trainer waits for data.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::records::ReaderState;
use crate::pipeline::PipelineProgress;
use readerd_common::sync::MutexUnpoisoned;

/// A reader's state, locked; its counters are published when the lock is released.
pub(super) struct StateGuard<'a> {
    state: MutexGuard<'a, ReaderState>,
    published: &'a PublishedFigures,
}

impl<'a> StateGuard<'a> {
    pub(super) fn new(state: MutexGuard<'a, ReaderState>, published: &'a PublishedFigures) -> Self {
        Self { state, published }
    }
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = ReaderState;

    fn deref(&self) -> &ReaderState {
        &self.state
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut ReaderState {
        &mut self.state
    }
}

impl Drop for StateGuard<'_> {
    /// Publishes the state's counters: plain reads that never panic (this also runs while
    /// a panic unwinds through the lock's holder).
    fn drop(&mut self) {
        self.published.publish(&self.state);
    }
}

/// Where a value that may be absent is [`NONE`].
const NONE: u64 = u64::MAX;

/// The counters of a reader's state, as of the last release of its lock.
#[derive(Default)]
pub(super) struct PublishedFigures {
    records_produced: AtomicU64,
    elements_produced: AtomicU64,
    records_skipped: AtomicU64,
    files_cut_short: AtomicU64,
    files_completed: AtomicU64,
    epoch: AtomicU64,
    epoch_files_done: AtomicU64,
    /// [`NONE`]: not known.
    epoch_files: AtomicU64,
    finished: AtomicBool,
    /// A mixture's components: elements taken from each, and whether its choice found
    /// it exhausted.
    components: Mutex<Vec<(u64, bool)>>,
}

/// [`PublishedFigures`], read.
#[derive(Clone, Debug)]
pub(super) struct Figures {
    pub(super) records_produced: u64,
    pub(super) elements_produced: u64,
    pub(super) records_skipped: u64,
    pub(super) files_cut_short: u64,
    pub(super) files_completed: u64,
    pub(super) progress: PipelineProgress,
    pub(super) finished: bool,
    pub(super) components: Vec<(u64, bool)>,
}

impl PublishedFigures {
    /// `state`'s figures, published.
    pub(super) fn of(state: &ReaderState) -> Self {
        let figures = Self::default();
        figures.publish(state);
        figures
    }

    fn publish(&self, state: &ReaderState) {
        let store = |counter: &AtomicU64, value: u64| counter.store(value, Ordering::Relaxed);
        store(&self.records_produced, state.records_produced);
        store(&self.elements_produced, state.elements_produced);
        store(&self.records_skipped, state.records_skipped);
        store(&self.files_cut_short, state.files_cut_short);
        store(&self.files_completed, state.pipeline.files_completed());
        let progress = state.pipeline.epoch_progress();
        store(&self.epoch, progress.epoch);
        store(&self.epoch_files_done, progress.files_done);
        store(&self.epoch_files, progress.files.unwrap_or(NONE));
        self.finished.store(state.pipeline.is_finished(), Ordering::Relaxed);
        // A mixture's choice starts with its first element: until then (and after a
        // reset) nothing was taken from any component.
        let mut components = self.components.lock_unpoisoned();
        components.clear();
        if let Some(mix) = &state.mix {
            components.extend(mix.taken.iter().enumerate().map(|(i, taken)| (*taken, mix.choice.is_exhausted(i))));
        }
    }

    /// The figures last published; `epochs` is the spec's.
    pub(super) fn read(&self, epochs: Option<u64>) -> Figures {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let epoch_files = load(&self.epoch_files);
        Figures {
            records_produced: load(&self.records_produced),
            elements_produced: load(&self.elements_produced),
            records_skipped: load(&self.records_skipped),
            files_cut_short: load(&self.files_cut_short),
            files_completed: load(&self.files_completed),
            progress: PipelineProgress {
                epoch: load(&self.epoch),
                epochs,
                files_done: load(&self.epoch_files_done),
                files: (epoch_files != NONE).then_some(epoch_files),
            },
            finished: self.finished.load(Ordering::Relaxed),
            components: self.components.lock_unpoisoned().clone(),
        }
    }
}
