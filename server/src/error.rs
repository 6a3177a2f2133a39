//! `ServeError`, the server layer's one error type, and its one mapping to gRPC status.

use std::sync::Arc;

use crate::cluster::LedgerError;
use crate::source::SourceError;

pub type Result<T, E = ServeError> = std::result::Result<T, E>;

#[derive(Clone, Debug, thiserror::Error)]
pub enum ServeError {
    /// Reading the files failed (shared: a failed reader reports it to every caller).
    #[error(transparent)]
    Source(Arc<SourceError>),
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    /// A record that does not decode (the message names the record and the feature).
    #[error("{0}")]
    Decode(String),
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    #[error("{0} is not implemented yet")]
    Unimplemented(String),
    #[error("reader {0} not found")]
    ReaderNotFound(String),
    #[error("dataset {0} is not defined in the server's configuration")]
    DatasetNotFound(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("reader {name} exists with spec {existing}; the request's spec is {requested}")]
    SpecMismatch { name: String, existing: String, requested: String },
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("reader {0} was deleted")]
    ReaderDeleted(String),
    #[error("server is shutting down; resume from the stream's last checkpoint")]
    ShuttingDown,
    /// The state store failed: its error, kind and all, to the one mapping below.
    #[error(transparent)]
    StateStore(Arc<crate::state::StateError>),
    /// The split ledger failed (a replica's).
    #[error(transparent)]
    Ledger(Arc<crate::cluster::LedgerError>),
    /// This server cannot serve it now; another may (a replica that lost its lease).
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<crate::state::StateError> for ServeError {
    fn from(err: crate::state::StateError) -> Self {
        ServeError::StateStore(Arc::new(err))
    }
}

impl From<crate::cluster::LedgerError> for ServeError {
    fn from(err: crate::cluster::LedgerError) -> Self {
        match err {
            crate::cluster::LedgerError::OtherSpec(_) => ServeError::FailedPrecondition(err.to_string()),
            crate::cluster::LedgerError::Deleted(name) => ServeError::ReaderDeleted(name),
            _ => ServeError::Ledger(Arc::new(err)),
        }
    }
}

impl From<crate::memory::MemoryExhausted> for ServeError {
    fn from(err: crate::memory::MemoryExhausted) -> Self {
        ServeError::ResourceExhausted(err.to_string())
    }
}

impl From<SourceError> for ServeError {
    fn from(err: SourceError) -> Self {
        ServeError::Source(Arc::new(err))
    }
}

/// A split ledger error's code, wherever it surfaces (as itself, or as a pipeline's).
fn ledger_code(err: &LedgerError) -> tonic::Code {
    use tonic::Code;
    match err {
        LedgerError::Postgres(_) | LedgerError::Unreachable(_) | LedgerError::State(_) => Code::Unavailable,
        // The streams end; the consumer reads on from the other replicas.
        LedgerError::Void(_) => Code::Unavailable,
        // The ledger holds what does not decode: a record set, a job's spec.
        LedgerError::BadRecordSet(_) | LedgerError::BadSpec(_) => Code::DataLoss,
        LedgerError::OutOfRange(_) | LedgerError::Inconsistent(_) => Code::Internal,
        LedgerError::OtherSpec(_) => Code::FailedPrecondition,
        LedgerError::Deleted(_) => Code::Aborted,
    }
}

