//! Where a mixture's records are decoded: by their own component's decoder, or together
//! when the components decode alike.
//!
//! Batched, consecutive batches are decoded as a set (`next_chunk` makes sets of as
//! many batches as there are components): each component's records of the set as one
//! batch, about a whole batch's worth (the size that component decodes at when read
//! alone, not its share of one mixed batch); then each batch is gathered from them in the
//! mixture's order (`mix_gather.rs`). The decoders that can (Example, CSV) write the
//! numeric rows of fixed-shape features straight at their rows of the set, every
//! component into the same buffer of each feature (`Decoder::decode_placed`): those
//! features are not gathered, each batch is a slice of the set's buffer (`mix_placed.rs`).
//! When a component's records of the set fail to decode, the set is decoded again
//! without placing anything (every feature gathered), and each batch decodes its own
//! records of that component alone, in order, so that
//! the batches before the record at fault are delivered and the error fails the batch it
//! is in, as for a single spec. Components that decode alike need none of this: each batch
//! is decoded as one, as a single spec's. Unbatched, each record is decoded alone.

use super::decoding::{Batches, DecodedElements};
use super::in_component;
use super::mix::Mixture;
use super::mix_gather::{Decoded, Layout, RowIndex, gather, mixed_keys};
use super::mix_placed::{PlacedRows, PlacedSet};
use crate::decode::{Dense, PlacedBuffers, Placement, RecordValue, Tensor, Values};
use crate::element::{Element, Keys};
use crate::error::Result;
use crate::source::Record;

/// Batches as taken: each one's number and `(component, record)`s.
pub(super) type TakenBatches = Batches<(usize, Record)>;

/// A batch of a set: its number, its records' keys, and for each row its component and
/// its row in that component's records of the set.
struct Batch {
    index: u64,
    keys: Keys,
    rows: Vec<(usize, usize)>,
}

/// One component's records of a set: their values, their rows in the set (its batches'
/// rows one after the other), and what its decoder made of them (`Ok(None)` when it
/// dropped them all, or the set has none).
struct Group {
    values: Vec<RecordValue>,
    /// The epoch each was read for (its transforms' draws).
    epochs: Vec<u64>,
    places: Vec<usize>,
    decoded: Result<Option<DecodedGroup>>,
}

/// A component's decoded records.
struct DecodedGroup {
    features: Decoded,
    /// The row each record became (`None`: dropped by `onError: SKIP`); `None` when
    /// every record was kept, each its own row.
    rows: Option<Vec<Option<usize>>>,
}

impl DecodedGroup {
    fn row(&self, record: usize) -> Option<usize> {
        match &self.rows {
            None => Some(record),
            Some(rows) => rows.get(record).copied().flatten(),
        }
    }
}

impl Mixture {
    /// Decodes a set of batches (a batched mixture's, together; an unbatched one's
    /// records one by one). A panic fails the set at its first element (and the reader).
    pub(super) fn decode_mixed_set(&self, set: TakenBatches) -> DecodedElements {
        let first = set.first().map_or(0, |(index, _)| *index);
        super::decoding::catch_decode_panic(&self.name, || {
            if self.batch_size > 0 && self.layout.alike {
                return set.into_iter().map(|(index, taken)| (index, self.decode_mixed_alike(taken))).collect();
            }
            if self.batch_size > 0 {
                return self.decode_mixed_batches(set);
            }
            let decode_one = |(index, mut taken): (u64, Vec<(usize, Record)>)| {
                let record = taken.pop().expect("a record a batch");
                (index, self.decode_mixed_record(record))
            };
            set.into_iter().map(decode_one).collect()
        })
        .unwrap_or_else(|err| vec![(first, Err(err))])
    }

