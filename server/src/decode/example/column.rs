//! `Column`: the values of one feature across a batch, in the list's own type (int64,
//! float or bytes slices of the records), before they become a tensor.

use bytes::Bytes;

use super::features::DefaultValue;
use super::wire::Kind;
use crate::decode::{DType, Dense, put_le};

/// Values read from one feature, in the list's own type.
#[derive(Debug)]
pub(super) enum Column {
    Int64(Vec<i64>),
    Float(Vec<f32>),
    Bytes(Vec<Bytes>),
}

impl Column {
    pub(super) fn new(dtype: DType) -> Self {
        Self::with_capacity(dtype, 0)
    }

    pub(super) fn with_capacity(dtype: DType, capacity: usize) -> Self {
        match dtype {
            DType::Int64 => Column::Int64(Vec::with_capacity(capacity)),
            DType::Float32 => Column::Float(Vec::with_capacity(capacity)),
            _ => Column::Bytes(Vec::with_capacity(capacity)),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Column::Int64(v) => v.len(),
            Column::Float(v) => v.len(),
            Column::Bytes(v) => v.len(),
        }
    }

    pub(super) fn kind(&self) -> Kind {
        match self {
            Column::Int64(_) => Kind::Int64,
            Column::Float(_) => Kind::Float,
            Column::Bytes(_) => Kind::Bytes,
        }
    }

    /// Appends a FixedLen feature's default: its values, as many as the shape's elements
    /// (checked by `check_default`).
    pub(super) fn extend_default(&mut self, value: &DefaultValue) {
        match (self, value) {
            (Column::Int64(out), DefaultValue::Int64(v)) => out.extend_from_slice(v),
            (Column::Float(out), DefaultValue::Float(v)) => out.extend_from_slice(v),
            (Column::Bytes(out), DefaultValue::Bytes(v)) => out.extend_from_slice(v),
            _ => unreachable!("default dtype checked in ExampleParser::new"),
        }
    }

    /// Appends `count` copies of a padding value (a default of one value, checked by
    /// `check_default`).
    pub(super) fn extend_padding(&mut self, value: &DefaultValue, count: usize) {
        fn fill<T: Clone + Default>(out: &mut Vec<T>, value: &[T], count: usize) {
            out.extend(std::iter::repeat_n(value.first().cloned().unwrap_or_default(), count));
        }
        match (self, value) {
            (Column::Int64(out), DefaultValue::Int64(v)) => fill(out, v, count),
            (Column::Float(out), DefaultValue::Float(v)) => fill(out, v, count),
            (Column::Bytes(out), DefaultValue::Bytes(v)) => fill(out, v, count),
            _ => unreachable!("default dtype checked in ExampleParser::new"),
        }
    }

    /// Appends `count` zeros (or empty strings).
    pub(super) fn extend_zeros(&mut self, count: usize) {
        match self {
            Column::Int64(out) => out.resize(out.len() + count, 0),
            Column::Float(out) => out.resize(out.len() + count, 0.0),
            Column::Bytes(out) => out.resize(out.len() + count, Bytes::new()),
        }
    }

    /// Copies values `range` of `from` (same type) to the end.
    pub(super) fn extend_from_range(&mut self, from: &Column, range: std::ops::Range<usize>) {
        match (self, from) {
            (Column::Int64(out), Column::Int64(v)) => out.extend_from_slice(&v[range]),
            (Column::Float(out), Column::Float(v)) => out.extend_from_slice(&v[range]),
            (Column::Bytes(out), Column::Bytes(v)) => out.extend_from_slice(&v[range]),
            _ => unreachable!("same dtype"),
        }
    }

    /// Writes the values, `per_row` a row, as rows `rows` of `out` (little-endian
    /// numbers; a row past `out` panics). Strings are not placed: nothing is written.
    pub(super) fn place_rows(&self, rows: &[usize], per_row: usize, out: &mut [u8]) {
        fn place<T: Copy, const N: usize>(
            values: &[T],
            rows: &[usize],
            per_row: usize,
            out: &mut [u8],
            to_le: impl Fn(T) -> [u8; N],
        ) {
            if per_row == 0 {
                return;
            }
            for (row_values, &row) in values.chunks_exact(per_row).zip(rows) {
                for (k, &value) in row_values.iter().enumerate() {
                    put_le(out, row * per_row + k, to_le(value));
                }
            }
        }
        match self {
            Column::Int64(v) => place(v, rows, per_row, out, i64::to_le_bytes),
            Column::Float(v) => place(v, rows, per_row, out, f32::to_le_bytes),
            Column::Bytes(_) => {}
        }
    }

    pub(super) fn into_dense(self, shape: Vec<usize>) -> Dense {
        match self {
            Column::Int64(v) => Dense::int64(shape, &v),
            Column::Float(v) => Dense::float32(shape, &v),
            Column::Bytes(v) => Dense::strings(shape, v),
        }
    }
}

pub(super) fn kind_of(dtype: DType) -> Kind {
    match dtype {
        DType::Int64 => Kind::Int64,
        DType::Float32 => Kind::Float,
        _ => Kind::Bytes,
    }
}
