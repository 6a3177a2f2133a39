//! A set's placed features: the numeric rows every component's decoder wrote at their
//! places in the set's buffers (`crate::decode::Placement`; `mix_decode.rs` takes them),
//! and each batch's rows of them ([`placed_rows`]), slices sharing their bytes.

use crate::decode::{Dense, Values};
use crate::error::{Result, ServeError};

/// A set's features that every group wrote at their rows of the set: per feature of the
/// layout, the set's rows of it (`None`: gathered batch by batch).
pub(super) type PlacedSet = Vec<Option<Dense>>;

/// Rows `rows` of a set's merged feature (`mix_decode.rs`'s `merge_placed`), sharing its bytes.
pub(super) fn placed_rows(dense: &Dense, rows: &std::ops::Range<usize>) -> Result<Dense> {
    let per_row = dense.shape.iter().skip(1).product::<usize>() * dense.dtype.size().unwrap_or(0);
    let range = rows.start * per_row..rows.end * per_row;
    let values = match &dense.values {
        Values::Bytes(bytes) if range.end <= bytes.len() => bytes.slice(range),
        _ => return Err(ServeError::Internal("a batch's rows are not in its set's placed feature".into())),
    };
    let mut shape = vec![rows.len()];
    shape.extend_from_slice(dense.shape.get(1..).unwrap_or_default());
    Ok(Dense { dtype: dense.dtype, shape, values: Values::Bytes(values) })
}

/// A batch's rows of its set's placed features.
pub(super) struct PlacedRows<'a> {
    pub(super) set: &'a PlacedSet,
    pub(super) rows: std::ops::Range<usize>,
}

impl PlacedRows<'_> {
    pub(super) fn feature(&self, j: usize) -> Option<&Dense> {
        self.set.get(j).and_then(Option::as_ref)
    }
}
