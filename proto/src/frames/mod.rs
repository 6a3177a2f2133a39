//! gRPC frames whose payloads are not copied: [`Frames`] writes `ReadResponse` messages
//! (the server), [`Unframer`] reads messages back from the chunks HTTP/2 received (the
//! client).
//!
//! tonic's codec encodes each message into one buffer, so every tensor byte of a batch is
//! copied once on its way to the socket. Here a message is written as a sequence of
//! chunks instead: the gRPC frame header and the protobuf framing (tags, lengths, small
//! fields) go into a small buffer, and every payload (`DenseTensor.data`, each of
//! `DenseTensor.strings`) of at least [`PAYLOAD_SLICE_BYTES`] becomes a chunk of its own,
//! a `Bytes` handle on the buffer it already lives in (the decoded record). HTTP/2 then
//! writes those handles to the socket. The bytes on the wire are exactly prost's
//! encoding of the message (fields in field-number order, proto3 defaults left out), so
//! any gRPC client decodes them.

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint};

use crate::v1 as pb;

/// The client's side: HTTP/2 hands over each DATA frame as `Bytes` (a slice of its read
/// buffer); tonic would copy them into one decode buffer. The unframer keeps the chunks
/// as they came and decodes each message from them, so a `bytes` field that lies within
/// one chunk (the server sends each large payload as a chunk of its own) becomes a view
/// of the received frame; one that straddles chunks is copied.
#[derive(Debug, Default)]
pub struct Unframer {
    chunks: VecDeque<Bytes>,
    buffered: usize,
}

impl Unframer {
    pub fn push(&mut self, chunk: Bytes) {
        self.buffered += chunk.len();
        if !chunk.is_empty() {
            self.chunks.push_back(chunk);
        }
    }

    /// Bytes received and not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// The next whole message, `None` until all of it arrived. A message longer than
    /// `max_bytes` is `RESOURCE_EXHAUSTED` (nothing of that size is held for it).
    pub fn next_message<M: Message + Default>(&mut self, max_bytes: usize) -> Result<Option<M>, tonic::Status> {
        if self.buffered < 5 {
            return Ok(None);
        }
        let mut header = [0u8; 5];
        let mut filled = 0;
        for chunk in &self.chunks {
            let take = (5 - filled).min(chunk.len());
            header[filled..filled + take].copy_from_slice(&chunk[..take]);
            filled += take;
            if filled == 5 {
                break;
            }
        }
        if header[0] != 0 {
            return Err(tonic::Status::unimplemented("a compressed message (readerd sends none)"));
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if len > max_bytes {
            return Err(tonic::Status::resource_exhausted(format!(
                "a message of {len} bytes is over the limit of {max_bytes}"
            )));
        }
        if self.buffered < 5 + len {
            return Ok(None);
        }
        let mut taken = Taken { chunks: &mut self.chunks, remaining: 5 + len };
        taken.advance(5);
        let message =
            M::decode(&mut taken).map_err(|err| tonic::Status::internal(format!("decoding a message: {err}")));
        // Whatever the decoder left of the message is dropped with it.
        let rest = taken.remaining;
        taken.advance(rest);
        self.buffered -= 5 + len;
        message.map(Some)
    }
}

/// The first `remaining` bytes of a queue of chunks, as a `Buf` that hands out slices of a
/// chunk without copying.
struct Taken<'a> {
    chunks: &'a mut VecDeque<Bytes>,
    remaining: usize,
}

impl bytes::Buf for Taken<'_> {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        match self.chunks.front() {
            Some(front) => &front[..front.len().min(self.remaining)],
            None => &[],
        }
    }

    fn advance(&mut self, mut count: usize) {
        assert!(count <= self.remaining, "advance past the message");
        self.remaining -= count;
        while count > 0 {
            let front = self.chunks.front_mut().expect("the message's bytes are buffered");
            if front.len() > count {
                front.advance(count);
                return;
            }
            count -= front.len();
            self.chunks.pop_front();
        }
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        assert!(len <= self.remaining, "copy past the message");
        match self.chunks.front_mut() {
            Some(front) if front.len() >= len => {
                self.remaining -= len;
                let bytes = front.split_to(len);
                if front.is_empty() {
                    self.chunks.pop_front();
                }
                bytes
            }
            _ => {
                let mut copied = BytesMut::with_capacity(len);
                copied.put((&mut *self).take(len));
                copied.freeze()
            }
        }
    }
}

