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
