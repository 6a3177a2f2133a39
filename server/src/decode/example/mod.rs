//! `tf.io.parse_example` (a batch) and `tf.io.parse_single_example` (one record) over
//! serialized `tf.train.Example`s, with TensorFlow's output shapes and error messages.
//!
//! A batch is parsed in three steps: locate each record's features (this module),
//! read each feature's values across the batch (`slots`, into a `column`), and build
//! the feature's tensor (`dense`, `sparse`, `ragged`).
//!
//! - this module: [`ExampleParser`], locating the features a spec reads in each record;
//! - `features`: the feature specs ([`FeatureSpec`], [`Partition`], [`DefaultValue`]) and
//!   their checks;
//! - [`wire`]: reading the protobuf wire format in place;
//! - `slots`: reading one feature's values out of the located records;
//! - `column`: the values of one feature across a batch;
//! - `dense`, `sparse`, `ragged`: the output tensors of each kind of feature;
//! - `messages`: TensorFlow's error messages;
//! - [`sequence`]: `parse_sequence_example` over `tf.train.SequenceExample`s.
//!
//! Bytes values are `Bytes` slices of the records, never copies.

mod column;
mod dense;
mod features;
mod messages;
mod ragged;
pub mod sequence;
mod slots;
mod sparse;
pub mod wire;

use std::collections::HashMap;

use bytes::Bytes;

use super::{DType, DecodeError, Placement, Tensor};
use column::Column;
use dense::{fixed_len, pad_sequences};
pub use features::{DefaultValue, FeatureSpec, Partition};
use features::{check_default, check_list_dtype};
use messages::TypeMessage;
pub(crate) use messages::{Names, Wording, unparsable};
use ragged::RaggedBuilder;
use slots::SlotTable;
use sparse::{sparse_feature, var_len};

/// Parses batches of serialized Examples for a fixed set of features.
#[derive(Debug, PartialEq)]
pub struct ExampleParser {
    /// Output features, in order.
    features: Vec<(String, FeatureSpec)>,
    /// Every Example key some feature reads, by slot.
    keys: Vec<String>,
    slot_of: HashMap<Vec<u8>, usize>,
}

impl ExampleParser {
    /// Bytes of the features of fixed shape, per record (see
    /// [`crate::decode::Decoder::fixed_bytes_per_record`]).
    pub fn fixed_bytes_per_record(&self) -> u64 {
        self.features
            .iter()
            .map(|(_, spec)| match spec {
                FeatureSpec::FixedLen { dtype, shape, .. } => shape
                    .iter()
                    .fold(crate::decode::element_bytes(*dtype), |bytes, &dim| bytes.saturating_mul(dim as u64)),
                _ => 0,
            })
            .fold(0, u64::saturating_add)
    }

