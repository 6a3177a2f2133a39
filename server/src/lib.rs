//! readerd: named, shared reader resources that frame training records from files,
//! exactly as TensorFlow's readers do, and stream them to trainers over gRPC.
//!
//! # Layout: the path of a record
//!
//! - [`format`]: framing, bytes → records (TFRecord, fixed length, text lines). No I/O,
//!   no tokio: each format is a [`format::Framer`] over byte windows. TFRecord's masked
//!   CRC is `readerd_common::tfrecord_crc`, the client's too.
//! - [`source`]: files → records: data roots, GZIP/ZLIB, the driver that feeds framers and
//!   slices records out of its read buffer without copying, and `source::FileRecords`,
//!   where every file's records come from (a new kind of source registers there);
//!   `source::columnar`, Parquet and Arrow IPC files, a record per row.
//!   Blocking I/O. An object-store root's URL becomes its store and key prefix in
//!   `readerd_common::object`, as readerctl's URLs do (one HTTP client, one set of path
//!   rules, retries and time limits).
//! - [`decode`]: records → tensors as TensorFlow's ops decode them, and columnar rows
//!   by the `columns` decoder (`decode::columnar`, from rows of Arrow batches).
//!   No I/O, no tokio.
//! - [`spec`]: a `pb::DatasetSpec` checked into the settings the server acts on (a
//!   mixture's components and weights in `spec/mix.rs`).
//! - [`pipeline`]: records in order: epochs, file shuffling, sharding, parallel
//!   interleave, the shuffle buffer. Deterministic for a spec and seed: its generator is
//!   `readerd_common::rng`'s SplitMix64 (re-exported as `pipeline::rng`).
//! - [`transform`]: the per-element operations after decoding (`transforms`: TensorFlow's
//!   image and array ops, JPEG by libjpeg-turbo), each element's random draws its own.
//! - [`reader`]: a reader resource, as stages: where records come from
//!   (`reader/records.rs`, a mixture's in `reader/mix.rs`), where they are batched
//!   (`reader/batcher.rs`, one loop for every source), where a batch is decoded
//!   (`reader/decoding.rs`, ordered and parallel in `reader/chunks.rs`), where a shared
//!   reader keeps its books (`reader/shared_books.rs`), where it is checkpointed
//!   (`reader/state.rs`), and what it answers to for what it hands out, this server or the split ledger
//!   ([`coordinator`], `reader/ledger_coordinator.rs`).
//! - [`registry`]: the readers by `(container, shared_name)`.
//! - [`element`]: records → `pb::Element` for the wire.
//! - [`grpc`]: the thin `DataService` handlers, and in `grpc/stream.rs` the per-stream
//!   task that hands elements to a trainer.
//! - [`flight`]: the Arrow Flight plane on the same port (`DoGet` streams a reader's
//!   batches, `DoAction` checkpoints and acknowledges); [`columns`] lays elements out as
//!   Arrow record batches.
//! - [`cluster`]: replicas sharing a shared reader through PostgreSQL: the split ledger,
//!   leases and acknowledged records.
//! - [`consumer`]: who was given which element of a shared reader; redelivery.
//! - [`checkpoint`]: opening streams; checkpoints of private ones (snapshots, replay,
//!   tokens).
//! - [`state`]: the state store (SQLite by default, PostgreSQL for replicas) where
//!   checkpoints are committed.
//! - [`fuzzing`]: arbitrary bytes into the framers and decoders (cargo fuzz targets).
//! - [`error`]: `ServeError` and its one mapping to gRPC status codes.
//! - [`metrics`]: Prometheus counters and the `/metrics` endpoint.
//! - [`limits`]: RESOURCE_EXHAUSTED limits (readers, streams, files, batch bytes, rate).
//! - [`memory`]: the server-wide memory budget that growing buffers reserve from.
//! - [`batch_buffers`]: batches too large for the allocator to keep, reused instead of
//!   mapped and faulted in again for each batch.
//! - [`stats`]: a reader's stats as every call that returns them answers them.
//! - [`snapshots`]: which snapshots of a reader's state a full list drops (private
//!   streams' and shared readers' alike).
//! - [`auth`]: bearer tokens and the containers and verbs each may use.
//! - [`watch`]: is a trainer input-bound, and where the time goes: consumers' wait and
//!   step, readers' time by stage.
//! - [`status`]: what the server shows of it: `/status.json`, the status page, the last
//!   15 minutes, and the listener (`--metrics-listen`) that serves them with `/metrics`.
//! - [`server`], [`config`], [`shutdown`], [`telemetry`]: running the process.

pub mod auth;
pub mod batch_buffers;
pub mod checkpoint;
pub mod cluster;
pub mod columns;
pub mod config;
pub mod consumer;
pub mod coordinator;
pub mod decode;
pub mod element;
pub mod error;
pub mod flight;
pub mod format;
pub mod fuzzing;
pub mod grpc;
pub mod limits;
pub mod memory;
pub mod metrics;
pub mod pipeline;
pub mod reader;
pub mod registry;
pub mod server;
pub mod shutdown;
pub mod snapshots;
pub mod source;
pub mod spec;
pub mod state;
pub mod stats;
pub mod status;
pub mod telemetry;
pub mod transform;
pub mod watch;

pub use config::Config;
pub use server::run;
