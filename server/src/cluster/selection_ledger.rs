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
//!
//! A job that unbatches names examples in the ledger ([`LedgerNames::Examples`]): a record
//! left out is settled under its tombstone (`RecordId::tombstone`, one example of its
//! split), a taken one granted under its first example's name, and its grant is
//! outstanding until any of its examples is acknowledged. A record read again after a
//! takeover with examples acknowledged was taken: claimed again, it stays taken, counted
//! once.

use std::collections::{BTreeMap, BTreeSet};

use postgres::Transaction;

use super::ledger::{
    EpochSelection, GrantsRow, Job, Ledger, LedgerError, OutOfRange, SelectionCounts, SelectionRow, SplitToClaim,
    checked,
};
use crate::pipeline::record_set::RecordSet;
use crate::source::{EXAMPLE_BITS, RecordId, SplitRef};
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

/// How a job's ledger names what its consumers acknowledge: records, or, for a job that
/// unbatches, examples (`RecordId::example`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LedgerNames {
    #[default]
    Records,
    Examples,
}

impl LedgerNames {
    pub fn of(unbatch: bool) -> Self {
        if unbatch { Self::Examples } else { Self::Records }
    }

    /// The names of the job whose spec is `spec` (`readerd.v1.DatasetSpec`, encoded): a
    /// mixture's are records (its components are not unbatched).
    pub(in crate::cluster) fn of_spec(spec: &[u8]) -> Result<Self, LedgerError> {
        let spec = <readerd_proto::v1::DatasetSpec as prost::Message>::decode(spec)?;
        Ok(Self::of(spec.mix.is_none() && spec.pipeline.is_some_and(|pipeline| pipeline.unbatch)))
    }

    /// The name `record` is granted its place in `take` under.
    fn granted(self, record: &RecordId) -> Result<u64, OutOfRange> {
        match self {
            Self::Records => Ok(record.number),
            Self::Examples => record.example(0).map(|id| id.number).ok_or_else(|| too_large(record)),
        }
    }

    /// The name `record` is settled under when the selection leaves it out.
    fn settled(self, record: &RecordId) -> Result<u64, OutOfRange> {
        match self {
            Self::Records => Ok(record.number),
            Self::Examples => record.tombstone().map(|id| id.number).ok_or_else(|| too_large(record)),
        }
    }

    /// Whether `acked` holds an example of the record granted under `grant`.
    fn delivered(self, grant: u64, acked: &RecordSet) -> bool {
        match self {
            Self::Records => acked.contains(grant),
            Self::Examples => acked.overlaps(grant, grant.saturating_add(EXAMPLE_SPAN - 1)),
        }
    }

    /// How many of the records `granted` names were never acknowledged (none of their
    /// examples, nor, for a taken record that gave none, its tombstone: a job that
    /// unbatches) in `acked`: their places in `take` are outstanding.
    pub(super) fn outstanding(self, granted: &RecordSet, acked: &RecordSet) -> u64 {
        match self {
            Self::Records => granted.count_not_in(acked),
            // Grants are multiples of the span, one a record.
            Self::Examples => granted
                .ranges()
                .iter()
                .flat_map(|&(start, end)| (start.next_multiple_of(EXAMPLE_SPAN)..end).step_by(EXAMPLE_SPAN as usize))
                .filter(|&grant| !acked.overlaps(grant, grant.saturating_add(EXAMPLE_SPAN)))
                .count() as u64,
        }
    }
}

/// The ledger names of one record's examples, for a job that unbatches.
const EXAMPLE_SPAN: u64 = 1 << EXAMPLE_BITS;

fn too_large(record: &RecordId) -> OutOfRange {
    OutOfRange::new("record number of a job that unbatches (below 2^44)", record.number)
}

