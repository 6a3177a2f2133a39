//! The ledger's rows as Rust values: every row a ledger statement returns is decoded here,
//! and every integer crosses here between PostgreSQL's signed columns (`int8`, `int4`) and
//! the ledger's unsigned numbers, checked ([`checked`]): a number out of range is an error,
//! never wrapped.

use postgres::Row;

use super::{EpochProgress, Job, Lease, LedgerError, ReplicaReport, SplitSnapshot};
use crate::cluster::selection_ledger::LedgerNames;
use crate::pipeline::record_set::RecordSet;
use crate::source::SplitRef;

/// A number that does not fit where it goes: a column, or the ledger's Rust type.
#[derive(Debug, thiserror::Error)]
#[error("{what} {value} is out of range")]
pub struct OutOfRange {
    what: &'static str,
    value: String,
}

impl OutOfRange {
    pub fn new(what: &'static str, value: impl std::fmt::Display) -> Self {
        Self { what, value: value.to_string() }
    }
}

/// `value`, a `what`, as a `T`.
pub fn checked<T: TryFrom<S>, S: Copy + std::fmt::Display>(what: &'static str, value: S) -> Result<T, OutOfRange> {
    T::try_from(value).map_err(|_| OutOfRange { what, value: value.to_string() })
}

/// Column `index` of `row`, an `int8` (a `what`), as a `T`.
fn int8<T: TryFrom<i64>>(row: &Row, index: usize, what: &'static str) -> Result<T, OutOfRange> {
    checked(what, row.get::<_, i64>(index))
}

/// Column `index` of `row`, an `int4` (a `what`), as a `T`.
fn int4<T: TryFrom<i32>>(row: &Row, index: usize, what: &'static str) -> Result<T, OutOfRange> {
    checked(what, row.get::<_, i32>(index))
}

/// One split of one job: the job's id and the split (its epoch, and its file's number in
/// the job), as leases are renewed and given up across jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitKey {
    pub job: i64,
    pub split: SplitRef,
}

impl SplitKey {
    /// A row of `job, epoch, file` (`queries::RENEW_LEASES`).
    pub fn from_row(row: &Row) -> Result<Self, OutOfRange> {
        let split = SplitRef { epoch: int8(row, 1, "epoch")?, file: int4(row, 2, "file")? };
        Ok(Self { job: row.get(0), split })
    }
}

/// Splits as the three arrays statements unnest: jobs and epochs (`int8[]`), files
/// (`int4[]`).
#[derive(Debug, Default)]
pub struct SplitArrays {
    pub jobs: Vec<i64>,
    pub epochs: Vec<i64>,
    pub files: Vec<i32>,
}

impl SplitArrays {
    pub fn new(keys: impl IntoIterator<Item = SplitKey>) -> Result<Self, OutOfRange> {
        let mut arrays = Self::default();
        for key in keys {
            arrays.jobs.push(key.job);
            arrays.epochs.push(checked("epoch", key.split.epoch)?);
            arrays.files.push(checked("file", key.split.file)?);
        }
        Ok(arrays)
    }

    /// The splits `splits` of job `job`.
    pub fn of_job(job: Job, splits: &[SplitRef]) -> Result<Self, OutOfRange> {
        Self::new(splits.iter().map(|&split| SplitKey { job: job.id, split }))
    }
}

impl Lease {
    /// A row of `epoch, position, file, acked, leases` (`queries::LEASE_NEXT`).
    pub(in crate::cluster) fn from_row(row: &Row) -> Result<Self, LedgerError> {
        Ok(Self {
            split: SplitRef { epoch: int8(row, 0, "epoch")?, file: int4(row, 2, "file")? },
            position: int4(row, 1, "position")?,
            acked: RecordSet::decode(row.get(3))?,
            taken_over: row.get::<_, i32>(4) > 1,
        })
    }
}

/// A split's acknowledged records.
pub struct AckedSplit {
    pub split: SplitRef,
    pub acked: RecordSet,
}

impl AckedSplit {
    /// A row of `epoch, file, acked` (`queries::ACKED_SETS`).
    pub fn from_row(row: &Row) -> Result<Self, LedgerError> {
        let split = SplitRef { epoch: int8(row, 0, "epoch")?, file: int4(row, 1, "file")? };
        Ok(Self { split, acked: RecordSet::decode(row.get(2))? })
    }
}

