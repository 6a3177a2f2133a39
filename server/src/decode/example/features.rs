//! The features to parse, as `tf.io.FixedLenFeature`, `FixedLenSequenceFeature`,
//! `VarLenFeature`, `SparseFeature` and `RaggedFeature`, and the checks a spec's
//! features pass before any record is parsed.

use bytes::Bytes;

use crate::decode::{DType, DecodeError};

/// A default value, flattened row-major. Equal defaults give the same bytes: floats are
/// compared bit by bit (-0.0 is not 0.0, a NaN is itself).
#[derive(Clone, Debug)]
pub enum DefaultValue {
    Int64(Vec<i64>),
    Float(Vec<f32>),
    Bytes(Vec<Bytes>),
}

impl PartialEq for DefaultValue {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (DefaultValue::Int64(a), DefaultValue::Int64(b)) => a == b,
            (DefaultValue::Float(a), DefaultValue::Float(b)) => {
                a.iter().map(|f| f.to_bits()).eq(b.iter().map(|f| f.to_bits()))
            }
            (DefaultValue::Bytes(a), DefaultValue::Bytes(b)) => a == b,
            _ => false,
        }
    }
}

impl DefaultValue {
    pub(super) fn len(&self) -> usize {
        match self {
            DefaultValue::Int64(v) => v.len(),
            DefaultValue::Float(v) => v.len(),
            DefaultValue::Bytes(v) => v.len(),
        }
    }
}

/// One way to partition a ragged feature's values (outermost first in a spec).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Partition {
    RowSplits(String),
    RowLengths(String),
    RowStarts(String),
    RowLimits(String),
    ValueRowIds(String),
    UniformRowLength(usize),
}

/// A feature to parse, as `tf.io.*Feature`. Keys name the Example's features.
#[derive(Clone, Debug, PartialEq)]
pub enum FeatureSpec {
    FixedLen { dtype: DType, shape: Vec<usize>, default: Option<DefaultValue> },
    FixedLenSequence { dtype: DType, shape: Vec<usize>, allow_missing: bool, default: Option<DefaultValue> },
    VarLen { dtype: DType },
    Sparse { index_keys: Vec<String>, value_key: String, dtype: DType, size: Vec<i64>, already_sorted: bool },
    Ragged { dtype: DType, value_key: String, partitions: Vec<Partition>, row_splits_dtype: DType, validate: bool },
}

pub(super) fn check_list_dtype(name: &str, dtype: DType) -> Result<(), DecodeError> {
    match dtype {
        DType::Int64 | DType::Float32 | DType::String => Ok(()),
        other => Err(DecodeError::new(format!(
            "feature {name}: dtype {} is not one of int64, float32, string",
            other.name()
        ))),
    }
}

/// Checks a default as TensorFlow's parsing takes it: of the feature's dtype, and reshaped
/// to the shape it fills (`elements` values: a FixedLen feature's shape, a padding
/// value's `[]`), so neither repeated nor cut.
pub(super) fn check_default(
    name: &str,
    dtype: DType,
    default: &DefaultValue,
    elements: usize,
) -> Result<(), DecodeError> {
    let kind_ok = matches!(
        (dtype, default),
        (DType::Int64, DefaultValue::Int64(_))
            | (DType::Float32, DefaultValue::Float(_))
            | (DType::String, DefaultValue::Bytes(_))
    );
    if !kind_ok {
        return Err(DecodeError::new(format!("feature {name}: the default value does not fit its dtype")));
    }
    if default.len() != elements {
        return Err(DecodeError::new(format!(
            "feature {name}: default: Input to reshape is a tensor with {} values, but the requested shape has {elements}",
            default.len()
        )));
    }
    Ok(())
}
