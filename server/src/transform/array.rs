//! Array operations: `tf.slice`, `tf.reshape`, `tf.transpose`, `tf.cast`, a scale and
//! shift, and `tf.io.decode_raw` of a string feature; each with TensorFlow's messages for an
//! input it refuses.

use super::values::{Number, box_indices, cast_numbers, daz, gather, numbers, strides};
use crate::decode::raw::{RawConfig, decode_raw};
use crate::decode::{DType, Dense, Values};

/// `tf.slice(input, begin, size)`: `size` -1 takes the rest of a dimension.
pub fn slice(dense: &Dense, begin: &[i64], size: &[i64]) -> Result<Dense, String> {
    let rank = dense.shape.len();
    if begin.len() != rank || size.len() != rank {
        return Err(format!(
            "Expected begin and size arguments to be 1-D tensors of size {rank}, but got shapes [{}] and [{}] instead.",
            begin.len(),
            size.len()
        ));
    }
    let (mut from, mut sizes) = (Vec::with_capacity(rank), Vec::with_capacity(rank));
    for (i, ((&b, &s), &dim)) in begin.iter().zip(size).zip(&dense.shape).enumerate() {
        let dim = dim as i64;
        let s = if s == -1 { dim - b } else { s };
        if !(0..=dim).contains(&b) {
            return Err(format!("Expected begin[{i}] in [0, {dim}], but got {b}"));
        }
        if !(0..=dim - b).contains(&s) {
            return Err(format!("Expected size[{i}] in [0, {}], but got {s}", dim - b));
        }
        from.push(b as usize);
        sizes.push(s as usize);
    }
    Ok(gather(dense, sizes.clone(), box_indices(&dense.shape, &from, &sizes)))
}

/// `tf.reshape(tensor, shape)`: one dimension may be -1, inferred.
pub fn reshape(dense: &Dense, shape: &[i64]) -> Result<Dense, String> {
    let count = dense.num_elements();
    let mut known: usize = 1;
    let mut unknown = None;
    for (i, &dim) in shape.iter().enumerate() {
        match dim {
            -1 => {
                if let Some(first) = unknown {
                    return Err(format!("Only one input size may be -1, not both {first} and {i}"));
                }
                unknown = Some(i);
            }
            d if d >= 0 => known = known.saturating_mul(d as usize),
            d => return Err(format!("Size {i} must be non-negative, not {d}")),
        }
    }
    let mut out: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    match unknown {
        Some(i) => {
            if known == 0 || !count.is_multiple_of(known) {
                return Err(format!(
                    "Input to reshape is a tensor with {count} values, but the requested shape requires a multiple of {known}"
                ));
            }
            out[i] = count / known;
        }
        None if known != count => {
            return Err(format!(
                "Input to reshape is a tensor with {count} values, but the requested shape has {known}"
            ));
        }
        None => {}
    }
    Ok(Dense { dtype: dense.dtype, shape: out, values: dense.values.clone() })
}

/// `tf.transpose(a, perm)`; an empty `perm` reverses the dimensions.
pub fn transpose(dense: &Dense, perm: &[i64]) -> Result<Dense, String> {
    let rank = dense.shape.len();
    let perm: Vec<usize> = if perm.is_empty() {
        (0..rank).rev().collect()
    } else {
        if perm.len() != rank {
            return Err(format!(
                "transpose expects a vector of size {rank}. But input(1) is a vector of size {}",
                perm.len()
            ));
        }
        let mut seen = vec![false; rank];
        for &p in perm {
            if !(0..rank as i64).contains(&p) {
                return Err(format!("{p} is out of range [0 .. {rank})"));
            }
            seen[p as usize] = true;
        }
        if let Some(missing) = seen.iter().position(|s| !s) {
            let listed: Vec<String> = perm.iter().map(i64::to_string).collect();
            return Err(format!("{missing} is missing from {{{}}}.", listed.join(",")));
        }
        perm.iter().map(|&p| p as usize).collect()
    };
    let shape: Vec<usize> = perm.iter().map(|&p| dense.shape[p]).collect();
    let from_strides = strides(&dense.shape);
    let moved: Vec<usize> = perm.iter().map(|&p| from_strides[p]).collect();
    let count = dense.num_elements();
    let mut at = vec![0usize; rank];
    let sources = (0..count).map(|n| {
        if n > 0 {
            for d in (0..rank).rev() {
                at[d] += 1;
                if at[d] < shape[d] {
                    break;
                }
                at[d] = 0;
            }
        }
        at.iter().zip(&moved).map(|(a, s)| a * s).sum()
    });
    Ok(gather(dense, shape.clone(), sources))
}

