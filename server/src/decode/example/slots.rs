//! `SlotTable`: the `Feature` messages located in each record of a batch, and reading a
//! feature's values out of them in place (bytes values are slices of the records).

use bytes::Bytes;

use super::column::Column;
use super::messages::{Names, TypeMessage, type_mismatch, unparsable};
use super::wire::{self, Kind};
use crate::decode::{DType, DecodeError, put_le};

/// The located feature messages of a batch: `slots[record * width + slot]`.
pub(super) struct SlotTable<'r> {
    pub(super) records: &'r [Bytes],
    pub(super) slots: &'r [Option<&'r [u8]>],
    pub(super) width: usize,
}

impl<'r> SlotTable<'r> {
    pub(super) fn feature(&self, record: usize, slot: usize) -> Option<&'r [u8]> {
        self.slots[record * self.width + slot]
    }

    /// The common case of a scalar feature, taken first into the empty `column`: one value
    /// per record while records hold the feature in its usual shape (`wire::scalar_int64`,
    /// `wire::scalar_float`), and returns the first record that does not; [`Self::read`]
    /// goes on from there, with its checks and messages.
    pub(super) fn read_scalars(&self, slot: usize, column: &mut Column) -> usize {
        let records = self.records.len();
        let features = (0..records).map(|index| self.feature(index, slot));
        match column {
            Column::Int64(out) => features.map_while(|f| f.and_then(wire::scalar_int64)).for_each(|v| out.push(v)),
            Column::Float(out) => features.map_while(|f| f.and_then(wire::scalar_float)).for_each(|v| out.push(v)),
            Column::Bytes(_) => {}
        }
        column.len()
    }

    /// [`Self::read_scalars`] for a placed feature: record `i`'s value written as row
    /// `rows[i]` of `out` (little-endian) while records hold it in its usual shape;
    /// returns the first record that does not. `column` (empty, of the feature's dtype)
    /// says which; its values stay for the records after.
    pub(super) fn place_scalars(&self, slot: usize, column: &mut Column, rows: &[usize], out: &mut [u8]) -> usize {
        let features = (0..self.records.len()).map(|index| self.feature(index, slot));
        match column {
            Column::Int64(_) => {
                let values = features.map_while(|f| f.and_then(wire::scalar_int64));
                values.zip(rows).map(|(value, &row)| put_le(out, row, value.to_le_bytes())).count()
            }
            Column::Float(_) => {
                let values = features.map_while(|f| f.and_then(wire::scalar_float));
                values.zip(rows).map(|(value, &row)| put_le(out, row, value.to_le_bytes())).count()
            }
            Column::Bytes(_) => 0,
        }
    }

    /// Appends record `index`'s values of a feature to `column`; `Ok(None)` when the
    /// feature is absent or holds no list.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn read(
        &self,
        index: usize,
        slot: usize,
        key: &str,
        column: &mut Column,
        names: Names<'_>,
        style: TypeMessage,
        scratch: &mut Vec<&'r [u8]>,
    ) -> Result<Option<usize>, DecodeError> {
        let Some(feature) = self.feature(index, slot) else { return Ok(None) };
        let record = &self.records[index];
        let malformed = |_| unparsable("example", index, record);
        let before = column.len();
        if let Some((kind, list)) = wire::single_list(feature) {
            self.check_kind(kind, column, index, key, names, style)?;
            match column {
                Column::Int64(out) => wire::int64_list(list, out).map_err(malformed)?,
                Column::Float(out) => wire::float_list(list, out).map_err(malformed)?,
                Column::Bytes(out) => {
                    scratch.clear();
                    wire::bytes_list(list, scratch).map_err(malformed)?;
                    out.extend(scratch.iter().map(|value| record.slice_ref(value)));
                }
            }
            return Ok(Some(column.len() - before));
        }
        let Some((kind, from)) = wire::feature_kind(feature).map_err(malformed)? else { return Ok(None) };
        self.check_kind(kind, column, index, key, names, style)?;
        match column {
            Column::Int64(out) => wire::int64_values(feature, from, out).map_err(malformed)?,
            Column::Float(out) => wire::float_values(feature, from, out).map_err(malformed)?,
            Column::Bytes(out) => {
                scratch.clear();
                wire::bytes_values(feature, from, scratch).map_err(malformed)?;
                out.extend(scratch.iter().map(|value| record.slice_ref(value)));
            }
        }
        Ok(Some(column.len() - before))
    }

    #[inline]
    pub(super) fn check_kind(
        &self,
        kind: Kind,
        column: &Column,
        index: usize,
        key: &str,
        names: Names<'_>,
        style: TypeMessage,
    ) -> Result<(), DecodeError> {
        if kind == column.kind() {
            return Ok(());
        }
        let expected = match column {
            Column::Int64(_) => DType::Int64,
            Column::Float(_) => DType::Float32,
            Column::Bytes(_) => DType::String,
        };
        Err(names.key_error(index, key, type_mismatch(style, kind, expected)))
    }

    /// Every record's values of a feature, and where each record's values start
    /// (`rows[i]..rows[i+1]`; absent features give empty rows).
    pub(super) fn read_rows(
        &self,
        slot: usize,
        key: &str,
        dtype: DType,
        names: Names<'_>,
        style: TypeMessage,
    ) -> Result<(Vec<usize>, Column), DecodeError> {
        let mut column = Column::new(dtype);
        let mut rows = Vec::with_capacity(self.records.len() + 1);
        rows.push(0);
        let mut scratch = Vec::new();
        for index in 0..self.records.len() {
            self.read(index, slot, key, &mut column, names, style, &mut scratch)?;
            rows.push(column.len());
        }
        Ok((rows, column))
    }
}
