//! The gRPC codec of `readerd.v1`: prost, with one change to encoding.
//!
//! tonic's prost encoder writes a message into the stream's buffer piece by piece, so a
//! 28 MB batch grows that buffer by doubling: a new allocation, a copy and fresh pages
//! (faulted in and zeroed by the kernel) at every step, for every message. This encoder
//! reserves the message's encoded length first. Once the transport has written the
//! previous message, tonic's buffer is unique again and the reservation reuses it, so a
//! stream of large batches keeps one buffer instead of mapping a new one per message.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};
use tonic_prost::ProstDecoder;

/// `tonic_prost::ProstCodec`, but reserving each message's length before encoding it.
#[derive(Debug, Clone, Copy)]
pub struct ReservingCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ReservingCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for ReservingCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ReservingEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ReservingEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        // tonic's decoder already reserves a message's length from its header.
        ProstDecoder::new(BufferSettings::default())
    }
}

/// Encodes a prost message into a buffer reserved to its length.
#[derive(Debug, Clone, Copy)]
pub struct ReservingEncoder<T>(PhantomData<T>);

impl<T: Message> Encoder for ReservingEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        item.encode(buf).map_err(|err| Status::internal(format!("encoding a message: {err}")))
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use bytes::Bytes;
    use prost::Message;
    use tonic::codec::{Codec, EncodeBody};

    use super::ReservingCodec;
    use crate::v1 as pb;

    #[tokio::test]
    async fn frames_each_message_as_prost_encodes_it() {
        let element = |seq| pb::Element {
            seq,
            keys: vec![format!("a:{seq}"); 1000],
            features: Vec::new(),
            more_rows: false,
            key_table: None,
            records: None,
        };
        let messages = futures::stream::iter([element(1), element(2)].map(Ok));
        let encoder = ReservingCodec::<pb::Element, pb::Element>::default().encoder();
        let mut body = pin!(EncodeBody::new_client(encoder, messages, None, None));
        let mut framed = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| http_body::Body::poll_frame(body.as_mut(), cx)).await {
            framed.extend_from_slice(&frame.unwrap().into_data().unwrap_or_else(|_| Bytes::new()));
        }
        let mut expected = Vec::new();
        for message in [element(1), element(2)] {
            expected.push(0u8); // not compressed
            expected.extend_from_slice(&u32::try_from(message.encoded_len()).unwrap().to_be_bytes());
            expected.extend_from_slice(&message.encode_to_vec());
        }
        assert_eq!(framed, expected);
    }
}
