//! Where a mixture's batch is put back into the mixture's order: its components' decoded
//! records (`mix_decode.rs`) gathered row by row into one batch, and its keys. Numeric
//! dense features that every component's decoder wrote at their rows of the set, in one
//! buffer (`crate::decode::Placement`), are not gathered: `mix_decode.rs` takes the
//! set's buffers and each batch is a slice of them (`mix_placed.rs`). Components that decode alike
//! (`decode_alike`) need no gather: their records decode as one batch.

use std::sync::Arc;

use bytes::Bytes;

use super::Reader;
use super::mix_placed::{PlacedRows, placed_rows};
use crate::decode::{DType, Dense, PlacedFeatures, Ragged, Sparse, Tensor, Values};
use crate::element::Keys;
use crate::error::{Result, ServeError};
use crate::source::Record;

/// Decoded features by name.
type Features = Vec<(String, Tensor)>;

/// The features of a batched mixture, in their order (the first component's decoder's),
/// and where each component's decoder puts each of them, as its signature says (checked
/// against every decoded batch). Empty for a reader of files.
#[derive(Clone)]
pub(super) struct Layout {
    /// Every component decodes as the first (`decode_alike`): a batch is then decoded as
    /// one, as a single spec's, and nothing is gathered.
    pub(super) alike: bool,
    pub(super) names: Vec<String>,
    /// Per feature, whether its shape varies by record (a `VarLen` feature's width).
    varying: Vec<bool>,
    positions: Vec<Vec<usize>>,
}

impl Layout {
    pub(super) fn of(components: &[Reader]) -> Self {
        let signatures: Vec<Vec<(String, String)>> = components.iter().map(|c| c.spec.signature()).collect();
        let first = signatures.first().cloned().unwrap_or_default();
        let varying = first.iter().map(|(_, description)| description.contains('?')).collect();
        let names = first.into_iter().map(|(name, _)| name).collect::<Vec<_>>();
        let positions = signatures
            .iter()
            .map(|theirs| {
                names.iter().map(|name| theirs.iter().position(|(n, _)| n == name).unwrap_or(usize::MAX)).collect()
            })
            .collect();
        Self { alike: decode_alike(components), names, varying, positions }
    }
}

/// Whether every component decodes as the first (`ReaderSpec::decodes_like`, with CSV
/// columns named from the files' headers): their records can then be decoded together
/// whatever their component, as one spec's.
pub(super) fn decode_alike(components: &[Reader]) -> bool {
    !components.is_empty() && first_decoding_otherwise(components).is_none()
}

/// The first component that does not decode as the first (see `decode_alike`).
pub(super) fn first_decoding_otherwise(components: &[Reader]) -> Option<usize> {
    let first = &components.first()?.spec;
    components.iter().position(|c| !c.spec.decodes_like(first))
}

/// A decoded batch of one component's records, its features in the layout's order.
pub(super) struct Decoded {
    features: Features,
    /// For each of the layout's names, its index in `features` (`usize::MAX`: missing).
    order: Vec<usize>,
    /// For each of the layout's names, where each record's part is: read once a group,
    /// though the group's rows go to several batches of a set.
    rows: Vec<RowIndex>,
    /// For each of the layout's names, whether the decoder wrote its rows at their places
    /// in the set (`decode_placed`): it is then taken from the set's buffers, not gathered.
    pub(super) placed: Vec<bool>,
}

/// Where each record's part of a decoded feature is.
pub(super) enum RowIndex {
    /// Dense: rows at a fixed stride.
    Dense,
    /// Sparse: the indices (`[entries, rank]`), and record `r`'s entries
    /// `starts[r]..starts[r + 1]` (decoders emit them record by record).
    Sparse { rank: usize, indices: Vec<i64>, starts: Vec<usize> },
    /// Ragged: the row splits of each partition, outermost first.
    Ragged { splits: Vec<Vec<i64>> },
    /// Not readable as its kind says: gathering it is an error.
    Unreadable,
}