/// `tf.cast(x, dtype)` between numeric and bool dtypes.
pub fn cast(dense: &Dense, dtype: DType) -> Result<Dense, String> {
    if dense.dtype == dtype {
        return Ok(dense.clone());
    }
    let values =
        numbers(dense).ok_or_else(|| format!("Cast {} to {} is not supported", dense.dtype.name(), dtype.name()))?;
    if dtype.size().is_none() || dtype == DType::Complex64 {
        return Err(format!("Cast {} to {} is not supported", dense.dtype.name(), dtype.name()));
    }
    // A float32 subnormal reads as zero (`daz`), except to bfloat16, which Eigen makes by
    // cutting bits, with no arithmetic.
    let values = values.into_iter().map(|v| match (v, dense.dtype, dtype) {
        (Number::Float(f), DType::Float32, to) if to != DType::Bfloat16 => Number::Float(f64::from(daz(f as f32))),
        _ => v,
    });
    Ok(cast_numbers(values.collect::<Vec<_>>().into_iter(), dtype, dense.shape.clone()))
}

/// `x * multiply + add` in float32 (in float64 for a float64 input; other dtypes are cast
/// to float32 first, as `tf.cast(x, tf.float32) * m + a`).
pub fn scale(dense: &Dense, multiply: f64, add: f64) -> Result<Dense, String> {
    let values = numbers(dense).ok_or_else(|| format!("scale takes a numeric feature, not {}", dense.dtype.name()))?;
    if matches!(dense.dtype, DType::Float16 | DType::Bfloat16) {
        // Half types: each operation rounds to the dtype, as Eigen's half arithmetic does.
        let dtype = dense.dtype;
        let round = |x: f32| {
            numbers(&cast_numbers(std::iter::once(Number::Float(f64::from(x))), dtype, vec![1])).unwrap()[0].as_f32()
        };
        let (m, a) = (round(multiply as f32), round(add as f32));
        let out = values.iter().map(|v| Number::Float(f64::from(round(round(v.as_f32() * m) + a))));
        return Ok(cast_numbers(out.collect::<Vec<_>>().into_iter(), dtype, dense.shape.clone()));
    }
    if dense.dtype == DType::Float64 {
        let out: Vec<f64> = values.iter().map(|v| v.as_f64() * multiply + add).collect();
        return Ok(Dense::float64(dense.shape.clone(), &out));
    }
    let (m, a) = (multiply as f32, add as f32);
    let out: Vec<f32> = values.iter().map(|v| v.as_f32() * m + a).collect();
    Ok(Dense::float32(dense.shape.clone(), &out))
}

/// `tf.io.decode_raw` of a string feature: shape `[...]` of strings gives `[..., n]`.
pub fn decode_raw_feature(dense: &Dense, out_type: DType, little_endian: bool) -> Result<Dense, String> {
    let Values::Strings(strings) = &dense.values else {
        return Err(format!("decodeRaw reads a string feature, not {}", dense.dtype.name()));
    };
    let config = RawConfig::new(out_type, little_endian, None).map_err(|e| e.message)?;
    decode_raw(&config, strings, &dense.shape).map_err(|e| e.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_reshape_and_transpose_move_elements_as_tensorflow() {
        let x = Dense::int64(vec![2, 3], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(slice(&x, &[0, 1], &[-1, 2]).unwrap(), Dense::int64(vec![2, 2], &[2, 3, 5, 6]));
        assert_eq!(slice(&x, &[0, 2], &[1, 2]).unwrap_err(), "Expected size[1] in [0, 1], but got 2");
        assert_eq!(reshape(&x, &[-1, 2]).unwrap().shape, vec![3, 2]);
        assert_eq!(
            reshape(&x, &[4]).unwrap_err(),
            "Input to reshape is a tensor with 6 values, but the requested shape has 4"
        );
        assert_eq!(transpose(&x, &[1, 0]).unwrap(), Dense::int64(vec![3, 2], &[1, 4, 2, 5, 3, 6]));
        assert_eq!(transpose(&x, &[]).unwrap(), transpose(&x, &[1, 0]).unwrap());
    }

    #[test]
    fn scale_casts_integers_to_float32() {
        let x =
            Dense { dtype: DType::Uint8, shape: vec![2], values: Values::Bytes(bytes::Bytes::from_static(&[0, 255])) };
        assert_eq!(scale(&x, 1.0 / 255.0, -0.5).unwrap(), Dense::float32(vec![2], &[-0.5, 0.5]));
    }
}
