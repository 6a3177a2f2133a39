//! Elements of a dense tensor as numbers: read whatever the dtype, written back in another,
//! with C++'s `static_cast` rules as TensorFlow's `Cast` applies them (integers wrap,
//! floats round to nearest even, float to integer truncates toward zero, anything to bool is
//! `!= 0`). Moves that do not look at values (crops, flips, transposes) go through
//! [`gather`], whatever the dtype, strings included.

use bytes::Bytes;
use half::{bf16, f16};

use crate::decode::{DType, Dense, Values};

/// One element, wide enough for any dtype's value: integers exactly, floats as the `f64`
/// that equals them (every float16, bfloat16 and float32 value is one).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    Int(i128),
    Float(f64),
}

impl Number {
    pub fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }

    /// As C++'s `static_cast<float>`: an integer rounds once to the nearest float.
    pub fn as_f32(self) -> f32 {
        match self {
            Number::Int(i) => i as f32,
            Number::Float(f) => f as f32,
        }
    }
}

/// A float32 subnormal as zero (of its sign): TensorFlow's kernels run with the CPU's
/// flush-to-zero and denormals-are-zero modes, so a subnormal float32 neither comes out of
/// a cast nor counts as non-zero going in.
pub fn daz(x: f32) -> f32 {
    if x.is_subnormal() { 0.0f32.copysign(x) } else { x }
}

/// The numeric elements of `dense`, in row-major order; `None` for strings and complex numbers.
pub fn numbers(dense: &Dense) -> Option<Vec<Number>> {
    let Values::Bytes(bytes) = &dense.values else { return None };
    let ints =
        |size: usize, read: fn(&[u8]) -> i128| Some(bytes.chunks_exact(size).map(|b| Number::Int(read(b))).collect());
    let floats =
        |size: usize, read: fn(&[u8]) -> f64| Some(bytes.chunks_exact(size).map(|b| Number::Float(read(b))).collect());
    match dense.dtype {
        DType::Int8 => ints(1, |b| i128::from(b[0] as i8)),
        DType::Uint8 => ints(1, |b| i128::from(b[0])),
        DType::Bool => ints(1, |b| i128::from(b[0] != 0)),
        DType::Int16 => ints(2, |b| i128::from(i16::from_le_bytes([b[0], b[1]]))),
        DType::Uint16 => ints(2, |b| i128::from(u16::from_le_bytes([b[0], b[1]]))),
        DType::Int32 => ints(4, |b| i128::from(i32::from_le_bytes(b.try_into().expect("4 bytes")))),
        DType::Int64 => ints(8, |b| i128::from(i64::from_le_bytes(b.try_into().expect("8 bytes")))),
        DType::Float16 => floats(2, |b| f64::from(f16::from_le_bytes([b[0], b[1]]))),
        DType::Bfloat16 => floats(2, |b| f64::from(bf16::from_le_bytes([b[0], b[1]]))),
        DType::Float32 => floats(4, |b| f64::from(f32::from_le_bytes(b.try_into().expect("4 bytes")))),
        DType::Float64 => floats(8, |b| f64::from_le_bytes(b.try_into().expect("8 bytes"))),
        DType::Complex64 | DType::String => None,
    }
}

/// The elements of a float32 or uint8 tensor (the image dtypes) as `f32`, fast; any other
/// numeric dtype through [`numbers`] (`static_cast<float>`).
pub fn floats(dense: &Dense) -> Option<Vec<f32>> {
    let Values::Bytes(bytes) = &dense.values else { return None };
    match dense.dtype {
        DType::Uint8 => Some(bytes.iter().map(|&b| f32::from(b)).collect()),
        DType::Float32 => Some(bytes.as_chunks::<4>().0.iter().map(|b| daz(f32::from_le_bytes(*b))).collect()),
        _ => Some(numbers(dense)?.into_iter().map(Number::as_f32).collect()),
    }
}