impl RowIndex {
    fn of(tensor: &Tensor) -> Self {
        match tensor {
            Tensor::Dense(_) => RowIndex::Dense,
            Tensor::Sparse(sparse) => Self::of_sparse(sparse).unwrap_or(RowIndex::Unreadable),
            Tensor::Ragged(ragged) => {
                let splits = ragged.nested_row_splits.iter().map(Dense::int64_values).collect::<Option<_>>();
                splits.map_or(RowIndex::Unreadable, |splits| RowIndex::Ragged { splits })
            }
        }
    }

    fn of_sparse(sparse: &Sparse) -> Option<Self> {
        let rank = *sparse.indices.shape.get(1)?;
        let indices = sparse.indices.int64_values()?;
        let records = usize::try_from(*sparse.dense_shape.int64_values()?.first()?).ok()?;
        if rank == 0 {
            return None;
        }
        let mut starts = vec![0usize; records + 1];
        for entry in indices.chunks_exact(rank) {
            let record = usize::try_from(entry[0]).ok().filter(|&r| r < records)?;
            starts[record + 1] += 1;
        }
        (0..records).for_each(|r| starts[r + 1] += starts[r]);
        Some(RowIndex::Sparse { rank, indices, starts })
    }
}

impl Decoded {
    pub(super) fn new(features: Features, layout: &Layout, component: usize) -> Self {
        let expected = &layout.positions[component];
        let order = layout
            .names
            .iter()
            .enumerate()
            .map(|(j, name)| match features.get(expected[j]) {
                Some((n, _)) if n == name => expected[j],
                _ => features.iter().position(|(n, _)| n == name).unwrap_or(usize::MAX),
            })
            .collect::<Vec<_>>();
        let rows =
            order.iter().map(|&at| features.get(at).map_or(RowIndex::Unreadable, |(_, t)| RowIndex::of(t))).collect();
        let placed = vec![false; order.len()];
        Self { features, order, rows, placed }
    }

    /// A group decoded with its rows placed in the set (`Decoder::decode_placed`).
    pub(super) fn placed(decoded: PlacedFeatures, layout: &Layout, component: usize) -> Self {
        let PlacedFeatures { features, placed } = decoded;
        let mut this = Self::new(features, layout, component);
        this.placed = this.order.iter().map(|&at| placed.get(at).copied().unwrap_or(false)).collect();
        this
    }

    /// The layout's `j`th feature, and where each record's part of it is.
    pub(super) fn get(&self, j: usize) -> Option<(&Tensor, &RowIndex)> {
        self.features.get(self.order[j]).map(|(_, tensor)| (tensor, &self.rows[j]))
    }
}

