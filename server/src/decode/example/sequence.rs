//! `tf.io.parse_sequence_example` (a batch) and `parse_single_sequence_example` over
//! serialized `tf.train.SequenceExample`s: context features as an Example's, and
//! feature lists (one `Feature` per step) as dense `[B, steps] + shape` tensors with
//! their lengths, sparse `[B, steps, values]` tensors, or ragged `[B, (steps), (values)]`.

use std::collections::HashMap;

use bytes::Bytes;

use super::ExampleParser;
use super::column::{Column, kind_of};
use super::dense::pad_sequences;
use super::features::{FeatureSpec, Partition};
use super::messages::{Names, Wording, shape_string, unparsable};
use super::ragged::RaggedBuilder;
use super::wire::{self, Field};
use crate::decode::{DType, DecodeError, Dense, Sparse, Tensor};

/// TensorFlow's three outputs.
#[derive(Debug, Default)]
pub struct ParsedSequences {
    pub context: Vec<(String, Tensor)>,
    pub feature_lists: Vec<(String, Tensor)>,
    /// Steps per record of each dense sequence feature (batches only).
    pub lengths: Vec<(String, Tensor)>,
}

#[derive(Debug, PartialEq)]
pub struct SequenceExampleParser {
    context: ExampleParser,
    sequence: Vec<(String, FeatureSpec)>,
    slot_of: HashMap<Vec<u8>, usize>,
}

impl SequenceExampleParser {
    /// Bytes of the context features of fixed shape, per record (sequence features
    /// depend on the data).
    pub fn fixed_bytes_per_record(&self) -> u64 {
        self.context.fixed_bytes_per_record()
    }

    /// The context features, as an Example's.
    pub fn context_features(&self) -> &[(String, FeatureSpec)] {
        self.context.features()
    }

    /// The feature lists' features.
    pub fn sequence_features(&self) -> &[(String, FeatureSpec)] {
        &self.sequence
    }

    pub fn new(context: Vec<(String, FeatureSpec)>, sequence: Vec<(String, FeatureSpec)>) -> Result<Self, DecodeError> {
        // TensorFlow's Python layer takes VarLen, FixedLen and Ragged context features,
        // checked in the order of their keys, before any feature list.
        let mut names: Vec<&(String, FeatureSpec)> = context.iter().collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some((name, FeatureSpec::Sparse { index_keys, value_key, dtype, size, already_sorted })) =
            names.into_iter().find(|(_, spec)| matches!(spec, FeatureSpec::Sparse { .. }))
        {
            let index_key = python_list(index_keys, |key| format!("'{key}'"));
            let size = python_list(size, i64::to_string);
            let dtype = python_dtype(*dtype);
            let sorted = if *already_sorted { "True" } else { "False" };
            return Err(DecodeError::new(format!(
                "Unsupported SparseFeature SparseFeature(index_key={index_key}, value_key='{value_key}', \
                 dtype={dtype}, size={size}, already_sorted={sorted}) for key '{name}'"
            )));
        }
        let mut slot_of = HashMap::new();
        for (name, spec) in &sequence {
            let keys: Vec<&str> = match spec {
                FeatureSpec::FixedLenSequence { default: Some(_), .. } => {
                    // A feature list's steps are padded with zeros: TensorFlow refuses a default.
                    return Err(DecodeError::new(format!(
                        "sequence feature {name}: Value feature_list.dense_defaults[{name}] must be None"
                    )));
                }
                FeatureSpec::FixedLenSequence { dtype, .. } | FeatureSpec::VarLen { dtype } => {
                    check_dtype(name, *dtype)?;
                    vec![name]
                }
                FeatureSpec::Ragged { dtype, value_key, partitions, row_splits_dtype, .. } => {
                    check_dtype(name, *dtype)?;
                    if !matches!(row_splits_dtype, DType::Int32 | DType::Int64) {
                        return Err(DecodeError::new(format!(
                            "sequence feature {name}: rowSplitsDtype must be INT32 or INT64"
                        )));
                    }
                    if partitions.contains(&Partition::UniformRowLength(0)) {
                        return Err(DecodeError::new(format!(
                            "sequence feature {name}: uniformRowLength must be positive"
                        )));
                    }
                    // Partition keys are feature lists of their own, a step for each step of the values.
                    let mut keys = vec![value_key.as_str()];
                    keys.extend(partitions.iter().filter_map(partition_key).map(String::as_str));
                    keys
                }
                FeatureSpec::FixedLen { .. } | FeatureSpec::Sparse { .. } => {
                    return Err(DecodeError::new(format!(
                        "sequence feature {name}: feature lists take FixedLenSequence, VarLen or Ragged features"
                    )));
                }
            };
            for key in keys {
                let next = slot_of.len();
                slot_of.entry(key.as_bytes().to_vec()).or_insert(next);
            }
        }
        Ok(Self { context: ExampleParser::new(context)?, sequence, slot_of })
    }

