//! [`AcknowledgeCall`]: a client's acknowledgements on one long-lived `AcknowledgeEach`
//! call, each sent and its answer read before the next, exactly as an `Acknowledge` call
//! answers, at the cost of one message each way. A consumer of a shared reader
//! acknowledges every element before it takes the next; a call each cost the server a
//! fifth of a sweep's CPU (bench/README.md).

use readerd_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::client::Service;

/// The call, opened at the first acknowledgement and again after one failed. A server
/// without `AcknowledgeEach` (UNIMPLEMENTED) is sent `Acknowledge` calls instead.
#[derive(Debug, Default)]
pub enum AcknowledgeCall {
    #[default]
    NotOpen,
    Open(Box<OpenCall>),
    Unsupported,
}

/// An open call: where its requests go and its answers come from.
#[derive(Debug)]
pub struct OpenCall {
    requests: mpsc::Sender<pb::AcknowledgeRequest>,
    answers: tonic::Streaming<pb::AcknowledgeResponse>,
}

/// A clone of a client opens a call of its own.
impl Clone for AcknowledgeCall {
    fn clone(&self) -> Self {
        match self {
            AcknowledgeCall::Unsupported => AcknowledgeCall::Unsupported,
            _ => AcknowledgeCall::NotOpen,
        }
    }
}

impl AcknowledgeCall {
    /// Sends `request` on the call (opening it if needed) and returns its answer. A
    /// failure is the request's, as `Acknowledge` would fail it, and closes the call.
    pub async fn acknowledge(
        &mut self,
        service: &mut Service,
        request: pb::AcknowledgeRequest,
    ) -> Result<pb::AcknowledgeResponse, tonic::Status> {
        // Out of `self` while it waits: a caller that gives up waiting (drops this
        // future) leaves no call with an answer unread, and the next opens another.
        let mut call = match std::mem::take(self) {
            AcknowledgeCall::Open(call) => call,
            AcknowledgeCall::NotOpen => {
                let (requests, outgoing) = mpsc::channel(1);
                match service.acknowledge_each(ReceiverStream::new(outgoing)).await {
                    Ok(answers) => Box::new(OpenCall { requests, answers: answers.into_inner() }),
                    Err(status) if status.code() == tonic::Code::Unimplemented => {
                        *self = AcknowledgeCall::Unsupported;
                        return Ok(service.acknowledge(request).await?.into_inner());
                    }
                    Err(status) => return Err(status),
                }
            }
            AcknowledgeCall::Unsupported => {
                *self = AcknowledgeCall::Unsupported;
                return Ok(service.acknowledge(request).await?.into_inner());
            }
        };
        // A call the server ended has dropped its requests: its answers say why.
        let _ = call.requests.send(request).await;
        let answer = match call.answers.message().await {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Err(tonic::Status::unavailable("the server ended the acknowledgement call")),
            Err(status) => Err(status),
        };
        if answer.is_ok() {
            *self = AcknowledgeCall::Open(call);
        }
        answer
    }
}
