//! [`ReadWithoutCopies`]: `readerd.v1.DataService` with its `Read` streams sent without
//! copying their tensor payloads.
//!
//! tonic's generated server encodes each message into one buffer (a copy of every byte of
//! every batch). This service answers `/readerd.v1.DataService/Read` itself: it decodes
//! the request, calls the handler behind `DataService::read` (`read_replies`), and streams
//! its messages as [`Frames`] (the payloads as handles on the buffers they were decoded
//! into, framed as prost would; an element of a job's window as the encoding its clones
//! share, with this stream's `seq`). Every other method goes to the generated server.
//! Sitting inside the token interceptor, it sees the requests the handlers see.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use futures::Stream;
use http_body::Frame;
use http_body_util::BodyExt;
use prost::Message;
use readerd_proto::frames::Frames;
use readerd_proto::v1 as pb;
use tonic::Status;
use tonic::body::Body;
use tonic::server::NamedService;

use super::{DataService, Reply, ReplyStream};

const READ_PATH: &str = "/readerd.v1.DataService/Read";

/// Framing of this many bytes is sent once no more messages are ready (small elements
/// travel several to an HTTP/2 frame, as tonic's encoder sends them).
const COALESCE_BYTES: usize = 32 << 10;

/// The generated server, with `Read` answered without payload copies; see the module
/// documentation.
#[derive(Clone)]
pub struct ReadWithoutCopies {
    generated: pb::data_service_server::DataServiceServer<DataService>,
    data: Arc<DataService>,
    max_request_bytes: usize,
    max_message_bytes: usize,
}

impl ReadWithoutCopies {
    pub fn new(data: Arc<DataService>, max_request_bytes: usize, max_message_bytes: usize) -> Self {
        let generated = pb::data_service_server::DataServiceServer::from_arc(data.clone())
            .max_decoding_message_size(max_request_bytes)
            .max_encoding_message_size(max_message_bytes);
        Self { generated, data, max_request_bytes, max_message_bytes }
    }
}

impl NamedService for ReadWithoutCopies {
    const NAME: &'static str = "readerd.v1.DataService";
}

impl tower::Service<http::Request<Body>> for ReadWithoutCopies {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.uri().path() != READ_PATH {
            return Box::pin(self.generated.call(request));
        }
        let (data, max_request, max_message) = (self.data.clone(), self.max_request_bytes, self.max_message_bytes);
        Box::pin(async move {
            let response = match read(&data, request, max_request).await {
                Ok(messages) => streaming_response(messages, max_message),
                Err(status) => status.into_http(),
            };
            Ok(response)
        })
    }
}

/// Decodes the `ReadRequest` and opens the stream through the handler.
async fn read(data: &DataService, request: http::Request<Body>, max_bytes: usize) -> Result<ReplyStream, Status> {
    let (parts, body) = request.into_parts();
    let mut body = http_body_util::Limited::new(body, max_bytes.saturating_add(5))
        .collect()
        .await
        .map_err(|err| {
            Status::resource_exhausted(format!("the request is over the limit of {max_bytes} bytes: {err}"))
        })?
        .to_bytes();
    if body.len() < 5 {
        return Err(Status::invalid_argument("a Read request without its message"));
    }
    if body.get_u8() != 0 {
        return Err(Status::unimplemented("compressed requests are not accepted"));
    }
    let len = body.get_u32() as usize;
    if len != body.len() {
        return Err(Status::invalid_argument(format!("a Read request of {} bytes framed as {len}", body.len())));
    }
    let message = pb::ReadRequest::decode(body).map_err(|err| Status::invalid_argument(err.to_string()))?;
    let request = tonic::Request::from_http(http::Request::from_parts(parts, message));
    data.read_replies(request).await
}

fn streaming_response(messages: ReplyStream, max_message_bytes: usize) -> http::Response<Body> {
    let body = FramesBody { messages, frames: Frames::default(), max_message_bytes, end: None, done: false };
    let mut response = http::Response::new(Body::new(body));
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    response
}

/// The response body: each message's chunks as they are made, then the status.
struct FramesBody {
    messages: ReplyStream,
    frames: Frames,
    max_message_bytes: usize,
    /// How the stream ended, to send after the chunks still held.
    end: Option<Status>,
    done: bool,
}

fn trailers(status: &Status) -> Frame<Bytes> {
    let mut trailers = http::HeaderMap::new();
    if status.add_header(&mut trailers).is_err() {
        trailers.insert("grpc-status", http::HeaderValue::from(tonic::Code::Internal as i32));
    }
    Frame::trailers(trailers)
}

impl http_body::Body for FramesBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        loop {
            if (this.end.is_some() || this.frames.ready(COALESCE_BYTES))
                && let Some(chunk) = this.frames.pop()
            {
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            if let Some(end) = this.end.take() {
                this.done = true;
                return Poll::Ready(Some(Ok(trailers(&end))));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.messages).poll_next(cx) {
                Poll::Pending => {
                    // Nothing more ready: what is framed goes out now.
                    return match this.frames.pop() {
                        Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
                        None => Poll::Pending,
                    };
                }
                Poll::Ready(Some(Ok(reply))) => {
                    let pushed = match &reply {
                        Reply::Message(message) => this.frames.push(message, this.max_message_bytes),
                        Reply::Element(seq, element) => {
                            this.frames.push_encoded(*seq, element.encoded(), this.max_message_bytes)
                        }
                    };
                    if let Err(status) = pushed {
                        this.end = Some(status);
                    }
                }
                Poll::Ready(Some(Err(status))) => this.end = Some(status),
                Poll::Ready(None) => this.end = Some(Status::ok("")),
            }
        }
    }
}
