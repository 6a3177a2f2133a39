//! What readerd's server, its client (`readerctl`) and the Python binding must agree on
//! byte for byte: one copy of each, used by all.
//!
//! - [`rng`]: SplitMix64, whose values a checkpoint stores and every release must
//!   reproduce (the server's shuffles; the client's demo data and reconnection jitter);
//! - [`tfrecord_crc`]: the masked CRC-32C of TFRecord framing (the server's framer, the
//!   client's writer and `inspect`);
//! - [`sync`]: locks taken whether or not a caught panic poisoned them (every lock of
//!   the server and the Python binding);
//! - `object` (cargo feature `object-store`): an object-store URL → its store and key
//!   path, with one set of rules for paths, retries, time limits and redirects (the
//!   server's data roots, readerctl's file tools).
//!
//! `rng` and `tfrecord_crc` do no I/O and use no tokio, so the server's format and
//! pipeline code stays free of them; only the `object-store` feature brings tokio and
//! HTTP in (its tests run with it: `cargo test -p readerd-common --all-features`).

#[cfg(feature = "object-store")]
pub mod object;
pub mod rng;
pub mod sync;
pub mod tfrecord_crc;
