//! tonic's own server-streaming rate on loopback, the reference line of `readerctl bench`:
//! a server with nothing behind it (its `Read` streams one ready-made message again and
//! again; it answers `Acknowledge` as a readerd from before `AcknowledgeEach` would, and
//! every other call is UNIMPLEMENTED) runs on its own thread, and this process's client
//! reads the messages with the same windows and limits as a readerd stream.

use std::pin::Pin;

use futures::Stream;
use readerd_proto::v1::data_service_server::{DataService, DataServiceServer};
use readerd_proto::{http2, v1 as pb};
use tonic::{Request, Response, Status};

use crate::client::{Client, MAX_MESSAGE_BYTES};
use crate::payload::element_bytes;
use crate::resume::{Received, received};

type Reply<T> = Result<Response<T>, Status>;

/// Streams `count` copies of `message`.
struct Echo {
    message: pb::ReadResponse,
    count: usize,
    /// Calls of `Acknowledge`, and of `AcknowledgeEach`.
    calls: std::sync::Arc<[std::sync::atomic::AtomicU64; 2]>,
}

fn nothing<T>() -> Reply<T> {
    Err(Status::unimplemented("the echo server only streams"))
}

#[tonic::async_trait]
impl DataService for Echo {
    type ReadStream = Pin<Box<dyn Stream<Item = Result<pb::ReadResponse, Status>> + Send>>;
    type AcknowledgeEachStream = Pin<Box<dyn Stream<Item = Result<pb::AcknowledgeResponse, Status>> + Send>>;

    async fn read(&self, _: Request<pb::ReadRequest>) -> Reply<Self::ReadStream> {
        let (message, count) = (self.message.clone(), self.count);
        Ok(Response::new(Box::pin(futures::stream::iter((0..count).map(move |_| Ok(message.clone()))))))
    }

    async fn lookup_or_create_reader(&self, _: Request<pb::LookupOrCreateReaderRequest>) -> Reply<pb::ReaderInfo> {
        nothing()
    }

    async fn describe_spec(&self, _: Request<pb::DescribeSpecRequest>) -> Reply<pb::DescribeSpecResponse> {
        nothing()
    }

    async fn read_up_to(&self, _: Request<pb::ReadUpToRequest>) -> Reply<pb::ReadUpToResponse> {
        nothing()
    }
    async fn get_reader_stats(&self, _: Request<pb::GetReaderStatsRequest>) -> Reply<pb::ReaderStats> {
        nothing()
    }
    async fn reset_reader(&self, _: Request<pb::ResetReaderRequest>) -> Reply<pb::ReaderStats> {
        nothing()
    }
    async fn delete_reader(&self, _: Request<pb::DeleteReaderRequest>) -> Reply<pb::DeleteReaderResponse> {
        nothing()
    }
    async fn list_readers(&self, _: Request<pb::ListReadersRequest>) -> Reply<pb::ListReadersResponse> {
        nothing()
    }
    async fn reset_container(&self, _: Request<pb::ResetContainerRequest>) -> Reply<pb::ResetContainerResponse> {
        nothing()
    }
    async fn serialize_reader_state(
        &self,
        _: Request<pb::SerializeReaderStateRequest>,
    ) -> Reply<pb::SerializeReaderStateResponse> {
        nothing()
    }
    async fn restore_reader_state(&self, _: Request<pb::RestoreReaderStateRequest>) -> Reply<pb::ReaderStats> {
        nothing()
    }
    async fn acknowledge(&self, request: Request<pb::AcknowledgeRequest>) -> Reply<pb::AcknowledgeResponse> {
        self.calls[0].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let committed_elements = request.into_inner().up_to_seq + 1;
        Ok(Response::new(pb::AcknowledgeResponse { committed_elements, ledger_unreachable_ms: 0 }))
    }
    async fn acknowledge_each(
        &self,
        _: Request<tonic::Streaming<pb::AcknowledgeRequest>>,
    ) -> Reply<Self::AcknowledgeEachStream> {
        self.calls[1].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        nothing()
    }
    async fn checkpoint(&self, _: Request<pb::CheckpointRequest>) -> Reply<pb::CheckpointResponse> {
        nothing()
    }
    async fn list_datasets(&self, _: Request<pb::ListDatasetsRequest>) -> Reply<pb::ListDatasetsResponse> {
        nothing()
    }
}

