//! `tf.io.decode_raw`: each record's bytes reinterpreted as a vector of `out_type`.
//!
//! The output of a batch of B records of n elements has shape `[B, n]` (one record: `[n]`).
//! With `fixed_length`, each record is cut or zero-padded to that many bytes first.
//! A single little-endian record is passed on as it is: no copy.

use bytes::Bytes;

use super::{DType, DecodeError, Dense, Values};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawConfig {
    pub out_type: DType,
    pub little_endian: bool,
    /// Bytes each record is cut or padded to; `None`: records as they are.
    pub fixed_length: Option<usize>,
}

impl RawConfig {
    pub fn new(out_type: DType, little_endian: bool, fixed_length: Option<usize>) -> Result<Self, DecodeError> {
        let size = out_type.size().ok_or_else(|| DecodeError::new("decode_raw cannot produce strings"))?;
        if let Some(fixed) = fixed_length
            && !fixed.is_multiple_of(size)
        {
            return Err(DecodeError::new(format!(
                "fixed_length ({fixed}) must be a multiple of the size of out_type ({size})"
            )));
        }
        Ok(Self { out_type, little_endian, fixed_length })
    }
}

/// Decodes `records`, the row-major elements of a string tensor of shape `shape`.
pub fn decode_raw(config: &RawConfig, records: &[Bytes], shape: &[usize]) -> Result<Dense, DecodeError> {
    let dtype = config.out_type;
    let size = dtype.size().expect("checked in RawConfig::new");
    let record_len = match config.fixed_length {
        Some(fixed) => fixed,
        None => {
            let first = records.first().map_or(0, Bytes::len);
            if let Some((i, other)) = records.iter().enumerate().find(|(_, r)| r.len() != first) {
                return Err(DecodeError::at(
                    i,
                    format!(
                        "DecodeRaw requires input strings to all be the same size, but element {i} has size {first} != {}",
                        other.len()
                    ),
                ));
            }
            if !first.is_multiple_of(size) {
                return Err(DecodeError::at(
                    0,
                    format!(
                        "Input to DecodeRaw has length {first} that is not a multiple of {size}, the size of {}",
                        dtype.name()
                    ),
                ));
            }
            first
        }
    };
    let mut out_shape = shape.to_vec();
    out_shape.push(record_len / size);
    let swap = !config.little_endian && size > 1;
    if let ([record], false, None) = (records, swap, config.fixed_length) {
        return Ok(Dense { dtype, shape: out_shape, values: Values::Bytes(record.clone()) });
    }
    let mut data = Vec::with_capacity(records.len() * record_len);
    for record in records {
        let kept = record.len().min(record_len);
        let start = data.len();
        data.extend_from_slice(&record[..kept]);
        data.resize(start + record_len, 0);
        if swap {
            // Complex numbers swap each 4-byte part, as TensorFlow does.
            let unit = if dtype == DType::Complex64 { 4 } else { size };
            data[start..].chunks_exact_mut(unit).for_each(<[u8]>::reverse);
        }
    }
    Ok(Dense { dtype, shape: out_shape, values: Values::Bytes(Bytes::from(data)) })
}
