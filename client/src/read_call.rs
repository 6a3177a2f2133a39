//! The `Read` call made by hand over the HTTP/2 connection, its messages decoded from the
//! received frames without copying them ([`ReadCall`]).
//!
//! tonic's `Streaming` copies every received byte into one decode buffer before prost
//! decodes it. Here the response body's DATA frames are kept as the `Bytes` HTTP/2 made
//! of them and `readerd_proto::frames::Unframer` decodes each message from them, so a
//! tensor payload the server sent as its own chunk arrives as a view of its frame. The
//! request goes through the same channel and token interceptor as every other call.

use bytes::{BufMut, BytesMut};
use http_body_util::BodyExt;
use prost::Message;
use readerd_proto::frames::Unframer;
use readerd_proto::v1 as pb;
use tonic::Status;
use tonic::body::Body;
use tower::{Service, ServiceExt};

const READ_PATH: &str = "/readerd.v1.DataService/Read";

/// An open `Read` call: the response body and what of it is not decoded yet.
#[derive(Debug)]
pub struct ReadCall {
    body: Body,
    unframer: Unframer,
    max_message_bytes: usize,
    done: bool,
}

impl ReadCall {
    /// Sends `request` over `service` (the channel behind the token interceptor) and waits
    /// for the response's headers. A refusal (a trailers-only response) is its status.
    pub async fn open<S, B>(
        service: &mut S,
        request: &pb::ReadRequest,
        max_message_bytes: usize,
    ) -> Result<Self, Status>
    where
        S: Service<http::Request<Body>, Response = http::Response<B>>,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let mut framed = BytesMut::with_capacity(5 + request.encoded_len());
        framed.put_u8(0);
        framed.put_u32(u32::try_from(request.encoded_len()).map_err(|_| Status::invalid_argument("a huge request"))?);
        request.encode(&mut framed).map_err(|err| Status::internal(err.to_string()))?;
        let http_request = http::Request::builder()
            .method(http::Method::POST)
            .uri(READ_PATH)
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header(http::header::TE, "trailers")
            .body(Body::new(http_body_util::Full::new(framed.freeze())))
            .map_err(|err| Status::internal(err.to_string()))?;
        let ready = service.ready().await.map_err(|err| Status::from_error(err.into()))?;
        let response = ready.call(http_request).await.map_err(|err| Status::from_error(err.into()))?;
        let (parts, body) = response.into_parts();
        if let Some(status) = Status::from_header_map(&parts.headers)
            && status.code() != tonic::Code::Ok
        {
            return Err(status);
        }
        if parts.status != http::StatusCode::OK {
            let status = match parts.status {
                http::StatusCode::BAD_GATEWAY
                | http::StatusCode::SERVICE_UNAVAILABLE
                | http::StatusCode::GATEWAY_TIMEOUT => Status::unavailable,
                _ => Status::unknown,
            };
            return Err(status(format!("the server answered HTTP {}", parts.status)));
        }
        Ok(Self { body: Body::new(body), unframer: Unframer::default(), max_message_bytes, done: false })
    }

    /// The next message; `None` at the end of the call (its status OK).
    pub async fn message(&mut self) -> Result<Option<pb::ReadResponse>, Status> {
        loop {
            if let Some(message) = self.unframer.next_message(self.max_message_bytes)? {
                return Ok(Some(message));
            }
            if self.done {
                return Ok(None);
            }
            match self.body.frame().await {
                None => {
                    self.done = true;
                    if self.unframer.buffered() > 0 {
                        return Err(Status::internal("the stream ended inside a message"));
                    }
                }
                Some(Err(status)) => return Err(status),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.unframer.push(data),
                    Err(frame) => {
                        self.done = true;
                        if let Some(trailers) = frame.trailers_ref()
                            && let Some(status) = Status::from_header_map(trailers)
                            && status.code() != tonic::Code::Ok
                        {
                            return Err(status);
                        }
                    }
                },
            }
        }
    }
}