    pub fn new(mut features: Vec<(String, FeatureSpec)>) -> Result<Self, DecodeError> {
        // TensorFlow's parsing takes an empty default for none (the feature is then
        // required); only a shape of no element accepts one (others fail `check_default`).
        for (_, spec) in &mut features {
            if let FeatureSpec::FixedLen { shape, default, .. } = spec
                && shape.iter().product::<usize>() == 0
                && default.as_ref().is_some_and(|d| d.len() == 0)
            {
                *default = None;
            }
        }
        let mut keys: Vec<String> = Vec::new();
        let mut slot_of = HashMap::new();
        let mut add_key = |key: &str| {
            if !slot_of.contains_key(key.as_bytes()) {
                slot_of.insert(key.as_bytes().to_vec(), keys.len());
                keys.push(key.to_owned());
            }
        };
        for (name, spec) in &features {
            match spec {
                FeatureSpec::FixedLen { dtype, shape, default } => {
                    check_list_dtype(name, *dtype)?;
                    let elements: usize = shape.iter().product();
                    if let Some(default) = default {
                        check_default(name, *dtype, default, elements)?;
                    }
                    add_key(name);
                }
                FeatureSpec::FixedLenSequence { dtype, allow_missing, default, .. } => {
                    check_list_dtype(name, *dtype)?;
                    if !allow_missing {
                        return Err(DecodeError::new(format!(
                            "feature {name}: a FixedLenSequenceFeature of an Example needs allowMissing: true"
                        )));
                    }
                    // The padding value, reshaped to `[]`.
                    if let Some(default) = default {
                        check_default(name, *dtype, default, 1)?;
                    }
                    add_key(name);
                }
                FeatureSpec::VarLen { dtype } => {
                    check_list_dtype(name, *dtype)?;
                    add_key(name);
                }
                FeatureSpec::Sparse { index_keys, value_key, dtype, size, .. } => {
                    check_list_dtype(name, *dtype)?;
                    if index_keys.is_empty() || index_keys.len() != size.len() {
                        return Err(DecodeError::new(format!(
                            "feature {name}: a SparseFeature needs one size per index key"
                        )));
                    }
                    index_keys.iter().for_each(|k| add_key(k));
                    add_key(value_key);
                }
                FeatureSpec::Ragged { dtype, value_key, partitions, row_splits_dtype, .. } => {
                    check_list_dtype(name, *dtype)?;
                    if !matches!(row_splits_dtype, DType::Int32 | DType::Int64) {
                        return Err(DecodeError::new(format!("feature {name}: rowSplitsDtype must be INT32 or INT64")));
                    }
                    add_key(value_key);
                    for partition in partitions {
                        match partition {
                            Partition::UniformRowLength(0) => {
                                return Err(DecodeError::new(format!(
                                    "feature {name}: uniformRowLength must be positive"
                                )));
                            }
                            Partition::UniformRowLength(_) => {}
                            Partition::RowSplits(k)
                            | Partition::RowLengths(k)
                            | Partition::RowStarts(k)
                            | Partition::RowLimits(k)
                            | Partition::ValueRowIds(k) => add_key(k),
                        }
                    }
                }
            }
        }
        Ok(Self { features, keys, slot_of })
    }

    pub fn features(&self) -> &[(String, FeatureSpec)] {
        &self.features
    }

    /// `parse_example` on `records` (`batched`), or `parse_single_example` on the one
    /// record (`!batched`). `names` (TensorFlow's `example_names`) appear in messages.
    pub fn parse(
        &self,
        records: &[Bytes],
        names: Option<&[String]>,
        batched: bool,
    ) -> Result<Vec<(String, Tensor)>, DecodeError> {
        self.parse_as(records, names, batched, Wording::Example)
    }

    /// `parse_example` on `records`, with the numeric rows of `FixedLen` features written
    /// at their places (see [`Placement`]; [`places`] says which features are placed).
    pub fn parse_placed(
        &self,
        records: &[Bytes],
        place: &mut Placement<'_>,
    ) -> Result<Vec<(String, Tensor)>, DecodeError> {
        self.parse_into(records, None, true, Wording::Example, Some(place))
    }

    /// `parse`, with TensorFlow's messages for `wording`: a SequenceExample's context is
    /// field 1 like an Example's features, so the same parser reads both.
    pub(crate) fn parse_as(
        &self,
        records: &[Bytes],
        names: Option<&[String]>,
        batched: bool,
        wording: Wording,
    ) -> Result<Vec<(String, Tensor)>, DecodeError> {
        self.parse_into(records, names, batched, wording, None)
    }

