//! Jobs on a replica of a cluster: each job is a shared reader of its own, its own job in
//! the split ledger ([`crate::reader::job_reader_name`]), and those of one shared name
//! take their elements from one window of decoded elements on this replica
//! (`JobWindow::on_replicas`), whose producer leases splits in a ledger job of its own,
//! `NAME (window)`. A spec the window does not serve on replicas yet (a mixture,
//! `unbatch`, `skip`/`take`) has each job read alone, as before.

use std::sync::Arc;

use readerd_proto::v1 as pb;

use super::{ReaderRegistry, display_name, mismatch};
use crate::error::{Result, ServeError};
use crate::reader::{JobWindow, LedgerCoordinator, Reader, job_reader_name};
use crate::spec::ReaderSpec;
use readerd_common::sync::RwLockUnpoisoned;

/// Whether jobs of `spec` share a window on replicas.
fn shares_on_replicas(spec: &ReaderSpec) -> bool {
    spec.mix.is_none() && !spec.unbatch && !spec.select.counts()
}

/// The ledger job of the window the jobs of `shared_name` share on each replica.
fn window_job_name(shared_name: &str) -> String {
    format!("{shared_name} (window)")
}

impl ReaderRegistry {
    /// On replicas, `lookup_or_create_job`: job `job`'s reader of shared reader
    /// `container/shared_name`, a shared reader of its own, created from `spec` when
    /// absent (then the flag is true) and seated at the window the name's jobs share on
    /// this replica.
    pub(super) fn replica_job(
        &self,
        container: &str,
        (shared_name, job): (&str, &str),
        spec: Option<pb::DatasetSpec>,
    ) -> Result<(Arc<Reader>, bool)> {
        // Seated before any stream can find it, so that none reads alone meanwhile.
        let seat = |reader: &Arc<Reader>| {
            if !shares_on_replicas(reader.spec()) {
                return;
            }
            match self.replica_window(container, shared_name, reader) {
                Ok(window) => reader.join_window(window.seat(job.to_owned())),
                Err(err) => tracing::warn!(reader = reader.name(), error = %err, "the job reads alone"),
            }
        };
        self.lookup_or_create_with(container, &job_reader_name(shared_name, job), spec, seat)
    }

    /// The window of `container/shared_name`'s jobs on this replica, made for `reader`'s
    /// spec if there is none.
    fn replica_window(&self, container: &str, shared_name: &str, reader: &Reader) -> Result<Arc<JobWindow>> {
        let key = (container.to_owned(), shared_name.to_owned());
        let existing = self.inner.jobs.read_unpoisoned().windows.get(&key).cloned();
        let window = match existing {
            Some(window) => window,
            None => {
                let cluster =
                    self.inner.setup.cluster.as_ref().ok_or_else(|| ServeError::Internal("no cluster".into()))?;
                let producer =
                    self.open(display_name(container, &window_job_name(shared_name)), reader.spec().proto.clone())?;
                let order = LedgerCoordinator::order(&producer)?;
                let spec = producer.spec();
                let spec_bytes = prost::Message::encode_to_vec(&spec.proto);
                let window_job = window_job_name(shared_name);
                // A window's job read before (by a sweep before this one) and read by
                // no replica now starts again. Which splits the window leases never
                // decides what a job delivers: its own ledger job does.
                cluster.ledger().delete_idle_job(container, &window_job)?;
                let feed = cluster.job_feed(container, &window_job, &spec.fingerprint, &spec_bytes, order)?;
                let log = LedgerCoordinator::produce_for_window(&producer, feed);
                let window = JobWindow::on_replicas(producer, self.inner.setup.job_window_bytes, log);
                self.inner.jobs.write_unpoisoned().windows.entry(key).or_insert(window).clone()
            }
        };
        if !window.matches(reader) {
            return Err(mismatch(display_name(container, shared_name), window.fingerprint(), reader));
        }
        Ok(window)
    }
}
