//! `Stream`: one reader stream as the Python `readerd.Stream` drives it.
//!
//! - A private reader reads through `ResumingStream` from the first address that answers:
//!   a lost server is reconnected to (the next address, with backoff) and the stream
//!   resumes from its newest checkpoint with nothing lost or repeated.
//! - A shared reader on one address reads through `ResumingStream` too, reattaching by
//!   name; asking for the next element acknowledges the one before.
//! - A shared reader on several addresses (replicas of a cluster) reads through
//!   `ReplicaSession`, from all of them at once, surviving a replica's death.
//!
//! Every wait (the network, decoding) happens with the GIL released, and Ctrl-C ends it
//! (`KeyboardInterrupt`, within [`crate::runtime::SIGNAL_TICK`]). A `next()` interrupted
//! leaves its read going on: the next `next()` waits for that same element, so nothing is
//! lost. A server that stops answering (stopped, frozen, cut off) is noticed by HTTP/2
//! pings ([`readerd_client::KEEP_ALIVE`]) and counts as lost: the stream reconnects and
//! resumes. An element reaches Python as `(seq, keys, {feature: tensor})`, its tensors
//! made by [`crate::arrays`].

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use readerd_client::replicas::ReplicaSession;
use readerd_client::{Event, Reconnect, ResumingStream, StreamError, status_code, v1 as pb};
use tokio::task::JoinHandle;

use crate::arrays;
use crate::calls::{Options, seconds};
use crate::errors::{bad_json, from_stream, reader_error};
use crate::runtime::{join, spawn, wait};
use readerd_common::sync::MutexUnpoisoned;

enum Source {
    One(Box<ResumingStream>),
    Replicas(Box<ReplicaSession>),
}

/// What [`next_event`] gives back: the source, the acknowledgement mark and the event.
type NextEvent = (Source, Option<(String, i64)>, Result<Option<Event>, StreamError>);

/// An element as Python receives it: `(seq, keys, {feature: tensor})`.
type Item<'py> = (i64, Bound<'py, PyList>, Bound<'py, PyDict>);

struct State {
    /// `None` once closed (the connections are dropped), or while `pending` has it.
    source: Option<Source>,
    /// The read of a `next()` that Ctrl-C interrupted: it holds the source until it ends.
    pending: Option<JoinHandle<NextEvent>>,
    closed: bool,
    /// The `seq` of the last element handed out (-1: none yet).
    seq: i64,
    /// (stream id, seq) of the last acknowledgement of a shared reader on one server.
    acknowledged: Option<(String, i64)>,
    /// The newest checkpoint, where the source keeps none (a replicated shared reader's
    /// whole-job checkpoints) or is gone (closed): (token, after seq).
    kept_checkpoint: Option<(String, i64)>,
    /// Reconnections of a closed stream's source.
    kept_reconnects: u64,
    ended: bool,
}

/// A reader stream; see the module documentation.
#[pyclass(module = "readerd._native")]
pub struct Stream {
    state: Mutex<State>,
    shared: bool,
}

impl Stream {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock_unpoisoned()
    }
}

impl State {
    fn source(&mut self) -> PyResult<&mut Source> {
        if self.pending.is_some() {
            let message = "a next() interrupted while waiting for the server is still waiting: call next() again first";
            return Err(reader_error("FAILED_PRECONDITION", message));
        }
        self.source.as_mut().ok_or_else(|| reader_error("FAILED_PRECONDITION", "the stream is closed"))
    }
}

/// What `next()` on a closed stream raises: `ValueError("stream is closed")`, as Python's
/// files do; never `StopIteration`, which would look like the end of the data.
fn closed_error() -> PyErr {
    pyo3::exceptions::PyValueError::new_err("stream is closed")
}

/// Acknowledges what a shared reader's stream on one server handed out. A connection that
/// is gone (UNAVAILABLE) or a stream that ended there (NOT_FOUND) is no failure: the
/// server redelivers what was not acknowledged.
async fn acknowledge_one(
    stream: &mut ResumingStream,
    acknowledged: &mut Option<(String, i64)>,
) -> Result<(), StreamError> {
    let mark = (stream.stream_id().to_owned(), stream.last_seq());
    if mark.1 < 0 || acknowledged.as_ref() == Some(&mark) {
        return Ok(());
    }
    match stream.acknowledge().await {
        Ok(()) => {
            *acknowledged = Some(mark);
            Ok(())
        }
        Err(StreamError::Status(status))
            if matches!(status_code(&status), tonic::Code::Unavailable | tonic::Code::NotFound) =>
        {
            Ok(())
        }
        Err(err) => Err(err),
    }
}

