//! What readerd's server, its client (`readerctl`) and the Python binding must agree on
//! byte for byte: one copy of each, used by all.
//!
//! - [`rng`]: SplitMix64, whose values a checkpoint stores and every release must
//!   reproduce (the server's shuffles; the client's demo data and reconnection jitter);
//! - [`tfrecord_crc`]: the masked CRC-32C of TFRecord framing (the server's framer, the
//!   client's writer and `inspect`).
//!
//! Nothing here does I/O or uses tokio, so the server's format and pipeline code stays
//! free of them.

pub mod rng;
pub mod tfrecord_crc;