/// The batch in the mixture's order: row `i` of each feature (in the layout's order) is
/// row `sources[i].1` of `groups[sources[i].0]`, every group being used, or, for a
/// feature `placed` holds, the batch's rows of its set's. A feature is of one kind and
/// dtype in every group (the spec checks it); dense rows are of one shape (else
/// TensorFlow's `batch` would fail too). The gathered numeric dense features' rows go to
/// one buffer, each feature a slice of it: one allocation a batch, not one a feature.
pub(super) fn gather(
    layout: &Layout,
    groups: &[&Decoded],
    sources: &[(usize, usize)],
    placed: Option<&PlacedRows>,
) -> Result<Features> {
    // Where the rows come from: worked out when a feature is gathered (not when all are placed).
    let mut rows: Option<Rows> = None;
    let is_placed = |j: usize| placed.is_some_and(|p| p.feature(j).is_some());
    let mut numeric = Vec::with_capacity(numeric_bytes(layout, groups, sources.len(), &is_placed));
    let mut slices = Vec::new();
    let mut out = Vec::with_capacity(layout.names.len());
    // The groups' parts of one feature, and their bytes: made again for each feature in
    // the same two vectors (a batch gathers tens of features).
    let mut parts: Vec<(&Tensor, &RowIndex)> = Vec::with_capacity(groups.len());
    let mut columns: Vec<&[u8]> = Vec::with_capacity(groups.len());
    for (j, name) in layout.names.iter().enumerate() {
        if let Some((placed, dense)) = placed.and_then(|p| Some((p, p.feature(j)?))) {
            out.push((name.clone(), Tensor::Dense(placed_rows(dense, &placed.rows)?)));
            continue;
        }
        parts.clear();
        for group in groups {
            parts.push(group.get(j).ok_or_else(|| stack_error(name))?);
        }
        // Each gather takes the groups' tensors of its kind, and fails unless all are.
        let tensor = match parts.first() {
            Some((Tensor::Dense(_), _)) => {
                // Each feature's values start 8-byte aligned (as their own allocation
                // would), so that readers of them as typed arrays need not copy.
                numeric.resize(numeric.len().next_multiple_of(8), 0);
                let start = numeric.len();
                let rows = rows.get_or_insert_with(|| Rows::of(sources, groups.len()));
                let dense = gather_dense(name, &parts, rows, &mut numeric, &mut columns)?;
                if numeric.len() > start {
                    slices.push((out.len(), start..numeric.len()));
                }
                Tensor::Dense(dense)
            }
            Some((Tensor::Sparse(_), _)) => Tensor::Sparse(gather_sparse(name, &parts, sources, layout.varying[j])?),
            Some((Tensor::Ragged(_), _)) => Tensor::Ragged(gather_ragged(name, &parts, sources)?),
            _ => return Err(stack_error(name)),
        };
        out.push((name.clone(), tensor));
    }
    let numeric = Bytes::from(numeric);
    for (at, range) in slices {
        if let (_, Tensor::Dense(dense)) = &mut out[at] {
            dense.values = Values::Bytes(numeric.slice(range));
        }
    }
    Ok(out)
}

/// The bytes of a batch of `rows` rows of every numeric dense feature gathered (not
/// `placed`), as the first group has them (a capacity: what the gather writes is checked
/// there).
fn numeric_bytes(layout: &Layout, groups: &[&Decoded], rows: usize, placed: &dyn Fn(usize) -> bool) -> usize {
    let Some(first) = groups.first() else { return 0 };
    (0..layout.names.len())
        .filter(|&j| !placed(j))
        .filter_map(|j| match first.get(j)? {
            (Tensor::Dense(Dense { dtype, shape, values: Values::Bytes(_) }), _) => {
                Some((shape.iter().skip(1).product::<usize>() * dtype.size()? * rows).next_multiple_of(8))
            }
            _ => None,
        })
        .sum()
}