/// The next event of `source` (a shared reader's elements handed out before acknowledged
/// first), with the source handed back: it runs as a task of the runtime, beside the
/// connection it reads, so the frames' arrivals wake no other thread.
async fn next_event(mut source: Source, mut acknowledged: Option<(String, i64)>, shared: bool) -> NextEvent {
    let event = match &mut source {
        Source::One(stream) => match shared {
            true => match acknowledge_one(stream, &mut acknowledged).await {
                Ok(()) => stream.next().await,
                Err(err) => Err(err),
            },
            false => stream.next().await,
        },
        Source::Replicas(session) => session.next().await,
    };
    (source, acknowledged, event)
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Some(task) = self.state().pending.take() {
            task.abort();
        }
    }
}

#[pymethods]
impl Stream {
    /// Opens `request` (a `ReadRequest` in proto3 JSON) on `addrs`.
    #[new]
    #[pyo3(signature = (addrs, request, options, *, attempts=10, initial_delay=0.1, max_delay=5.0))]
    fn new(
        py: Python<'_>,
        addrs: Vec<String>,
        request: &str,
        options: &Options,
        attempts: u32,
        initial_delay: f64,
        max_delay: f64,
    ) -> PyResult<Self> {
        if addrs.is_empty() {
            return Err(reader_error("INVALID_ARGUMENT", "no server address"));
        }
        let request: pb::ReadRequest = serde_json::from_str(request).map_err(|err| bad_json("ReadRequest", &err))?;
        let options = options.connect.clone();
        let reconnect = Reconnect {
            attempts,
            initial_delay: seconds("delay", initial_delay)?,
            max_delay: seconds("delay", max_delay)?,
        };
        let shared = request.reader.as_ref().is_some_and(|reader| !reader.shared_name.is_empty());
        let source = wait(py, async move {
            let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
            if shared && addrs.len() > 1 {
                // `ReplicaSession::open` starts its streams on this runtime.
                Ok(Source::Replicas(Box::new(ReplicaSession::open(&addrs, request, options))))
            } else {
                ResumingStream::open_with(&addrs, request, reconnect, options)
                    .await
                    .map(|stream| Source::One(Box::new(stream)))
            }
        })?
        .map_err(|err| from_stream(&err))?;
        let seq = match &source {
            Source::One(stream) => stream.last_seq(),
            Source::Replicas(_) => -1,
        };
        let state = State {
            source: Some(source),
            pending: None,
            closed: false,
            seq,
            acknowledged: None,
            kept_checkpoint: None,
            kept_reconnects: 0,
            ended: false,
        };
        Ok(Self { state: Mutex::new(state), shared })
    }

