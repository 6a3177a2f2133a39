//! Ragged outputs: `RaggedFeature`'s partitions applied the way TensorFlow's parsing
//! does, with its static shape (uniform row lengths) and its validation message.

use super::column::Column;
use super::features::Partition;
use crate::decode::{DType, DecodeError, Dense, Ragged, Tensor};

/// Rows a ragged partition given by `value_rowids` may make in one batch (row ids come
/// from the data).
const MAX_RAGGED_ROWS: usize = 1 << 24;

/// Builds a batched `RaggedTensor` the way TensorFlow's `RaggedFeature` parsing does:
/// the values of each record form the rows of a `[B, (values)]` ragged tensor, then the
/// partitions apply from the innermost out, each replacing the outermost row splits.
pub(super) struct RaggedBuilder {
    values: Column,
    /// Trailing dimensions of the flat values (from uniform row lengths).
    inner_shape: Vec<usize>,
    /// Outermost first; `splits[0]` partitions the batch.
    splits: Vec<Vec<i64>>,
    /// Per level of `splits`: its row length when a `uniformRowLength` partition made it.
    uniform: Vec<Option<usize>>,
}

fn validation_error(x: i64, y: i64) -> DecodeError {
    DecodeError::new(format!(
        "Arguments to _from_row_partition do not form a valid RaggedTensor\nCondition x == y did not hold.\n\
         First 1 elements of x:\n[{x}]\nFirst 1 elements of y:\n[{y}]"
    ))
}

impl RaggedBuilder {
    /// The `[B, (values)]` tensor whose rows are each record's values (`rows[i]..rows[i+1]`).
    pub(super) fn new(values: Column, rows: &[usize]) -> Self {
        Self::from_splits(values, vec![rows.iter().map(|&r| r as i64).collect()])
    }

    /// A ragged tensor over `values` with the given row splits (outermost first), before
    /// any partition of the feature applies.
    pub(super) fn from_splits(values: Column, splits: Vec<Vec<i64>>) -> Self {
        let uniform = vec![None; splits.len()];
        Self { values, inner_shape: Vec::new(), splits, uniform }
    }

    /// Rows of the level under the outermost splits.
    fn inner_rows(&self) -> i64 {
        match self.splits.get(1) {
            Some(next) => next.len() as i64 - 1,
            None => (self.values.len() / self.inner_shape.iter().product::<usize>().max(1)) as i64,
        }
    }

    /// Applies one partition of the feature (innermost first): a `uniformRowLength`
    /// (`key_rows` is `None`), or one read from a key's int64 values per record.
    pub(super) fn partition(
        &mut self,
        partition: &Partition,
        key_rows: Option<(Vec<usize>, Vec<i64>)>,
        validate: bool,
    ) -> Result<(), DecodeError> {
        let Some((rows, key_values)) = key_rows else {
            let Partition::UniformRowLength(length) = *partition else { unreachable!("keyed partitions have rows") };
            return self.uniform_partition(length, validate);
        };
        let inner_rows = self.inner_rows();
        let records = rows.len() - 1;
        // Per record: the partition's values.
        let runs: Vec<&[i64]> = (0..records).map(|record| &key_values[rows[record]..rows[record + 1]]).collect();
        let (new_outer, new_inner) = match partition {
            Partition::RowLengths(_) => by_row_lengths(&runs),
            Partition::RowSplits(_) | Partition::RowLimits(_) | Partition::RowStarts(_) => {
                by_row_bounds(partition, &runs, &self.splits[0], inner_rows)
            }
            Partition::ValueRowIds(key) => by_value_rowids(key, &runs)?,
            Partition::UniformRowLength(_) => unreachable!("handled above"),
        };
        if validate {
            let last = *new_inner.last().unwrap();
            if last != inner_rows {
                return Err(validation_error(last, inner_rows));
            }
        }
        self.splits[0] = new_inner;
        self.splits.insert(0, new_outer);
        self.uniform.insert(0, None);
        Ok(())
    }

    /// A `uniformRowLength` partition. Innermost (over the batch's splits alone) it
    /// becomes a dimension of the flat values, as TensorFlow reshapes them; further out
    /// it is a partition of its own whose rows all have `length` (TensorFlow's
    /// `RaggedTensor.from_uniform_row_length`: unvalidated, rows past the last whole
    /// `length` stay out of it).
    fn uniform_partition(&mut self, length: usize, validate: bool) -> Result<(), DecodeError> {
        let length_i = length as i64;
        let new_outer: Vec<i64> = self.splits[0].iter().map(|s| s / length_i).collect();
        if self.splits.len() == 1 {
            let inner: usize = self.inner_shape.iter().product::<usize>().max(1);
            if !(self.values.len() / inner).is_multiple_of(length) {
                return Err(DecodeError::new(format!(
                    "Input to reshape is a tensor with {} values, but the requested shape requires a multiple of {}",
                    self.values.len(),
                    length * inner
                )));
            }
            self.inner_shape.insert(0, length);
            self.splits[0] = new_outer;
            return Ok(());
        }
        let inner_rows = self.inner_rows();
        if validate && inner_rows % length_i != 0 {
            return Err(DecodeError::new(format!(
                "uniform_row_length={length} times nrows={} must equal nvals={inner_rows}",
                inner_rows / length_i
            )));
        }
        self.splits[0] = (0..=inner_rows / length_i).map(|i| i * length_i).collect();
        self.uniform[0] = Some(length);
        self.splits.insert(0, new_outer);
        self.uniform.insert(0, None);
        Ok(())
    }

