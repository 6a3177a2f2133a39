//! Decoding: records → named tensors, exactly as TensorFlow's ops do. No I/O, no tokio.
//!
//! - [`tensor`]: the tensor types decoders produce;
//! - [`csv`]: `tf.io.decode_csv`, and the field rules of `tf.data.experimental.CsvDataset`;
//! - [`number`]: text to numbers as TensorFlow's `strings::safe_strto*` parse it.

pub mod csv;
pub mod number;
pub mod tensor;

pub use tensor::{DType, Dense, Ragged, Sparse, Tensor, Values};

/// A record that does not decode. The message follows TensorFlow's (it names the record
/// and the feature or column); the gRPC code is INVALID_ARGUMENT.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DecodeError {
    pub message: String,
}

impl DecodeError {
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }
}