    /// Decodes a set of batches together (see the module's doc).
    fn decode_mixed_batches(&self, batches: TakenBatches) -> DecodedElements {
        let mut counts = vec![0; self.components.len()];
        batches.iter().flat_map(|(_, taken)| taken).for_each(|(component, _)| counts[*component] += 1);
        let mut groups: Vec<Group> = counts
            .iter()
            .map(|&count| Group {
                values: Vec::with_capacity(count),
                epochs: Vec::with_capacity(count),
                places: Vec::with_capacity(count),
                decoded: Ok(None),
            })
            .collect();
        let mut set = Vec::with_capacity(batches.len());
        let mut total = 0;
        for (index, taken) in batches {
            let keys = mixed_keys(taken.iter().map(|(component, record)| (*component, record)));
            let mut rows = Vec::with_capacity(taken.len());
            for (component, record) in taken {
                let group = &mut groups[component];
                rows.push((component, group.values.len()));
                group.epochs.push(record.epoch);
                group.values.push(record.value);
                group.places.push(total);
                total += 1;
            }
            set.push(Batch { index, keys, rows });
        }
        let placed = self.decode_placed_set(&mut groups, total);
        for (component, group) in groups.iter_mut().enumerate() {
            if group.values.is_empty() || placed.is_some() {
                continue;
            }
            // Keys name records only in messages: made when the decoder fails.
            let key_strings = || {
                let of_batch = |b: &Batch| {
                    let mine = b.rows.iter().enumerate().filter(|(_, (c, _))| *c == component);
                    mine.map(|(i, _)| b.keys.key(i)).collect::<Vec<_>>()
                };
                set.iter().flat_map(of_batch).collect()
            };
            group.decoded = self.decode_group(component, &group.values, &group.epochs, &key_strings);
        }
        let mut elements = Vec::with_capacity(set.len());
        let mut first_row = 0;
        for batch in set {
            let index = batch.index;
            let rows = first_row..first_row + batch.rows.len();
            first_row = rows.end;
            let placed = placed.as_ref().map(|set| PlacedRows { set, rows });
            let result = self.gather_batch(&groups, batch, placed.as_ref());
            let failed = result.is_err();
            elements.push((index, result));
            if failed {
                break;
            }
        }
        elements
    }

    /// A batch of a mixture whose components decode alike, decoded as one batch by the
    /// first component's decoder: what a single spec's batch of these records gives (its
    /// errors and `onError: SKIP` included; records skipped are counted by that component,
    /// and a message names the record by its key, `<component>/<file>:<n>`).
    fn decode_mixed_alike(&self, taken: Vec<(usize, Record)>) -> Result<Option<Element>> {
        let keys = mixed_keys(taken.iter().map(|(component, record)| (*component, record)));
        let epochs: Vec<u64> = taken.iter().map(|(_, record)| record.epoch).collect();
        let values: Vec<RecordValue> = taken.into_iter().map(|(_, record)| record.value).collect();
        self.components[0].decoding.decode_keyed(&values, keys, &epochs, true)
    }

    /// A record of an unbatched mixture, decoded alone by its component.
    fn decode_mixed_record(&self, (component, record): (usize, Record)) -> Result<Option<Element>> {
        let keys = mixed_keys(std::iter::once((component, &record)));
        self.components[component]
            .decoding
            .decode_keyed(std::slice::from_ref(&record.value), keys, &[record.epoch], false)
            .map_err(|err| in_component(component, err))
    }

    /// Every group of a set decoded with its numeric fixed-shape rows placed in the set's
    /// `total` rows, all groups writing into the same buffers, then taken as the set's
    /// (`merge_placed`; a feature no group places is gathered): `None`, the groups left
    /// undecoded, when a group fails to decode (it is decoded again, for its error or
    /// `onError: SKIP`), or the groups' placed features differ.
    fn decode_placed_set(&self, groups: &mut [Group], total: usize) -> Option<PlacedSet> {
        let mut buffers = PlacedBuffers::default();
        let mut decoded = Vec::with_capacity(groups.len());
        for (component, group) in groups.iter().enumerate() {
            if group.values.is_empty() {
                continue;
            }
            let mut place = Placement { rows: &group.places, total, buffers: &mut buffers };
            let features = self.components[component].decoding.decode_into_set(&group.values, &mut place).ok()?;
            decoded.push((component, Decoded::placed(features, &self.layout, component)));
        }
        let set = merge_placed(&self.layout, decoded.iter().map(|(_, d)| d), total, &mut buffers)?;
        for (component, features) in decoded {
            groups[component].decoded = Ok(Some(DecodedGroup { features, rows: None }));
        }
        Some(set)
    }

    /// `values` of a component (read for `epochs`) decoded and transformed as one batch;
    /// errors name the component.
    fn decode_group(
        &self,
        component: usize,
        values: &[RecordValue],
        epochs: &[u64],
        key_strings: &dyn Fn() -> Vec<String>,
    ) -> Result<Option<DecodedGroup>> {
        let decoded = self.components[component]
            .decoding
            .decode_and_transform(values, key_strings, epochs, true)
            .map_err(|err| in_component(component, err))?;
        Ok(decoded.map(|(features, kept)| {
            let rows = (kept.len() != values.len()).then(|| {
                let mut rows = vec![None; values.len()];
                kept.iter().enumerate().for_each(|(n, &at)| rows[at] = Some(n));
                rows
            });
            DecodedGroup { features: Decoded::new(features, &self.layout, component), rows }
        }))
    }