/// Dense rows stacked in the mixture's order. Numeric rows are appended to `numeric` (the
/// batch's buffer; the tensor returned holds no bytes until `gather` slices them out of
/// it), read from each group's bytes (`columns`, the caller's vector, made again here);
/// strings are the tensor's own.
fn gather_dense<'a>(
    name: &str,
    parts: &[(&'a Tensor, &RowIndex)],
    rows: &Rows,
    numeric: &mut Vec<u8>,
    columns: &mut Vec<&'a [u8]>,
) -> Result<Dense> {
    let dense = |&(tensor, _): &(&'a Tensor, &RowIndex)| -> Option<&'a Dense> {
        if let Tensor::Dense(d) = tensor { Some(d) } else { None }
    };
    let sample = parts.first().and_then(dense).ok_or_else(|| stack_error(name))?;
    let inner = sample.shape.get(1..).ok_or_else(|| stack_error(name))?;
    let per_row: usize = inner.iter().product();
    let alike = |d: &Dense| d.dtype == sample.dtype && d.shape.get(1..) == Some(inner);
    if !parts.iter().all(|part| dense(part).is_some_and(alike)) {
        return Err(stack_error(name));
    }
    let mut shape = vec![rows.sources.len()];
    shape.extend_from_slice(inner);
    let values = match &sample.values {
        Values::Bytes(_) => {
            let row_bytes = per_row * sample.dtype.size().unwrap_or(1);
            columns.clear();
            for part in parts {
                columns.push(dense(part).and_then(|d| bytes_of(&d.values)).ok_or_else(|| stack_error(name))?);
            }
            // Every row a source names is in its group's bytes.
            if columns.iter().zip(&rows.used).any(|(column, &used)| column.len() < used * row_bytes) {
                return Err(stack_error(name));
            }
            gather_rows(numeric, columns, rows, row_bytes);
            Values::Bytes(Bytes::new())
        }
        Values::Strings(_) => {
            let parts: Vec<&Dense> = parts.iter().filter_map(dense).collect();
            let picks: Vec<(usize, std::ops::Range<usize>)> =
                rows.runs.iter().map(|(g, range)| (*g, range.start * per_row..range.end * per_row)).collect();
            take_ranges(name, &parts, &picks)?
        }
    };
    Ok(Dense { dtype: sample.dtype, shape, values })
}

/// A batch of sparse rows (`VarLen` or `SparseFeature`, `[B, ...]`): each row's entries
/// in the mixture's order, their first index its row in the batch. The dense shape is
/// the rows, then the features' (a `VarLen`'s width: the longest row of this batch, as
/// TensorFlow's `parse_example` of these records gives).
fn gather_sparse(
    name: &str,
    parts: &[(&Tensor, &RowIndex)],
    sources: &[(usize, usize)],
    varying: bool,
) -> Result<Sparse> {
    let n = parts.len();
    let parts: Vec<(&Sparse, usize, &[i64], &[usize])> = parts
        .iter()
        .filter_map(|part| match part {
            (Tensor::Sparse(sparse), RowIndex::Sparse { rank, indices, starts }) => {
                Some((sparse, *rank, &indices[..], &starts[..]))
            }
            _ => None,
        })
        .collect();
    if parts.len() != n {
        return Err(stack_error(name));
    }
    let (first, rank, ..) = parts[0];
    let dtype = first.values.dtype;
    // Past the rows, a SparseFeature's dense shape is its size, the same in every group.
    let size = |p: &Sparse| p.dense_shape.int64_values().and_then(|shape| Some(shape.get(1..)?.to_vec()));
    let same = |&(p, r, ..): &(&Sparse, usize, &[i64], &[usize])| {
        r == rank && p.values.dtype == dtype && size(p).is_some() && (varying || size(p) == size(first))
    };
    if !parts.iter().all(same) {
        return Err(stack_error(name));
    }
    let mut out_indices = Vec::new();
    let mut picks = Vec::with_capacity(sources.len());
    let mut widest = vec![0i64; rank];
    for (row, &(g, r)) in sources.iter().enumerate() {
        let (_, _, indices, starts) = parts[g];
        let (Some(&from), Some(&to)) = (starts.get(r), starts.get(r + 1)) else {
            return Err(stack_error(name));
        };
        let entries = from..to;
        for entry in indices[entries.start * rank..entries.end * rank].chunks_exact(rank) {
            out_indices.push(row as i64);
            out_indices.extend_from_slice(&entry[1..]);
            widest.iter_mut().zip(entry).skip(1).for_each(|(w, &i)| *w = (*w).max(i + 1));
        }
        picks.push((g, entries));
    }
    let values: Vec<&Dense> = parts.iter().map(|(p, ..)| &p.values).collect();
    let n = out_indices.len() / rank;
    let mut dense_shape = vec![sources.len() as i64];
    if varying {
        dense_shape.extend_from_slice(&widest[1..]);
    } else {
        dense_shape.extend(size(first).expect("checked"));
    }
    Ok(Sparse {
        indices: Dense::int64(vec![n, rank], &out_indices),
        values: Dense { dtype, shape: vec![n], values: take_ranges(name, &values, &picks)? },
        dense_shape: Dense::int64(vec![rank], &dense_shape),
    })
}

/// A batch of ragged rows: each row's subtree of every partition, in the mixture's order,
/// with row splits made again from their lengths.
fn gather_ragged(name: &str, parts: &[(&Tensor, &RowIndex)], sources: &[(usize, usize)]) -> Result<Ragged> {
    let n = parts.len();
    let parts: Vec<(&Ragged, &[Vec<i64>])> = parts
        .iter()
        .filter_map(|part| match part {
            (Tensor::Ragged(ragged), RowIndex::Ragged { splits }) => Some((ragged, &splits[..])),
            _ => None,
        })
        .collect();
    if parts.len() != n {
        return Err(stack_error(name));
    }
    let first = parts[0].0;
    let levels = first.nested_row_splits.len();
    let same = |&(p, _): &(&Ragged, &[Vec<i64>])| {
        p.nested_row_splits.len() == levels
            && p.nested_row_splits.iter().zip(&first.nested_row_splits).all(|(a, b)| a.dtype == b.dtype)
            && p.flat_values.dtype == first.flat_values.dtype
            && p.flat_values.shape.get(1..).is_some()
            && p.flat_values.shape.get(1..) == first.flat_values.shape.get(1..)
    };
    if levels == 0 || !parts.iter().all(same) {
        return Err(stack_error(name));
    }
    let mut out_splits: Vec<Vec<i64>> = vec![vec![0]; levels];
    let mut picks = Vec::with_capacity(sources.len());
    for &(g, r) in sources {
        let (mut from, mut to) = (r, r + 1);
        for (level, out) in out_splits.iter_mut().enumerate() {
            let level_splits = &parts[g].1[level];
            let in_range = |i: usize| level_splits.get(i).and_then(|&s| usize::try_from(s).ok());
            for i in from..to {
                let (Some(start), Some(end)) = (in_range(i), in_range(i + 1)) else { return Err(stack_error(name)) };
                let Some(length) = end.checked_sub(start) else { return Err(stack_error(name)) };
                let last = *out.last().expect("a first split");
                out.push(last + length as i64);
            }
            (from, to) = match (in_range(from), in_range(to)) {
                (Some(from), Some(to)) if from <= to => (from, to),
                _ => return Err(stack_error(name)),
            };
        }
        picks.push((g, from..to));
    }
    let per_value: usize = first.flat_values.shape.iter().skip(1).product();
    let scaled: Vec<(usize, std::ops::Range<usize>)> =
        picks.iter().map(|(g, rows)| (*g, rows.start * per_value..rows.end * per_value)).collect();
    let values: Vec<&Dense> = parts.iter().map(|(p, _)| &p.flat_values).collect();
    let mut shape = vec![picks.iter().map(|(_, rows)| rows.len()).sum::<usize>()];
    shape.extend_from_slice(first.flat_values.shape.get(1..).unwrap_or_default());
    let nested_row_splits = out_splits
        .iter()
        .zip(&first.nested_row_splits)
        .map(|(splits, like)| match like.dtype {
            DType::Int32 => Dense::int32(vec![splits.len()], &splits.iter().map(|&s| s as i32).collect::<Vec<_>>()),
            _ => Dense::int64(vec![splits.len()], splits),
        })
        .collect();
    Ok(Ragged {
        flat_values: Dense { dtype: first.flat_values.dtype, shape, values: take_ranges(name, &values, &scaled)? },
        nested_row_splits,
        uniform_row_lengths: first.uniform_row_lengths.clone(),
    })
}

fn bytes_of(values: &Values) -> Option<&[u8]> {
    if let Values::Bytes(bytes) = values { Some(bytes) } else { None }
}

/// Values `picks` (`(part, range of values)`, in order) of `parts`, all of one dtype.
fn take_ranges(name: &str, parts: &[&Dense], picks: &[(usize, std::ops::Range<usize>)]) -> Result<Values> {
    match &parts[0].values {
        Values::Bytes(_) => {
            let size = parts[0].dtype.size().unwrap_or(1);
            let mut out = Vec::with_capacity(picks.iter().map(|(_, r)| r.len() * size).sum());
            for (g, range) in picks {
                let bytes = bytes_of(&parts[*g].values).ok_or_else(|| stack_error(name))?;
                out.extend_from_slice(
                    bytes.get(range.start * size..range.end * size).ok_or_else(|| stack_error(name))?,
                );
            }
            Ok(Values::Bytes(Bytes::from(out)))
        }
        Values::Strings(_) => {
            let mut out = Vec::with_capacity(picks.iter().map(|(_, r)| r.len()).sum());
            for (g, range) in picks {
                let Values::Strings(strings) = &parts[*g].values else { return Err(stack_error(name)) };
                out.extend_from_slice(strings.get(range.clone()).ok_or_else(|| stack_error(name))?);
            }
            Ok(Values::Strings(out))
        }
    }
}

/// Where a batch's rows come from, worked out once for all its features.
struct Rows<'a> {
    /// Row `i` is row `sources[i].1` of group `sources[i].0`.
    sources: &'a [(usize, usize)],
    /// `sources` as runs of consecutive rows of one group.
    runs: Vec<(usize, std::ops::Range<usize>)>,
    /// Of each group, the rows up to the last one the batch takes.
    used: Vec<usize>,
    /// When each group's rows are taken in order, one after the other (as a batch takes its
    /// records of one component), per group: its first row taken, and the batch's row of
    /// each.
    placed: Option<Vec<(usize, Vec<usize>)>>,
}

impl<'a> Rows<'a> {
    fn of(sources: &'a [(usize, usize)], groups: usize) -> Self {
        let runs: Vec<_> = runs(sources).collect();
        let mut used = vec![0; groups];
        runs.iter().for_each(|(g, range)| used[*g] = used[*g].max(range.end));
        Self { sources, runs, used, placed: placed(sources, groups) }
    }
}

/// See `Rows::placed` (`None` when a group's rows are not taken in order, one after the
/// other, or a source names no group).
fn placed(sources: &[(usize, usize)], groups: usize) -> Option<Vec<(usize, Vec<usize>)>> {
    let mut placed: Vec<(usize, Vec<usize>)> = vec![(0, Vec::new()); groups];
    for (at, &(g, r)) in sources.iter().enumerate() {
        let (first, to) = placed.get_mut(g)?;
        if to.is_empty() {
            *first = r;
        } else if *first + to.len() != r {
            return None;
        }
        to.push(at);
    }
    Some(placed)
}

/// Appends the batch's rows of `row_bytes` bytes to `out`, from `groups` (each holding the
/// rows the batch takes: the caller checks). Short runs (components alternating) are
/// placed row by row at a fixed width, each group's rows read in order: a load and a store
/// a row. Long runs are copied run by run.
fn gather_rows(out: &mut Vec<u8>, groups: &[&[u8]], rows: &Rows, row_bytes: usize) {
    fn place<const N: usize>(out: &mut Vec<u8>, groups: &[&[u8]], placed: &[(usize, Vec<usize>)], rows: usize) {
        let start = out.len();
        out.resize(start + N * rows, 0);
        let (out, _) = out[start..].as_chunks_mut::<N>();
        for (column, (first, to)) in groups.iter().zip(placed) {
            let (column, _) = column[first * N..].as_chunks::<N>();
            for (row, &at) in column.iter().zip(to) {
                out[at] = *row;
            }
        }
    }
    let n = rows.sources.len();
    match (row_bytes, &rows.placed) {
        (1, Some(placed)) if rows.runs.len() * 4 > n => place::<1>(out, groups, placed, n),
        (2, Some(placed)) if rows.runs.len() * 4 > n => place::<2>(out, groups, placed, n),
        (4, Some(placed)) if rows.runs.len() * 4 > n => place::<4>(out, groups, placed, n),
        (8, Some(placed)) if rows.runs.len() * 4 > n => place::<8>(out, groups, placed, n),
        _ => {
            for (g, range) in &rows.runs {
                out.extend_from_slice(&groups[*g][range.start * row_bytes..range.end * row_bytes]);
            }
        }
    }
}

/// `sources` as runs of consecutive rows of one group: `(group, rows)`, copied at once.
fn runs(sources: &[(usize, usize)]) -> impl Iterator<Item = (usize, std::ops::Range<usize>)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let &(group, first) = sources.get(at)?;
        let mut end = first + 1;
        at += 1;
        while sources.get(at) == Some(&(group, end)) {
            end += 1;
            at += 1;
        }
        Some((group, first..end))
    })
}

