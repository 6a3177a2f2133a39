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

/// Payloads at least this large are sent from their own buffers; smaller ones are copied
/// into the framing (a chunk costs more than copying a few KiB).
pub const PAYLOAD_SLICE_BYTES: usize = 8 << 10;

/// Chunks of encoded gRPC messages, in order.
#[derive(Debug, Default)]
pub struct Frames {
    chunks: VecDeque<Bytes>,
    /// Framing not yet made a chunk.
    small: BytesMut,
}

impl Frames {
    /// Appends `message` as one gRPC frame (uncompressed), unless its encoding is longer
    /// than `max_bytes` (then `RESOURCE_EXHAUSTED`, nothing appended).
    pub fn push(&mut self, message: &pb::ReadResponse, max_bytes: usize) -> Result<(), tonic::Status> {
        let len = message.encoded_len();
        let header = u32::try_from(len).ok().filter(|_| len <= max_bytes).ok_or_else(|| {
            tonic::Status::resource_exhausted(format!("a message of {len} bytes is over the limit of {max_bytes}"))
        })?;
        self.small.put_u8(0);
        self.small.put_u32(header);
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
        if bytes.len() < PAYLOAD_SLICE_BYTES {
            self.small.extend_from_slice(bytes);
        } else {
            if !self.small.is_empty() {
                self.chunks.push_back(self.small.split().freeze());
            }
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
        use prost::encoding::{bool, int64, message, string};
        let pb::Element { seq, keys, features, more_rows, key_table, records } = element;
        if *seq != 0 {
            int64::encode(1, seq, &mut self.small);
        }
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
mod tests {
    use bytes::Bytes;
    use prost::Message;

    use super::{Frames, PAYLOAD_SLICE_BYTES, Unframer};
    use crate::v1 as pb;

    fn dense(dtype: pb::DataType, shape: Vec<i64>, data: Vec<u8>, strings: Vec<Vec<u8>>) -> pb::DenseTensor {
        pb::DenseTensor {
            dtype: dtype as i32,
            shape,
            data: Bytes::from(data),
            strings: strings.into_iter().map(Bytes::from).collect(),
        }
    }

    fn feature(name: &str, kind: pb::tensor::Kind) -> pb::Feature {
        pb::Feature { name: name.into(), tensor: Some(pb::Tensor { kind: Some(kind) }) }
    }

    /// Every kind of tensor, payloads below and above the slicing size, empty ones and
    /// proto3 defaults (seq 0, dtype 0, no name).
    fn messages() -> Vec<pb::ReadResponse> {
        let big = vec![7u8; PAYLOAD_SLICE_BYTES + 3];
        let element = |seq| pb::Element {
            seq,
            keys: vec!["a.tfrecord:0".into(), "a.tfrecord:19".into()],
            features: vec![
                feature(
                    "image",
                    pb::tensor::Kind::Dense(dense(
                        pb::DataType::String,
                        vec![2],
                        vec![],
                        vec![big.clone(), b"x".to_vec()],
                    )),
                ),
                feature("x", pb::tensor::Kind::Dense(dense(pb::DataType::Float32, vec![2, 2], vec![1; 16], vec![]))),
                feature(
                    "wide",
                    pb::tensor::Kind::Dense(dense(pb::DataType::Uint8, vec![big.len() as i64], big.clone(), vec![])),
                ),
                feature("", pb::tensor::Kind::Dense(dense(pb::DataType::DtInvalid, vec![], vec![], vec![vec![]]))),
                feature(
                    "tok",
                    pb::tensor::Kind::Sparse(pb::SparseTensor {
                        indices: Some(dense(pb::DataType::Int64, vec![1, 2], vec![0; 16], vec![])),
                        values: Some(dense(pb::DataType::Int64, vec![1], big[..8].to_vec(), vec![])),
                        dense_shape: None,
                    }),
                ),
                feature(
                    "spans",
                    pb::tensor::Kind::Ragged(pb::RaggedTensor {
                        flat_values: Some(dense(
                            pb::DataType::Float32,
                            vec![big.len() as i64 / 4],
                            big[..big.len() / 4 * 4].to_vec(),
                            vec![],
                        )),
                        nested_row_splits: vec![dense(pb::DataType::Int64, vec![3], vec![2; 24], vec![])],
                        shape: vec![2, -1],
                    }),
                ),
            ],
            more_rows: seq == 1,
            key_table: (seq == 2).then(|| pb::KeyTable {
                files: vec!["a".into()],
                file: vec![0, 0],
                number: vec![0, 19],
            }),
            records: (seq == 2).then(|| pb::RecordIds { epoch: vec![0], file: vec![1], number: vec![5] }),
        };
        vec![
            pb::ReadResponse {
                kind: Some(pb::read_response::Kind::Started(pb::StreamStarted {
                    stream_id: "s-1".into(),
                    first_seq: 0,
                    replica_id: String::new(),
                })),
            },
            pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element(0))) },
            pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element(1))) },
            pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element(2))) },
            pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(pb::Element::default())) },
            pb::ReadResponse { kind: Some(pb::read_response::Kind::EndOfSequence(pb::EndOfSequence { after_seq: 2 })) },
            pb::ReadResponse { kind: None },
        ]
    }

    /// The bytes `Frames` sends for `messages`, its chunks joined.
    fn sent_by_frames(messages: &[pb::ReadResponse]) -> Vec<u8> {
        let mut frames = Frames::default();
        for message in messages {
            frames.push(message, usize::MAX).unwrap();
        }
        let mut sent = Vec::new();
        while let Some(chunk) = frames.pop() {
            sent.extend_from_slice(&chunk);
        }
        sent
    }

    /// `messages` as gRPC frames of prost's encoding (`encode_to_vec`).
    fn framed_by_prost(messages: &[pb::ReadResponse]) -> Vec<u8> {
        let mut expected = Vec::new();
        for message in messages {
            expected.push(0u8);
            expected.extend_from_slice(&u32::try_from(message.encoded_len()).unwrap().to_be_bytes());
            expected.extend_from_slice(&message.encode_to_vec());
        }
        expected
    }

    #[test]
    fn the_chunks_are_prosts_encoding_framed_for_grpc() {
        assert_eq!(sent_by_frames(&messages()), framed_by_prost(&messages()));
    }

    #[test]
    fn large_payloads_are_sent_from_their_own_buffers() {
        let message = &messages()[1];
        let Some(pb::read_response::Kind::Element(element)) = &message.kind else { unreachable!() };
        let image = &element.features[0].tensor.as_ref().unwrap();
        let Some(pb::tensor::Kind::Dense(image)) = &image.kind else { unreachable!() };
        let mut frames = Frames::default();
        frames.push(message, usize::MAX).unwrap();
        let mut chunks = Vec::new();
        while let Some(chunk) = frames.pop() {
            chunks.push(chunk);
        }
        // The large image is a chunk of its own over the same memory: not copied.
        assert!(
            chunks
                .iter()
                .any(|chunk| chunk.as_ptr() == image.strings[0].as_ptr() && chunk.len() == image.strings[0].len())
        );
        // The small one was copied into the framing.
        assert!(!chunks.iter().any(|chunk| chunk.as_ptr() == image.strings[1].as_ptr()));
    }

    /// The encoder's chunks, cut again at `cut` bytes, read back by the unframer.
    fn round_trip(cut: usize) -> (Vec<pb::ReadResponse>, Vec<Bytes>) {
        let mut frames = Frames::default();
        for message in messages() {
            frames.push(&message, usize::MAX).unwrap();
        }
        let mut unframer = Unframer::default();
        let mut chunks = Vec::new();
        let mut decoded = Vec::new();
        while let Some(mut chunk) = frames.pop() {
            chunks.push(chunk.clone());
            while !chunk.is_empty() {
                unframer.push(chunk.split_to(cut.min(chunk.len())));
                while let Some(message) = unframer.next_message::<pb::ReadResponse>(usize::MAX).unwrap() {
                    decoded.push(message);
                }
            }
        }
        assert_eq!(unframer.buffered(), 0);
        (decoded, chunks)
    }

    #[test]
    fn the_unframer_reads_back_what_was_framed_however_it_is_cut() {
        for cut in [1, 3, 5, 7, 1000, PAYLOAD_SLICE_BYTES, usize::MAX] {
            assert_eq!(round_trip(cut).0, messages(), "cut at {cut}");
        }
    }

    #[test]
    fn payloads_received_whole_are_not_copied() {
        let (decoded, chunks) = round_trip(usize::MAX);
        let Some(pb::read_response::Kind::Element(element)) = &decoded[1].kind else { unreachable!() };
        let Some(pb::tensor::Kind::Dense(image)) = &element.features[0].tensor.as_ref().unwrap().kind else {
            unreachable!()
        };
        assert!(chunks.iter().any(|chunk| chunk.as_ptr() == image.strings[0].as_ptr()));
    }

    #[test]
    fn the_unframer_refuses_what_it_cannot_take() {
        let mut unframer = Unframer::default();
        unframer.push(Bytes::from_static(&[0, 0, 0, 1, 0]));
        let err = unframer.next_message::<pb::ReadResponse>(100).unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        let mut unframer = Unframer::default();
        unframer.push(Bytes::from_static(&[1, 0, 0, 0, 0]));
        assert_eq!(unframer.next_message::<pb::ReadResponse>(100).unwrap_err().code(), tonic::Code::Unimplemented);
        let mut unframer = Unframer::default();
        unframer.push(Bytes::from_static(&[0, 0, 0, 0, 2, 0xff, 0xff]));
        assert_eq!(unframer.next_message::<pb::ReadResponse>(100).unwrap_err().code(), tonic::Code::Internal);
    }

    #[test]
    fn a_message_over_the_limit_is_refused_whole() {
        let mut frames = Frames::default();
        let message = &messages()[1];
        let err = frames.push(message, message.encoded_len() - 1).unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert!(frames.pop().is_none());
    }

    /// Random messages, every field of every message `Frames` encodes by hand drawn (every
    /// dtype, strings, sparse and ragged tensors, payloads on both sides of
    /// [`PAYLOAD_SLICE_BYTES`], proto3 defaults): `Frames` sends prost's bytes.
    mod random {
        use bytes::Bytes;
        use proptest::collection::vec;
        use proptest::option;
        use proptest::prelude::*;

        use super::{PAYLOAD_SLICE_BYTES, framed_by_prost, sent_by_frames};
        use crate::v1 as pb;

        /// A payload: a few random bytes, none, or one just below or above the slicing size.
        fn payload() -> impl Strategy<Value = Bytes> {
            let large = (PAYLOAD_SLICE_BYTES - 2..PAYLOAD_SLICE_BYTES + 2, any::<u8>());
            prop_oneof![
                4 => vec(any::<u8>(), 0..24).prop_map(Bytes::from),
                1 => large.prop_map(|(len, byte)| Bytes::from(vec![byte; len])),
            ]
        }

        /// Every `DataType`, and numbers no enum value has.
        fn dtype() -> impl Strategy<Value = i32> {
            prop_oneof![8 => 0..=pb::DataType::String as i32, 1 => any::<i32>()]
        }

        fn dense() -> impl Strategy<Value = pb::DenseTensor> {
            let shape = vec(any::<i64>(), 0..4);
            // Numbers as `data`, STRING as `strings`, and both at once (the encoder must not care).
            let strings = vec(payload(), 0..4);
            (dtype(), shape, payload(), strings, 0..3u8).prop_map(|(dtype, shape, data, strings, form)| {
                let (data, strings) = match form {
                    0 => (data, Vec::new()),
                    1 => (Bytes::new(), strings),
                    _ => (data, strings),
                };
                let dtype = if form == 1 { pb::DataType::String as i32 } else { dtype };
                pb::DenseTensor { dtype, shape, data, strings }
            })
        }

        fn tensor() -> impl Strategy<Value = pb::Tensor> {
            let sparse = (option::of(dense()), option::of(dense()), option::of(dense()))
                .prop_map(|(indices, values, dense_shape)| pb::SparseTensor { indices, values, dense_shape });
            let ragged = (option::of(dense()), vec(dense(), 0..3), vec(any::<i64>(), 0..4)).prop_map(
                |(flat_values, nested_row_splits, shape)| pb::RaggedTensor { flat_values, nested_row_splits, shape },
            );
            let kind = prop_oneof![
                dense().prop_map(pb::tensor::Kind::Dense),
                sparse.prop_map(pb::tensor::Kind::Sparse),
                ragged.prop_map(pb::tensor::Kind::Ragged),
            ];
            option::of(kind).prop_map(|kind| pb::Tensor { kind })
        }

        fn feature() -> impl Strategy<Value = pb::Feature> {
            ("[a-z_]{0,8}", option::of(tensor())).prop_map(|(name, tensor)| pb::Feature { name, tensor })
        }

        fn element() -> impl Strategy<Value = pb::Element> {
            let key_table = (vec("[a-z./]{0,12}", 0..3), vec(any::<u32>(), 0..4), vec(any::<u64>(), 0..4))
                .prop_map(|(files, file, number)| pb::KeyTable { files, file, number });
            let records = (vec(any::<u64>(), 0..3), vec(any::<u32>(), 0..3), vec(any::<u64>(), 0..3))
                .prop_map(|(epoch, file, number)| pb::RecordIds { epoch, file, number });
            let seq = prop_oneof![Just(0i64), any::<i64>()];
            let keys = vec("[a-z.:0-9]{0,16}", 0..4);
            (seq, keys, vec(feature(), 0..4), any::<bool>(), option::of(key_table), option::of(records)).prop_map(
                |(seq, keys, features, more_rows, key_table, records)| pb::Element {
                    seq,
                    keys,
                    features,
                    more_rows,
                    key_table,
                    records,
                },
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]

            #[test]
            fn frames_send_prosts_bytes_for_any_element(elements in vec(element(), 1..4)) {
                let messages: Vec<pb::ReadResponse> = elements
                    .into_iter()
                    .map(|element| pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element)) })
                    .collect();
                prop_assert_eq!(sent_by_frames(&messages), framed_by_prost(&messages));
            }
        }
    }
}
