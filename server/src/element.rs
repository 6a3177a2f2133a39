//! Elements for the wire: decoded tensors as `pb::Element`s. Numeric values travel as the
//! little-endian bytes the decoders built and strings as the `Bytes` slices of records,
//! so building a message copies no payload.

use readerd_proto::v1 as pb;

use crate::decode::{DType, Dense, Tensor, Values};

/// One element: the keys of its records and its named tensors.
#[derive(Clone, Debug)]
pub struct Element {
    /// The element's number in its reader's sequence (from 0; epochs continue it).
    pub index: u64,
    pub keys: Vec<String>,
    pub features: Vec<(String, Tensor)>,
}

impl Element {
    /// Payload bytes, for sizing messages.
    pub fn payload_bytes(&self) -> usize {
        fn dense(d: &Dense) -> usize {
            match &d.values {
                Values::Bytes(b) => b.len(),
                Values::Strings(s) => s.iter().map(|b| b.len()).sum(),
            }
        }
        self.features
            .iter()
            .map(|(_, tensor)| match tensor {
                Tensor::Dense(d) => dense(d),
                Tensor::Sparse(s) => dense(&s.indices) + dense(&s.values) + dense(&s.dense_shape),
                Tensor::Ragged(r) => dense(&r.flat_values) + r.nested_row_splits.iter().map(dense).sum::<usize>(),
            })
            .sum()
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
        Tensor::Ragged(ragged) => Kind::Ragged(pb::RaggedTensor {
            flat_values: Some(dense_to_pb(ragged.flat_values)),
            nested_row_splits: ragged.nested_row_splits.into_iter().map(dense_to_pb).collect(),
        }),
    };
    pb::Tensor { kind: Some(kind) }
}

pub fn element_to_pb(seq: i64, element: Element) -> pb::Element {
    pb::Element {
        seq,
        keys: element.keys,
        features: element
            .features
            .into_iter()
            .map(|(name, tensor)| pb::Feature { name, tensor: Some(tensor_to_pb(tensor)) })
            .collect(),
        more_rows: false,
    }
}