/// A `ReadResponse` element's encoding without its `seq`, which is all of it that is
/// the same on every stream the element goes out on: made once ([`EncodedElement::new`]),
/// then framed for each stream with its own `seq` ([`Frames::push_encoded`]), so that a
/// shared reader's element sent to several jobs is encoded once. Its payloads of at least
/// [`PAYLOAD_SLICE_BYTES`] stay handles on their buffers; the rest is one copy.
#[derive(Debug, Clone, Default)]
pub struct EncodedElement {
    chunks: Vec<Bytes>,
    len: usize,
    /// Of `len`, the bytes copied into its own buffers (the rest are payloads' handles).
    copied: usize,
}

impl EncodedElement {
    /// `element`'s fields after `seq` (whose own `seq` is left out).
    pub fn new(element: &pb::Element) -> Self {
        let mut frames = Frames::default();
        frames.element_after_seq(element);
        let copied = frames.small.len() + frames.chunks.iter().map(Bytes::len).sum::<usize>() - frames.shared;
        let chunks: Vec<Bytes> = std::iter::from_fn(|| frames.pop()).collect();
        let len = chunks.iter().map(Bytes::len).sum();
        Self { chunks, len, copied }
    }

    /// The memory it holds of its own: what it copied (its payloads' handles hold none).
    pub fn copied_bytes(&self) -> usize {
        self.copied
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Payloads at least this large are sent from their own buffers; smaller ones are copied
/// into the framing (a chunk costs more than copying a few KiB).
pub const PAYLOAD_SLICE_BYTES: usize = 8 << 10;

/// Chunks of encoded gRPC messages, in order.
#[derive(Debug, Default)]
pub struct Frames {
    chunks: VecDeque<Bytes>,
    /// Framing not yet made a chunk.
    small: BytesMut,
    /// Bytes of the chunks that are payloads' own buffers (not copied).
    shared: usize,
}

impl Frames {
    /// Appends `message` as one gRPC frame (uncompressed), unless its encoding is longer
    /// than `max_bytes` (then `RESOURCE_EXHAUSTED`, nothing appended).
    pub fn push(&mut self, message: &pb::ReadResponse, max_bytes: usize) -> Result<(), tonic::Status> {
        self.header(message.encoded_len(), max_bytes)?;
        let pb::ReadResponse { kind } = message;
        match kind {
            Some(pb::read_response::Kind::Element(element)) => {
                encode_key(1, WireType::LengthDelimited, &mut self.small);
                encode_varint(element.encoded_len() as u64, &mut self.small);
                self.element(element);
            }
            // Small messages with no payload: prost's own encoding.
            _ => message.encode_raw(&mut self.small),
        }
        Ok(())
    }

    /// Appends element `seq`, whose other fields `encoded` holds, as one gRPC frame of a
    /// `ReadResponse`: the bytes [`Frames::push`] writes for that element, its encoding
    /// shared rather than made again. `RESOURCE_EXHAUSTED` past `max_bytes`, as there.
    pub fn push_encoded(&mut self, seq: i64, encoded: &EncodedElement, max_bytes: usize) -> Result<(), tonic::Status> {
        use prost::encoding::{encoded_len_varint, int64, key_len};
        let seq_len = if seq != 0 { int64::encoded_len(1, &seq) } else { 0 };
        let element_len = seq_len + encoded.len;
        self.header(key_len(1) + encoded_len_varint(element_len as u64) + element_len, max_bytes)?;
        self.nested(1, element_len);
        if seq != 0 {
            int64::encode(1, &seq, &mut self.small);
        }
        for chunk in &encoded.chunks {
            self.append(chunk);
        }
        Ok(())
    }

    /// The gRPC frame header of a message of `len` bytes (uncompressed), unless `len` is
    /// over `max_bytes`.
    fn header(&mut self, len: usize, max_bytes: usize) -> Result<(), tonic::Status> {
        let header = u32::try_from(len).ok().filter(|_| len <= max_bytes).ok_or_else(|| {
            tonic::Status::resource_exhausted(format!("a message of {len} bytes is over the limit of {max_bytes}"))
        })?;
        self.small.put_u8(0);
        self.small.put_u32(header);
        Ok(())
    }

    /// Whether a chunk is waiting, or at least `framing` bytes of framing.
    pub fn ready(&self, framing: usize) -> bool {
        !self.chunks.is_empty() || self.small.len() >= framing
    }

    /// The next chunk, the framing written so far included; `None` when all are taken.
    pub fn pop(&mut self) -> Option<Bytes> {
        if let Some(chunk) = self.chunks.pop_front() {
            return Some(chunk);
        }
        (!self.small.is_empty()).then(|| self.small.split().freeze())
    }

    fn payload(&mut self, tag: u32, bytes: &Bytes) {
        encode_key(tag, WireType::LengthDelimited, &mut self.small);
        encode_varint(bytes.len() as u64, &mut self.small);
        self.append(bytes);
    }

    /// `bytes`, copied into the framing when small, else as a chunk of its own.
    fn append(&mut self, bytes: &Bytes) {
        if bytes.len() < PAYLOAD_SLICE_BYTES {
            self.small.extend_from_slice(bytes);
        } else {
            if !self.small.is_empty() {
                self.chunks.push_back(self.small.split().freeze());
            }
            self.shared += bytes.len();
            self.chunks.push_back(bytes.clone());
        }
    }

    /// A length-delimited field holding `len` bytes, written next by the caller.
    fn nested(&mut self, tag: u32, len: usize) {
        encode_key(tag, WireType::LengthDelimited, &mut self.small);
        encode_varint(len as u64, &mut self.small);
    }

    // Each message below is destructured whole (no `..`): a field added to the proto fails
    // to compile here until it is encoded, in field-number order.

    fn element(&mut self, element: &pb::Element) {
        if element.seq != 0 {
            prost::encoding::int64::encode(1, &element.seq, &mut self.small);
        }
        self.element_after_seq(element);
    }

    /// `element`'s fields after `seq`.
    fn element_after_seq(&mut self, element: &pb::Element) {
        use prost::encoding::{bool, message, string};
        let pb::Element { seq: _, keys, features, more_rows, key_table, records } = element;
        string::encode_repeated(2, keys, &mut self.small);
        for feature in features {
            self.nested(3, feature.encoded_len());
            self.feature(feature);
        }
        if *more_rows {
            bool::encode(4, more_rows, &mut self.small);
        }
        if let Some(table) = key_table {
            message::encode(5, table, &mut self.small);
        }
        if let Some(records) = records {
            message::encode(6, records, &mut self.small);
        }
    }

    fn feature(&mut self, feature: &pb::Feature) {
        let pb::Feature { name, tensor } = feature;
        if !name.is_empty() {
            prost::encoding::string::encode(1, name, &mut self.small);
        }
        if let Some(tensor) = tensor {
            self.nested(2, tensor.encoded_len());
            self.tensor(tensor);
        }
    }

    fn tensor(&mut self, tensor: &pb::Tensor) {
        let pb::Tensor { kind } = tensor;
        match kind {
            None => {}
            Some(pb::tensor::Kind::Dense(dense)) => self.dense_field(1, dense),
            Some(pb::tensor::Kind::Sparse(sparse)) => {
                self.nested(2, sparse.encoded_len());
                let pb::SparseTensor { indices, values, dense_shape } = sparse;
                for (tag, part) in [(1, indices), (2, values), (3, dense_shape)] {
                    if let Some(dense) = part {
                        self.dense_field(tag, dense);
                    }
                }
            }
            Some(pb::tensor::Kind::Ragged(ragged)) => {
                self.nested(3, ragged.encoded_len());
                let pb::RaggedTensor { flat_values, nested_row_splits, shape } = ragged;
                if let Some(flat) = flat_values {
                    self.dense_field(1, flat);
                }
                for splits in nested_row_splits {
                    self.dense_field(2, splits);
                }
                prost::encoding::int64::encode_packed(3, shape, &mut self.small);
            }
        }
    }

    fn dense_field(&mut self, tag: u32, dense: &pb::DenseTensor) {
        use prost::encoding::{int32, int64};
        self.nested(tag, dense.encoded_len());
        let pb::DenseTensor { dtype, shape, data, strings } = dense;
        if *dtype != 0 {
            int32::encode(1, dtype, &mut self.small);
        }
        int64::encode_packed(2, shape, &mut self.small);
        if !data.is_empty() {
            self.payload(3, data);
        }
        for value in strings {
            self.payload(4, value);
        }
    }
}

#[cfg(test)]
mod tests;
