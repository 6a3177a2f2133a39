//! Rows of Arrow record batches, as records carry them from a columnar file
//! (`crate::source::columnar`) to the `columns` decoder: a record is its batch's columns,
//! shared, and its row's index ([`ArrowRow`]). Nothing is laid out in between: the
//! decoder copies a number once, from the Arrow array into the batch's tensor, a run of
//! consecutive rows of one column at a time. Each column is typed once per Arrow batch
//! ([`ArrowColumn`]), in the file's reading thread. No I/O.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, ArrowPrimitiveType, BooleanArray};
use arrow_buffer::{Buffer, NullBuffer};
use arrow_schema::DataType;

/// The columns of one Arrow batch, in the order the decoder reads them.
pub struct ArrowRows {
    columns: Vec<ArrowColumn>,
    /// The batch's arrays, as they came: what [`compact_sparse_batches`] copies rows of.
    arrays: Vec<ArrayRef>,
    len: usize,
    /// Whether copying rows of it frees its memory ([`copies_rows_only`]).
    compactable: bool,
    /// What the batch's buffers hold, a row (for memory accounting).
    bytes_per_row: usize,
}

/// Row `index` of an Arrow batch: a columnar file's record.
#[derive(Clone)]
pub struct ArrowRow {
    pub rows: Arc<ArrowRows>,
    pub index: usize,
}

impl std::fmt::Debug for ArrowRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "row {} of an Arrow batch", self.index)
    }
}

impl PartialEq for ArrowRow {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.rows, &other.rows) && self.index == other.index
    }
}

impl Eq for ArrowRow {}

impl ArrowRow {
    /// The bytes this row stands for: its share of its batch's buffers.
    pub fn bytes(&self) -> usize {
        self.rows.bytes_per_row
    }

    pub(super) fn column(&self, column: usize) -> &ArrowColumn {
        self.rows.column(column)
    }
}

impl ArrowRows {
    /// The `rows` rows of `arrays` (a batch's columns, in the decoder's order).
    pub fn new(arrays: &[ArrayRef], rows: usize) -> Arc<Self> {
        // The bytes of the arrays' slices: their buffers may be slices of one larger
        // allocation (an Arrow IPC message), which `get_buffer_memory_size` would count
        // once for each.
        let sliced = |array: &ArrayRef| array.to_data().get_slice_memory_size().unwrap_or(0);
        let held: usize = arrays.iter().map(sliced).sum();
        let columns = arrays.iter().map(|array| ArrowColumn::new(array.as_ref())).collect();
        let compactable = arrays.iter().all(|array| copies_rows_only(array.data_type()));
        Arc::new(Self {
            columns,
            arrays: arrays.to_vec(),
            len: rows,
            compactable,
            bytes_per_row: held / rows.max(1) + 1,
        })
    }

    /// The batch's arrays, as they came.
    pub fn arrays(&self) -> &[ArrayRef] {
        &self.arrays
    }

    /// Its rows.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes its buffers hold: what it keeps alive while any of its rows is held.
    pub fn held_bytes(&self) -> usize {
        self.bytes_per_row * self.len
    }

    /// Each of its rows.
    pub fn rows(self: &Arc<Self>, rows: usize) -> impl Iterator<Item = ArrowRow> + '_ {
        (0..rows).map(|index| ArrowRow { rows: self.clone(), index })
    }

    pub fn column_count(&self) -> usize {
        self.columns.len()
    }

    pub(super) fn column(&self, column: usize) -> &ArrowColumn {
        &self.columns[column]
    }
}

