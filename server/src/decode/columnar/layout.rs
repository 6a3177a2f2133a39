//! The row layout columnar records travel in, defined once for the encoder
//! (`crate::source::columnar::rows`) and the decoder ([`super::ColumnarDecoder`]).
//!
//! A row has a fixed part, then a variable part. Little-endian throughout.
//!
//! - **Fixed part**, the same size in every row: each fixed-width scalar column (numbers,
//!   bools), in column order, as one byte (`0` null, `1` present) then its value's bytes
//!   (zeros when null; a bool is one byte, 0 or 1). Every row holds such a column at the
//!   same offset, so both sides copy it column by column with a constant stride.
//! - **Variable part**: every other column, in column order, as one byte (`0` null: nothing
//!   follows; `1` present) then its value: a string or binary value as `u32` length and
//!   bytes; a list as `u32` count and its items, each as a value without the null byte.

use super::ColumnType;

/// Where each column of a row is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowLayout {
    /// The fixed-width scalar columns.
    pub fixed: Vec<FixedSlot>,
    /// Bytes of the fixed part.
    pub fixed_bytes: usize,
    /// The other columns' indexes, in the order the variable part holds them.
    pub variable: Vec<usize>,
}

/// A fixed-width column's place: its null byte at `offset`, its `width` bytes after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedSlot {
    pub column: usize,
    pub offset: usize,
    pub width: usize,
}

impl RowLayout {
    /// The layout of rows of columns typed `types`, in that order.
    pub fn of<'a>(types: impl IntoIterator<Item = &'a ColumnType>) -> Self {
        let (mut fixed, mut variable, mut fixed_bytes) = (Vec::new(), Vec::new(), 0);
        for (column, ty) in types.into_iter().enumerate() {
            match ty {
                ColumnType::Scalar(dtype) if dtype.size().is_some() => {
                    let width = dtype.size().expect("checked");
                    fixed.push(FixedSlot { column, offset: fixed_bytes, width });
                    fixed_bytes += 1 + width;
                }
                _ => variable.push(column),
            }
        }
        Self { fixed, fixed_bytes, variable }
    }
}
