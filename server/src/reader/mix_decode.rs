//! Where a mixture's records are decoded, each by its own component's decoder.
//!
//! Batched, consecutive batches are decoded as a set (`next_mixed_chunk` makes sets of as
//! many batches as there are components): each component's records of the set as one
//! batch, about a whole batch's worth (the size that component decodes at when read
//! alone, not its share of one mixed batch); then each batch is gathered from them in the
//! mixture's order (`mix_gather.rs`). When a component's records of the set fail to
//! decode, each batch decodes its own records of that component alone, in order, so that
//! the batches before the record at fault are delivered and the error fails the batch it
//! is in, as for a single spec. Unbatched, each record is decoded alone.

use std::ops::Range;

use bytes::Bytes;

use super::mix_gather::{Decoded, Layout, gather, mixed_keys};
use super::{Reader, in_component};
use crate::element::{Element, RecordId};
use crate::error::Result;
use crate::source::Record;

/// Batches as taken: each one's number and `(component, record)`s.
pub(super) type TakenBatches = Vec<(u64, Vec<(usize, Record)>)>;

/// A batch of a set: its number, its records' ledger ids, and for each row its component
/// and its row in that component's records of the set.
struct Batch {
    index: u64,
    records: Vec<RecordId>,
    rows: Vec<(usize, usize)>,
}

/// One component's records of a set (their values apart, for its decoder), and what the
/// decoder made of them.
#[derive(Default)]
struct Group {
    records: Vec<Record>,
    values: Vec<Bytes>,
    decoded: Option<Result<DecodedRows>>,
}

/// A decoded batch and the row each record became (`None`: dropped by `onError: SKIP`);
/// `None` when the decoder dropped them all.
type DecodedRows = Option<(Decoded, Vec<Option<usize>>)>;

impl Reader {
    /// Decodes a set of batches together (see the module's doc): each one's number and
    /// element, up to the first that fails.
    pub(super) fn decode_mixed_batches(
        &self,
        layout: &Layout,
        batches: TakenBatches,
    ) -> Vec<(u64, Result<Option<Element>>)> {
        let mut groups: Vec<Group> = self.components.iter().map(|_| Group::default()).collect();
        let mut set = Vec::with_capacity(batches.len());
        for (index, taken) in batches {
            // Every record taken, those a decoder drops included: acknowledging the
            // element settles them all (on replicas).
            let records = self.mixed_record_ids(&taken);
            let mut rows = Vec::with_capacity(taken.len());
            for (component, mut record) in taken {
                let group = &mut groups[component];
                rows.push((component, group.records.len()));
                group.values.push(std::mem::take(&mut record.value));
                group.records.push(record);
            }
            set.push(Batch { index, records, rows });
        }
        for (component, group) in groups.iter_mut().enumerate() {
            if !group.records.is_empty() {
                group.decoded = Some(self.decode_group(layout, component, group, 0..group.records.len()));
            }
        }
        let mut elements = Vec::with_capacity(set.len());
        for batch in set {
            let index = batch.index;
            let result = self.gather_batch(layout, &groups, batch);
            let failed = result.is_err();
            elements.push((index, result));
            if failed {
                break;
            }
        }
        elements
    }

    /// A record of an unbatched mixture, decoded alone by its component.
    pub(super) fn decode_mixed_record(&self, index: u64, taken: (usize, Record)) -> Result<Option<Element>> {
        let records = self.mixed_record_ids([&taken]);
        let (component, record) = taken;
        let keys = mixed_keys(std::iter::once((component, &record)));
        let decoded = self.components[component]
            .decode_values(std::slice::from_ref(&record.value), &|| keys.to_strings(), false)
            .map_err(|err| in_component(component, err))?;
        let element = decoded.map(|(features, _)| Element { index: 0, keys, features, records: Vec::new() });
        self.numbered_mixed(index, records, Ok(element))
    }

    /// A component's records of the set at `rows`, decoded as one batch; errors name the
    /// component.
    fn decode_group(
        &self,
        layout: &Layout,
        component: usize,
        group: &Group,
        rows: Range<usize>,
    ) -> Result<DecodedRows> {
        let key_strings = || {
            let key = |r: &Record| readerd_proto::keys::key(&format!("{component}/{}", r.file), r.key);
            group.records[rows.clone()].iter().map(key).collect()
        };
        let values = &group.values[rows.clone()];
        let decoded = self.components[component]
            .decode_values(values, &key_strings, true)
            .map_err(|err| in_component(component, err))?;
        Ok(decoded.map(|(features, kept)| {
            let mut rows = vec![None; values.len()];
            kept.iter().enumerate().for_each(|(n, &at)| rows[at] = Some(n));
            (Decoded::new(features, layout, component), rows)
        }))
    }

    /// One batch gathered from its components' decoded records: the rows they kept, in
    /// the mixture's order (`None` when they dropped every row).
    fn gather_batch(&self, layout: &Layout, groups: &[Group], batch: Batch) -> Result<Option<Element>> {
        // A component whose records of the set failed: this batch's own, decoded alone
        // (a batch's rows of one component are consecutive in its group), so that the
        // error fails this batch only if its record is here.
        let mut alone: Vec<Option<(usize, DecodedRows)>> = groups.iter().map(|_| None).collect();
        for (c, group) in groups.iter().enumerate() {
            if !matches!(group.decoded, Some(Err(_))) {
                continue;
            }
            let mut mine = batch.rows.iter().filter(|(rc, _)| *rc == c).map(|&(_, r)| r);
            if let Some(first) = mine.next() {
                let end = mine.next_back().unwrap_or(first) + 1;
                alone[c] = Some((first, self.decode_group(layout, c, group, first..end)?));
            }
        }
        let decoded_of = |c: usize| -> Option<(&Decoded, &[Option<usize>], usize)> {
            match (&alone[c], &groups[c].decoded) {
                (Some((first, decoded)), _) => decoded.as_ref().map(|(d, rows)| (d, rows.as_slice(), *first)),
                (None, Some(Ok(Some((d, rows))))) => Some((d, rows.as_slice(), 0)),
                _ => None,
            }
        };
        // The components this batch uses, each once, and each kept row's (used, row).
        let mut used: Vec<usize> = Vec::new();
        let mut sources = Vec::with_capacity(batch.rows.len());
        let mut kept = Vec::with_capacity(batch.rows.len());
        for (i, &(c, r)) in batch.rows.iter().enumerate() {
            let Some(row) = decoded_of(c).and_then(|(_, rows, first)| rows[r - first]) else { continue };
            let local = used.iter().position(|&u| u == c).unwrap_or_else(|| {
                used.push(c);
                used.len() - 1
            });
            sources.push((local, row));
            kept.push(i);
        }
        if kept.is_empty() {
            return self.numbered_mixed(batch.index, batch.records, Ok(None));
        }
        let keys = mixed_keys(batch.rows.iter().map(|&(c, r)| (c, &groups[c].records[r])));
        let keys = if kept.len() == keys.len() { keys } else { keys.select(&kept) };
        let decoded: Vec<&Decoded> = used.iter().filter_map(|&c| decoded_of(c).map(|(d, _, _)| d)).collect();
        let features = gather(layout, &decoded, &sources)?;
        let element = Element { index: 0, keys, features, records: Vec::new() };
        self.numbered_mixed(batch.index, batch.records, Ok(Some(element)))
    }
}
