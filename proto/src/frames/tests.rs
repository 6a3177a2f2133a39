//! The frames are prost's bytes, however they are cut, read back whole.

use bytes::Bytes;
use prost::Message;

use super::{EncodedElement, Frames, PAYLOAD_SLICE_BYTES, Unframer};
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
                pb::tensor::Kind::Dense(dense(pb::DataType::String, vec![2], vec![], vec![big.clone(), b"x".to_vec()])),
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
        key_table: (seq == 2).then(|| pb::KeyTable { files: vec!["a".into()], file: vec![0, 0], number: vec![0, 19] }),
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

/// The bytes `Frames` sends for `messages` when each element is encoded once without
/// its `seq` and pushed with it (other messages as they are).
fn sent_encoded(messages: &[pb::ReadResponse]) -> Vec<u8> {
    let mut frames = Frames::default();
    for message in messages {
        match &message.kind {
            Some(pb::read_response::Kind::Element(element)) => {
                let encoded = EncodedElement::new(&pb::Element { seq: 0, ..element.clone() });
                frames.push_encoded(element.seq, &encoded, usize::MAX).unwrap();
            }
            _ => frames.push(message, usize::MAX).unwrap(),
        }
    }
    let mut sent = Vec::new();
    while let Some(chunk) = frames.pop() {
        sent.extend_from_slice(&chunk);
    }
    sent
}

#[test]
fn an_element_encoded_once_is_sent_with_each_seq_as_prost_encodes_it() {
    assert_eq!(sent_encoded(&messages()), framed_by_prost(&messages()));
    let Some(pb::read_response::Kind::Element(element)) = messages()[1].kind.clone() else { unreachable!() };
    let encoded = EncodedElement::new(&pb::Element { seq: 0, ..element.clone() });
    for seq in [0, 1, 127, 128, i64::MAX, -1] {
        let message =
            pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(pb::Element { seq, ..element.clone() })) };
        let mut frames = Frames::default();
        frames.push_encoded(seq, &encoded, usize::MAX).unwrap();
        let sent: Vec<u8> = std::iter::from_fn(|| frames.pop()).flat_map(|chunk| chunk.to_vec()).collect();
        assert_eq!(sent, framed_by_prost(&[message]), "seq {seq}");
    }
    // Its large payload stays the decoded buffer, through both.
    let Some(pb::tensor::Kind::Dense(image)) = &element.features[0].tensor.as_ref().unwrap().kind else {
        unreachable!()
    };
    let mut frames = Frames::default();
    frames.push_encoded(7, &encoded, usize::MAX).unwrap();
    assert!(std::iter::from_fn(|| frames.pop()).any(|chunk| chunk.as_ptr() == image.strings[0].as_ptr()));
    // Over the limit it is refused whole, as `push` refuses it.
    let mut frames = Frames::default();
    assert_eq!(frames.push_encoded(7, &encoded, encoded.len()).unwrap_err().code(), tonic::Code::ResourceExhausted);
    assert!(frames.pop().is_none());
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
        chunks.iter().any(|chunk| chunk.as_ptr() == image.strings[0].as_ptr() && chunk.len() == image.strings[0].len())
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

    use super::{PAYLOAD_SLICE_BYTES, framed_by_prost, sent_by_frames, sent_encoded};
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
            prop_assert_eq!(sent_encoded(&messages), framed_by_prost(&messages));
        }
    }
}
