//! Elements for the wire: decoded tensors as `pb::Element`s. Numeric values travel as the
//! little-endian bytes the decoders built and strings as the `Bytes` slices of records,
//! so building a message copies no payload. Keys of records read from files travel as a
//! table (`pb::KeyTable`): no string per record.

use std::sync::{Arc, OnceLock};

use readerd_proto::frames::EncodedElement;
use readerd_proto::v1 as pb;

use crate::decode::{DType, Dense, Tensor, Values};
use crate::source::Record;

/// One element: the keys of its records and its named tensors.
///
/// Its tensors are shared: an element is cloned into the delivery books of each stream
/// it goes out on and, on a shared reader with jobs, once per job from their window, so
/// a clone must not copy every feature (see [`Features`]).
#[derive(Clone, Debug)]
pub struct Element {
    /// The element's number in its reader's sequence (from 0; epochs continue it).
    pub index: u64,
    pub keys: Keys,
    pub features: Features,
    /// Which records it holds, for the split ledger (a shared reader served by replicas;
    /// empty otherwise): their consumer's acknowledgement is committed for these.
    pub records: Vec<RecordId>,
    /// Its encoding for the wire but for its `seq`, made once for all its clones by the
    /// first that needs it ([`Element::encoded`]): the jobs of a shared reader each send it
    /// with their own `seq`. An element is not changed once it is handed out.
    wire: Arc<OnceLock<EncodedElement>>,
}

pub use crate::source::RecordId;

/// An element's named tensors, shared by its clones.
pub type Features = Arc<Vec<(String, Tensor)>>;

/// The keys of an element's records, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Keys {
    /// Records read from files, `<file>:<n>`: each file once, then per record its file (an
    /// index into `files`) and its `<n>`.
    Table { files: Vec<Arc<str>>, file: Vec<u32>, number: Vec<u64> },
    /// Keys of any other form (the examples of an unbatched record, `<file>:<n>[i]`).
    Strings(Vec<String>),
}

impl Keys {
    /// The keys of `records`.
    pub fn of_records(records: &[Record]) -> Self {
        let mut files: Vec<Arc<str>> = Vec::new();
        let mut file = Vec::with_capacity(records.len());
        for record in records {
            // Records of one file share its name: a batch names a few files at most.
            let index = match files.iter().position(|f| Arc::ptr_eq(f, &record.file) || **f == *record.file) {
                Some(index) => index,
                None => {
                    files.push(record.file.clone());
                    files.len() - 1
                }
            };
            file.push(index as u32);
        }
        Keys::Table { files, file, number: records.iter().map(|record| record.key).collect() }
    }

