//! A large batch on the wire as several messages, by rows (`ReadRequest.max_message_bytes`).
//!
//! [`split_rows`] cuts a batched element into parts that share its seq, each holding
//! consecutive rows of every feature and the keys of those rows; every part but the last
//! has `more_rows`. Cutting moves the element's strings and keys and slices its numeric
//! buffers (no copy). [`RowJoiner`] puts the parts back together on the receiving side:
//! string rows are moved, numeric rows copied once into one buffer per feature.
//!
//! Only batches of dense tensors whose first dimension is the batch are split; any other
//! element (one record, sparse or ragged tensors) is sent whole.

use bytes::Bytes;

use crate::v1 as pb;

/// `element` as messages of about `max_bytes` of tensor payload each (at least one row
/// each); the element itself when it is smaller, not a batch of dense tensors, or
/// `max_bytes` is 0.
pub fn split_rows(element: pb::Element, max_bytes: usize) -> Vec<pb::Element> {
    let rows = crate::keys::count(&element);
    if max_bytes == 0 || rows < 2 {
        return vec![element];
    }
    let Some(row_bytes) = row_sizes(&element, rows) else {
        return vec![element];
    };
    if row_bytes.iter().sum::<usize>() <= max_bytes {
        return vec![element];
    }
    let mut cuts = Vec::new();
    let mut filled = 0;
    for (row, bytes) in row_bytes.iter().enumerate() {
        filled += bytes;
        if filled >= max_bytes && row + 1 < rows {
            cuts.push(row + 1);
            filled = 0;
        }
    }
    cuts.push(rows);
    let pb::Element { seq, keys, features, key_table, records, .. } = element;
    // The ledger's record ids travel whole, with the first part.
    let mut records = records;
    let mut keys = keys.into_iter();
    let mut columns: Vec<Column> = features.into_iter().map(|feature| Column::new(feature, rows)).collect();
    let mut parts = Vec::with_capacity(cuts.len());
    let mut start = 0;
    for &end in &cuts {
        let features = columns.iter_mut().map(|column| column.take_rows(end - start)).collect();
        let keys = keys.by_ref().take(end - start).collect();
        let key_table = key_table.as_ref().map(|table| crate::keys::table_rows(table, start..end));
        parts.push(pb::Element { seq, keys, features, more_rows: end < rows, key_table, records: records.take() });
        start = end;
    }
    parts
}

/// A dense feature being cut into parts: its rows are handed out from the front, moved
/// (strings) or sliced (numeric bytes), never copied.
struct Column {
    name: String,
    whole: pb::DenseTensor,
    strings: std::vec::IntoIter<Bytes>,
    /// Strings or bytes per row.
    per_row: usize,
}

impl Column {
    /// `feature`, a dense tensor of `rows` rows, `rows` > 0 (checked by `row_sizes`).
    fn new(feature: pb::Feature, rows: usize) -> Self {
        let Some(pb::tensor::Kind::Dense(mut whole)) = feature.tensor.and_then(|t| t.kind) else {
            unreachable!("split_rows checked every feature is dense")
        };
        let strings = std::mem::take(&mut whole.strings);
        let per_row = if whole.dtype() == pb::DataType::String { strings.len() } else { whole.data.len() } / rows;
        Self { name: feature.name, whole, strings: strings.into_iter(), per_row }
    }

    /// The next `rows` rows as a feature of their own.
    fn take_rows(&mut self, rows: usize) -> pb::Feature {
        let mut shape = self.whole.shape.clone();
        shape[0] = rows as i64;
        let (data, strings) = if self.whole.dtype() == pb::DataType::String {
            (Bytes::new(), self.strings.by_ref().take(rows * self.per_row).collect())
        } else {
            (self.whole.data.split_to(rows * self.per_row), Vec::new())
        };
        let dense = pb::DenseTensor { dtype: self.whole.dtype, shape, data, strings };
        pb::Feature { name: self.name.clone(), tensor: Some(pb::Tensor { kind: Some(pb::tensor::Kind::Dense(dense)) }) }
    }
}