/// The fates of records claimed for the jobs seated at a window, by job id
/// ([`Ledger::claim_selected_for_seated`]).
pub type SeatedFates = Vec<(i64, Vec<Fate>)>;

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
        Ok(self.claim_selected_for_seated(job, &[], limits, records)?.0)
    }

    /// [`Ledger::claim_selected`] for the window a shared reader's jobs share on this
    /// replica (`job` is the window's), and in the same transaction for each job of
    /// `seated` (the jobs seated at the window, which take its elements): returns the
    /// window's fates and each seated job's (by job id). A job whose fates differ from the
    /// window's cannot take the window's elements of these records. Jobs are claimed for
    /// in one order (the window's first, then by id), as every claim locks them.
    pub fn claim_selected_for_seated(
        &self,
        job: Job,
        seated: &[Job],
        limits: SelectionLimits,
        records: &[RecordId],
    ) -> Result<(Vec<Fate>, SeatedFates), LedgerError> {
        let mut seated = seated.to_vec();
        seated.sort_by_key(|job| job.id);
        self.run(|client| {
            let mut transaction = client.transaction()?;
            let fates = claim_in(&mut transaction, job, limits, records)?;
            let mut seated_fates = Vec::with_capacity(seated.len());
            for seated in &seated {
                seated_fates.push((seated.id, claim_in(&mut transaction, *seated, limits, records)?));
            }
            transaction.commit()?;
            Ok((fates, seated_fates))
        })
    }

    /// Job `job`'s selection counts per epoch, as they stand (places granted to records
    /// not yet delivered included), by scope and epoch.
    pub fn selection_counts(&self, job: Job) -> Result<Vec<EpochSelection>, LedgerError> {
        self.run(|client| selections(&client.query(queries::SELECTIONS_TO_SNAPSHOT, &[&job.id])?, |_, _| 0))
    }

    /// Job `job`'s selection counts per epoch, with the places still granted to records
    /// not acknowledged given back (a restore starts with no lease: those records are
    /// read and claimed again). Read in `transaction` with the job's splits.
    pub(super) fn selections_to_snapshot(
        transaction: &mut Transaction<'_>,
        job: i64,
        names: LedgerNames,
    ) -> Result<Vec<EpochSelection>, LedgerError> {
        let mut outstanding: BTreeMap<(u32, u64), u64> = BTreeMap::new();
        for row in transaction.query(queries::GRANTS_TO_SNAPSHOT, &[&job])? {
            let grants = GrantsRow::from_row(&row)?;
            *outstanding.entry((grants.scope, grants.epoch)).or_default() +=
                names.outstanding(&grants.granted, &grants.acked);
        }
        let rows = transaction.query(queries::SELECTIONS_TO_SNAPSHOT, &[&job])?;
        selections(&rows, |scope, epoch| outstanding.get(&(scope, epoch)).copied().unwrap_or(0))
    }

    /// Writes a restored job's selection counts.
    pub(super) fn restore_selections(
        transaction: &mut Transaction<'_>,
        job: i64,
        selections: &[EpochSelection],
    ) -> Result<(), LedgerError> {
        let number = |n: u64| checked::<i64, _>("selection count", n);
        let scopes =
            selections.iter().map(|s| checked::<i32, _>("selection scope", s.scope)).collect::<Result<Vec<_>, _>>()?;
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

/// The fate a record of `split` (granted under `granted`, settled under `settled`) was
/// given by an earlier claim, if any: granted, or delivered in part, taken; settled, not
/// delivered (skipped or dropped: which of them no longer matters). A record claimed
/// again is one a claim's retry finds, or one of a job that unbatches read again after a
/// takeover (records settled before a lease are otherwise left out of the split's read,
/// and a takeover clears the grants it gives back).
fn claimed(split: &SplitToClaim, names: LedgerNames, granted: u64, settled: u64) -> Option<Fate> {
    if split.granted.contains(granted) || (names == LedgerNames::Examples && names.delivered(granted, &split.acked)) {
        Some(Fate::Taken)
    } else if split.acked.contains(settled) {
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
    let outstanding = i64::try_from(job.names.outstanding(granted, acked)).unwrap_or(i64::MAX);
    let [id, epoch, _] = key.params();
    transaction.execute(queries::RETURN_GRANTS, &[id, &scope, epoch, &outstanding])?;
    transaction.execute(queries::CLEAR_GRANTS, &key.params())?;
    Ok(())
}

/// The selection counts of `rows` (`queries::SELECTIONS_TO_SNAPSHOT`), by scope and
/// epoch, with `given_back(scope, epoch)` places taken back from each epoch's taken.
fn selections(
    rows: &[postgres::Row],
    given_back: impl Fn(u32, u64) -> u64,
) -> Result<Vec<EpochSelection>, LedgerError> {
    let mut selections = Vec::with_capacity(rows.len());
    for row in rows {
        let SelectionRow { scope, epoch, counts } = SelectionRow::from_row(row)?;
        let taken = counts.taken.saturating_sub(given_back(scope, epoch));
        selections.push(EpochSelection { scope, epoch, skipped: counts.skipped, taken });
    }
    selections.sort_by_key(|selection| (selection.scope, selection.epoch));
    Ok(selections)
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

/// Claims the fates of `records` for `job` in `transaction` (see
/// [`Ledger::claim_selected`]).
fn claim_in(
    transaction: &mut Transaction<'_>,
    job: Job,
    limits: SelectionLimits,
    records: &[RecordId],
) -> Result<Vec<Fate>, LedgerError> {
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
    let names = job.names;
    let mut fates = Vec::with_capacity(records.len());
    for record in records {
        let counts = counts.get_mut(&record.epoch).expect("counted above");
        // A split this replica no longer finds (its job deleted) has nothing to keep.
        let split = rows.get_mut(&record.split());
        let (granted, settled) = (names.granted(record)?, names.settled(record)?);
        let fate = match split.as_deref().map(|split| claimed(split, names, granted, settled)) {
            // Claimed already, by an attempt whose answer an outage lost (or, for a
            // job that unbatches, by a replica that died): the same fate, counted
            // once.
            Some(Some(fate)) => fate,
            _ => {
                let fate = limits.fate_of_next(counts);
                if let Some(split) = split {
                    match fate {
                        Fate::Taken => split.granted.insert(granted),
                        Fate::Skipped | Fate::Dropped => split.acked.insert(settled),
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
    Ok(fates)
}

fn split_key(job: Job, split: SplitRef) -> Result<SplitParams, LedgerError> {
    Ok(SplitParams { job: job.id, epoch: checked("epoch", split.epoch)?, file: checked("file", split.file)? })
}
