//! Tensors as decoders produce them: dtype, shape and values, numeric values as
//! little-endian bytes (what travels on the wire), strings as `Bytes` (slices of the
//! record, not copies, wherever the format allows).

use bytes::Bytes;

/// The little-endian bytes of `values` (one pass, one allocation).
fn le_bytes<T: Copy, const N: usize>(values: &[T], to_le: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * N);
    for &value in values {
        out.extend_from_slice(&to_le(value));
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    Int8,
    Int16,
    Int32,
    Int64,
    Uint8,
    Uint16,
    Bool,
    Float16,
    Bfloat16,
    Float32,
    Float64,
    Complex64,
    String,
}

impl DType {
    /// Bytes per element; `None` for strings.
    pub fn size(self) -> Option<usize> {
        use DType::*;
        Some(match self {
            Int8 | Uint8 | Bool => 1,
            Int16 | Uint16 | Float16 | Bfloat16 => 2,
            Int32 | Float32 => 4,
            Int64 | Float64 | Complex64 => 8,
            String => return None,
        })
    }

    /// TensorFlow's name (`int64`, `float32`, `string`), as in its error messages.
    pub fn name(self) -> &'static str {
        use DType::*;
        match self {
            Int8 => "int8",
            Int16 => "int16",
            Int32 => "int32",
            Int64 => "int64",
            Uint8 => "uint8",
            Uint16 => "uint16",
            Bool => "bool",
            Float16 => "float16",
            Bfloat16 => "bfloat16",
            Float32 => "float",
            Float64 => "double",
            Complex64 => "complex64",
            String => "string",
        }
    }
}

/// Element values of a dense tensor.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// Row-major little-endian elements of a numeric or bool tensor.
    Bytes(Bytes),
    /// Row-major elements of a string tensor.
    Strings(Vec<Bytes>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Dense {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub values: Values,
}

/// `tf.SparseTensor`: int64 `indices` `[N, rank]`, `values` `[N]`, int64 `dense_shape` `[rank]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sparse {
    pub indices: Dense,
    pub values: Dense,
    pub dense_shape: Dense,
}

/// `tf.RaggedTensor`: flat values and row splits, outermost partition first.
#[derive(Clone, Debug, PartialEq)]
pub struct Ragged {
    pub flat_values: Dense,
    pub nested_row_splits: Vec<Dense>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Tensor {
    Dense(Dense),
    Sparse(Sparse),
    Ragged(Ragged),
}

impl Dense {
    pub fn num_elements(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn strings(shape: Vec<usize>, values: Vec<Bytes>) -> Self {
        Self { dtype: DType::String, shape, values: Values::Strings(values) }
    }

    pub fn int64(shape: Vec<usize>, values: &[i64]) -> Self {
        Self::numeric(DType::Int64, shape, le_bytes(values, |v| v.to_le_bytes()))
    }

    pub fn int32(shape: Vec<usize>, values: &[i32]) -> Self {
        Self::numeric(DType::Int32, shape, le_bytes(values, |v| v.to_le_bytes()))
    }

    pub fn float32(shape: Vec<usize>, values: &[f32]) -> Self {
        Self::numeric(DType::Float32, shape, le_bytes(values, |v| v.to_le_bytes()))
    }

    pub fn float64(shape: Vec<usize>, values: &[f64]) -> Self {
        Self::numeric(DType::Float64, shape, le_bytes(values, |v| v.to_le_bytes()))
    }

    /// A numeric tensor from its little-endian element bytes.
    pub fn numeric(dtype: DType, shape: Vec<usize>, le_bytes: Vec<u8>) -> Self {
        debug_assert_eq!(Some(le_bytes.len()), dtype.size().map(|s| s * shape.iter().product::<usize>()));
        Self { dtype, shape, values: Values::Bytes(Bytes::from(le_bytes)) }
    }
}