/// A split as a commit finds it.
pub struct SplitToCommit {
    pub acked: RecordSet,
    pub owner: Option<String>,
    pub done: bool,
}

impl SplitToCommit {
    /// A row of `acked, owner, done` (`queries::SPLIT_TO_COMMIT`).
    pub fn from_row(row: &Row) -> Result<Self, LedgerError> {
        Ok(Self { acked: RecordSet::decode(row.get(0))?, owner: row.get(1), done: row.get(2) })
    }
}

/// A split as a selection's claim finds it (`crate::cluster::selection_ledger`).
pub struct SplitToClaim {
    pub acked: RecordSet,
    /// Records granted a place in `take`.
    pub granted: RecordSet,
}

impl SplitToClaim {
    /// A row of `acked, granted` (`queries::SPLIT_TO_CLAIM`).
    pub fn from_row(row: &Row) -> Result<Self, LedgerError> {
        Ok(Self { acked: RecordSet::decode(row.get(0))?, granted: RecordSet::decode(row.get(1))? })
    }
}

/// How many records a selection skipped and took in one epoch so far.
pub struct SelectionCounts {
    pub skipped: u64,
    pub taken: u64,
}

impl SelectionCounts {
    /// A row of `skipped, taken` (`queries::SELECTION_TO_CLAIM`).
    pub fn from_row(row: &Row) -> Result<Self, OutOfRange> {
        Ok(Self { skipped: int8(row, 0, "records skipped")?, taken: int8(row, 1, "records taken")? })
    }
}

/// A selection's counts as a job snapshot reads them, before the places still granted are
/// given back.
pub struct SelectionRow {
    pub scope: u32,
    pub epoch: u64,
    pub counts: SelectionCounts,
}

impl SelectionRow {
    /// A row of `scope, epoch, skipped, taken` (`queries::SELECTIONS_TO_SNAPSHOT`).
    pub fn from_row(row: &Row) -> Result<Self, OutOfRange> {
        Ok(Self {
            scope: int4(row, 0, "selection scope")?,
            epoch: int8(row, 1, "epoch")?,
            counts: SelectionCounts {
                skipped: int8(row, 2, "records skipped")?,
                taken: int8(row, 3, "records taken")?,
            },
        })
    }
}

/// A split's places in `take` not acknowledged yet, as a job snapshot reads them.
pub struct GrantsRow {
    pub scope: u32,
    pub epoch: u64,
    pub granted: RecordSet,
    pub acked: RecordSet,
}

impl GrantsRow {
    /// A row of `grant_scope, epoch, granted, acked` (`queries::GRANTS_TO_SNAPSHOT`).
    pub fn from_row(row: &Row) -> Result<Self, LedgerError> {
        Ok(Self {
            scope: int4(row, 0, "selection scope")?,
            epoch: int8(row, 1, "epoch")?,
            granted: RecordSet::decode(row.get(2))?,
            acked: RecordSet::decode(row.get(3))?,
        })
    }
}

/// How a job's first epochs stand.
pub struct EpochsDone {
    /// How many of them are planned.
    pub planned: u64,
    /// Whether every split of theirs is done.
    pub done: bool,
}

impl EpochsDone {
    /// A row of `planned epochs, every split done` (`queries::EPOCHS_DONE`).
    pub fn from_row(row: &Row) -> Result<Self, OutOfRange> {
        Ok(Self { planned: int8(row, 0, "epoch count")?, done: row.get(1) })
    }
}

impl EpochProgress {
    /// A row of `splits, never leased, done` (`queries::EPOCH_PROGRESS`).
    pub(in crate::cluster) fn from_row(row: &Row) -> Result<Self, OutOfRange> {
        let count = |index| int8(row, index, "split count");
        Ok(Self { splits: count(0)?, never_leased: count(1)?, done: count(2)?, leased: 0 })
    }

    /// A row of `epoch, splits, never leased, done, leased` (`queries::JOB_EPOCHS`).
    pub(in crate::cluster) fn from_epochs_row(row: &Row) -> Result<(u64, Self), OutOfRange> {
        let count = |index| int8(row, index, "split count");
        let progress = Self { splits: count(1)?, never_leased: count(2)?, done: count(3)?, leased: count(4)? };
        Ok((int8(row, 0, "epoch")?, progress))
    }
}