    pub fn parse(
        &self,
        records: &[Bytes],
        names: Option<&[String]>,
        batched: bool,
    ) -> Result<ParsedSequences, DecodeError> {
        let context = self.context.parse_as(records, names, batched, Wording::SequenceContext)?;
        let names = Names { names };
        let width = self.slot_of.len();
        let mut lists: Vec<Option<&[u8]>> = vec![None; records.len() * width];
        for (index, record) in records.iter().enumerate() {
            let row = &mut lists[index * width..(index + 1) * width];
            let located = wire::for_each_submessage(record, 2, |feature_lists| {
                wire::for_each_entry(feature_lists, |key, list| {
                    if let Some(&slot) = self.slot_of.get(key) {
                        row[slot] = Some(list);
                    }
                })
            });
            if located.is_err() {
                return Err(unparsable("sequence_example", index, record));
            }
        }
        let mut parsed = ParsedSequences { context, ..ParsedSequences::default() };
        for (name, spec) in &self.sequence {
            let key = match spec {
                FeatureSpec::Ragged { value_key, .. } => value_key.as_str(),
                _ => name.as_str(),
            };
            let slot = self.slot_of[key.as_bytes()];
            let list_of = |index: usize| lists[index * width + slot];
            let tensor = match spec {
                FeatureSpec::FixedLenSequence { dtype, shape, allow_missing, default } => {
                    let per_step: usize = shape.iter().product();
                    let steps = read_steps(records, &list_of, key, *dtype, Some((shape, per_step)), names)?;
                    if !allow_missing && let Some(index) = steps.missing.iter().position(|&m| m) {
                        return Err(DecodeError::new(format!(
                            "Name: {}, Feature list '{key}' is required but could not be found.  Did you mean to \
                                 include it in feature_list_dense_missing_assumed_empty or feature_list_dense_defaults?",
                            names.name(index)
                        )));
                    }
                    let step_counts: Vec<i64> = steps.record_steps.windows(2).map(|w| (w[1] - w[0]) as i64).collect();
                    if batched {
                        parsed
                            .lengths
                            .push((name.clone(), Tensor::Dense(Dense::int64(vec![records.len()], &step_counts))));
                    }
                    let value_rows: Vec<usize> = steps.record_steps.iter().map(|&s| steps.step_values[s]).collect();
                    let dense =
                        pad_sequences(value_rows, steps.values, shape, default.as_ref(), key, *dtype, names, batched)?;
                    Tensor::Dense(dense)
                }
                FeatureSpec::VarLen { dtype } => {
                    let steps = read_steps(records, &list_of, key, *dtype, None, names)?;
                    Tensor::Sparse(var_len_steps(&steps, batched))
                }
                FeatureSpec::Ragged { dtype, partitions, row_splits_dtype, validate, .. } => {
                    let steps = read_steps(records, &list_of, key, *dtype, None, names)?;
                    ragged_steps(name, steps, partitions, *row_splits_dtype, *validate, batched, |key| {
                        let slot = self.slot_of[key.as_bytes()];
                        let list_of = |index: usize| lists[index * width + slot];
                        read_steps(records, &list_of, key, DType::Int64, None, names)
                    })?
                }
                FeatureSpec::FixedLen { .. } | FeatureSpec::Sparse { .. } => unreachable!("refused in new"),
            };
            parsed.feature_lists.push((name.clone(), tensor));
        }
        Ok(parsed)
    }
}

fn partition_key(partition: &Partition) -> Option<&String> {
    match partition {
        Partition::UniformRowLength(_) => None,
        Partition::RowSplits(k)
        | Partition::RowLengths(k)
        | Partition::RowStarts(k)
        | Partition::RowLimits(k)
        | Partition::ValueRowIds(k) => Some(k),
    }
}

/// A ragged feature list, as TensorFlow builds it: the steps (of every record) take the
/// place of an Example batch's records, each partition applies to the values of each
/// step (a key's step `i` partitions the values' step `i`), then the records' splits
/// over their steps go back on top (batches only). `key_steps` reads a partition key's
/// feature list.
fn ragged_steps(
    name: &str,
    steps: Steps,
    partitions: &[Partition],
    row_splits_dtype: DType,
    validate: bool,
    batched: bool,
    key_steps: impl Fn(&str) -> Result<Steps, DecodeError>,
) -> Result<Tensor, DecodeError> {
    let record_steps: Vec<i64> = steps.record_steps.iter().map(|&s| s as i64).collect();
    let mut builder = RaggedBuilder::new(steps.values, &steps.step_values);
    let named = |err: DecodeError| DecodeError { message: format!("sequence feature {name}: {}", err.message), ..err };
    for partition in partitions.iter().rev() {
        let key_rows = match partition_key(partition) {
            None => None,
            Some(key) => {
                let partition_steps = key_steps(key)?;
                let Column::Int64(values) = partition_steps.values else { unreachable!("int64 column") };
                if batched && validate {
                    let splits: Vec<i64> = partition_steps.record_steps.iter().map(|&s| s as i64).collect();
                    check_aligned(name, &record_steps, &splits)?;
                }
                Some((partition_steps.step_values, values))
            }
        };
        builder.partition(partition, key_rows, validate).map_err(named)?;
    }
    if batched {
        builder.nest_under(record_steps);
    }
    Ok(builder.finish(row_splits_dtype, true))
}