/// Copies the rows of batches that are mostly spent into batches of their own, so that a
/// few rows no longer keep a whole batch alive: a shuffle buffer holds rows of many
/// batches, and a random choice leaves a batch's last rows in it long after the others
/// left. A batch is compacted when `rows` hold every reference to it (nothing else reads
/// it: not its file's reader, not an element) and fewer than half of its rows, unless a
/// column's copy would keep its whole buffers ([`copies_rows_only`]). The
/// batches `rows` keep alive then hold at most twice the rows' own bytes. Each row copied
/// stands for at least one that left its batch before, so the copying costs at most one
/// row copy per row taken out of the buffer. Returns the rows copied.
pub fn compact_sparse_batches(rows: &mut [&mut ArrowRow]) -> usize {
    let mut by_batch: std::collections::HashMap<*const ArrowRows, Vec<usize>> = std::collections::HashMap::new();
    for (at, row) in rows.iter().enumerate() {
        by_batch.entry(Arc::as_ptr(&row.rows)).or_default().push(at);
    }
    let mut copied = 0;
    for held in by_batch.into_values() {
        let batch = rows[held[0]].rows.clone();
        // `batch` is one more reference.
        let only_these = Arc::strong_count(&batch) == held.len() + 1;
        if !batch.compactable || !only_these || held.len() * 2 >= batch.len {
            continue;
        }
        let indices = arrow_array::UInt32Array::from_iter_values(held.iter().map(|&at| rows[at].index as u32));
        let taken: Result<Vec<ArrayRef>, _> =
            batch.arrays.iter().map(|array| arrow_select::take::take(array.as_ref(), &indices, None)).collect();
        // A batch that cannot be copied (no such case is known) stays as it is.
        let Ok(taken) = taken else { continue };
        let compact = ArrowRows::new(&taken, held.len());
        for (index, &at) in held.iter().enumerate() {
            *rows[at] = ArrowRow { rows: compact.clone(), index };
        }
        copied += held.len();
    }
    copied
}

/// Whether Arrow's `take` of some rows of a column of this type copies just those rows:
/// not for a dictionary (its values are kept whole) nor a view (its data buffers are), at
/// any depth. A batch with such a column is not compacted: the copy would free nothing.
fn copies_rows_only(data_type: &DataType) -> bool {
    use DataType::*;
    match data_type {
        Dictionary(..) | Utf8View | BinaryView | ListView(_) | LargeListView(_) => false,
        List(item) | LargeList(item) | FixedSizeList(item, _) => copies_rows_only(item.data_type()),
        Struct(fields) => fields.iter().all(|field| copies_rows_only(field.data_type())),
        _ => true,
    }
}

/// One column of a batch, typed once.
pub(super) struct ArrowColumn {
    /// Which rows are null (a dictionary's: its keys' and its values').
    nulls: Option<NullBuffer>,
    pub(super) values: ArrowValues,
}

pub(super) enum ArrowValues {
    /// Numbers of `width` bytes each, little-endian, from the array's first row.
    Fixed {
        bytes: Buffer,
        width: usize,
    },
    Bool(BooleanArray),
    Bytes(ByteColumn),
    /// Row `i`'s items are `child` items `offsets[i]..offsets[i + 1]`.
    List {
        offsets: Vec<usize>,
        child: Box<ArrowColumn>,
    },
    /// Row `i` is `values` row `keys[i]`.
    Dictionary {
        keys: Vec<usize>,
        values: Box<ArrowColumn>,
    },
    /// A type `ColumnType::of_arrow` refuses (never reached for a resolved column).
    Unsupported(DataType),
}

/// The little-endian bytes of a primitive array's values, and their width.
fn fixed<T: ArrowPrimitiveType>(array: &dyn Array) -> ArrowValues {
    let values = array.as_primitive::<T>().values();
    ArrowValues::Fixed { bytes: values.inner().clone(), width: std::mem::size_of::<T::Native>() }
}