    /// Puts `outer` on top: row splits over the current outermost rows (a batch of
    /// SequenceExamples over their steps).
    pub(super) fn nest_under(&mut self, outer: Vec<i64>) {
        self.splits.insert(0, outer);
        self.uniform.insert(0, None);
    }

    pub(super) fn finish(self, splits_dtype: DType, batched: bool) -> Tensor {
        let mut shape = vec![self.values.len() / self.inner_shape.iter().product::<usize>().max(1)];
        shape.extend_from_slice(&self.inner_shape);
        let flat_values = self.values.into_dense(shape);
        let first = if batched { 0 } else { 1 };
        let (splits, uniform) = (&self.splits[first..], &self.uniform[first..]);
        if splits.is_empty() {
            return Tensor::Dense(flat_values);
        }
        let nested_row_splits = splits
            .iter()
            .map(|s| match splits_dtype {
                DType::Int32 => Dense::int32(vec![s.len()], &s.iter().map(|&v| v as i32).collect::<Vec<_>>()),
                _ => Dense::int64(vec![s.len()], s),
            })
            .collect();
        Tensor::Ragged(Ragged { flat_values, nested_row_splits, uniform_row_lengths: uniform.to_vec() })
    }
}

/// Outer splits (records into rows) and inner splits (rows into the level below) from
/// each record's row lengths. Lengths come from the data: their sums wrap as
/// TensorFlow's int64 arithmetic does (validation, when asked, then fails).
fn by_row_lengths(runs: &[&[i64]]) -> (Vec<i64>, Vec<i64>) {
    let (mut new_outer, mut new_inner) = (vec![0i64], vec![0i64]);
    for lengths in runs {
        for &length in *lengths {
            new_inner.push(new_inner.last().unwrap().wrapping_add(length));
        }
        new_outer.push(new_outer.last().unwrap() + lengths.len() as i64);
    }
    (new_outer, new_inner)
}

/// Outer and inner splits from each record's row splits, limits or starts, which count
/// from the record's first row (`outer`, the current outermost splits). Bounds come from
/// the data: moved by the record's first row, they wrap as TensorFlow's int64 do.
fn by_row_bounds(partition: &Partition, runs: &[&[i64]], outer: &[i64], inner_rows: i64) -> (Vec<i64>, Vec<i64>) {
    let row_starts = &outer[..runs.len().min(outer.len().saturating_sub(1))];
    let (mut new_outer, mut new_inner) = (vec![0], vec![0]);
    let mut starts = Vec::new();
    for (record, run) in runs.iter().enumerate() {
        let mut bounds = *run;
        if matches!(partition, Partition::RowSplits(_)) && !bounds.is_empty() {
            bounds = &bounds[1..];
        }
        let base = row_starts.get(record).copied().unwrap_or(0);
        match partition {
            Partition::RowStarts(_) => starts.extend(bounds.iter().map(|b| b.wrapping_add(base))),
            _ => new_inner.extend(bounds.iter().map(|b| b.wrapping_add(base))),
        }
        new_outer.push(new_outer.last().unwrap() + bounds.len() as i64);
    }
    if matches!(partition, Partition::RowStarts(_)) {
        new_inner = starts;
        new_inner.push(inner_rows);
    }
    (new_outer, new_inner)
}

/// Outer and inner splits from each record's value row ids. Row ids come from the data:
/// the rows they make are bounded before anything is allocated for them.
fn by_value_rowids(key: &str, runs: &[&[i64]]) -> Result<(Vec<i64>, Vec<i64>), DecodeError> {
    let (mut new_outer, mut new_inner) = (vec![0], vec![0]);
    let mut row_counts: Vec<i64> = Vec::new();
    for (record, ids) in runs.iter().enumerate() {
        let nrows = ids.iter().max().map_or(0, |m| m.saturating_add(1).max(0));
        let first = row_counts.len();
        if nrows as u64 > (MAX_RAGGED_ROWS - first) as u64 {
            return Err(DecodeError::at(
                record,
                format!("value_rowids {key} name row {}, past the {MAX_RAGGED_ROWS} rows a batch may hold", nrows - 1),
            ));
        }
        row_counts.resize(first + nrows as usize, 0);
        for &id in *ids {
            if let Some(count) = usize::try_from(id).ok().and_then(|id| row_counts.get_mut(first + id)) {
                *count += 1;
            }
        }
        new_outer.push(new_outer.last().unwrap() + nrows);
    }
    for count in row_counts {
        new_inner.push(new_inner.last().unwrap() + count);
    }
    Ok((new_outer, new_inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_lengths_and_bounds_past_i64_wrap_instead_of_panicking() {
        let (outer, inner) = by_row_lengths(&[&[i64::MAX, 1], &[i64::MIN]]);
        assert_eq!(outer, [0, 2, 3]);
        assert_eq!(inner, [0, i64::MAX, i64::MIN, 0]);
        // The second record's bounds count from its first row, 3.
        let partition = Partition::RowLimits("k".into());
        let (outer, inner) = by_row_bounds(&partition, &[&[1, 3], &[i64::MAX]], &[0, 3, 4], 4);
        assert_eq!(outer, [0, 2, 3]);
        assert_eq!(inner, [0, 1, 3, i64::MIN + 2]);
    }
}
