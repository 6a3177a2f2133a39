//! Files handed to a pipeline one at a time, instead of an epoch's whole file order up
//! front: how a replica of a cluster reads the splits it leases from the split ledger
//! (`crate::cluster`). The interleave asks for the next file when a slot of its cycle is
//! free, so a replica holds only the files it is reading; a file may come with records to
//! leave out (those already acknowledged when another replica held it).
//!
//! Fed the epoch's file order, one file at a time and nothing left out, a pipeline gives
//! exactly the sequence of one that knew the order up front.

use super::record_set::RecordSet;
use crate::source::{SourceError, SplitRef};
use readerd_common::sync::MutexUnpoisoned;

/// A file to read next: an index into the source's files, its split's number in the
/// ledger (the same index, except for a mixture's component: its index among the job's
/// files), the epoch it is read for (the one asked for, or an earlier one whose reader
/// died), and the records (by `Record::number`) not to produce.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FedFile {
    pub file: usize,
    pub split: u32,
    pub epoch: u64,
    pub leave_out: RecordSet,
}

impl FedFile {
    /// Split `split` of a job whose splits are its files (not a mixture's component),
    /// leaving out `leave_out`.
    pub fn of(split: crate::source::SplitRef, leave_out: RecordSet) -> Self {
        Self { file: split.file as usize, split: split.file, epoch: split.epoch, leave_out }
    }
}

pub trait FileFeed: Send + Sync {
    /// The next file of `epoch` (from 1) or of an earlier epoch for this pipeline; `None`
    /// when there is none now. Blocking. (A job on replicas that took its elements from
    /// the jobs' window and then reads alone is first handed the splits it followed there,
    /// of any epoch: each record carries its file's epoch, `FedFile::epoch`.)
    fn next_file(&self, epoch: u64) -> Result<Option<FedFile>, SourceError>;

    /// The pipeline has read split `split` (`FedFile::split` of `FedFile::epoch`) to its
    /// end (or to an error that ends it), taking `records` records from it (those left out
    /// not counted). Its records may still be in the shuffle buffer.
    fn file_read(&self, _split: SplitRef, _records: u64) {}
}

/// A feed that takes its next file before its pipeline asks for it: the pipeline asks
/// under its reader's lock, and on replicas taking a file is a ledger transaction, which
/// [`AheadFeed::take_ahead`] makes with no lock held (called by the reading thread before
/// it takes its next chunk). One file at most is taken ahead, of the epoch the pipeline
/// last asked for.
///
/// A file taken ahead that the pipeline then never asks for (it found its epoch's input
/// ended, or its sequence ended, in between) is held until the pipeline looks for files
/// again: on replicas a reader that ends before its job does looks again, and so reads it.
pub struct AheadFeed {
    inner: std::sync::Arc<dyn FileFeed>,
    ahead: std::sync::Mutex<Ahead>,
    /// One file taken at a time, ahead or asked for.
    taking: std::sync::Mutex<()>,
}

#[derive(Default)]
struct Ahead {
    /// The epoch the pipeline last asked for (`None`: it has not asked yet).
    asked: Option<u64>,
    file: Option<FedFile>,
    /// The inner feed had no file the last time it was asked (by the pipeline or ahead):
    /// nothing is taken ahead until the pipeline asks again (it then looks again, or
    /// moved on), so a feed with no file now is not asked at every chunk.
    dry: bool,
}

impl AheadFeed {
    pub fn new(inner: std::sync::Arc<dyn FileFeed>) -> Self {
        Self { inner, ahead: Default::default(), taking: Default::default() }
    }

    /// Takes the next file of the epoch the pipeline last asked for, unless one is taken
    /// already or being taken (blocking: call with no lock held). A failure is left to the
    /// pipeline's next ask, which meets it again.
    pub fn take_ahead(&self) {
        let Ok(_one_at_a_time) = self.taking.try_lock() else { return };
        let epoch = {
            let ahead = self.ahead();
            match (&ahead.file, ahead.asked) {
                (None, Some(epoch)) if !ahead.dry => epoch,
                _ => return,
            }
        };
        match self.inner.next_file(epoch) {
            Ok(Some(file)) => self.ahead().file = Some(file),
            Ok(None) => self.ahead().dry = true,
            Err(_) => {}
        }
    }

    fn ahead(&self) -> std::sync::MutexGuard<'_, Ahead> {
        self.ahead.lock_unpoisoned()
    }
}