/// Payload bytes of each row, when every feature is a dense tensor of `rows` rows (`rows`
/// > 0). A row may hold no value at all (a feature of shape `[B, 0]`).
fn row_sizes(element: &pb::Element, rows: usize) -> Option<Vec<usize>> {
    let mut sizes = vec![0usize; rows];
    for feature in &element.features {
        let dense = dense(feature)?;
        if dense.shape.first().copied() != i64::try_from(rows).ok() {
            return None;
        }
        if dense.dtype() == pb::DataType::String {
            if dense.strings.len() % rows != 0 {
                return None;
            }
            let per_row = dense.strings.len() / rows;
            for (row, size) in sizes.iter_mut().enumerate() {
                // A string costs its bytes and a few for its tag and length.
                let strings = &dense.strings[row * per_row..(row + 1) * per_row];
                *size += strings.iter().map(|s| s.len() + 4).sum::<usize>();
            }
        } else {
            if dense.data.len() % rows != 0 {
                return None;
            }
            sizes.iter_mut().for_each(|size| *size += dense.data.len() / rows);
        }
    }
    Some(sizes)
}

fn dense(feature: &pb::Feature) -> Option<&pb::DenseTensor> {
    match feature.tensor.as_ref()?.kind.as_ref()? {
        pb::tensor::Kind::Dense(dense) => Some(dense),
        _ => None,
    }
}

/// Parts that do not make one element: the stream broke the protocol.
#[derive(Debug, thiserror::Error)]
#[error("element {seq}: {reason}")]
pub struct RowsError {
    pub seq: i64,
    pub reason: String,
}

/// Collects the parts of one element and joins them when the last arrives.
#[derive(Debug, Default)]
pub struct RowJoiner {
    parts: Vec<pb::Element>,
}

impl RowJoiner {
    /// Takes the next element message of a stream: `Some(element)` once it is whole.
    pub fn push(&mut self, part: pb::Element) -> Result<Option<pb::Element>, RowsError> {
        if let Some(first) = self.parts.first()
            && first.seq != part.seq
        {
            let reason = format!("its rows stopped before the last part, at the start of element {}", part.seq);
            return Err(RowsError { seq: first.seq, reason });
        }
        let more = part.more_rows;
        self.parts.push(part);
        if more {
            return Ok(None);
        }
        let parts = std::mem::take(&mut self.parts);
        if parts.len() == 1 {
            return Ok(parts.into_iter().next());
        }
        join(parts).map(Some)
    }

    /// Whether a part came without the rest of its element.
    pub fn is_partial(&self) -> bool {
        !self.parts.is_empty()
    }
}

fn join(parts: Vec<pb::Element>) -> Result<pb::Element, RowsError> {
    let seq = parts[0].seq;
    let error = |reason: String| RowsError { seq, reason };
    let names: Vec<String> = parts[0].features.iter().map(|f| f.name.clone()).collect();
    let mut keys = Vec::with_capacity(parts.iter().map(|p| p.keys.len()).sum());
    // Every part of a table carries the element's files: the first part's are kept.
    let mut key_table =
        parts[0].key_table.as_ref().map(|table| pb::KeyTable { files: table.files.clone(), ..Default::default() });
    let mut columns: Vec<Vec<pb::DenseTensor>> = vec![Vec::with_capacity(parts.len()); names.len()];
    let records = parts[0].records.clone();
    for part in parts {
        if part.features.len() != names.len() {
            return Err(error(format!("a part has {} features, the first {}", part.features.len(), names.len())));
        }
        keys.extend(part.keys);
        match (&mut key_table, part.key_table) {
            (Some(table), Some(part)) if part.files == table.files => {
                table.file.extend(part.file);
                table.number.extend(part.number);
            }
            (None, None) => {}
            _ => return Err(error("the parts' key tables differ".into())),
        }
        for (column, (feature, name)) in columns.iter_mut().zip(part.features.into_iter().zip(&names)) {
            if feature.name != *name {
                return Err(error(format!("a part has feature {:?} where the first has {name:?}", feature.name)));
            }
            match feature.tensor.and_then(|t| t.kind) {
                Some(pb::tensor::Kind::Dense(dense)) => column.push(dense),
                _ => return Err(error(format!("feature {name:?}: a part is not a dense tensor"))),
            }
        }
    }
    let mut features = Vec::with_capacity(names.len());
    for (column, name) in columns.into_iter().zip(names) {
        let tensor = join_dense(column).map_err(|reason| error(format!("feature {name:?}: {reason}")))?;
        let tensor = pb::Tensor { kind: Some(pb::tensor::Kind::Dense(tensor)) };
        features.push(pb::Feature { name, tensor: Some(tensor) });
    }
    Ok(pb::Element { seq, keys, features, more_rows: false, key_table, records })
}

