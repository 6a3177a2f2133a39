//! Arrow record batches laid out as records: the encoder of the row layout
//! (`crate::decode::columnar::layout`, where it is defined). No I/O.
//!
//! A columnar source (`crate::source::columnar`) reads Arrow record batches and gives
//! one record per row, so that every stage after it (shuffle buffer, interleave,
//! batching, replicas) handles columnar rows as it handles framed records. A batch's
//! rows are encoded into one buffer and each record is a slice of it: the variable part
//! row by row, then each fixed-width column copied into its slot of every row with a
//! constant stride.

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, ArrowPrimitiveType};
use arrow_schema::DataType;

use arrow_buffer::NullBuffer;

use crate::decode::columnar::ColumnType;
use crate::decode::columnar::layout::RowLayout;

/// A value the layout cannot carry, in column `column` at row `row` of the batch.
#[derive(Debug, PartialEq, Eq)]
pub struct EncodeError {
    pub column: String,
    pub row: usize,
    pub message: String,
}

/// The `rows` rows of `arrays` (a batch's columns, in the order of `columns`, which says
/// how the decoder types them) in the layout: one buffer, and where each row ends in it.
pub fn encode_batch(
    arrays: &[ArrayRef],
    rows: usize,
    columns: &[(String, ColumnType)],
) -> Result<(Vec<u8>, Vec<usize>), EncodeError> {
    let layout = RowLayout::of(columns.iter().map(|(_, ty)| ty));
    let readers: Vec<ColumnReader<'_>> =
        arrays.iter().zip(columns).map(|(array, (_, ty))| ColumnReader::new(array.as_ref(), ty)).collect();
    let mut out = Vec::with_capacity(estimated_bytes(arrays, rows, layout.fixed_bytes));
    let mut ends = Vec::with_capacity(rows);
    // The variable part row by row, after room for the fixed part (zeros: nulls).
    for row in 0..rows {
        out.resize(out.len() + layout.fixed_bytes, 0);
        for &column in &layout.variable {
            let reader = &readers[column];
            if !reader.is_valid(row) {
                out.push(0);
                continue;
            }
            out.push(1);
            let error = |message: String| EncodeError { column: columns[column].0.clone(), row, message };
            reader.write(row, &mut out).map_err(error)?;
        }
        ends.push(out.len());
    }
    // The fixed part column by column.
    for slot in &layout.fixed {
        let reader = &readers[slot.column];
        let starts = std::iter::once(0).chain(ends.iter().copied()).map(|start| start + slot.offset);
        match &reader.values {
            Values::Fixed { bytes, width } => match width {
                1 => scatter::<1>(reader, bytes, starts, &mut out),
                2 => scatter::<2>(reader, bytes, starts, &mut out),
                4 => scatter::<4>(reader, bytes, starts, &mut out),
                8 => scatter::<8>(reader, bytes, starts, &mut out),
                other => unreachable!("no fixed-width dtype of {other} bytes"),
            },
            _ => {
                let mut value = Vec::with_capacity(1 + slot.width);
                for (row, at) in starts.take(rows).enumerate() {
                    if reader.is_valid(row) {
                        value.clear();
                        value.push(1);
                        let error =
                            |message: String| EncodeError { column: columns[slot.column].0.clone(), row, message };
                        reader.write(row, &mut value).map_err(error)?;
                        out[at..at + value.len()].copy_from_slice(&value);
                    }
                }
            }
        }
    }
    Ok((out, ends))
}

/// Copies each valid row's `N`-byte value of `values` (and its present byte) to `starts`.
fn scatter<const N: usize>(
    reader: &ColumnReader<'_>,
    values: &[u8],
    starts: impl Iterator<Item = usize>,
    out: &mut [u8],
) {
    let (values, _) = values.as_chunks::<N>();
    for ((row, value), at) in values.iter().enumerate().zip(starts) {
        if reader.is_valid(row) {
            out[at] = 1;
            out[at + 1..at + 1 + N].copy_from_slice(value);
        }
    }
}

/// The bytes the batch's arrays hold: a first guess at its rows' size.
fn estimated_bytes(arrays: &[ArrayRef], rows: usize, fixed_bytes: usize) -> usize {
    let held: usize = arrays.iter().map(|array| array.get_buffer_memory_size()).sum();
    held.min(64 << 20) + rows * (arrays.len() + fixed_bytes)
}

/// One column of a batch, typed once, read row by row.
struct ColumnReader<'a> {
    /// Which rows are null (a dictionary's: its keys' and its values').
    nulls: Option<NullBuffer>,
    values: Values<'a>,
}

enum Values<'a> {
    /// Numbers of `width` bytes each, little-endian.
    Fixed {
        bytes: &'a [u8],
        width: usize,
    },
    Bool(&'a arrow_array::BooleanArray),
    Bytes(&'a dyn Array),
    /// Row `i`'s items are `child` items `offsets[i]..offsets[i + 1]`.
    List {
        offsets: Vec<usize>,
        child: Box<ColumnReader<'a>>,
    },
    /// Row `i` is `values` row `keys[i]`.
    Dictionary {
        keys: Vec<usize>,
        values: Box<ColumnReader<'a>>,
    },
    /// A type `ColumnType::of_arrow` refuses (never reached for a resolved column).
    Unsupported(DataType),
}

/// The little-endian bytes of a primitive array's values, and their width.
fn fixed<'a, T: ArrowPrimitiveType>(array: &'a dyn Array) -> Values<'a> {
    let values = array.as_primitive::<T>().values();
    Values::Fixed { bytes: values.inner().as_slice(), width: std::mem::size_of::<T::Native>() }
}

