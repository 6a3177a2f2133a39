//! Tensors as decoders produce them: dtype, shape and values, numeric values as
//! little-endian bytes (what travels on the wire), strings as `Bytes` (slices of the
//! record, not copies, wherever the format allows).

use bytes::Bytes;

/// The little-endian bytes of `values` (one pass, one allocation): collected as arrays of
/// `N` bytes, a plain copy on a little-endian machine (appending value by value cost
/// about 15 instructions a value).
fn le_bytes<T: Copy, const N: usize>(values: &[T], to_le: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().map(|&value| to_le(value)).collect::<Vec<[u8; N]>>().into_flattened()
}

/// Writes `value` as element `at` of the little-endian `bytes` (elements of `N` bytes; a
/// panic past the end): how decoders place a value at its row.
#[inline]
pub(crate) fn put_le<const N: usize>(bytes: &mut [u8], at: usize, value: [u8; N]) {
    bytes.as_chunks_mut::<N>().0[at] = value;
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
    /// The row length of each partition of `nested_row_splits` when it is uniform (a
    /// `uniformRowLength` partition that is not innermost), `None` where rows vary.
    pub uniform_row_lengths: Vec<Option<usize>>,
}

impl Ragged {
    /// TensorFlow's static shape (`RaggedTensor.shape`): the number of rows, each
    /// partition's uniform row length (`None` where rows vary), then the inner
    /// dimensions of `flat_values`.
    pub fn static_shape(&self) -> Vec<Option<usize>> {
        let rows = self.nested_row_splits.first().map_or(0, |splits| splits.num_elements().saturating_sub(1));
        let mut shape = vec![Some(rows)];
        shape.extend(self.uniform_row_lengths.iter().copied());
        shape.extend(self.flat_values.shape.iter().skip(1).map(|&dim| Some(dim)));
        shape
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Tensor {
    Dense(Dense),
    Sparse(Sparse),
    Ragged(Ragged),
}

impl Tensor {
    /// The dense arrays it is made of: itself; a sparse tensor's indices, values and
    /// shape; a ragged one's flat values and row splits.
    pub fn parts(&self) -> impl Iterator<Item = &Dense> {
        let (first, splits): ([Option<&Dense>; 3], &[Dense]) = match self {
            Tensor::Dense(d) => ([Some(d), None, None], &[]),
            Tensor::Sparse(s) => ([Some(&s.indices), Some(&s.values), Some(&s.dense_shape)], &[]),
            Tensor::Ragged(r) => ([Some(&r.flat_values), None, None], &r.nested_row_splits),
        };
        first.into_iter().flatten().chain(splits)
    }
}

impl Dense {
    pub fn num_elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes of its values (a string tensor's: its strings').
    pub fn payload_bytes(&self) -> usize {
        match &self.values {
            Values::Bytes(b) => b.len(),
            Values::Strings(s) => s.iter().map(|b| b.len()).sum(),
        }
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

impl Dense {
    /// An int64 or int32 tensor's values as i64 (indices, row splits, dense shapes);
    /// `None` for another dtype.
    pub fn int64_values(&self) -> Option<Vec<i64>> {
        let Values::Bytes(bytes) = &self.values else { return None };
        match self.dtype {
            DType::Int64 => {
                Some(bytes.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes"))).collect())
            }
            DType::Int32 => Some(
                bytes.chunks_exact(4).map(|b| i64::from(i32::from_le_bytes(b.try_into().expect("4 bytes")))).collect(),
            ),
            _ => None,
        }
    }

    /// The slices along the first dimension: `[n, ...]` → n tensors of shape `[...]`.
    pub fn unstack(&self) -> Option<Vec<Dense>> {
        let (&n, inner) = self.shape.split_first()?;
        let inner = inner.to_vec();
        let per: usize = inner.iter().product();
        Some(match &self.values {
            Values::Bytes(bytes) => {
                let size = self.dtype.size()? * per;
                (0..n)
                    .map(|i| Dense {
                        dtype: self.dtype,
                        shape: inner.clone(),
                        values: Values::Bytes(bytes.slice(i * size..(i + 1) * size)),
                    })
                    .collect()
            }
            Values::Strings(strings) => {
                (0..n).map(|i| Dense::strings(inner.clone(), strings[i * per..(i + 1) * per].to_vec())).collect()
            }
        })
    }

    /// Tensors of one dtype and shape `[...]` stacked into `[n, ...]`; `None` when they differ.
    pub fn stack(parts: &[Dense]) -> Option<Dense> {
        let (first, rest) = parts.split_first()?;
        let mut stack = DenseStack::new(first, parts.len());
        for part in rest {
            if !stack.push(part) {
                return None;
            }
        }
        Some(stack.finish())
    }
}

/// Tensors of one dtype and shape `[...]` stacked into `[n, ...]` as they come (tf.data's
/// `batch`), each copied into the stack's buffer as it is pushed so that it can be freed
/// at once. A buffer of a large batch comes from the server's pool of batch buffers
/// (`crate::batch_buffers`) and goes back there when the batch has been sent.
#[derive(Debug)]
pub struct DenseStack {
    dtype: DType,
    part_shape: Vec<usize>,
    parts: usize,
    values: StackValues,
}

#[derive(Debug)]
enum StackValues {
    Bytes(Vec<u8>),
    Strings(Vec<Bytes>),
}

/// The most a stack's buffer is sized for up front; past it the buffer grows as parts
/// come (the expected count comes from records and requests, so it is not trusted for one
/// allocation).
const STACK_RESERVE_MAX: usize = 256 << 20;

impl DenseStack {
    /// A stack that starts with `first`, sized for about `expected` parts.
    pub fn new(first: &Dense, expected: usize) -> Self {
        let values = match &first.values {
            Values::Bytes(bytes) => {
                let mut out = crate::batch_buffers::take(bytes.len().saturating_mul(expected).min(STACK_RESERVE_MAX));
                out.extend_from_slice(bytes);
                StackValues::Bytes(out)
            }
            Values::Strings(strings) => {
                let mut out = Vec::with_capacity(strings.len().saturating_mul(expected).min(STACK_RESERVE_MAX / 32));
                out.extend_from_slice(strings);
                StackValues::Strings(out)
            }
        };
        Self { dtype: first.dtype, part_shape: first.shape.clone(), parts: 1, values }
    }

    /// Appends `part`; false, appending nothing, when its dtype or shape is not the first
    /// part's.
    pub fn push(&mut self, part: &Dense) -> bool {
        if part.dtype != self.dtype || part.shape != self.part_shape {
            return false;
        }
        match (&mut self.values, &part.values) {
            (StackValues::Bytes(out), Values::Bytes(bytes)) => out.extend_from_slice(bytes),
            (StackValues::Strings(out), Values::Strings(strings)) => out.extend_from_slice(strings),
            _ => return false,
        }
        self.parts += 1;
        true
    }

    /// The shape of each part: the first one's.
    pub fn part_shape(&self) -> &[usize] {
        &self.part_shape
    }

    /// The stacked tensor, `[parts, ...]`.
    pub fn finish(self) -> Dense {
        let mut shape = Vec::with_capacity(self.part_shape.len() + 1);
        shape.push(self.parts);
        shape.extend_from_slice(&self.part_shape);
        let values = match self.values {
            StackValues::Bytes(bytes) => Values::Bytes(crate::batch_buffers::into_bytes(bytes)),
            StackValues::Strings(strings) => Values::Strings(strings),
        };
        Dense { dtype: self.dtype, shape, values }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unstack_then_stack_is_the_identity() {
        let dense = Dense::int64(vec![3, 2], &[1, 2, 3, 4, 5, 6]);
        let parts = dense.unstack().unwrap();
        assert_eq!(parts[1], Dense::int64(vec![2], &[3, 4]));
        assert_eq!(Dense::stack(&parts).unwrap(), dense);
        let strings = Dense::strings(vec![2], vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]);
        assert_eq!(Dense::stack(&strings.unstack().unwrap()).unwrap(), strings);
        assert!(Dense::int64(vec![], &[1]).unstack().is_none(), "a scalar has no first dimension");
        assert!(Dense::stack(&[Dense::int64(vec![1], &[1]), Dense::int64(vec![2], &[1, 2])]).is_none());
    }
}
