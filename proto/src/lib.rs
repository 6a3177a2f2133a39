//! readerd's wire contract, generated from `proto/readerd/v1/*.proto`.
//!
//! - [`v1`]: the `readerd.v1` messages, the `DataService` client and server, and the
//!   proto3 JSON mapping (serde) of every message: `SPEC.json` files are
//!   `serde_json::from_str::<v1::DatasetSpec>`.
//! - [`v1::FILE_DESCRIPTOR_SET`]: for gRPC server reflection.
//! - [`tensorflow`]: `tf.train.Example` / `SequenceExample` (TensorFlow's field numbers),
//!   for building Examples in tests, benchmarks and tools.
//! - [`flight`]: the calls of Arrow Flight's `FlightService` that readerd serves (DoGet,
//!   DoAction, ListActions), with Flight's own package and field numbers.
//!
//! - [`allocator`]: glibc's allocator tuned for large batches (both binaries, trainers).
//! - [`codec`]: the gRPC codec of the generated services (prost, large messages encoded
//!   into one reservation).
//! - [`frames`]: `ReadResponse` messages as gRPC frames whose tensor payloads are sent from
//!   their own buffers, not copied (the server's `Read` streams).
//! - [`rows`]: a large batch as several messages by rows (`ReadRequest.max_message_bytes`),
//!   split by the server and joined by clients.
//! - [`keys`]: an element's record keys, as strings or as the table the server sends.
//! - [`http2`]: the HTTP/2 settings both ends use for large streams.
//! - [`REPLICA_LEASE`]: how long replicas' leases last by default, which clients' patience
//!   with a silent replica is sized by.
//!
//! This is the only crate that runs code generation. Import it as
//! `use readerd_proto::v1 as pb;` so the wire boundary stays visible at call sites.

pub mod allocator;
pub mod codec;
pub mod frames;
pub mod keys;
pub mod rows;

pub mod v1 {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("readerd.v1");
    include!(concat!(env!("OUT_DIR"), "/readerd.v1.serde.rs"));

    /// The encoded `FileDescriptorSet` of readerd.v1, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("readerd_v1");

    impl RaggedTensor {
        /// TensorFlow's static shape (`RaggedTensor.shape`): the number of rows, each
        /// partition's uniform row length, then the inner dimensions of `flat_values`;
        /// `None` where rows vary (`-1` on the wire).
        pub fn static_shape(&self) -> Vec<Option<u64>> {
            self.shape.iter().map(|&dim| u64::try_from(dim).ok()).collect()
        }

        /// The number of ragged partitions (TensorFlow's `ragged_rank`).
        pub fn ragged_rank(&self) -> usize {
            self.nested_row_splits.len()
        }
    }
}

/// HTTP/2 settings of readerd's server and clients. Batches are megabytes: with HTTP/2's
/// default 16 KiB frames and 64 KiB windows a stream spends its time on frame headers and
/// window updates (CRATES.md measured tonic's loopback rate about doubling with these).
pub mod http2 {
    /// The largest DATA frame a peer may send us (SETTINGS_MAX_FRAME_SIZE).
    pub const MAX_FRAME_BYTES: u32 = 1 << 20;
    /// Flow-control window of each stream.
    pub const STREAM_WINDOW_BYTES: u32 = 16 << 20;
    /// Flow-control window of a connection (all its streams).
    pub const CONNECTION_WINDOW_BYTES: u32 = 64 << 20;
}

/// How long a replica's lease of a split lasts without renewal, by default (the server's
/// `--lease-time`; replicas renew every third of it). Both sides use it: the server as its
/// default lease time, clients to size how long a replica may stay silent before they leave
/// it (`readerd_client::replicas`), which must be well within a lease plus the grace period
/// replicas give a dead replica's consumers.
pub const REPLICA_LEASE: std::time::Duration = std::time::Duration::from_secs(10);

pub mod tensorflow {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/tensorflow.rs"));
}

pub mod flight {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/arrow.flight.protocol.rs"));
}

#[cfg(test)]
mod tests {
    use super::v1 as pb;

    #[test]
    fn spec_json_uses_design_field_names() {
        let json = r#"{
          "source": {"files": ["a/*.tfrecord"], "format": "FIXED_LENGTH", "compression": "GZIP",
                     "headerBytes": "5", "recordBytes": 4, "hopBytes": 3},
          "decoder": {"csv": {"columns": [{"name": "x", "dtype": "FLOAT32",
                                           "default": {"floatValues": ["NaN", -0.0, "Infinity"]}}]}},
          "pipeline": {"seed": 42, "numEpochs": -1, "batchSize": 8, "onError": "SKIP",
                       "shuffle": {"bufferSize": 16}}
        }"#;
        let spec: pb::DatasetSpec = serde_json::from_str(json).unwrap();
        let source = spec.source.unwrap();
        assert_eq!(source.format(), pb::Format::FixedLength);
        assert_eq!(source.compression(), pb::Compression::Gzip);
        assert_eq!((source.header_bytes, source.record_bytes, source.hop_bytes), (5, 4, 3));
        let Some(pb::decoder::Kind::Csv(csv)) = spec.decoder.unwrap().kind else { panic!("csv decoder expected") };
        let floats = &csv.columns[0].default.as_ref().unwrap().float_values;
        assert!(floats[0].is_nan());
        assert!(floats[1] == 0.0 && floats[1].is_sign_negative());
        assert_eq!(floats[2], f64::INFINITY);
        assert_eq!(csv.field_delim, None);
        let pipeline = spec.pipeline.unwrap();
        assert_eq!((pipeline.num_epochs, pipeline.batch_size), (-1, 8));
        assert_eq!(pipeline.on_error(), pb::OnError::Skip);
    }

    #[test]
    fn unknown_spec_fields_are_rejected() {
        let err = serde_json::from_str::<pb::DatasetSpec>(r#"{"source": {"filez": []}}"#);
        assert!(err.is_err());
    }
}