fn stack_error(name: &str) -> ServeError {
    ServeError::Decode(format!(
        "the records of one batch of the mixture differ in the kind, dtype or shape of {name}, or some lack it \
         (TensorFlow's batch needs them equal)"
    ))
}

/// The records' keys, `<component>/<file>:<n>`, as one table (each prefixed name made once).
pub(super) fn mixed_keys<'a>(records: impl ExactSizeIterator<Item = (usize, &'a Record)>) -> Keys {
    // Each (component, file) named so far, at its index in `files`.
    let mut names: Vec<(usize, Arc<str>)> = Vec::new();
    let mut files: Vec<Arc<str>> = Vec::new();
    let (mut file, mut number) = (Vec::with_capacity(records.len()), Vec::with_capacity(records.len()));
    for (component, record) in records {
        let at = names.iter().position(|(c, f)| *c == component && (Arc::ptr_eq(f, &record.file) || *f == record.file));
        let index = match at {
            Some(at) => at,
            None => {
                names.push((component, record.file.clone()));
                files.push(Arc::from(format!("{component}/{}", record.file).as_str()));
                names.len() - 1
            }
        };
        file.push(index as u32);
        number.push(record.key);
    }
    Keys::Table { files, file, number }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component's decoded group of `rows` records: `f` float32 `[rows]`, `i` int64
    /// `[rows, 2]`, `s` strings `[rows]` and `z` int64 `[rows, 0]`, every value naming its
    /// group and row.
    fn group(g: usize, rows: usize, layout: &Layout) -> Decoded {
        let base = (g * 100) as i64;
        let f: Vec<f32> = (0..rows).map(|r| (base + r as i64) as f32 + 0.5).collect();
        let i: Vec<i64> = (0..rows).flat_map(|r| [base + r as i64, -(base + r as i64)]).collect();
        let s: Vec<Bytes> = (0..rows).map(|r| Bytes::from(format!("{g}-{r}"))).collect();
        let features = vec![
            ("s".to_owned(), Tensor::Dense(Dense::strings(vec![rows], s))),
            ("f".to_owned(), Tensor::Dense(Dense::float32(vec![rows], &f))),
            ("i".to_owned(), Tensor::Dense(Dense::int64(vec![rows, 2], &i))),
            ("z".to_owned(), Tensor::Dense(Dense::int64(vec![rows, 0], &[]))),
        ];
        Decoded::new(features, layout, g)
    }

    #[test]
    fn a_batch_is_gathered_feature_by_feature_in_the_mixtures_order() {
        let names: Vec<String> = ["f", "i", "s", "z"].map(String::from).to_vec();
        let layout = Layout { alike: false, varying: vec![false; 4], positions: vec![vec![1, 2, 0, 3]; 2], names };
        let (a, b) = (group(0, 5, &layout), group(1, 3, &layout));
        let sources = [(1, 2), (0, 0), (0, 1), (1, 0), (0, 4), (1, 1), (0, 2)];
        let features = gather(&layout, &[&a, &b], &sources, None).expect("gathers");
        let dense = |n: usize| match &features[n].1 {
            Tensor::Dense(dense) => dense.clone(),
            other => panic!("{other:?}"),
        };
        let expected: Vec<i64> = sources.iter().map(|&(g, r)| (g * 100 + r) as i64).collect();
        let floats: Vec<f32> = expected.iter().map(|&v| v as f32 + 0.5).collect();
        let pairs: Vec<i64> = expected.iter().flat_map(|&v| [v, -v]).collect();
        let strings: Vec<Bytes> = sources.iter().map(|&(g, r)| Bytes::from(format!("{g}-{r}"))).collect();
        assert_eq!(features.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["f", "i", "s", "z"]);
        assert_eq!(dense(0), Dense::float32(vec![7], &floats));
        assert_eq!(dense(1), Dense::int64(vec![7, 2], &pairs));
        assert_eq!(dense(2), Dense::strings(vec![7], strings));
        assert_eq!(dense(3), Dense::int64(vec![7, 0], &[]));
        // Each feature's values are 8-byte aligned in the batch's one buffer (7 floats
        // take 28 bytes).
        for n in [0, 1] {
            let Values::Bytes(bytes) = &dense(n).values else { panic!() };
            assert_eq!(bytes.as_ptr() as usize % 8, 0, "{}", features[n].0);
        }
        // A source past its group's rows is an error, not a panic.
        assert!(gather(&layout, &[&a, &b], &[(1, 3)], None).is_err());
    }

    #[test]
    fn rows_are_gathered_in_the_mixtures_order_at_every_width() {
        for row_bytes in [1, 2, 3, 4, 8, 12] {
            // Two groups of 12 rows; no two rows of either group are alike.
            let rows = |g: usize| -> Vec<u8> {
                (0..12).flat_map(|r| (0..row_bytes).map(move |b| (g * 131 + r * 17 + b * 3) as u8)).collect()
            };
            let (a, b) = (rows(0), rows(1));
            let groups: Vec<&[u8]> = vec![&a, &b];
            // Components alternating, each group's rows in order from row 2 and row 0 (as a
            // batch of a set takes them): placed row by row at widths 1, 2, 4 and 8.
            let alternating: Vec<(usize, usize)> = (0..10).flat_map(|r| [(0, r + 2), (1, r)]).collect();
            // Short runs out of order: copied run by run.
            let shuffled: Vec<(usize, usize)> = (0..10).rev().flat_map(|r| [(0, r), (1, r + 2)]).collect();
            // Long runs: 4 runs over 22 rows (copied run by run).
            let long: Vec<(usize, usize)> =
                (0..10).map(|r| (0, r)).chain((0..10).map(|r| (1, r))).chain([(0, 10), (1, 10)]).collect();
            for sources in [&alternating, &shuffled, &long] {
                let plan = Rows::of(sources, 2);
                let expected: Vec<u8> =
                    sources.iter().flat_map(|&(g, r)| groups[g][r * row_bytes..(r + 1) * row_bytes].to_vec()).collect();
                // Appended after what the buffer holds already (another feature's rows).
                let mut out = vec![7u8; 5];
                gather_rows(&mut out, &groups, &plan, row_bytes);
                assert_eq!(out[..5], [7u8; 5], "{row_bytes} bytes a row");
                assert_eq!(out[5..], expected, "{row_bytes} bytes a row");
            }
            assert!(Rows::of(&alternating, 2).placed.is_some(), "the row-by-row path");
            assert!(Rows::of(&shuffled, 2).placed.is_none(), "a group's rows out of order");
            assert!(Rows::of(&long, 2).runs.len() * 4 <= long.len(), "the run-by-run path");
        }
    }
}
