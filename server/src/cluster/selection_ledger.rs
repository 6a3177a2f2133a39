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

use super::ledger::{
    EpochSelection, GrantsRow, Job, Ledger, LedgerError, SelectionCounts, SelectionRow, SplitToClaim, checked,
};
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
                    rows.insert(split, SplitToClaim::from_row(&row)?);
                }
            }
            let scope: i32 = checked("selection scope", limits.scope)?;
            let mut counts = BTreeMap::new();
            for epoch in records.iter().map(|record| record.epoch).collect::<BTreeSet<_>>() {
                let epoch_param: i64 = checked("epoch", epoch)?;
                transaction.execute(queries::CREATE_SELECTION, &[&job.id, &scope, &epoch_param])?;
                let row = transaction.query_one(queries::SELECTION_TO_CLAIM, &[&job.id, &scope, &epoch_param])?;
                counts.insert(epoch, SelectionCounts::from_row(&row)?);
            }
            let mut fates = Vec::with_capacity(records.len());
            for record in records {
                let counts = counts.get_mut(&record.epoch).expect("counted above");
                // A split this replica no longer finds (its job deleted) has nothing to keep.
                let split = rows.get_mut(&record.split());
                let fate = match split.as_deref().map(|split| claimed(split, record.number)) {
                    // Claimed already, by an attempt whose answer an outage lost: the same
                    // fate, counted once.
                    Some(Some(fate)) => fate,
                    _ => {
                        let fate = limits.fate_of_next(counts);
                        if let Some(split) = split {
                            match fate {
                                Fate::Taken => split.granted.insert(record.number),
                                Fate::Skipped | Fate::Dropped => split.acked.insert(record.number),
                            }
                        }
                        fate
                    }
                };
                fates.push(fate);
            }
            for (epoch, counts) in counts {
                let epoch: i64 = checked("epoch", epoch)?;
                let (skipped, taken): (i64, i64) =
                    (checked("records skipped", counts.skipped)?, checked("records taken", counts.taken)?);
                transaction.execute(queries::COUNT_SELECTION, &[&job.id, &scope, &epoch, &skipped, &taken])?;
            }
            for (split, claim) in rows {
                let key = split_key(job, split)?;
                let [id, epoch, file] = key.params();
                let (acked, granted) = (claim.acked.encode(), claim.granted.encode());
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
        let mut outstanding: BTreeMap<(u32, u64), u64> = BTreeMap::new();
        for row in transaction.query(queries::GRANTS_TO_SNAPSHOT, &[&job])? {
            let grants = GrantsRow::from_row(&row)?;
            *outstanding.entry((grants.scope, grants.epoch)).or_default() += grants.outstanding;
        }
        let mut selections = Vec::new();
        for row in transaction.query(queries::SELECTIONS_TO_SNAPSHOT, &[&job])? {
            let SelectionRow { scope, epoch, counts } = SelectionRow::from_row(&row)?;
            let given_back = outstanding.get(&(scope, epoch)).copied().unwrap_or(0);
            let (skipped, taken) = (counts.skipped, counts.taken.saturating_sub(given_back));
            selections.push(EpochSelection { scope, epoch, skipped, taken });
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

impl SelectionLimits {
    /// The fate of the next record an epoch's filters keep, with `counts` so far (counted
    /// in).
    fn fate_of_next(&self, counts: &mut SelectionCounts) -> Fate {
        if counts.skipped < self.skip {
            counts.skipped += 1;
            Fate::Skipped
        } else if self.take.is_none_or(|take| counts.taken < take) {
            counts.taken += 1;
            Fate::Taken
        } else {
            Fate::Dropped
        }
    }
}

/// The fate record `number` of `split` was given by an earlier claim, if any: granted,
/// taken; settled, not delivered (skipped or dropped: which of them no longer matters).
/// A record claimed again is one a claim's retry finds (records settled before a lease
/// are left out of the split's read, and a takeover clears the grants it gives back).
fn claimed(split: &SplitToClaim, number: u64) -> Option<Fate> {
    if split.granted.contains(number) {
        Some(Fate::Taken)
    } else if split.acked.contains(number) {
        Some(Fate::Dropped)
    } else {
        None
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