impl<'a> ColumnReader<'a> {
    fn new(array: &'a dyn Array, ty: &ColumnType) -> Self {
        let values = match array.data_type() {
            DataType::Int8 => fixed::<Int8Type>(array),
            DataType::Int16 => fixed::<Int16Type>(array),
            DataType::Int32 => fixed::<Int32Type>(array),
            DataType::Int64 => fixed::<Int64Type>(array),
            DataType::UInt8 => fixed::<UInt8Type>(array),
            DataType::UInt16 => fixed::<UInt16Type>(array),
            DataType::Float16 => fixed::<Float16Type>(array),
            DataType::Float32 => fixed::<Float32Type>(array),
            DataType::Float64 => fixed::<Float64Type>(array),
            DataType::Boolean => Values::Bool(array.as_boolean()),
            data_type if holds_bytes(data_type) => Values::Bytes(array),
            DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => {
                let item = match ty {
                    ColumnType::List { item, .. } => item.as_ref(),
                    _ => ty,
                };
                let (offsets, child) = list_parts(array);
                Values::List { offsets, child: Box::new(ColumnReader::new(child, item)) }
            }
            DataType::Dictionary(..) => {
                let dictionary = array.as_any_dictionary();
                // A dictionary without entries (every row null) has no key to normalize.
                let keys =
                    if dictionary.values().is_empty() { vec![0; array.len()] } else { dictionary.normalized_keys() };
                Values::Dictionary { keys, values: Box::new(ColumnReader::new(dictionary.values().as_ref(), ty)) }
            }
            other => Values::Unsupported(other.clone()),
        };
        Self { nulls: array.logical_nulls(), values }
    }

    fn is_valid(&self, row: usize) -> bool {
        self.nulls.as_ref().is_none_or(|nulls| nulls.is_valid(row))
    }

    /// Writes row `row`'s value (known to be valid) after its null byte.
    fn write(&self, row: usize, out: &mut Vec<u8>) -> Result<(), String> {
        match &self.values {
            Values::Fixed { bytes, width } => out.extend_from_slice(&bytes[row * width..(row + 1) * width]),
            Values::Bool(array) => out.push(array.value(row) as u8),
            Values::Bytes(array) => {
                let value = byte_value(*array, row);
                let len = u32::try_from(value.len()).map_err(|_| "a value of 4 GiB or more".to_owned())?;
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(value);
            }
            Values::List { offsets, child } => {
                let (start, end) = (offsets[row], offsets[row + 1]);
                let count = u32::try_from(end - start).map_err(|_| "a list of 2^32 items or more".to_owned())?;
                out.extend_from_slice(&count.to_le_bytes());
                for item in start..end {
                    if !child.is_valid(item) {
                        return Err(format!(
                            "item {} of its list is null; lists of nullable items are not read",
                            item - start
                        ));
                    }
                    child.write(item, out)?;
                }
            }
            Values::Dictionary { keys, values } => {
                let key = keys[row];
                if !values.is_valid(key) {
                    // A valid key naming a null entry of the dictionary: a null all the same.
                    return Err("a dictionary entry that is null".to_owned());
                }
                values.write(key, out)?;
            }
            Values::Unsupported(data_type) => return Err(format!("Arrow type {data_type} is not read")),
        }
        Ok(())
    }
}

/// A list array's offsets (one per row, and the end) and its items.
fn list_parts(array: &dyn Array) -> (Vec<usize>, &dyn Array) {
    match array.data_type() {
        DataType::List(_) => {
            let list = array.as_list::<i32>();
            (list.value_offsets().iter().map(|&offset| offset as usize).collect(), list.values().as_ref())
        }
        DataType::LargeList(_) => {
            let list = array.as_list::<i64>();
            (list.value_offsets().iter().map(|&offset| offset as usize).collect(), list.values().as_ref())
        }
        DataType::FixedSizeList(_, size) => {
            let list = array.as_fixed_size_list();
            let size = *size as usize;
            let start = list.offset();
            ((0..=list.len()).map(|row| (start + row) * size).collect(), list.values().as_ref())
        }
        other => unreachable!("list_parts of {other}"),
    }
}

/// Row `row` of a string or binary array, as bytes.
fn byte_value(array: &dyn Array, row: usize) -> &[u8] {
    match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().value(row).as_bytes(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row).as_bytes(),
        DataType::Utf8View => array.as_string_view().value(row).as_bytes(),
        DataType::Binary => array.as_binary::<i32>().value(row),
        DataType::LargeBinary => array.as_binary::<i64>().value(row),
        DataType::BinaryView => array.as_binary_view().value(row),
        DataType::FixedSizeBinary(_) => array.as_fixed_size_binary().value(row),
        other => unreachable!("byte_value of {other}"),
    }
}

/// The bytes of row `row` of a string or binary column, for a source whose records are
/// one column's values (`source.column`); `None` for another type.
pub fn bytes_of(array: &ArrayRef, row: usize) -> Option<&[u8]> {
    holds_bytes(array.data_type()).then(|| byte_value(array.as_ref(), row))
}

/// String and binary types, whose values are read as bytes.
fn holds_bytes(data_type: &DataType) -> bool {
    use DataType::*;
    matches!(data_type, Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView | FixedSizeBinary(_))
}