    pub fn len(&self) -> usize {
        match self {
            Keys::Table { file, .. } => file.len(),
            Keys::Strings(keys) => keys.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Key `i` as a string (`i < len()`).
    pub fn key(&self, i: usize) -> String {
        match self {
            Keys::Table { files, file, number } => readerd_proto::keys::key(&files[file[i] as usize], number[i]),
            Keys::Strings(keys) => keys[i].clone(),
        }
    }

    /// Every key as a string (for messages, which name records by key).
    pub fn to_strings(&self) -> Vec<String> {
        (0..self.len()).map(|i| self.key(i)).collect()
    }

    /// The keys at `indices`, in that order.
    pub fn select(&self, indices: &[usize]) -> Self {
        match self {
            Keys::Table { files, file, number } => Keys::Table {
                files: files.clone(),
                file: indices.iter().map(|&i| file[i]).collect(),
                number: indices.iter().map(|&i| number[i]).collect(),
            },
            Keys::Strings(keys) => Keys::Strings(indices.iter().map(|&i| keys[i].clone()).collect()),
        }
    }

    /// `Element.keys` and `Element.key_table`: one of them holds the keys.
    fn into_pb(self) -> (Vec<String>, Option<pb::KeyTable>) {
        match self {
            Keys::Table { files, file, number } => {
                let files = files.iter().map(|f| f.to_string()).collect();
                (Vec::new(), Some(pb::KeyTable { files, file, number }))
            }
            Keys::Strings(keys) => (keys, None),
        }
    }
}

impl Element {
    /// An element of `features` from the records `keys` names (numbered 0 until its reader
    /// numbers it).
    pub fn new(keys: Keys, features: Vec<(String, Tensor)>, records: Vec<RecordId>) -> Self {
        Self { index: 0, keys, features: Arc::new(features), records, wire: Arc::default() }
    }

    /// It, as element number `index` of its reader.
    pub fn numbered(self, index: u64) -> Self {
        Self { index, ..self }
    }

    /// Its encoding for the wire without its `seq` (see `wire`), made now if no clone of it
    /// made it yet.
    pub fn encoded(&self) -> &EncodedElement {
        self.wire.get_or_init(|| EncodedElement::new(&element_to_pb(0, self.clone())))
    }

    /// Whether it goes out whole in messages of at most `max_bytes` of tensor payload (0:
    /// no limit), as `readerd_proto::rows::split_rows` would leave it: its payload bytes and
    /// 4 for each string are within the limit (an upper bound of what that counts).
    pub fn whole_within(&self, max_bytes: usize) -> bool {
        if max_bytes == 0 {
            return true;
        }
        let strings: usize = self
            .dense_parts()
            .map(|dense| match &dense.values {
                Values::Strings(strings) => strings.len(),
                Values::Bytes(_) => 0,
            })
            .sum();
        self.payload_bytes().saturating_add(strings.saturating_mul(4)) <= max_bytes
    }

    /// Payload bytes, for sizing messages.
    pub fn payload_bytes(&self) -> usize {
        self.dense_parts().map(Dense::payload_bytes).sum()
    }

    /// The dense arrays of all its tensors.
    fn dense_parts(&self) -> impl Iterator<Item = &Dense> {
        self.features.iter().flat_map(|(_, tensor)| tensor.parts())
    }
}

pub fn dtype_to_pb(dtype: DType) -> pb::DataType {
    use pb::DataType as P;
    match dtype {
        DType::Int8 => P::Int8,
        DType::Int16 => P::Int16,
        DType::Int32 => P::Int32,
        DType::Int64 => P::Int64,
        DType::Uint8 => P::Uint8,
        DType::Uint16 => P::Uint16,
        DType::Bool => P::Bool,
        DType::Float16 => P::Float16,
        DType::Bfloat16 => P::Bfloat16,
        DType::Float32 => P::Float32,
        DType::Float64 => P::Float64,
        DType::Complex64 => P::Complex64,
        DType::String => P::String,
    }
}

fn dense_to_pb(dense: Dense) -> pb::DenseTensor {
    let (data, strings) = match dense.values {
        Values::Bytes(bytes) => (bytes, Vec::new()),
        Values::Strings(strings) => (Default::default(), strings),
    };
    pb::DenseTensor {
        dtype: dtype_to_pb(dense.dtype) as i32,
        shape: dense.shape.into_iter().map(|d| d as i64).collect(),
        data,
        strings,
    }
}

pub fn tensor_to_pb(tensor: Tensor) -> pb::Tensor {
    use pb::tensor::Kind;
    let kind = match tensor {
        Tensor::Dense(dense) => Kind::Dense(dense_to_pb(dense)),
        Tensor::Sparse(sparse) => Kind::Sparse(pb::SparseTensor {
            indices: Some(dense_to_pb(sparse.indices)),
            values: Some(dense_to_pb(sparse.values)),
            dense_shape: Some(dense_to_pb(sparse.dense_shape)),
        }),
        Tensor::Ragged(ragged) => {
            let shape = ragged.static_shape().into_iter().map(|dim| dim.map_or(-1, |d| d as i64)).collect();
            Kind::Ragged(pb::RaggedTensor {
                flat_values: Some(dense_to_pb(ragged.flat_values)),
                nested_row_splits: ragged.nested_row_splits.into_iter().map(dense_to_pb).collect(),
                shape,
            })
        }
    };
    pb::Tensor { kind: Some(kind) }
}

/// `element` for the wire, numbered `seq`. Its tensors are moved when no clone of it is
/// left (a private stream's element), copied otherwise (their payloads stay shared).
pub fn element_to_pb(seq: i64, element: Element) -> pb::Element {
    let (keys, key_table) = element.keys.into_pb();
    pb::Element {
        seq,
        keys,
        key_table,
        features: Arc::unwrap_or_clone(element.features)
            .into_iter()
            .map(|(name, tensor)| pb::Feature { name, tensor: Some(tensor_to_pb(tensor)) })
            .collect(),
        more_rows: false,
        records: record_ids_to_pb(&element.records),
    }
}

/// The ledger's names of records, as the wire carries them (`None` when there are none).
pub fn record_ids_to_pb(records: &[RecordId]) -> Option<pb::RecordIds> {
    (!records.is_empty()).then(|| pb::RecordIds {
        epoch: records.iter().map(|r| r.epoch).collect(),
        file: records.iter().map(|r| r.file).collect(),
        number: records.iter().map(|r| r.number).collect(),
    })
}

/// Record ids a client sent back (an acknowledgement through another replica).
pub fn record_ids_from_pb(records: &pb::RecordIds) -> impl Iterator<Item = RecordId> + '_ {
    let files = records.file.iter().zip(&records.number);
    records.epoch.iter().zip(files).map(|(&epoch, (&file, &number))| RecordId { epoch, file, number })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// A batch of `rows` rows: an int64 column and a string column of `len`-byte strings.
    fn batch(rows: usize, len: usize) -> Element {
        let ids: Vec<i64> = (0..rows as i64).collect();
        let strings = (0..rows).map(|_| Bytes::from(vec![b'x'; len])).collect();
        let features = vec![
            ("id".to_owned(), Tensor::Dense(Dense::int64(vec![rows], &ids))),
            ("text".to_owned(), Tensor::Dense(Dense::strings(vec![rows], strings))),
        ];
        Element::new(Keys::Strings((0..rows).map(|i| format!("f:{i}")).collect()), features, Vec::new())
    }

    #[test]
    fn an_element_whole_within_a_size_is_one_message_of_split_rows() {
        for (rows, len) in [(1, 0), (2, 1), (8, 10), (100, 3), (64, 1000)] {
            let element = batch(rows, len);
            // Around its payload too: split_rows counts 4 bytes more per string.
            let payload = element.payload_bytes();
            for max_bytes in [0, 1, 16, 100, 1000, 4096, 70_000, 1 << 20, payload, payload + 2 * rows] {
                let parts = readerd_proto::rows::split_rows(element_to_pb(0, element.clone()), max_bytes).len();
                if element.whole_within(max_bytes) {
                    assert_eq!(parts, 1, "{rows} rows of {len} bytes, at most {max_bytes}: whole");
                }
            }
            // Well over its size it is whole, and well under it (several rows) it is not.
            assert!(element.whole_within(payload * 2 + 4 * rows + 1));
            assert!(rows < 2 || !element.whole_within(1));
        }
    }

    #[test]
    fn clones_share_their_tensors_and_their_encoding() {
        let element = batch(8, 10);
        let clone = element.clone();
        assert!(Arc::ptr_eq(&element.features, &clone.features));
        assert!(std::ptr::eq(element.encoded(), clone.encoded()), "encoded once for both");
        // The encoding is the element's message but for its seq.
        let mut frames = readerd_proto::frames::Frames::default();
        frames.push_encoded(5, clone.encoded(), usize::MAX).unwrap();
        let mut expected = readerd_proto::frames::Frames::default();
        let message = pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element_to_pb(5, element))) };
        expected.push(&message, usize::MAX).unwrap();
        let bytes = |mut frames: readerd_proto::frames::Frames| {
            std::iter::from_fn(move || frames.pop()).flat_map(|chunk| chunk.to_vec()).collect::<Vec<u8>>()
        };
        assert_eq!(bytes(frames), bytes(expected));
    }
}
