//! The tokio runtime the client runs on: one per process, with one worker thread (the
//! connections' I/O) beside the Python thread that waits in `block_on` with the GIL
//! released. A process forked after the runtime started (a `DataLoader` worker) gets a
//! runtime of its own: the parent's threads do not exist in the child. Every wait can be
//! interrupted with Ctrl-C ([`SIGNAL_TICK`]).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use readerd_common::sync::MutexUnpoisoned;
use tokio::task::JoinHandle;

static RUNTIME: Mutex<Option<(u32, Arc<tokio::runtime::Runtime>)>> = Mutex::new(None);

/// The runtime of this process.
pub fn runtime() -> PyResult<Arc<tokio::runtime::Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock_unpoisoned();
    if let Some((owner, runtime)) = slot.as_ref()
        && *owner == pid
    {
        return Ok(runtime.clone());
    }
    if let Some((_, inherited)) = slot.take() {
        // Forked: the parent's runtime has no threads here and cannot be shut down.
        std::mem::forget(inherited);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("readerd-client")
        .enable_all()
        .build()
        .map_err(|err| pyo3::exceptions::PyRuntimeError::new_err(format!("cannot start the tokio runtime: {err}")))?;
    let runtime = Arc::new(runtime);
    *slot = Some((pid, runtime.clone()));
    Ok(runtime)
}

/// How often a wait takes the GIL to let Python run its signal handlers: Ctrl-C
/// (`KeyboardInterrupt`) ends a wait within this time, whatever the server does.
pub const SIGNAL_TICK: Duration = Duration::from_millis(100);

/// Runs `future` to its end on the runtime, the GIL released meanwhile (other Python
/// threads run, and a `DataLoader`'s main thread goes on while a worker waits). Every
/// [`SIGNAL_TICK`] it checks for signals: a handler that raises (`KeyboardInterrupt`) ends
/// the wait with that exception, `future` dropped.
pub fn wait<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let runtime = runtime()?;
    py.detach(|| runtime.block_on(interruptible(future)))
}

/// `future`, stopped by a Python signal handler that raises (checked every [`SIGNAL_TICK`];
/// signals are handled on Python's main thread only, elsewhere this only waits).
async fn interruptible<F: Future>(future: F) -> PyResult<F::Output> {
    let mut future = std::pin::pin!(future);
    loop {
        match tokio::time::timeout(SIGNAL_TICK, future.as_mut()).await {
            Ok(output) => return Ok(output),
            Err(_tick) => Python::attach(|py| py.check_signals())?,
        }
    }
}

/// Starts `task` as a task of the runtime (on its worker, beside the connections it reads).
pub fn spawn<F>(task: F) -> PyResult<JoinHandle<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Ok(runtime()?.spawn(task))
}

/// Waits for `task` with the GIL released. `Err`: a signal handler raised (Ctrl-C), and
/// `task` goes on, to be joined again; `Ok(Err)`: the task panicked (a `RuntimeError`).
pub fn join<T: Send>(py: Python<'_>, task: &mut JoinHandle<T>) -> PyResult<PyResult<T>> {
    let joined = wait(py, task)?;
    Ok(joined.map_err(|err| pyo3::exceptions::PyRuntimeError::new_err(format!("the client's task failed: {err}"))))
}
