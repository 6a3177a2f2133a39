//! A selection's `skip` and `take` on replicas, counted per job, selection (its scope: a
//! reader of files, or one of a mixture's components) and epoch in the ledger
//! (`readerd_selections`), not per replica: a single server skips the first `skip` records
//! its filters keep in an epoch and takes the next `take`; a job on replicas skips and
//! takes as many, the records being those the replicas claim first
//! ([`Ledger::claim_selected`]). One replica alone claims them in the single server's
//! order, and gives its sequence.
//!
//! Exactly as many, through a replica's death: a skipped or dropped record is
//! acknowledged in its split in the transaction that counts it (no replica produces it
//! again); a taken one is granted its place in its split (`readerd_splits.granted`), and
//! when that split is taken over the places of its records not acknowledged go back to
//! the epoch's count ([`return_grants`]): the records the next owner reads again are
//! claimed again. Counts and outstanding grants go into job checkpoints.

use std::collections::{BTreeMap, BTreeSet};

use postgres::Transaction;

use super::ledger::{EpochSelection, Job, Ledger, LedgerError, checked};
use crate::pipeline::record_set::RecordSet;
use crate::source::{RecordId, SplitRef};
use crate::state::ledger::queries;

/// A selection's `skip` and `take`, per epoch, and whose selection it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SelectionLimits {
    pub skip: u64,
    /// `None`: every record after those skipped.
    pub take: Option<u64>,
    /// 0 for a reader of files, 1 + i for a mixture's component i: each counts apart.
    pub scope: u32,
}

/// What the job does with a record its filters kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Among the epoch's first `skip`: not delivered.
    Skipped,
    /// Within `take`: delivered.
    Taken,
    /// Past `skip + take`: not delivered.
    Dropped,
}

impl Ledger {
    /// The fates of `records` (kept by job `job`'s filters, in the order this replica read
    /// them), each counted in its epoch: the first `skip` of an epoch, over all replicas,
    /// are skipped, the next `take` taken, the rest dropped. In one transaction, the
    /// skipped and dropped records are acknowledged in their splits and the taken ones
    /// granted their places there.
    pub fn claim_selected(
        &self,
        job: Job,
        limits: SelectionLimits,
        records: &[RecordId],
    ) -> Result<Vec<Fate>, LedgerError> {
        self.run(|client| {
            let mut transaction = client.transaction()?;
            // Splits first, in order, then the epochs' counts: as commits and takeovers lock.
            let splits: BTreeSet<SplitRef> = records.iter().map(RecordId::split).collect();
            let mut rows = BTreeMap::new();
            for &split in &splits {
                let key = split_key(job, split)?;
                if let Some(row) = transaction.query_opt(queries::SPLIT_TO_CLAIM, &key.params())? {
                    rows.insert(split, (RecordSet::decode(row.get(0))?, RecordSet::decode(row.get(1))?));
                }
            }
            let scope: i32 = checked("selection scope", limits.scope)?;
            let mut counts = BTreeMap::new();
            for epoch in records.iter().map(|record| record.epoch).collect::<BTreeSet<_>>() {
                let epoch_param: i64 = checked("epoch", epoch)?;
                transaction.execute(queries::CREATE_SELECTION, &[&job.id, &scope, &epoch_param])?;
                let row = transaction.query_one(queries::SELECTION_TO_CLAIM, &[&job.id, &scope, &epoch_param])?;
                counts.insert(epoch, (row.get::<_, i64>(0).max(0) as u64, row.get::<_, i64>(1).max(0) as u64));
            }
            let mut fates = Vec::with_capacity(records.len());
            for record in records {
                let (skipped, taken) = counts.get_mut(&record.epoch).expect("counted above");
                let fate = if *skipped < limits.skip {
                    *skipped += 1;
                    Fate::Skipped
                } else if limits.take.is_none_or(|take| *taken < take) {
                    *taken += 1;
                    Fate::Taken
                } else {
                    Fate::Dropped
                };
                // A split this replica no longer finds (its job deleted) has nothing to keep.
                if let Some((acked, granted)) = rows.get_mut(&record.split()) {
                    match fate {
                        Fate::Taken => granted.insert(record.number),
                        Fate::Skipped | Fate::Dropped => acked.insert(record.number),
                    }
                }
                fates.push(fate);
            }
            for (epoch, (skipped, taken)) in counts {
                let [epoch, skipped, taken] = [epoch, skipped, taken].map(|n| i64::try_from(n).unwrap_or(i64::MAX));
                transaction.execute(queries::COUNT_SELECTION, &[&job.id, &scope, &epoch, &skipped, &taken])?;
            }
            for (split, (acked, granted)) in rows {
                let key = split_key(job, split)?;
                let [id, epoch, file] = key.params();
                let (acked, granted) = (acked.encode(), granted.encode());
                transaction.execute(queries::CLAIM_SPLIT, &[id, epoch, file, &acked, &granted, &scope])?;
            }
            transaction.commit()?;
            Ok(fates)
        })
    }