/// TensorFlow's `assert_equal` of the records' steps in the values and in a partition
/// key (`validate` only), with its eager message.
fn check_aligned(name: &str, x: &[i64], y: &[i64]) -> Result<(), DecodeError> {
    if x == y {
        return Ok(());
    }
    // Both have a split per record and one more.
    const SUMMARIZE: usize = 3;
    let differ: Vec<usize> = (0..x.len()).filter(|&i| x[i] != y[i]).take(SUMMARIZE).collect();
    // numpy's `str` of the `[n, 1]` indices: a row per index.
    let width = differ.iter().map(|i| i.to_string().len()).max().unwrap_or(0);
    let indices: Vec<String> = differ.iter().map(|i| format!("[{i:>width$}]")).collect();
    let pick = |v: &[i64]| differ.iter().map(|&i| v[i]).collect::<Vec<_>>();
    Err(DecodeError::new(format!(
        "Feature {name}: values and partitions are not aligned\nCondition x == y did not hold.\n\
         Indices of first {} different values:\n[{}]\nCorresponding x values:\n{}\nCorresponding y values:\n{}\n\
         First {} elements of x:\n{}\nFirst {} elements of y:\n{}",
        differ.len(),
        indices.join("\n "),
        numpy_row(&pick(x)),
        numpy_row(&pick(y)),
        x.len().min(SUMMARIZE),
        numpy_row(&x[..x.len().min(SUMMARIZE)]),
        y.len().min(SUMMARIZE),
        numpy_row(&y[..y.len().min(SUMMARIZE)]),
    )))
}

/// numpy's `str` of a short integer vector: `[ 0 12]`, every number as wide as the widest.
fn numpy_row(values: &[i64]) -> String {
    let width = values.iter().map(|v| v.to_string().len()).max().unwrap_or(0);
    let cells: Vec<String> = values.iter().map(|v| format!("{v:>width$}")).collect();
    format!("[{}]", cells.join(" "))
}

fn check_dtype(name: &str, dtype: DType) -> Result<(), DecodeError> {
    if matches!(dtype, DType::Int64 | DType::Float32 | DType::String) {
        Ok(())
    } else {
        Err(DecodeError::new(format!("sequence feature {name}: dtype must be INT64, FLOAT32 or STRING")))
    }
}

/// One feature list across a batch: values of every step, steps of every record.
struct Steps {
    values: Column,
    /// `step_values[s]..step_values[s+1]`: the values of step s (over all records).
    step_values: Vec<usize>,
    /// `record_steps[r]..record_steps[r+1]`: the steps of record r.
    record_steps: Vec<usize>,
    /// Records without the feature list.
    missing: Vec<bool>,
}

fn read_steps<'r>(
    records: &'r [Bytes],
    list_of: &dyn Fn(usize) -> Option<&'r [u8]>,
    key: &str,
    dtype: DType,
    fixed: Option<(&Vec<usize>, usize)>,
    names: Names<'_>,
) -> Result<Steps, DecodeError> {
    let mut steps = Steps {
        values: Column::new(dtype),
        step_values: vec![0],
        record_steps: vec![0],
        missing: Vec::with_capacity(records.len()),
    };
    let mut scratch = Vec::new();
    for (index, record) in records.iter().enumerate() {
        let malformed = |_| unparsable("sequence_example", index, record);
        let list = list_of(index);
        steps.missing.push(list.is_none());
        let mut step = 0;
        for field in wire::fields(list.unwrap_or_default()) {
            let (1, Field::Len(feature)) = field.map_err(malformed)? else { continue };
            let before = steps.values.len();
            if let Some((kind, from)) = wire::feature_kind(feature).map_err(malformed)? {
                if kind != kind_of(dtype) {
                    return Err(DecodeError::new(format!(
                        "Name: {}, Feature list: {key}, Index: {step}.  Data types don't match. Expected type: {}, Actual type: {}",
                        names.name(index),
                        kind_of(dtype).dtype_name(),
                        kind.dtype_name()
                    )));
                }
                match &mut steps.values {
                    Column::Int64(out) => wire::int64_values(feature, from, out).map_err(malformed)?,
                    Column::Float(out) => wire::float_values(feature, from, out).map_err(malformed)?,
                    Column::Bytes(out) => {
                        scratch.clear();
                        wire::bytes_values(feature, from, &mut scratch).map_err(malformed)?;
                        out.extend(scratch.iter().map(|value| record.slice_ref(value)));
                    }
                }
            }
            let count = steps.values.len() - before;
            if let Some((shape, per_step)) = fixed
                && count != per_step
            {
                // TensorFlow names the step here, not the record.
                return Err(DecodeError::new(format!(
                    "Name: {}, Key: {key}, Index: {step}.  Number of values != expected.  values size: {count} but \
                         output shape: {}",
                    names.name(index),
                    shape_string(shape)
                )));
            }
            steps.step_values.push(steps.values.len());
            step += 1;
        }
        steps.record_steps.push(steps.step_values.len() - 1);
    }
    Ok(steps)
}

