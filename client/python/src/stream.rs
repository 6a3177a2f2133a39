//! `Stream`: one reader stream as the Python `readerd.Stream` drives it, over
//! `readerd_client::open_stream` (the stream `readerctl read` reads too):
//!
//! - A private reader reads from the first address that answers: a lost server is
//!   reconnected to (the next address, with backoff) and the stream resumes from its
//!   newest checkpoint with nothing lost or repeated.
//! - A shared reader on one address reattaches by name; one on several addresses
//!   (replicas of a cluster) reads from all of them at once, surviving a replica's death.
//!   Asking for the next element acknowledges the ones before.
//!
//! Every wait (the network, decoding) happens with the GIL released, and Ctrl-C ends it
//! (`KeyboardInterrupt`, within [`crate::runtime::SIGNAL_TICK`]). A `next()` interrupted
//! leaves its read going on: the next `next()` waits for that same element, so nothing is
//! lost. A server that stops answering (stopped, frozen, cut off) is noticed by HTTP/2
//! pings ([`readerd_client::KEEP_ALIVE`]) and counts as lost: the stream reconnects and
//! resumes, each attempt failing unless the server answers within
//! [`readerd_client::ANSWER_WITHIN`], so `next()` raises `UNAVAILABLE` once the retries are
//! spent rather than waiting on a silent server for good. An element reaches Python as
//! `(seq, keys, {feature: tensor})`, its tensors made by [`crate::arrays`].

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use readerd_client::{Event, ReaderStream, Reconnect, StreamError, open_stream, v1 as pb};
use tokio::task::JoinHandle;

use crate::arrays;
use crate::calls::{Options, seconds};
use crate::errors::{from_stream, reader_error};
use crate::runtime::{join, spawn, wait};
use readerd_common::sync::MutexUnpoisoned;

/// What [`next_event`] gives back: the stream and the event.
type NextEvent = (ReaderStream, Result<Option<Event>, StreamError>);

/// An element as Python receives it: `(seq, keys, {feature: tensor})`.
type Item<'py> = (i64, Bound<'py, PyList>, Bound<'py, PyDict>);

struct State {
    /// `None` once closed (the connections are dropped), or while `pending` has it.
    stream: Option<ReaderStream>,
    /// The read of a `next()` that Ctrl-C interrupted: it holds the stream until it ends.
    pending: Option<JoinHandle<NextEvent>>,
    closed: bool,
    /// The `seq` of the last element handed out (-1: none yet).
    seq: i64,
    /// The newest checkpoint (token, after seq) and the reconnections of the stream, as
    /// it last said, for while it is gone (closed, or held by `pending`).
    kept_checkpoint: Option<(String, i64)>,
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
    fn stream(&mut self) -> PyResult<&mut ReaderStream> {
        if self.pending.is_some() {
            let message = "a next() interrupted while waiting for the server is still waiting: call next() again first";
            return Err(reader_error("FAILED_PRECONDITION", message));
        }
        self.stream.as_mut().ok_or_else(|| reader_error("FAILED_PRECONDITION", "the stream is closed"))
    }

    /// Keeps what the stream says of its checkpoints and reconnections, for while it is gone.
    fn keep(&mut self) {
        if let Some(stream) = &self.stream {
            self.kept_checkpoint = stream.last_checkpoint().map(|(token, after)| (token.to_owned(), after));
            self.kept_reconnects = stream.reconnects();
        }
    }
}

/// What `next()` on a closed stream raises: `ValueError("stream is closed")`, as Python's
/// files do; never `StopIteration`, which would look like the end of the data.
fn closed_error() -> PyErr {
    pyo3::exceptions::PyValueError::new_err("stream is closed")
}