    /// The next element as `(seq, keys, {feature: tensor})`, or `None` at the end of the
    /// data. A shared reader's elements handed out before are acknowledged first. A closed
    /// stream raises `ValueError("stream is closed")`; Ctrl-C raises `KeyboardInterrupt`
    /// and the read goes on, for the next call to wait for.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Option<Item<'py>>> {
        let mut guard = self.state();
        let state = &mut *guard;
        if state.closed {
            return Err(closed_error());
        }
        if state.ended {
            return Ok(None);
        }
        let mut task = match state.pending.take() {
            Some(task) => task,
            None => {
                let source = state.source.take().ok_or_else(closed_error)?;
                let acknowledged = state.acknowledged.take();
                spawn(next_event(source, acknowledged, self.shared))?
            }
        };
        let joined = match join(py, &mut task) {
            Ok(joined) => joined,
            Err(interrupted) => {
                state.pending = Some(task);
                return Err(interrupted);
            }
        };
        let (source, acknowledged, event) = match joined {
            Ok(outcome) => outcome,
            Err(panicked) => {
                // The task held the source: it is gone.
                state.closed = true;
                return Err(panicked);
            }
        };
        (state.source, state.acknowledged) = (Some(source), acknowledged);
        let event = event.map_err(|err| from_stream(&err))?;
        let element = match event {
            Some(Event::Element(element)) => element,
            Some(Event::EndOfSequence { .. }) | None => {
                state.ended = true;
                return Ok(None);
            }
        };
        state.seq = element.seq;
        let keys = PyList::new(py, &element.keys)?;
        let features = PyDict::new(py);
        for feature in element.features {
            let tensor = feature.tensor.ok_or_else(|| {
                reader_error("DATA_LOSS", &format!("feature {} of element {} has no tensor", feature.name, element.seq))
            })?;
            features.set_item(&feature.name, arrays::tensor(py, &feature.name, tensor)?)?;
        }
        Ok(Some((element.seq, keys, features)))
    }

    /// Commits a checkpoint covering every element handed out; returns `(token, after_seq)`.
    /// Of a shared reader on replicas, the checkpoint is the whole job's (resumable on any
    /// number of replicas and consumers).
    fn checkpoint(&self, py: Python<'_>) -> PyResult<(String, i64)> {
        let mut guard = self.state();
        let state = &mut *guard;
        let seq = state.seq;
        let source = state.source()?;
        let replicated = matches!(source, Source::Replicas(_));
        let token = wait(py, async {
            match source {
                Source::One(stream) => stream.checkpoint().await,
                Source::Replicas(session) => session.checkpoint().await,
            }
        })?
        .map_err(|err| from_stream(&err))?;
        if replicated {
            state.kept_checkpoint = Some((token.clone(), seq));
        }
        Ok((token, seq))
    }

    /// Acknowledges every element handed out (shared readers; nothing for private ones).
    fn acknowledge(&self, py: Python<'_>) -> PyResult<()> {
        if !self.shared {
            return Ok(());
        }
        let mut guard = self.state();
        let State { source, acknowledged, .. } = &mut *guard;
        let Some(source) = source.as_mut() else { return Ok(()) };
        wait(py, async {
            match source {
                Source::One(stream) => acknowledge_one(stream, acknowledged).await.map_err(|err| from_stream(&err)),
                Source::Replicas(session) => session.acknowledge().await.map_err(|err| from_stream(&err)),
            }
        })?
    }

    /// Acknowledges what was handed out (committed, on replicas) and ends the stream. A
    /// failure is not raised: the server then redelivers those elements.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = self.state();
        let State { source, pending, closed, ended, kept_checkpoint, kept_reconnects, .. } = &mut *guard;
        *closed = true;
        if let Some(task) = pending.take() {
            // A read that Ctrl-C interrupted holds the source: it goes with it.
            task.abort();
        }
        let Some(mut source) = source.take() else { return Ok(()) };
        if let Source::One(stream) = &source {
            *kept_checkpoint = stream.last_checkpoint().map(|(token, after)| (token.to_owned(), after));
            *kept_reconnects = stream.reconnects();
        }
        // The acknowledgement's failure is not raised; Ctrl-C while it waits is.
        let mut interrupted = Ok(());
        if self.shared && !*ended {
            interrupted = wait(py, async {
                let _ = match &mut source {
                    // Committed before the answer: a checkpoint taken next covers it.
                    Source::One(stream) => stream.close().await,
                    Source::Replicas(session) => session.close().await,
                };
            });
        }
        *ended = true;
        // Dropping the streams (inside the runtime: their tasks are aborted there).
        let _ = wait(py, async move { drop(source) });
        interrupted
    }

    /// The newest checkpoint this stream saw, automatic or asked for: `(token, after_seq)`.
    #[getter]
    fn last_checkpoint(&self) -> Option<(String, i64)> {
        let state = self.state();
        match &state.source {
            Some(Source::One(stream)) => stream.last_checkpoint().map(|(token, after)| (token.to_owned(), after)),
            _ => state.kept_checkpoint.clone(),
        }
    }

    /// The `seq` of the last element handed out (-1 before the first; after a resumed
    /// token's `after_seq` until the first).
    #[getter]
    fn seq(&self) -> i64 {
        self.state().seq
    }

    /// The stream's id on its server (a replicated session's own id).
    #[getter]
    fn stream_id(&self) -> String {
        match &self.state().source {
            Some(Source::One(stream)) => stream.stream_id().to_owned(),
            Some(Source::Replicas(session)) => session.session_id().to_owned(),
            None => String::new(),
        }
    }

    #[getter]
    fn reconnects(&self) -> u64 {
        let state = self.state();
        match &state.source {
            Some(Source::One(stream)) => stream.reconnects(),
            _ => state.kept_reconnects,
        }
    }
}