impl ReplicaReport {
    /// A row of `id, address, alive, splits leased, in flight, consumers, splits done,
    /// heartbeat age` (`queries::REPLICA_REPORTS`).
    pub(in crate::cluster) fn from_row(row: &Row) -> Result<Self, OutOfRange> {
        Ok(Self {
            replica: row.get(0),
            address: row.get(1),
            alive: row.get(2),
            splits_leased: int8(row, 3, "split count")?,
            elements_in_flight: int8(row, 4, "elements in flight")?,
            consumers: int4(row, 5, "consumers")?,
            splits_done: int8(row, 6, "split count")?,
            heartbeat_age: row.get::<_, Option<f64>>(7).unwrap_or(f64::INFINITY),
        })
    }
}

/// A job found by its shared reader's name, with its spec's fingerprint.
pub struct NamedJob {
    pub id: i64,
    pub generation: i64,
    pub fingerprint: String,
}

impl NamedJob {
    /// A row of `id, fingerprint, generation` (`queries::JOB`).
    pub fn from_row(row: &Row) -> Self {
        Self { id: row.get(0), generation: row.get(2), fingerprint: row.get(1) }
    }
}

/// A job about to be restored, and the checkpoint it was last restored from.
pub struct RestoringJob {
    pub job: Job,
    pub restored_from: Option<String>,
}

impl RestoringJob {
    /// A row of `id, generation, restored_from` (`queries::JOB_TO_RESTORE`), of a job
    /// whose ledger names `names`.
    pub fn from_row(row: &Row, names: LedgerNames) -> Self {
        Self { job: Job { id: row.get(0), generation: row.get(1), names }, restored_from: row.get(2) }
    }
}

/// A job about to be snapshot.
pub struct JobToSnapshot {
    pub id: i64,
    pub fingerprint: String,
    pub spec: Vec<u8>,
}

impl JobToSnapshot {
    /// A row of `id, fingerprint, spec` (`queries::JOB_TO_SNAPSHOT`).
    pub fn from_row(row: &Row) -> Self {
        Self { id: row.get(0), fingerprint: row.get(1), spec: row.get(2) }
    }
}

impl SplitSnapshot {
    /// A row of `epoch, position, file, acked, done` (`queries::SPLITS_TO_SNAPSHOT`).
    pub(in crate::cluster) fn from_row(row: &Row) -> Result<Self, OutOfRange> {
        Ok(Self {
            epoch: int8(row, 0, "epoch")?,
            position: int4(row, 1, "position")?,
            file: int4(row, 2, "file")?,
            acked: row.get(3),
            done: row.get(4),
        })
    }
}

/// Snapshot splits as the arrays `queries::INSERT_RESTORED_SPLITS` unnests.
#[derive(Debug, Default)]
pub struct SnapshotArrays<'a> {
    pub epochs: Vec<i64>,
    pub positions: Vec<i32>,
    pub files: Vec<i32>,
    pub acked: Vec<&'a [u8]>,
    pub done: Vec<bool>,
}

impl<'a> SnapshotArrays<'a> {
    pub fn new(splits: &'a [SplitSnapshot]) -> Result<Self, OutOfRange> {
        let mut arrays = Self::default();
        for split in splits {
            arrays.epochs.push(checked("epoch", split.epoch)?);
            arrays.positions.push(checked("position", split.position)?);
            arrays.files.push(checked("file", split.file)?);
            arrays.acked.push(&split.acked);
            arrays.done.push(split.done);
        }
        Ok(arrays)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_out_of_range_are_errors_not_wrapped() {
        assert_eq!(checked::<i64, _>("epoch", 7u64).unwrap(), 7);
        let err = checked::<i64, _>("epoch", u64::MAX).unwrap_err();
        assert_eq!(err.to_string(), format!("epoch {} is out of range", u64::MAX));
        assert!(checked::<u32, _>("position", -1i32).is_err());
        assert!(checked::<i32, _>("file", usize::MAX).is_err());
        let key = |file| SplitKey { job: 1, split: SplitRef { epoch: 2, file } };
        let keys = SplitArrays::new([key(3)]).unwrap();
        assert_eq!((keys.jobs, keys.epochs, keys.files), (vec![1], vec![2], vec![3]));
        assert!(SplitArrays::new([key(u32::MAX)]).is_err());
    }
}
