//! The tokio runtime the client runs on: one per process, with one worker thread (the
//! connections' I/O) beside the Python thread that waits in `block_on` with the GIL
//! released. A process forked after the runtime started (a `DataLoader` worker) gets a
//! runtime of its own: the parent's threads do not exist in the child.

use std::future::Future;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

static RUNTIME: Mutex<Option<(u32, Arc<tokio::runtime::Runtime>)>> = Mutex::new(None);

/// The runtime of this process.
pub fn runtime() -> PyResult<Arc<tokio::runtime::Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
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

/// Runs `future` to its end on the runtime, the GIL released meanwhile (other Python
/// threads run, and a `DataLoader`'s main thread goes on while a worker waits).
pub fn wait<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let runtime = runtime()?;
    Ok(py.detach(|| runtime.block_on(future)))
}

/// Runs `task` as a task of the runtime (on its worker, beside the connections it reads)
/// and waits for it with the GIL released. A task that panicked is a `RuntimeError`.
pub fn run<F>(py: Python<'_>, task: F) -> PyResult<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let runtime = runtime()?;
    py.detach(|| runtime.block_on(runtime.spawn(task)))
        .map_err(|err| pyo3::exceptions::PyRuntimeError::new_err(format!("the client's task failed: {err}")))
}