/// `values` cast to `dtype` as `static_cast` does, as a tensor of `shape`.
pub fn cast_numbers(values: impl ExactSizeIterator<Item = Number>, dtype: DType, shape: Vec<usize>) -> Dense {
    let size = dtype.size().expect("a numeric dtype");
    let mut out = Vec::with_capacity(values.len() * size);
    for value in values {
        match dtype {
            DType::Bool => out.push(u8::from(is_nonzero(value))),
            DType::Int8 => out.push(int_of(value) as i8 as u8),
            DType::Uint8 => out.push(int_of(value) as u8),
            DType::Int16 => out.extend_from_slice(&(int_of(value) as i16).to_le_bytes()),
            DType::Uint16 => out.extend_from_slice(&(int_of(value) as u16).to_le_bytes()),
            DType::Int32 => out.extend_from_slice(&(int_of(value) as i32).to_le_bytes()),
            DType::Int64 => out.extend_from_slice(&(int_of(value) as i64).to_le_bytes()),
            DType::Float16 => {
                out.extend_from_slice(&float_of(value, f16::from_f64, |i| f16::from_f32(i as f32)).to_le_bytes())
            }
            DType::Bfloat16 => {
                out.extend_from_slice(&float_of(value, bf16::from_f64, |i| bf16::from_f32(i as f32)).to_le_bytes())
            }
            DType::Float32 => out.extend_from_slice(&daz(value.as_f32()).to_le_bytes()),
            DType::Float64 => out.extend_from_slice(&value.as_f64().to_le_bytes()),
            DType::Complex64 | DType::String => unreachable!("checked by the caller"),
        }
    }
    Dense { dtype, shape, values: Values::Bytes(Bytes::from(out)) }
}

fn is_nonzero(value: Number) -> bool {
    match value {
        Number::Int(i) => i != 0,
        Number::Float(f) => f != 0.0,
    }
}

/// An integer as `static_cast` from the value makes one before narrowing: floats truncate
/// toward zero (out of range they saturate here, where C++ leaves it undefined).
pub(crate) fn int_of(value: Number) -> i128 {
    match value {
        Number::Int(i) => i,
        Number::Float(f) => f as i128,
    }
}

fn float_of<T>(value: Number, from_f64: fn(f64) -> T, from_int: fn(i128) -> T) -> T {
    match value {
        Number::Int(i) => from_int(i),
        Number::Float(f) => from_f64(f),
    }
}

/// A tensor of `shape` whose element `i` is `dense`'s element `source(i)`: any dtype, each
/// element moved whole.
pub fn gather(dense: &Dense, shape: Vec<usize>, source: impl Iterator<Item = usize>) -> Dense {
    match &dense.values {
        Values::Bytes(bytes) => {
            let size = dense.dtype.size().expect("numeric");
            let count: usize = shape.iter().product();
            let mut out = Vec::with_capacity(count * size);
            for at in source {
                out.extend_from_slice(&bytes[at * size..(at + 1) * size]);
            }
            Dense { dtype: dense.dtype, shape, values: Values::Bytes(Bytes::from(out)) }
        }
        Values::Strings(strings) => Dense::strings(shape, source.map(|at| strings[at].clone()).collect()),
    }
}

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// The source index of every element of a box `size` at `begin` in a tensor of `shape`, in
/// row-major order of the box.
pub fn box_indices(shape: &[usize], begin: &[usize], size: &[usize]) -> impl Iterator<Item = usize> {
    let strides = strides(shape);
    let count: usize = size.iter().product();
    let (begin, size) = (begin.to_vec(), size.to_vec());
    let mut at = vec![0usize; size.len()];
    (0..count).map(move |n| {
        if n > 0 {
            for d in (0..at.len()).rev() {
                at[d] += 1;
                if at[d] < size[d] {
                    break;
                }
                at[d] = 0;
            }
        }
        at.iter().zip(&begin).zip(&strides).map(|((a, b), s)| (a + b) * s).sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_follow_static_cast() {
        let values = [Number::Float(-1.7), Number::Float(2.9), Number::Int(300), Number::Int(-1)];
        let uint8 = cast_numbers(values.into_iter(), DType::Uint8, vec![4]);
        assert_eq!(uint8.values, Values::Bytes(Bytes::from_static(&[255, 2, 44, 255])));
        let bools = cast_numbers([Number::Float(0.0), Number::Float(-0.5)].into_iter(), DType::Bool, vec![2]);
        assert_eq!(bools.values, Values::Bytes(Bytes::from_static(&[0, 1])));
        let back = numbers(&cast_numbers([Number::Int(16_777_217)].into_iter(), DType::Float32, vec![1])).unwrap();
        assert_eq!(back, vec![Number::Float(16_777_216.0)], "an int rounds once to the nearest float");
    }

    #[test]
    fn a_box_is_gathered_in_row_major_order() {
        let dense = Dense::int64(vec![3, 4], &(0..12).collect::<Vec<_>>());
        let cropped = gather(&dense, vec![2, 2], box_indices(&[3, 4], &[1, 1], &[2, 2]));
        assert_eq!(cropped, Dense::int64(vec![2, 2], &[5, 6, 9, 10]));
    }
}
