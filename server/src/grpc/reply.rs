//! What a `Read` stream sends: [`Reply`], a message or an element still to be encoded,
//! and [`split_elements`], which cuts batches over the trainer's message size by rows.
//!
//! An element travels as itself up to the transport, so that the body that frames it
//! (`read_frames.rs`) can send the encoding the element's clones share
//! (`Element::encoded`): the jobs of a shared reader send each element of their window
//! encoded once. Other ways out (the generated server, Arrow Flight) take
//! `pb::ReadResponse`s ([`Reply::into_response`]).

use futures::StreamExt;
use futures::stream::BoxStream;
use readerd_proto::rows;
use readerd_proto::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::element::{Element, element_to_pb};

/// One message of a `Read` stream.
#[derive(Debug)]
pub enum Reply {
    Message(pb::ReadResponse),
    /// Element number `seq` of the stream, sent whole.
    Element(i64, Element),
}

impl Reply {
    /// The message it is.
    pub fn into_response(self) -> pb::ReadResponse {
        match self {
            Reply::Message(message) => message,
            Reply::Element(seq, element) => element_message(element_to_pb(seq, element)),
        }
    }
}

fn element_message(element: pb::Element) -> pb::ReadResponse {
    pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element)) }
}

/// The replies of a stream, from its task.
pub type ReadStream = ReceiverStream<Result<Reply, Status>>;
/// What `Read` sends: the stream's replies, large batches split by rows.
pub type ReplyStream = BoxStream<'static, Result<Reply, Status>>;

/// Each element of `stream` (of reader `reader`) larger than `max_bytes` as several
/// messages (0: none split); the others stay whole. A panic while cutting one ends the
/// stream with INTERNAL.
pub fn split_elements(stream: ReadStream, max_bytes: usize, reader: String) -> ReplyStream {
    if max_bytes == 0 {
        return stream.boxed();
    }
    stream
        .flat_map(move |reply| {
            let element = match reply {
                Ok(Reply::Element(seq, element)) if !element.whole_within(max_bytes) => element_to_pb(seq, element),
                Ok(Reply::Message(pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element)) })) => {
                    element
                }
                other => return futures::stream::iter(vec![other]),
            };
            let replies = match crate::reader::catch_decode_panic(&reader, || rows::split_rows(element, max_bytes)) {
                Ok(parts) => parts.into_iter().map(|part| Ok(Reply::Message(element_message(part)))).collect(),
                Err(err) => vec![Err(Status::from(err))],
            };
            futures::stream::iter(replies)
        })
        .boxed()
}
