//! Rust client of readerd, and the pieces of `readerctl`.
//!
//! - [`Client`]: connects to a server (large messages, wide HTTP/2 windows) and wraps
//!   the generated `DataService` client;
//! - [`json`]: tensors and elements in the JSON form of the golden vectors, as
//!   `readerctl read --output jsonl` prints them;
//! - [`resume`]: [`ResumingStream`], a stream that reconnects (backoff, several addresses)
//!   and resumes from its newest checkpoint, and [`merge`] of streams from several servers;
//! - [`replicas`]: [`replicas::ReplicaSession`], one consumer of a shared reader served
//!   by replicas, reading from all of them at once and surviving a replica's death;
//! - [`stream`](mod@stream): [`open_stream`], the stream `readerctl read` and the Python
//!   client read: one [`ReaderStream`], a [`ResumingStream`] on one server or a
//!   `ReplicaSession` on replicas; [`received`]: what each message of a stream asks its
//!   reader to act on ([`Received`]);
//! - [`tfrecord`]: TFRecord framing for local files; `inspect` (dump a local file),
//!   `convert` (CSV → TFRecord of Examples) and `demo` (the benchmark workloads), the
//!   file tools of `readerctl` (cargo feature `tools`, on by default; the Python package's
//!   native core builds without it); [`progress`]: its progress line;
//! - `object_url` (cargo feature `object-store`, on by default): `s3://`, `gs://`, `az://`
//!   and `http(s)://` objects read and written by those tools, their stores built by
//!   `readerd_common::object` as the server builds its data roots;
//! - `bench`: the load generator of `readerctl bench`; `echo`: its reference line,
//!   tonic's own loopback streaming rate (feature `tools` too);
//! - [`code_name`]: a gRPC code's canonical name (`DATA_LOSS`); [`status_code`] and
//!   [`status_message`]: a failed call's code and message, a broken connection as
//!   UNAVAILABLE ([`connection_failed`]); [`error_message`]: an error with its causes;
//!   `readerd_proto::allocator::tune(None)` is the allocator tuning a trainer that reads
//!   large batches should start with.
//!
//! Modules depend one way: the tools above use the private `client` ([`Client`],
//! [`ReadStream`]; its `Read` calls are made by `read_call`, which decodes messages from
//! the received HTTP/2 frames without copying them), `status` (the status helpers),
//! `payload` (an element's tensor bytes) and `rng` (`readerd_common`'s SplitMix64)
//! modules, which use none of them; this root only declares and re-exports. What the
//! client must agree on with the server byte for byte (the generator, TFRecord's masked
//! CRC) is `readerd_common`'s.

#[cfg(feature = "tools")]
pub mod bench;
pub mod consumer_clock;
#[cfg(feature = "tools")]
pub mod convert;
#[cfg(feature = "tools")]
pub mod convert_parquet;
#[cfg(feature = "tools")]
pub mod demo;
#[cfg(feature = "tools")]
pub mod demo_parquet;
#[cfg(feature = "tools")]
pub mod echo;
#[cfg(feature = "tools")]
pub mod inspect;
#[cfg(feature = "tools")]
pub mod inspect_parquet;
pub mod json;
#[cfg(feature = "object-store")]
pub mod object_url;
pub mod progress;
pub mod replicas;
pub mod resume;
pub mod stream;
pub mod tfrecord;

mod client;
#[cfg(feature = "tools")]
mod payload;
mod read_call;
mod rng;
mod status;

pub use client::{
    BearerToken, Client, ClientError, ConnectOptions, MAX_MESSAGE_BYTES, MESSAGE_BYTES, Pem, ReadStream, Service,
    SpecError, parse_spec, reader_ref,
};
pub use readerd_proto::v1;
pub use resume::{ANSWER_WITHIN, Event, KEEP_ALIVE, Received, Reconnect, ResumingStream, StreamError, merge, received};
pub use status::{code_name, connection_failed, error_message, status_code, status_message};
pub use stream::{ReaderStream, open_stream};