    /// Job `job`'s selection counts per epoch, with the places still granted to records
    /// not acknowledged given back (a restore starts with no lease: those records are
    /// read and claimed again). Read in `transaction` with the job's splits.
    pub(super) fn selections_to_snapshot(
        transaction: &mut Transaction<'_>,
        job: i64,
    ) -> Result<Vec<EpochSelection>, LedgerError> {
        let mut outstanding: BTreeMap<(i32, i64), u64> = BTreeMap::new();
        for row in transaction.query(queries::GRANTS_TO_SNAPSHOT, &[&job])? {
            let (granted, acked) = (RecordSet::decode(row.get(2))?, RecordSet::decode(row.get(3))?);
            *outstanding.entry((row.get(0), row.get(1))).or_default() += granted.count_not_in(&acked);
        }
        let mut selections = Vec::new();
        for row in transaction.query(queries::SELECTIONS_TO_SNAPSHOT, &[&job])? {
            let (scope, epoch): (i32, i64) = (row.get(0), row.get(1));
            let given_back = outstanding.get(&(scope, epoch)).copied().unwrap_or(0);
            selections.push(EpochSelection {
                scope: scope.max(0) as u32,
                epoch: epoch.max(0) as u64,
                skipped: row.get::<_, i64>(2).max(0) as u64,
                taken: (row.get::<_, i64>(3).max(0) as u64).saturating_sub(given_back),
            });
        }
        selections.sort_by_key(|selection| (selection.scope, selection.epoch));
        Ok(selections)
    }

    /// Writes a restored job's selection counts.
    pub(super) fn restore_selections(
        transaction: &mut Transaction<'_>,
        job: i64,
        selections: &[EpochSelection],
    ) -> Result<(), LedgerError> {
        let number = |n: u64| checked::<i64, _>("selection count", n);
        let scopes = selections.iter().map(|s| checked::<i32, _>("selection scope", s.scope)).collect::<Result<Vec<_>, _>>()?;
        let epochs = selections.iter().map(|s| number(s.epoch)).collect::<Result<Vec<_>, _>>()?;
        let skipped = selections.iter().map(|s| number(s.skipped)).collect::<Result<Vec<_>, _>>()?;
        let taken = selections.iter().map(|s| number(s.taken)).collect::<Result<Vec<_>, _>>()?;
        transaction.execute(queries::INSERT_RESTORED_SELECTIONS, &[&job, &scopes, &epochs, &skipped, &taken])?;
        Ok(())
    }
}

/// A split taken over (in the transaction of its lease): the places in `take` its
/// records hold but never got acknowledged for (`granted`, minus `acked`) go back to its
/// epoch's count in their selection (`scope`), so that the new owner's claims for them
/// find room again.
pub(super) fn return_grants(
    transaction: &mut Transaction<'_>,
    job: Job,
    split: SplitRef,
    (granted, scope): (&RecordSet, i32),
    acked: &RecordSet,
) -> Result<(), LedgerError> {
    if granted.is_empty() {
        return Ok(());
    }
    let key = split_key(job, split)?;
    let outstanding = i64::try_from(granted.count_not_in(acked)).unwrap_or(i64::MAX);
    let [id, epoch, _] = key.params();
    transaction.execute(queries::RETURN_GRANTS, &[id, &scope, epoch, &outstanding])?;
    transaction.execute(queries::CLEAR_GRANTS, &key.params())?;
    Ok(())
}

/// A split's key as statement parameters.
struct SplitParams {
    job: i64,
    epoch: i64,
    file: i32,
}

impl SplitParams {
    fn params(&self) -> [&(dyn postgres::types::ToSql + Sync); 3] {
        [&self.job, &self.epoch, &self.file]
    }
}

fn split_key(job: Job, split: SplitRef) -> Result<SplitParams, LedgerError> {
    Ok(SplitParams { job: job.id, epoch: checked("epoch", split.epoch)?, file: checked("file", split.file)? })
}
