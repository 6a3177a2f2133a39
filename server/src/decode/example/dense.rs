//! Dense outputs: `FixedLenFeature` (`[B] + shape`, defaults for missing features; its
//! numeric rows written at their places when a `Placement` asks) and
//! `FixedLenSequenceFeature` (`[B, steps] + shape`, padded).

use super::column::{Column, kind_of};
use super::features::DefaultValue;
use super::messages::{Names, TypeMessage, Wording, shape_string, values_word};
use super::slots::SlotTable;
use crate::decode::{DType, DecodeError, Dense, Placement, Values};

#[allow(clippy::too_many_arguments)]
pub(super) fn fixed_len(
    table: &SlotTable<'_>,
    slot: usize,
    key: &str,
    dtype: DType,
    shape: &[usize],
    default: Option<&DefaultValue>,
    names: Names<'_>,
    batched: bool,
    wording: Wording,
    mut place: Option<&mut Placement<'_>>,
) -> Result<Dense, DecodeError> {
    let elements: usize = shape.iter().product();
    // Placed, the rows go to the placement's buffer of the feature (the scalars read
    // first straight there, the others through `column`).
    let mut placed =
        place.as_mut().map(|place| place.buffers.take(key, place.total * elements * dtype.size().unwrap_or(0)));
    // Placed scalars reach the column only from the first record not in the usual shape.
    let capacity = if placed.is_some() && elements == 1 { 0 } else { elements * table.records.len() };
    let mut column = Column::with_capacity(dtype, capacity);
    let first_other = match (&mut placed, &place) {
        (Some(out), Some(place)) if elements == 1 => table.place_scalars(slot, &mut column, place.rows, out),
        _ if elements == 1 => table.read_scalars(slot, &mut column),
        _ => 0,
    };
    let mut scratch = Vec::new();
    for index in first_other..table.records.len() {
        match table.read(index, slot, key, &mut column, names, TypeMessage::Fixed, &mut scratch)? {
            Some(count) if count == elements => {}
            Some(count) => {
                let what = format!(
                    "Number of {} values != expected.  Values size: {count} but output shape: {}",
                    values_word(column.kind()),
                    shape_string(shape)
                );
                return Err(names.key_error(index, key, what));
            }
            None => match default {
                Some(default) => column.extend_default(default),
                None if wording == Wording::SequenceContext && !batched => {
                    return Err(DecodeError::new(format!(
                        "Inconsistent max number of elements for feature {key}: expected {elements}, but found 0"
                    )));
                }
                None => {
                    let prefix = if batched || names.names.is_some() {
                        format!("Name: {}, ", names.name(index))
                    } else {
                        String::new()
                    };
                    return Err(DecodeError::new(format!(
                        "{prefix}Feature: {key} (data type: {}) is required but could not be found.",
                        kind_of(dtype).dtype_name()
                    )));
                }
            },
        }
    }
    if let (Some(mut out), Some(place)) = (placed, place) {
        column.place_rows(&place.rows[first_other..], elements, &mut out);
        place.buffers.put(key, out);
        let mut out_shape = vec![place.total];
        out_shape.extend_from_slice(shape);
        return Ok(Dense { dtype, shape: out_shape, values: Values::Bytes(bytes::Bytes::new()) });
    }
    let mut out_shape = if batched { vec![table.records.len()] } else { Vec::new() };
    out_shape.extend_from_slice(shape);
    Ok(column.into_dense(out_shape))
}

/// Dense `[B, max_rows] + shape` (or `[rows] + shape`) from per-record value runs,
/// padded with the default (or zeros).
#[allow(clippy::too_many_arguments)]
pub(super) fn pad_sequences(
    rows: Vec<usize>,
    column: Column,
    shape: &[usize],
    default: Option<&DefaultValue>,
    key: &str,
    dtype: DType,
    names: Names<'_>,
    batched: bool,
) -> Result<Dense, DecodeError> {
    let stride: usize = shape.iter().product();
    let records = rows.len() - 1;
    let mut max_steps = 0;
    for (index, run) in rows.windows(2).enumerate() {
        let count = run[1] - run[0];
        if stride == 0 || count % stride != 0 {
            let mut dims = vec!["?".to_owned()];
            dims.extend(shape.iter().map(ToString::to_string));
            let what = format!(
                "Number of {} values is not a multiple of stride length. Saw {count} values but output shape is: [{}]",
                values_word(kind_of(dtype)),
                dims.join(",")
            );
            return Err(names.key_error(index, key, what));
        }
        max_steps = max_steps.max(count / stride);
    }
    let width = max_steps * stride;
    if !batched {
        let mut out_shape = vec![max_steps];
        out_shape.extend_from_slice(shape);
        return Ok(column.into_dense(out_shape));
    }
    let mut padded = Column::new(dtype);
    for run in rows.windows(2) {
        padded.extend_from_range(&column, run[0]..run[1]);
        let missing = width - (run[1] - run[0]);
        match default {
            Some(default) => padded.extend_padding(default, missing),
            None => padded.extend_zeros(missing),
        }
    }
    let mut out_shape = vec![records, max_steps];
    out_shape.extend_from_slice(shape);
    Ok(padded.into_dense(out_shape))
}