impl ServeError {
    pub fn code(&self) -> tonic::Code {
        use tonic::Code;
        match self {
            ServeError::Source(err) => match err.as_ref() {
                SourceError::Format { source, .. } if source.is_data_loss() => Code::DataLoss,
                SourceError::Format { .. } | SourceError::BadPattern { .. } => Code::InvalidArgument,
                SourceError::Columnar { data_loss: true, .. } => Code::DataLoss,
                SourceError::Columnar { .. } => Code::InvalidArgument,
                SourceError::Open { source, .. } => match source.kind() {
                    std::io::ErrorKind::NotFound => Code::NotFound,
                    std::io::ErrorKind::PermissionDenied => Code::PermissionDenied,
                    _ => Code::Internal,
                },
                SourceError::Read { .. } => Code::Internal,
                SourceError::BadRoot { .. } => Code::InvalidArgument,
                SourceError::Unavailable { .. } => Code::Unavailable,
                // The ledger's error, its kind kept (`LedgerError::for_epoch`).
                SourceError::Ledger { cause, .. } => {
                    cause.downcast_ref::<LedgerError>().map_or(Code::Unavailable, ledger_code)
                }
                SourceError::Changed { .. } | SourceError::BadAnswer { .. } => Code::FailedPrecondition,
                SourceError::OutsideDataRoots { .. } => Code::PermissionDenied,
                SourceError::NoMatch { .. } => Code::NotFound,
                SourceError::Memory(_) => Code::ResourceExhausted,
            },
            ServeError::InvalidSpec(_) | ServeError::InvalidArgument(_) | ServeError::Decode(_) => {
                Code::InvalidArgument
            }
            ServeError::Unimplemented(_) => Code::Unimplemented,
            ServeError::ReaderNotFound(_) | ServeError::DatasetNotFound(_) | ServeError::NotFound(_) => Code::NotFound,
            ServeError::PermissionDenied(_) => Code::PermissionDenied,
            ServeError::Unauthenticated(_) => Code::Unauthenticated,
            ServeError::SpecMismatch { .. } | ServeError::FailedPrecondition(_) => Code::FailedPrecondition,
            ServeError::ResourceExhausted(_) => Code::ResourceExhausted,
            ServeError::ReaderDeleted(_) => Code::Aborted,
            ServeError::StateStore(_) => Code::Unavailable,
            ServeError::Ledger(err) => ledger_code(err),
            ServeError::ShuttingDown | ServeError::Unavailable(_) => Code::Unavailable,
            ServeError::Internal(_) => Code::Internal,
        }
    }
}

impl From<ServeError> for tonic::Status {
    fn from(err: ServeError) -> Self {
        let code = err.code();
        if code == tonic::Code::Internal {
            tracing::error!(error = %err, "internal error"); // logged once, here
        }
        tonic::Status::new(code, err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::record_set::RecordSet;
    use crate::state::session::Unreachable;

    #[test]
    fn the_state_stores_and_the_ledgers_errors_keep_their_kind_to_the_status() {
        let unreachable = || Unreachable { waited: std::time::Duration::from_secs(60), last: "refused".into() };
        let ledger = |err: LedgerError| ServeError::Ledger(Arc::new(err)).code();
        assert_eq!(ServeError::from(crate::state::StateError::from(unreachable())).code(), tonic::Code::Unavailable);
        assert_eq!(ServeError::from(LedgerError::from(unreachable())).code(), tonic::Code::Unavailable);
        let bad_set = RecordSet::decode(&[0xff, 0xff, 0xff]).expect_err("not a record set");
        assert_eq!(ledger(LedgerError::from(bad_set)), tonic::Code::DataLoss);
        assert_eq!(ServeError::from(LedgerError::Deleted("team/train".into())).code(), tonic::Code::Aborted);
        let other = ServeError::from(LedgerError::OtherSpec("team/train".into()));
        assert_eq!(other.code(), tonic::Code::FailedPrecondition);
        let status = tonic::Status::from(ServeError::from(LedgerError::from(unreachable())));
        assert!(status.message().starts_with("split ledger: unreachable for 60"), "{}", status.message());

        // Met while leasing a pipeline's next file, a ledger error keeps its kind.
        let leasing = |err: LedgerError| tonic::Status::from(ServeError::from(err.for_epoch(3)));
        assert_eq!(leasing(LedgerError::from(unreachable())).code(), tonic::Code::Unavailable);
        let bad_set = RecordSet::decode(&[0xff, 0xff, 0xff]).expect_err("not a record set");
        assert_eq!(leasing(LedgerError::from(bad_set)).code(), tonic::Code::DataLoss);
        assert_eq!(leasing(LedgerError::Deleted("team/train".into())).code(), tonic::Code::Aborted);
        let void = leasing(LedgerError::Void("a split was taken over".into()));
        assert_eq!(void.code(), tonic::Code::Unavailable);
        assert_eq!(void.message(), "cannot lease the next file of epoch 3: a split was taken over");
        assert_eq!(leasing(LedgerError::Inconsistent("file 9 of 0..4".into())).code(), tonic::Code::Internal);
    }
}
