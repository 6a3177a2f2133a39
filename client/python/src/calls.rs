//! `Connection`: the unary calls of `readerd.v1.DataService` on one server, by name, with
//! the request and the reply in proto3 JSON (the form the Python package and `readerctl`
//! already speak), and [`Options`], the TLS and token settings every connection of the
//! package is made with.

use std::time::Duration;

use pyo3::prelude::*;
use readerd_client::{Client, ConnectOptions, Pem, v1 as pb};

use crate::errors::{bad_json, from_client, from_status, reader_error};
use crate::runtime::wait;

/// How to reach a server, as the Python `Client` takes it: TLS (a CA's PEM turns it on; a
/// certificate chain and key add a client certificate for mutual TLS) and a bearer token.
#[pyclass(frozen, module = "readerd._native")]
pub struct Options {
    pub connect: ConnectOptions,
}

#[pymethods]
impl Options {
    #[new]
    #[pyo3(signature = (*, token=None, tls_root_certs=None, cert_chain=None, private_key=None, tls_domain=None))]
    fn new(
        token: Option<String>,
        tls_root_certs: Option<Vec<u8>>,
        cert_chain: Option<Vec<u8>>,
        private_key: Option<Vec<u8>>,
        tls_domain: Option<String>,
    ) -> Self {
        let connect = ConnectOptions {
            tls_ca: tls_root_certs.map(Pem::Contents),
            tls_identity: cert_chain.map(Pem::Contents).zip(private_key.map(Pem::Contents)),
            tls_domain,
            token,
            keep_alive: None,
        };
        Self { connect }
    }
}

/// `seconds` as a duration (`what` names it in the error).
pub fn seconds(what: &str, seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds).map_err(|_| reader_error("INVALID_ARGUMENT", &format!("bad {what} {seconds}")))
}

/// A connection to one server for the calls that are not streams.
#[pyclass(module = "readerd._native")]
pub struct Connection {
    client: Client,
    timeout: Duration,
}

#[pymethods]
impl Connection {
    #[new]
    #[pyo3(signature = (addr, options, *, timeout=30.0))]
    fn new(py: Python<'_>, addr: &str, options: &Options, timeout: f64) -> PyResult<Self> {
        let timeout = seconds("timeout", timeout)?;
        let options = &options.connect;
        let client = wait(py, async { Client::connect_with(addr, options).await })?.map_err(|err| from_client(&err))?;
        Ok(Self { client, timeout })
    }

    /// Calls `kind` (`GetReaderStats`, `ListReaders`, ...) with `body`, the request's
    /// proto3 JSON; returns the reply's proto3 JSON.
    fn call(&self, py: Python<'_>, kind: &str, body: &str) -> PyResult<String> {
        let mut client = self.client.clone();
        let timeout = self.timeout;
        let reply = wait(py, async move {
            match tokio::time::timeout(timeout, unary(&mut client, kind, body)).await {
                Ok(reply) => reply,
                Err(_) => Err(reader_error("DEADLINE_EXCEEDED", &format!("{kind}: no answer within {timeout:?}"))),
            }
        })??;
        Ok(reply)
    }
}

/// One unary call by its name.
async fn unary(client: &mut Client, kind: &str, body: &str) -> PyResult<String> {
    fn parse<T: serde::de::DeserializeOwned>(kind: &str, body: &str) -> PyResult<T> {
        crate::errors::from_json(kind, body)
    }
    fn reply<T: serde::Serialize>(kind: &str, answer: Result<tonic::Response<T>, tonic::Status>) -> PyResult<String> {
        let answer = answer.map_err(|status| from_status(&status))?.into_inner();
        serde_json::to_string(&answer).map_err(|err| bad_json(kind, &err))
    }
    let service = client.service();
    match kind {
        "LookupOrCreateReader" => {
            reply(kind, service.lookup_or_create_reader(parse::<pb::LookupOrCreateReaderRequest>(kind, body)?).await)
        }
        "GetReaderStats" => {
            reply(kind, service.get_reader_stats(parse::<pb::GetReaderStatsRequest>(kind, body)?).await)
        }
        "ResetReader" => reply(kind, service.reset_reader(parse::<pb::ResetReaderRequest>(kind, body)?).await),
        "DeleteReader" => reply(kind, service.delete_reader(parse::<pb::DeleteReaderRequest>(kind, body)?).await),
        "ListReaders" => reply(kind, service.list_readers(parse::<pb::ListReadersRequest>(kind, body)?).await),
        "ResetContainer" => reply(kind, service.reset_container(parse::<pb::ResetContainerRequest>(kind, body)?).await),
        "SerializeReaderState" => {
            reply(kind, service.serialize_reader_state(parse::<pb::SerializeReaderStateRequest>(kind, body)?).await)
        }
        "RestoreReaderState" => {
            reply(kind, service.restore_reader_state(parse::<pb::RestoreReaderStateRequest>(kind, body)?).await)
        }
        "Acknowledge" => reply(kind, service.acknowledge(parse::<pb::AcknowledgeRequest>(kind, body)?).await),
        "Checkpoint" => reply(kind, service.checkpoint(parse::<pb::CheckpointRequest>(kind, body)?).await),
        "ListDatasets" => reply(kind, service.list_datasets(parse::<pb::ListDatasetsRequest>(kind, body)?).await),
        "DescribeSpec" => reply(kind, service.describe_spec(parse::<pb::DescribeSpecRequest>(kind, body)?).await),
        other => Err(reader_error("UNIMPLEMENTED", &format!("no call named {other:?}"))),
    }
}