    /// One batch gathered from its components' decoded records: the rows they kept, in
    /// the mixture's order (`None` when they dropped every row); its rows of the set's
    /// `placed` features sliced out.
    fn gather_batch(&self, groups: &[Group], batch: Batch, placed: Option<&PlacedRows>) -> Result<Option<Element>> {
        // A component whose records of the set failed: this batch's own, decoded alone
        // (a batch's rows of one component are consecutive in its group), so that the
        // error fails this batch only if its record is here. With `onError: SKIP` the
        // records at fault were dropped (and counted) already: what failed is the set as
        // a whole, and it fails the first batch with records there.
        let mut alone: Vec<Option<(usize, Option<DecodedGroup>)>> = groups.iter().map(|_| None).collect();
        for (c, group) in groups.iter().enumerate() {
            let Err(err) = &group.decoded else { continue };
            let mine: Vec<usize> = (0..batch.rows.len()).filter(|&i| batch.rows[i].0 == c).collect();
            let (Some(&first), Some(&last)) = (mine.first(), mine.last()) else { continue };
            if self.components[c].spec.skip_errors {
                return Err(err.clone());
            }
            let (first, end) = (batch.rows[first].1, batch.rows[last].1 + 1);
            let key_strings = || mine.iter().map(|&i| batch.keys.key(i)).collect();
            alone[c] = Some((
                first,
                self.decode_group(c, &group.values[first..end], &group.epochs[first..end], &key_strings)?,
            ));
        }
        let decoded_of = |c: usize| -> Option<(&DecodedGroup, usize)> {
            match (&alone[c], &groups[c].decoded) {
                (Some((first, decoded)), _) => decoded.as_ref().map(|d| (d, *first)),
                (None, Ok(Some(decoded))) => Some((decoded, 0)),
                _ => None,
            }
        };
        // The components this batch uses, each once, and each kept row's (used, row).
        let mut used: Vec<usize> = Vec::new();
        let mut sources = Vec::with_capacity(batch.rows.len());
        let mut kept = Vec::with_capacity(batch.rows.len());
        for (i, &(c, r)) in batch.rows.iter().enumerate() {
            let Some(row) = decoded_of(c).and_then(|(decoded, first)| decoded.row(r - first)) else { continue };
            let local = used.iter().position(|&u| u == c).unwrap_or_else(|| {
                used.push(c);
                used.len() - 1
            });
            sources.push((local, row));
            kept.push(i);
        }
        if kept.is_empty() {
            return Ok(None);
        }
        let keys = if kept.len() == batch.keys.len() { batch.keys } else { batch.keys.select(&kept) };
        let decoded: Vec<&Decoded> = used.iter().filter_map(|&c| decoded_of(c).map(|(d, _)| &d.features)).collect();
        let features = gather(&self.layout, &decoded, &sources, placed)?;
        Ok(Some(Element::new(keys, features, Vec::new())))
    }
}

/// The features every group placed, each one tensor of the set's `total` rows: its
/// buffer, where every group wrote its own rows. `None` when a feature is placed by some
/// groups and not others, or the groups' placed tensors differ in dtype or shape: the set
/// is then decoded again and gathered (which words the error, if any).
fn merge_placed<'a>(
    layout: &Layout,
    groups: impl Iterator<Item = &'a Decoded> + Clone,
    total: usize,
    buffers: &mut PlacedBuffers,
) -> Option<PlacedSet> {
    let mut set = Vec::with_capacity(layout.names.len());
    for (j, name) in layout.names.iter().enumerate() {
        let mut placed = groups.clone().map(|group| (group.placed[j], group.get(j)));
        let Some((true, first)) = placed.next() else {
            // Not placed by the first group: by none, or the set is not merged.
            if groups.clone().any(|group| group.placed[j]) {
                return None;
            }
            set.push(None);
            continue;
        };
        let Some((Tensor::Dense(first), _)) = first else { return None };
        let alike = |(is_placed, tensor): (bool, Option<(&Tensor, &RowIndex)>)| match tensor {
            Some((Tensor::Dense(dense), _)) => is_placed && dense.dtype == first.dtype && dense.shape == first.shape,
            _ => false,
        };
        if !placed.all(alike) || first.shape.first() != Some(&total) {
            return None;
        }
        let bytes = buffers.take_filled(name)?;
        let expected = first.shape.iter().product::<usize>() * first.dtype.size()?;
        if bytes.len() != expected {
            return None;
        }
        set.push(Some(Dense {
            dtype: first.dtype,
            shape: first.shape.clone(),
            values: Values::Bytes(bytes::Bytes::from(bytes)),
        }));
    }
    Some(set)
}
