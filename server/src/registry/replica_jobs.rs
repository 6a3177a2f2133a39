//! Jobs on a replica of a cluster: each job's reader is the registry's, keyed by
//! `(container, shared_name, job)` as on one server, and its own job in the split ledger
//! (`crate::cluster::JobKey`); those of one shared name take their elements from one window of decoded
//! elements on this replica (`JobWindow::on_replicas`), whose producer leases splits in
//! a ledger job of its own (`crate::cluster::JobKey::window`). A mixture that stops at its first
//! exhausted component (the window does not serve one on replicas) has each job read
//! alone.

use std::sync::Arc;

use readerd_proto::v1 as pb;

use super::{JobReaderKey, ReaderRegistry, Stale, check_same_spec, display_name, mismatch};
use crate::error::{Result, ServeError};
use crate::reader::{JobWindow, LedgerJobs, Reader, job_reader_name};
use crate::spec::{self, ReaderSpec};
use readerd_common::sync::RwLockUnpoisoned;

/// Whether jobs of `spec` share a window on replicas: not a mixture that stops at its
/// first exhausted component (its end is one for the whole job, across replicas).
fn shares_on_replicas(spec: &ReaderSpec) -> bool {
    spec.mix.as_ref().is_none_or(|mix| !mix.stop_on_empty)
}

/// The name of the reader of the window the jobs of `shared_name` share on a replica (its
/// logs and stats).
fn window_reader_name(shared_name: &str) -> String {
    format!("{shared_name} (window)")
}

impl ReaderRegistry {
    /// On replicas, `lookup_or_create_job`: job `job`'s reader of shared reader
    /// `container/shared_name`, created from `spec` (or its window's) when absent (then the
    /// flag is true), joined to its ledger job and seated at the window the name's jobs
    /// share on this replica before any stream can find it (one that found it first would
    /// read alone).
    pub(super) fn replica_job(
        &self,
        (container, shared_name, job): (&str, &str, &str),
        spec: Option<pb::DatasetSpec>,
    ) -> Result<(Arc<Reader>, bool)> {
        let key: JobReaderKey = (container.to_owned(), shared_name.to_owned(), job.to_owned());
        let requested = spec.as_ref().map(spec::fingerprint);
        if let Some(existing) = self.job_reader(&key) {
            match Stale::of(&existing)? {
                Stale::No => {
                    check_same_spec(&existing, requested.as_deref())?;
                    existing.mark_used();
                    return Ok((existing, false));
                }
                // Its job goes on through a new reader.
                stale => stale.forget(&mut self.inner.jobs.write_unpoisoned().readers, &key, &existing),
            }
        }
        let name = job_reader_name(&display_name(container, shared_name), job);
        let spec = match (spec, self.job_window(container, shared_name)) {
            (Some(spec), _) => spec,
            (None, Some(window)) => window.spec(),
            (None, None) => return Err(ServeError::ReaderNotFound(name)),
        };
        let reader = Arc::new(self.open(name, spec)?);
        self.ledger_jobs()?.join(&reader, (container, shared_name, job))?;
        if shares_on_replicas(reader.spec()) {
            match self.replica_window(container, shared_name, &reader) {
                Ok(window) => reader.join_window(window.seat(job.to_owned(), &reader)),
                Err(err) => tracing::warn!(reader = reader.name(), error = %err, "the job reads alone"),
            }
        }
        let mut jobs = self.inner.jobs.write_unpoisoned();
        if let Some(existing) = jobs.readers.get(&key) {
            // Created by a concurrent call while the files were resolved.
            check_same_spec(existing, requested.as_deref())?;
            return Ok((existing.clone(), false));
        }
        jobs.readers.insert(key, reader.clone());
        Ok((reader, true))
    }

    /// The split ledger's jobs (this server is a replica).
    fn ledger_jobs(&self) -> Result<&LedgerJobs> {
        self.inner.setup.ledger_jobs.as_deref().ok_or_else(|| ServeError::Internal("not a replica".into()))
    }

    /// The window of `container/shared_name`'s jobs on this replica, made for `reader`'s
    /// spec if there is none.
    fn replica_window(&self, container: &str, shared_name: &str, reader: &Reader) -> Result<Arc<JobWindow>> {
        let key = (container.to_owned(), shared_name.to_owned());
        let existing = self.inner.jobs.read_unpoisoned().windows.get(&key).cloned();
        let window = match existing {
            Some(window) => window,
            None => {
                let producer =
                    self.open(display_name(container, &window_reader_name(shared_name)), reader.spec().proto.clone())?;
                let leases = self.ledger_jobs()?.produce_for_window(&producer, (container, shared_name))?;
                let window = JobWindow::on_replicas(producer, self.inner.setup.job_window_bytes, leases);
                self.inner.jobs.write_unpoisoned().windows.entry(key).or_insert(window).clone()
            }
        };
        if !window.matches(reader) {
            return Err(mismatch(display_name(container, shared_name), window.fingerprint(), reader));
        }
        Ok(window)
    }
}