impl FileFeed for AheadFeed {
    fn next_file(&self, epoch: u64) -> Result<Option<FedFile>, SourceError> {
        {
            let mut ahead = self.ahead();
            ahead.asked = Some(epoch);
            ahead.dry = false;
            if let Some(file) = ahead.file.take() {
                return Ok(Some(file));
            }
        }
        // A file being taken ahead is this one: waited for rather than taking another.
        let _one_at_a_time = self.taking.lock_unpoisoned();
        if let Some(file) = self.ahead().file.take() {
            return Ok(Some(file));
        }
        let next = self.inner.next_file(epoch);
        if let Ok(None) = next {
            self.ahead().dry = true;
        }
        next
    }

    fn file_read(&self, split: SplitRef, records: u64) {
        self.inner.file_read(split, records);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::mpsc;

    use super::*;

    /// Files 0, 1, 2, ... of the epoch asked for, each taken once; every ask recorded, and
    /// each ask first waits for a go on `gate` when it has one.
    #[derive(Default)]
    struct Counting {
        asked: std::sync::Mutex<Vec<u64>>,
        gate: std::sync::Mutex<Option<mpsc::Receiver<()>>>,
    }

    impl FileFeed for Counting {
        fn next_file(&self, epoch: u64) -> Result<Option<FedFile>, SourceError> {
            if let Some(gate) = &*self.gate.lock_unpoisoned() {
                gate.recv().unwrap();
            }
            let mut asked = self.asked.lock_unpoisoned();
            asked.push(epoch);
            let file = asked.len() - 1;
            Ok(Some(FedFile::of(SplitRef { epoch, file: file as u32 }, RecordSet::new())))
        }
    }

    #[test]
    fn a_file_taken_ahead_is_the_next_one_the_pipeline_gets_whatever_epoch_it_asks_for_then() {
        let inner = Arc::new(Counting::default());
        let feed = AheadFeed::new(inner.clone());
        feed.take_ahead();
        assert!(inner.asked.lock_unpoisoned().is_empty(), "nothing is taken before the pipeline asks");
        assert_eq!(feed.next_file(3).unwrap().map(|fed| (fed.epoch, fed.file)), Some((3, 0)));
        feed.take_ahead();
        feed.take_ahead();
        assert_eq!(*inner.asked.lock_unpoisoned(), [3, 3], "one file ahead at most, of the epoch asked last");
        // The pipeline went on to epoch 4: it gets the file of epoch 3 taken ahead first.
        assert_eq!(feed.next_file(4).unwrap().map(|fed| (fed.epoch, fed.file)), Some((3, 1)));
        assert_eq!(feed.next_file(4).unwrap().map(|fed| (fed.epoch, fed.file)), Some((4, 2)));
    }

    /// No file ever; its asks counted.
    #[derive(Default)]
    struct Empty(std::sync::atomic::AtomicUsize);

    impl FileFeed for Empty {
        fn next_file(&self, _epoch: u64) -> Result<Option<FedFile>, SourceError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(None)
        }
    }

    #[test]
    fn a_feed_with_no_file_is_not_asked_ahead_again_until_the_pipeline_asks() {
        let inner = Arc::new(Empty::default());
        let feed = AheadFeed::new(inner.clone());
        assert_eq!(feed.next_file(1).unwrap(), None);
        feed.take_ahead();
        feed.take_ahead();
        assert_eq!(feed.next_file(1).unwrap(), None, "the pipeline looks again");
        feed.take_ahead();
        assert_eq!(inner.0.load(std::sync::atomic::Ordering::Relaxed), 2, "asked by the pipeline only");
    }

    #[test]
    fn the_pipeline_asking_while_a_file_is_taken_ahead_waits_for_that_file_and_takes_no_other() {
        let inner = Arc::new(Counting::default());
        let feed = Arc::new(AheadFeed::new(inner.clone()));
        assert!(feed.next_file(1).unwrap().is_some());
        let (go, gate) = mpsc::channel();
        *inner.gate.lock_unpoisoned() = Some(gate);
        let ahead = std::thread::spawn({
            let feed = feed.clone();
            move || feed.take_ahead()
        });
        // The take ahead is waiting at the gate: the pipeline's ask waits for it.
        while feed.taking.try_lock().is_ok() {
            std::thread::yield_now();
        }
        let asking = std::thread::spawn({
            let feed = feed.clone();
            move || feed.next_file(1).unwrap().map(|fed| fed.file)
        });
        // Two goes: one for a second file, were the ask to take one (it must not).
        go.send(()).unwrap();
        go.send(()).unwrap();
        ahead.join().unwrap();
        assert_eq!(asking.join().unwrap(), Some(1), "the file taken ahead");
        assert_eq!(*inner.asked.lock_unpoisoned(), [1, 1], "no second file taken while the first was in flight");
    }
}
