//! Acknowledgements: `Acknowledge` answers one, `AcknowledgeEach` answers each of a
//! long-lived call's in order (a shared reader's consumer acknowledges every element
//! before it takes the next: one message each way instead of a call each).

use futures::StreamExt;
use futures::stream::BoxStream;
use readerd_proto::v1 as pb;
use tonic::{Status, Streaming};

use super::DataService;
use crate::auth::{Access, Caller};
use crate::error::ServeError;

/// `AcknowledgeEach`'s answers.
pub type AnswerStream = BoxStream<'static, Result<pb::AcknowledgeResponse, Status>>;

impl DataService {
    /// Acknowledges what `request` says for `caller`.
    pub(super) async fn acknowledge_as(
        &self,
        caller: &Caller,
        request: pb::AcknowledgeRequest,
    ) -> Result<pb::AcknowledgeResponse, Status> {
        let stream = self.streams.get(&request.stream_id)?;
        caller.check(&stream.container, Access::Read)?;
        stream.touch();
        if let Some(time) = &request.consumer_time {
            stream.consumer.time.report(crate::watch::consumer_time::TimeSpent::from_pb(time));
        }
        stream.reader.delivery().acknowledge(&stream.consumer, request.up_to_seq);
        if !request.records.is_empty() || request.flushed || request.commit {
            // Re-sent for a replica that died, or asked for: committed before the answer
            // (`Coordinator::commit_resent`; on one server acknowledgements are final when
            // made). Otherwise the coordinator commits the stream's acknowledgements on its
            // own; the answer says which are.
            let records: Vec<_> = request.records.iter().flat_map(crate::element::record_ids_from_pb).collect();
            let (session, from, flushed) = (request.session_id, request.from_replica, request.flushed);
            let reader = stream.reader.clone();
            self.blocking(move |_| {
                let flushed_from = (flushed && !from.is_empty() && !session.is_empty()).then_some((&*session, &*from));
                reader.coordinator().commit_resent(&records, flushed_from)
            })
            .await?;
        }
        let committed_elements = stream.reader.delivery().committed_elements(&stream.consumer);
        let unreachable = stream.reader.coordinator().unreachable_for();
        let ledger_unreachable_ms = unreachable.map_or(0, |waited| waited.as_millis().max(1) as i64);
        Ok(pb::AcknowledgeResponse { committed_elements, ledger_unreachable_ms })
    }
}

/// Answers each of `requests` in order, as `Acknowledge` would; the first error is the
/// last answer (the call ends with it). The client reads each answer before it sends its
/// next request, so at most one waits here. When the server shuts down the call ends
/// UNAVAILABLE: an idle consumer's call does not hold the shutdown.
pub(super) fn answer_each(
    service: DataService,
    caller: Caller,
    requests: Streaming<pb::AcknowledgeRequest>,
) -> AnswerStream {
    let answering = Some((service, caller));
    futures::stream::unfold((requests, answering), |(mut requests, answering)| async move {
        let (service, caller) = answering?;
        let next = tokio::select! {
            next = requests.message() => next,
            _ = service.drain.cancelled() => Err(ServeError::ShuttingDown.into()),
        };
        let answer = match next {
            Ok(Some(request)) => service.acknowledge_as(&caller, request).await,
            Ok(None) => return None,
            Err(status) => Err(status),
        };
        let answering = answer.is_ok().then_some((service, caller));
        Some((answer, (requests, answering)))
    })
    .boxed()
}