impl ArrowColumn {
    fn new(array: &dyn Array) -> Self {
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
            DataType::Boolean => ArrowValues::Bool(array.as_boolean().clone()),
            data_type if holds_bytes(data_type) => ArrowValues::Bytes(ByteColumn::new(array)),
            DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => {
                let (offsets, child) = list_parts(array);
                ArrowValues::List { offsets, child: Box::new(ArrowColumn::new(child)) }
            }
            DataType::Dictionary(..) => {
                let dictionary = array.as_any_dictionary();
                // A dictionary without entries (every row null) has no key to normalize.
                let keys =
                    if dictionary.values().is_empty() { vec![0; array.len()] } else { dictionary.normalized_keys() };
                ArrowValues::Dictionary { keys, values: Box::new(ArrowColumn::new(dictionary.values().as_ref())) }
            }
            other => ArrowValues::Unsupported(other.clone()),
        };
        Self { nulls: array.logical_nulls(), values }
    }

    pub(super) fn is_valid(&self, row: usize) -> bool {
        self.nulls.as_ref().is_none_or(|nulls| nulls.is_valid(row))
    }

    /// Whether no row is null.
    pub(super) fn has_no_nulls(&self) -> bool {
        self.nulls.as_ref().is_none_or(|nulls| nulls.null_count() == 0)
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

/// A string or binary column of a batch, whose values are handed out as slices of its
/// values buffer (shared, not copied) where the Arrow type keeps them in one buffer.
pub struct ByteColumn {
    array: ArrayRef,
    /// The values buffer, for `Utf8`, `Binary` and their large forms.
    values: Option<bytes::Bytes>,
}

impl ByteColumn {
    /// `array`, a string or binary array ([`holds_bytes`]).
    pub fn new(array: &dyn Array) -> Self {
        let values = match array.data_type() {
            DataType::Utf8 => Some(array.as_string::<i32>().values().clone()),
            DataType::LargeUtf8 => Some(array.as_string::<i64>().values().clone()),
            DataType::Binary => Some(array.as_binary::<i32>().values().clone()),
            DataType::LargeBinary => Some(array.as_binary::<i64>().values().clone()),
            _ => None,
        };
        Self { array: array.slice(0, array.len()), values: values.map(bytes::Bytes::from_owner) }
    }

    pub fn is_null(&self, row: usize) -> bool {
        self.array.is_null(row)
    }

    /// Row `row`'s bytes: a slice of the values buffer, or a copy for the other types.
    pub fn value(&self, row: usize) -> bytes::Bytes {
        let value = byte_value(self.array.as_ref(), row);
        match &self.values {
            // The same memory: a slice of it, no copy.
            Some(values) => values.slice_ref(value),
            None => bytes::Bytes::copy_from_slice(value),
        }
    }
}

/// Row `row` of a string or binary array, as bytes.
pub fn byte_value(array: &dyn Array, row: usize) -> &[u8] {
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

/// String and binary types, whose values are read as bytes.
pub fn holds_bytes(data_type: &DataType) -> bool {
    use DataType::*;
    matches!(data_type, Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView | FixedSizeBinary(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{DictionaryArray, Int64Array, types::Int32Type};

    /// Rows 1 and 7 of a 10-row batch of `array`, the batch's other rows gone: how many
    /// rows compaction copied, and their values after.
    fn compact_two_of_ten(array: ArrayRef) -> (usize, Vec<ArrayRef>) {
        let batch = ArrowRows::new(&[array], 10);
        let mut kept: Vec<ArrowRow> = batch.rows(10).filter(|row| row.index == 1 || row.index == 7).collect();
        drop(batch);
        let copied = compact_sparse_batches(&mut kept.iter_mut().collect::<Vec<_>>());
        (copied, kept.iter().map(|row| row.rows.arrays()[0].slice(row.index, 1)).collect())
    }

    #[test]
    fn a_mostly_spent_batch_is_copied_but_not_one_whose_copy_would_keep_its_buffers() {
        let numbers: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10));
        let (copied, values) = compact_two_of_ten(numbers.clone());
        assert_eq!(copied, 2);
        assert_eq!(values, [numbers.slice(1, 1), numbers.slice(7, 1)]);
        // A dictionary's `take` keeps every value: nothing to gain.
        let words: DictionaryArray<Int32Type> = (0..10).map(|i| ["a", "b", "c"][i % 3]).collect();
        let (copied, _) = compact_two_of_ten(Arc::new(words));
        assert_eq!(copied, 0);
    }
}
