//! Failures as Python sees them: `readerd.errors.ReaderdError(code, message)`, the code
//! being the gRPC code's canonical name (`DATA_LOSS`), as every client of readerd names it.

use pyo3::prelude::*;
use readerd_client::{ClientError, StreamError, code_name, error_message, status_code, status_message};

/// `ReaderdError(code, message)` as a Python exception.
pub fn reader_error(code: &str, message: &str) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("readerd.errors")
            .and_then(|errors| errors.getattr("ReaderdError"))
            .and_then(|class| class.call1((code, message)));
        match made {
            Ok(error) => PyErr::from_value(error),
            Err(err) => err,
        }
    })
}

pub fn from_status(status: &tonic::Status) -> PyErr {
    reader_error(code_name(status_code(status)), &status_message(status))
}

pub fn from_stream(err: &StreamError) -> PyErr {
    match err {
        StreamError::Status(status) => from_status(status),
        StreamError::GaveUp { .. } => reader_error("UNAVAILABLE", &err.to_string()),
    }
}

pub fn from_client(err: &ClientError) -> PyErr {
    let code = match err {
        ClientError::Connect { .. } => "UNAVAILABLE",
        _ => "INVALID_ARGUMENT",
    };
    reader_error(code, &error_message(err))
}

/// A request or reply that is not the proto3 JSON it should be.
pub fn bad_json(what: &str, err: &serde_json::Error) -> PyErr {
    reader_error("INVALID_ARGUMENT", &format!("{what}: {err}"))
}

/// `body`, the proto3 JSON of a `what` the Python side built from its dicts; an error
/// names the field by its path (`spec.source.filez: unknown field ...`), as a spec file's do.
pub fn from_json<T: serde::de::DeserializeOwned>(what: &str, body: &str) -> PyResult<T> {
    let mut deserializer = serde_json::Deserializer::from_str(body);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        reader_error("INVALID_ARGUMENT", &format!("{what}: {path}: {}", err.inner()))
    })
}