    fn parse_into(
        &self,
        records: &[Bytes],
        names: Option<&[String]>,
        batched: bool,
        wording: Wording,
        mut place: Option<&mut Placement<'_>>,
    ) -> Result<Vec<(String, Tensor)>, DecodeError> {
        let names = Names { names };
        let slots = self.locate(records, wording)?;
        let table = SlotTable { records, slots: &slots, width: self.keys.len() };
        let mut out = Vec::with_capacity(self.features.len());
        for (name, spec) in &self.features {
            let tensor = match spec {
                FeatureSpec::FixedLen { dtype, shape, default } => Tensor::Dense(fixed_len(
                    &table,
                    self.slot(name),
                    name,
                    *dtype,
                    shape,
                    default.as_ref(),
                    names,
                    batched,
                    wording,
                    place.as_deref_mut().filter(|_| places(spec)),
                )?),
                FeatureSpec::FixedLenSequence { dtype, shape, default, .. } => {
                    let (rows, column) = table.read_rows(self.slot(name), name, *dtype, names, TypeMessage::Fixed)?;
                    Tensor::Dense(pad_sequences(rows, column, shape, default.as_ref(), name, *dtype, names, batched)?)
                }
                FeatureSpec::VarLen { dtype } => {
                    let (rows, column) = table.read_rows(self.slot(name), name, *dtype, names, TypeMessage::List)?;
                    Tensor::Sparse(var_len(&rows, column, batched))
                }
                FeatureSpec::Sparse { index_keys, value_key, dtype, size, already_sorted } => {
                    let (rows, values) =
                        table.read_rows(self.slot(value_key), value_key, *dtype, names, TypeMessage::List)?;
                    let mut indices = Vec::with_capacity(index_keys.len());
                    for key in index_keys {
                        let (index_rows, Column::Int64(index)) =
                            table.read_rows(self.slot(key), key, DType::Int64, names, TypeMessage::List)?
                        else {
                            unreachable!("int64 column")
                        };
                        indices.push((index_rows, index));
                    }
                    Tensor::Sparse(sparse_feature(name, &rows, values, &indices, size, *already_sorted, batched)?)
                }
                FeatureSpec::Ragged { dtype, value_key, partitions, row_splits_dtype, validate } => {
                    let (rows, values) =
                        table.read_rows(self.slot(value_key), value_key, *dtype, names, TypeMessage::List)?;
                    let mut ragged = RaggedBuilder::new(values, &rows);
                    for partition in partitions.iter().rev() {
                        let key_rows = match partition {
                            Partition::UniformRowLength(_) => None,
                            Partition::RowSplits(k)
                            | Partition::RowLengths(k)
                            | Partition::RowStarts(k)
                            | Partition::RowLimits(k)
                            | Partition::ValueRowIds(k) => {
                                let (rows, Column::Int64(values)) =
                                    table.read_rows(self.slot(k), k, DType::Int64, names, TypeMessage::List)?
                                else {
                                    unreachable!("int64 column")
                                };
                                Some((rows, values))
                            }
                        };
                        ragged.partition(partition, key_rows, *validate).map_err(|err| DecodeError {
                            message: format!("feature {name}: {}", err.message),
                            ..err
                        })?;
                    }
                    ragged.finish(*row_splits_dtype, batched)
                }
            };
            out.push((name.clone(), tensor));
        }
        Ok(out)
    }

    fn slot(&self, key: &str) -> usize {
        self.slot_of[key.as_bytes()]
    }

    /// For every record, the `Feature` message of every slot (`None`: absent).
    ///
    /// Examples written by one program list their features in the same order, so the
    /// key seen at each position of the previous record predicts this one's: a byte
    /// comparison instead of a hash lookup per feature.
    fn locate<'r>(&self, records: &'r [Bytes], wording: Wording) -> Result<Vec<Option<&'r [u8]>>, DecodeError> {
        let width = self.keys.len();
        let mut slots = vec![None; records.len() * width];
        let mut predicted: Vec<(&'r [u8], Option<usize>)> = Vec::new();
        for (index, record) in records.iter().enumerate() {
            let row = &mut slots[index * width..(index + 1) * width];
            let mut position = 0;
            let located = wire::for_each_submessage(record, 1, |features| {
                wire::for_each_entry(features, |key, feature| {
                    let slot = match predicted.get(position) {
                        Some(&(seen, slot)) if same_bytes(seen, key) => slot,
                        _ => {
                            let slot = self.slot_of.get(key).copied();
                            if position < predicted.len() {
                                predicted[position] = (key, slot);
                            } else {
                                predicted.push((key, slot));
                            }
                            slot
                        }
                    };
                    if let Some(slot) = slot {
                        row[slot] = Some(feature);
                    }
                    position += 1;
                })
            });
            if located.is_err() {
                return Err(unparsable(wording.input_name(), index, record));
            }
        }
        Ok(slots)
    }
}

/// Whether [`ExampleParser::parse_placed`] writes a feature's rows at their places: a
/// numeric `FixedLen` feature's.
pub fn places(spec: &FeatureSpec) -> bool {
    matches!(spec, FeatureSpec::FixedLen { dtype: DType::Int64 | DType::Float32, .. })
}

/// Slice equality without a `memcmp` call: feature keys are short.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}