/// How Python writes `items` in a SparseFeature's repr: one item as itself, several as a
/// list.
fn python_list<T>(items: &[T], repr: impl Fn(&T) -> String) -> String {
    match items {
        [one] => repr(one),
        many => format!("[{}]", many.iter().map(repr).collect::<Vec<_>>().join(", ")),
    }
}

/// A dtype as Python writes it (`tf.float32`).
fn python_dtype(dtype: DType) -> String {
    let name = match dtype {
        DType::Float32 => "float32",
        DType::Float64 => "float64",
        other => other.name(),
    };
    format!("tf.{name}")
}

/// A VarLen feature list: sparse `[B, max_steps, max_values]` (or `[max_steps, max_values]`).
fn var_len_steps(steps: &Steps, batched: bool) -> Sparse {
    let records = steps.record_steps.len() - 1;
    let rank = if batched { 3 } else { 2 };
    let mut indices = Vec::with_capacity(steps.values.len() * rank);
    let (mut max_steps, mut max_values) = (0, 0);
    for record in 0..records {
        let (first, last) = (steps.record_steps[record], steps.record_steps[record + 1]);
        max_steps = max_steps.max(last - first);
        for step in first..last {
            let count = steps.step_values[step + 1] - steps.step_values[step];
            max_values = max_values.max(count);
            for j in 0..count {
                if batched {
                    indices.push(record as i64);
                }
                indices.extend([(step - first) as i64, j as i64]);
            }
        }
    }
    let n = steps.values.len();
    let mut dense_shape = if batched { vec![records as i64] } else { Vec::new() };
    dense_shape.extend([max_steps as i64, max_values as i64]);
    let values = match &steps.values {
        Column::Int64(v) => Dense::int64(vec![n], v),
        Column::Float(v) => Dense::float32(vec![n], v),
        Column::Bytes(v) => Dense::strings(vec![n], v.clone()),
    };
    Sparse {
        indices: Dense::int64(vec![n, rank], &indices),
        values,
        dense_shape: Dense::int64(vec![rank], &dense_shape),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uniform_row_length_of_zero_is_refused_with_the_feature_named() {
        let ragged = |length| FeatureSpec::Ragged {
            dtype: DType::Int64,
            value_key: "v".into(),
            partitions: vec![Partition::UniformRowLength(length)],
            row_splits_dtype: DType::Int64,
            validate: false,
        };
        let err = SequenceExampleParser::new(Vec::new(), vec![("r".into(), ragged(0))]).unwrap_err();
        assert_eq!(err.message, "sequence feature r: uniformRowLength must be positive");
        assert!(SequenceExampleParser::new(Vec::new(), vec![("r".into(), ragged(2))]).is_ok());
    }

    /// TensorFlow 2.21's message for a record of 12 steps, then 10 of 2 steps whose
    /// partition key has 1 (numpy pads the numbers of a row to one width).
    #[test]
    fn misaligned_partition_steps_are_told_as_tensorflow_tells_them() {
        let x: Vec<i64> = [0].into_iter().chain((0..=10).map(|i| 12 + 2 * i)).collect();
        let y: Vec<i64> = [0].into_iter().chain(12..=22).collect();
        let err = check_aligned("seq", &x, &y).unwrap_err();
        assert_eq!(
            err.message,
            "Feature seq: values and partitions are not aligned\nCondition x == y did not hold.\nIndices of first 3 \
             different values:\n[[2]\n [3]\n [4]]\nCorresponding x values:\n[14 16 18]\nCorresponding y values:\n[13 \
             14 15]\nFirst 3 elements of x:\n[ 0 12 14]\nFirst 3 elements of y:\n[ 0 12 13]"
        );
        assert!(check_aligned("seq", &x, &x).is_ok());
        assert_eq!(numpy_row(&[-5, 100, 7]), "[ -5 100   7]");
    }
}
