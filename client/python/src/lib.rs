//! `readerd._native`: the core of readerd's Python client, a PyO3 extension (abi3, one
//! wheel for every CPython ≥ 3.9) over the Rust client (`readerd_client`). The Python
//! package (`python/readerd`) is its public face; this crate does the work.
//!
//! - [`stream`]: `Stream`, one reader stream, the Rust client's `open_stream`:
//!   reconnection and exact resume on one server, or a shared reader read from several
//!   replicas at once;
//! - [`arrays`]: an element's tensors as Python values without copying their bytes:
//!   numeric tensors as read-only numpy arrays over the received buffers, strings as
//!   `Strings`, a sequence of zero-copy byte values;
//! - [`calls`]: the unary calls of `readerd.v1.DataService` (stats, readers, checkpoints,
//!   acknowledgements), proto3 JSON in and out;
//! - [`runtime`]: the tokio runtime every call runs on, with the GIL released while it waits;
//! - [`errors`]: failures as the package's `readerd.ReaderdError(code, message)`.

mod arrays;
mod calls;
mod errors;
mod runtime;
mod stream;

use pyo3::prelude::*;

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    // Batches of megabytes are allocated and freed many times a second: glibc keeps the
    // freed memory for the next one instead of mapping fresh, zeroed pages each time
    // (the tuning readerd's own binaries start with; bench/README.md).
    readerd_proto::allocator::tune(None);
    module.add_class::<stream::Stream>()?;
    module.add_class::<calls::Connection>()?;
    module.add_class::<calls::Options>()?;
    module.add_class::<arrays::Strings>()?;
    module.add_class::<arrays::Buffer>()?;
    Ok(())
}