/// Stacks dense tensors of the same dtype and inner shape along their first dimension.
fn join_dense(parts: Vec<pb::DenseTensor>) -> Result<pb::DenseTensor, String> {
    let first = &parts[0];
    let (dtype, inner) = (first.dtype, first.shape.get(1..).unwrap_or_default().to_vec());
    let mut rows = 0i64;
    for part in &parts {
        if part.dtype != dtype || part.shape.get(1..).unwrap_or_default() != inner.as_slice() || part.shape.is_empty() {
            return Err(format!("parts of shapes {:?} and {:?} do not stack", first.shape, part.shape));
        }
        rows += part.shape[0];
    }
    let mut shape = vec![rows];
    shape.extend(inner);
    let strings = parts.iter().map(|p| p.strings.len()).sum();
    let data = if parts.iter().all(|p| p.data.is_empty()) {
        Bytes::new()
    } else {
        let mut data = Vec::with_capacity(parts.iter().map(|p| p.data.len()).sum());
        parts.iter().for_each(|p| data.extend_from_slice(&p.data));
        Bytes::from(data)
    };
    let mut joined = pb::DenseTensor { dtype, shape, data, strings: Vec::with_capacity(strings) };
    for part in parts {
        joined.strings.extend(part.strings);
    }
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense_feature(
        name: &str,
        dtype: pb::DataType,
        shape: Vec<i64>,
        data: Vec<u8>,
        strings: Vec<&str>,
    ) -> pb::Feature {
        let strings = strings.into_iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect();
        let dense = pb::DenseTensor { dtype: dtype as i32, shape, data: Bytes::from(data), strings };
        pb::Feature { name: name.into(), tensor: Some(pb::Tensor { kind: Some(pb::tensor::Kind::Dense(dense)) }) }
    }

    /// A batch of 5 rows: a [5, 2] int64 tensor and a [5] string tensor of growing strings.
    fn batch() -> pb::Element {
        let ints: Vec<u8> = (0..10i64).flat_map(i64::to_le_bytes).collect();
        let images = vec!["a", "bb", "cccccccccccccccccccc", "dddd", "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"];
        pb::Element {
            seq: 9,
            keys: (0..5).map(|i| format!("f:{i}")).collect(),
            features: vec![
                dense_feature("x", pb::DataType::Int64, vec![5, 2], ints, vec![]),
                dense_feature("image", pb::DataType::String, vec![5], vec![], images),
            ],
            more_rows: false,
            key_table: None,
            records: None,
        }
    }

    /// `batch()` with its keys as a table (as the server sends them).
    fn batch_with_table() -> pb::Element {
        let mut element = batch();
        element.keys.clear();
        element.key_table = Some(pb::KeyTable {
            files: vec!["f".into(), "g".into()],
            file: vec![0, 0, 1, 0, 1],
            number: vec![0, 1, 2, 3, 4],
        });
        element
    }

    fn rows_of(part: &pb::Element) -> usize {
        crate::keys::count(part)
    }

    #[test]
    fn key_tables_split_and_join_with_their_rows() {
        let parts = split_rows(batch_with_table(), 40);
        assert!(parts.len() > 1);
        let mut next_row = 0;
        for part in &parts {
            let table = part.key_table.as_ref().unwrap();
            assert!(part.keys.is_empty());
            assert_eq!(table.files, ["f", "g"], "every part names every file");
            assert_eq!(table.number[0], next_row as u64);
            next_row += rows_of(part);
        }
        let mut joiner = RowJoiner::default();
        let joined = parts.into_iter().map(|part| joiner.push(part).unwrap()).last().unwrap().unwrap();
        assert_eq!(joined, batch_with_table());
        let mut expanded = joined;
        crate::keys::expand(&mut expanded).unwrap();
        assert_eq!(expanded.keys, ["f:0", "f:1", "g:2", "f:3", "g:4"]);
        // A part whose table names other files does not join.
        let mut parts = split_rows(batch_with_table(), 40);
        parts.last_mut().unwrap().key_table.as_mut().unwrap().files.push("h".into());
        let mut joiner = RowJoiner::default();
        let results: Vec<_> = parts.into_iter().map(|part| joiner.push(part)).collect();
        assert!(results.last().unwrap().is_err());
    }

    #[test]
    fn split_parts_hold_consecutive_rows_and_join_back_to_the_batch() {
        let parts = split_rows(batch(), 40);
        assert!(parts.len() > 1, "a 5-row batch of about 150 bytes splits at 40 bytes");
        assert_eq!(parts.iter().map(rows_of).sum::<usize>(), 5);
        assert!(parts.iter().all(|p| p.seq == 9));
        assert!(parts[..parts.len() - 1].iter().all(|p| p.more_rows) && !parts.last().unwrap().more_rows);
        // Each part's first feature holds its rows of the int64 matrix.
        let mut next_row = 0i64;
        for part in &parts {
            let x = dense(&part.features[0]).unwrap();
            assert_eq!(x.shape, vec![rows_of(part) as i64, 2]);
            let first = i64::from_le_bytes(x.data[..8].try_into().unwrap());
            assert_eq!(first, next_row * 2);
            assert_eq!(part.keys[0], format!("f:{next_row}"));
            next_row += rows_of(part) as i64;
        }
        let mut joiner = RowJoiner::default();
        let mut joined = None;
        for part in parts {
            assert!(joined.is_none(), "the element is whole only after its last part");
            joined = joiner.push(part).unwrap();
        }
        assert_eq!(joined.unwrap(), batch());
        assert!(!joiner.is_partial());
    }

    #[test]
    fn a_large_row_gets_a_part_of_its_own_and_small_batches_stay_whole() {
        let parts = split_rows(batch(), 1);
        assert_eq!(parts.iter().map(rows_of).collect::<Vec<_>>(), vec![1; 5]);
        assert_eq!(split_rows(batch(), 1 << 20), vec![batch()]);
        assert_eq!(split_rows(batch(), 0), vec![batch()]);
    }

    #[test]
    fn elements_that_are_not_dense_batches_are_sent_whole() {
        let mut one_record = batch();
        one_record.keys.truncate(1);
        assert_eq!(split_rows(one_record.clone(), 1), vec![one_record]);
        let mut sparse = batch();
        sparse.features[0].tensor = Some(pb::Tensor { kind: Some(pb::tensor::Kind::Sparse(Default::default())) });
        assert_eq!(split_rows(sparse.clone(), 1), vec![sparse]);
        let mut scalar_feature = batch();
        scalar_feature.features.push(dense_feature("n", pb::DataType::Int64, vec![], vec![0; 8], vec![]));
        assert_eq!(split_rows(scalar_feature.clone(), 1), vec![scalar_feature]);
    }

    #[test]
    fn features_of_empty_rows_split_and_join_back() {
        // `[5, 0]` string and int64 tensors beside the batch's own: rows of no value.
        let mut element = batch();
        element.features.push(dense_feature("none", pb::DataType::String, vec![5, 0], vec![], vec![]));
        element.features.push(dense_feature("zero", pb::DataType::Int64, vec![5, 2, 0], vec![], vec![]));
        let parts = split_rows(element.clone(), 40);
        assert!(parts.len() > 1);
        for part in &parts {
            assert_eq!(dense(&part.features[2]).unwrap().shape, vec![rows_of(part) as i64, 0]);
            assert_eq!(dense(&part.features[3]).unwrap().shape, vec![rows_of(part) as i64, 2, 0]);
        }
        let mut joiner = RowJoiner::default();
        let joined = parts.into_iter().map(|part| joiner.push(part).unwrap()).last().unwrap();
        assert_eq!(joined.unwrap(), element);
        // Only features of empty rows: every row weighs nothing, the batch stays whole.
        let mut empty = batch();
        empty.features = vec![dense_feature("none", pb::DataType::String, vec![5, 0], vec![], vec![])];
        assert_eq!(split_rows(empty.clone(), 1), vec![empty]);
    }

    #[test]
    fn an_element_of_no_rows_is_sent_whole() {
        let mut element = batch();
        element.keys.clear();
        element.features = vec![dense_feature("none", pb::DataType::String, vec![0], vec![], vec![])];
        assert_eq!(split_rows(element.clone(), 1), vec![element]);
    }

    #[test]
    fn parts_that_do_not_make_an_element_are_an_error() {
        let parts = split_rows(batch(), 40);
        let mut joiner = RowJoiner::default();
        joiner.push(parts[0].clone()).unwrap();
        let mut other = batch();
        other.seq = 10;
        let err = joiner.push(other).unwrap_err();
        assert_eq!(err.seq, 9);
        assert!(err.to_string().contains("element 10"), "{err}");

        let mut joiner = RowJoiner::default();
        let mut renamed = parts[1].clone();
        renamed.features[1].name = "label".into();
        joiner.push(parts[0].clone()).unwrap();
        renamed.more_rows = false;
        let err = joiner.push(renamed).unwrap_err();
        assert!(err.to_string().contains("\"label\""), "{err}");
    }
}