/// Bytes/s of `count` messages of `size` payload bytes streamed over loopback by tonic.
pub async fn loopback_rate(size: usize, count: usize) -> anyhow::Result<f64> {
    let payload = bytes::Bytes::from(vec![7u8; size]);
    let tensor =
        pb::DenseTensor { dtype: pb::DataType::Uint8 as i32, shape: vec![size as i64], data: payload, strings: vec![] };
    let feature =
        pb::Feature { name: "value".into(), tensor: Some(pb::Tensor { kind: Some(pb::tensor::Kind::Dense(tensor)) }) };
    let element = pb::Element { seq: 0, keys: vec![], features: vec![feature], ..Default::default() };
    let message = pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element)) };

    let echo = Echo { message, count, calls: Default::default() };
    let (addr, stop_tx, server) = serve(echo)?;
    let mut client = Client::connect(&format!("http://{addr}")).await?;
    let started = std::time::Instant::now();
    let mut stream = client.service().read(pb::ReadRequest::default()).await?.into_inner();
    let mut bytes = 0usize;
    while let Some(message) = stream.message().await? {
        if let Some(Received::Element(element)) = received(message) {
            bytes += element_bytes(&element) as usize;
        }
    }
    let rate = bytes as f64 / started.elapsed().as_secs_f64();
    // The server stops once the connection is gone: close it, and wait off this runtime,
    // which must keep running to close it.
    drop((stream, client));
    let _ = stop_tx.send(());
    tokio::task::spawn_blocking(move || server.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the echo server panicked"))??;
    anyhow::ensure!(bytes == size * count, "the echo stream delivered {bytes} of {} bytes", size * count);
    Ok(rate)
}

/// A running echo server: its address, the sender that stops it, its thread.
type Running = (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>, std::thread::JoinHandle<anyhow::Result<()>>);

/// Runs `echo` on a thread and runtime of its own, as readerd would be in its process.
fn serve(echo: Echo) -> anyhow::Result<Running> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(tokio::net::TcpListener::from_std(listener)?)
                .with_nodelay(Some(true));
            let service = DataServiceServer::new(echo).max_encoding_message_size(MAX_MESSAGE_BYTES);
            tonic::transport::Server::builder()
                .initial_stream_window_size(Some(http2::STREAM_WINDOW_BYTES))
                .initial_connection_window_size(Some(http2::CONNECTION_WINDOW_BYTES))
                .max_frame_size(Some(http2::MAX_FRAME_BYTES))
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stop_rx.await;
                })
                .await?;
            anyhow::Ok(())
        })
    });
    Ok((addr, stop_tx, server))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    /// A server from before `AcknowledgeEach` (UNIMPLEMENTED): the client tries the call
    /// once, then sends each acknowledgement as a unary `Acknowledge`, answered in order.
    #[tokio::test]
    async fn acknowledgements_fall_back_to_unary_calls_on_a_server_without_the_long_lived_call() {
        let echo = Echo { message: pb::ReadResponse::default(), count: 0, calls: Default::default() };
        let calls = echo.calls.clone();
        let (addr, stop, server) = serve(echo).unwrap();
        let mut client = Client::connect(&format!("http://{addr}")).await.unwrap();
        for up_to_seq in 0..3 {
            let request = pb::AcknowledgeRequest { stream_id: "s".into(), up_to_seq, ..Default::default() };
            let answer = client.acknowledge_request(request).await.unwrap();
            assert_eq!(answer.committed_elements, up_to_seq + 1);
        }
        assert_eq!(calls[1].load(Ordering::Relaxed), 1, "the long-lived call is tried once");
        assert_eq!(calls[0].load(Ordering::Relaxed), 3, "each acknowledgement is a unary call");
        drop(client);
        let _ = stop.send(());
        tokio::task::spawn_blocking(move || server.join()).await.unwrap().unwrap().unwrap();
    }
}