/// The next event of `stream`, with the stream handed back: it runs as a task of the
/// runtime, beside the connection it reads, so the frames' arrivals wake no other thread.
async fn next_event(mut stream: ReaderStream) -> NextEvent {
    let event = stream.next().await;
    (stream, event)
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
        let request: pb::ReadRequest = crate::errors::from_json("ReadRequest", request)?;
        let options = options.connect.clone();
        let reconnect = Reconnect {
            attempts,
            initial_delay: seconds("delay", initial_delay)?,
            max_delay: seconds("delay", max_delay)?,
        };
        let stream = wait(py, async move {
            let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
            open_stream(&addrs, request, reconnect, options).await
        })?
        .map_err(|err| from_stream(&err))?;
        let shared = stream.is_shared();
        let state = State {
            seq: stream.last_seq(),
            stream: Some(stream),
            pending: None,
            closed: false,
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
            None => spawn(next_event(state.stream.take().ok_or_else(closed_error)?))?,
        };
        let joined = match join(py, &mut task) {
            Ok(joined) => joined,
            Err(interrupted) => {
                state.pending = Some(task);
                return Err(interrupted);
            }
        };
        let (stream, event) = match joined {
            Ok(outcome) => outcome,
            Err(panicked) => {
                // The task held the stream: it is gone.
                state.closed = true;
                return Err(panicked);
            }
        };
        state.stream = Some(stream);
        state.keep();
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
        // The conversion to numpy was waiting too, not the trainer's step.
        if let Some(stream) = state.stream.as_mut() {
            stream.handed_out();
        }
        Ok(Some((element.seq, keys, features)))
    }

    /// Commits a checkpoint covering every element handed out; returns `(token, after_seq)`.
    /// Of a shared reader on replicas, the checkpoint is the whole job's (resumable on any
    /// number of replicas and consumers).
    fn checkpoint(&self, py: Python<'_>) -> PyResult<(String, i64)> {
        let mut guard = self.state();
        let state = &mut *guard;
        let stream = state.stream()?;
        let token = wait(py, stream.checkpoint())?.map_err(|err| from_stream(&err));
        state.keep();
        Ok((token?, state.seq))
    }

    /// Acknowledges every element handed out (shared readers; nothing for private ones).
    fn acknowledge(&self, py: Python<'_>) -> PyResult<()> {
        if !self.shared {
            return Ok(());
        }
        let mut guard = self.state();
        let Some(stream) = guard.stream.as_mut() else { return Ok(()) };
        wait(py, stream.acknowledge_with(false))?.map_err(|err| from_stream(&err))
    }

    /// Acknowledges what was handed out (committed before the answer) and ends the stream.
    /// A failure is not raised: the server then redelivers those elements.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = self.state();
        let state = &mut *guard;
        state.closed = true;
        if let Some(task) = state.pending.take() {
            // A read that Ctrl-C interrupted holds the stream: it goes with it.
            task.abort();
        }
        state.keep();
        let Some(mut stream) = state.stream.take() else { return Ok(()) };
        // The acknowledgement's failure is not raised; Ctrl-C while it waits is.
        let mut interrupted = Ok(());
        if self.shared && !state.ended {
            // Committed before the answer: a checkpoint taken next covers it.
            interrupted = wait(py, async {
                let _ = stream.acknowledge_with(true).await;
            });
        }
        state.ended = true;
        // Dropping the stream (inside the runtime: its tasks are aborted there).
        let _ = wait(py, async move { drop(stream) });
        interrupted
    }

    /// The newest checkpoint this stream saw, automatic or asked for: `(token, after_seq)`.
    #[getter]
    fn last_checkpoint(&self) -> Option<(String, i64)> {
        let state = self.state();
        match &state.stream {
            Some(stream) => stream.last_checkpoint().map(|(token, after)| (token.to_owned(), after)),
            None => state.kept_checkpoint.clone(),
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
        self.state().stream.as_ref().map_or_else(String::new, |stream| stream.stream_id().to_owned())
    }

    #[getter]
    fn reconnects(&self) -> u64 {
        let state = self.state();
        state.stream.as_ref().map_or(state.kept_reconnects, ReaderStream::reconnects)
    }
}
