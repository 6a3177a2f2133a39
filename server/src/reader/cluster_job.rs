//! Where a shared reader joins a cluster: with replicas (a `postgres://` state store),
//! its pipeline reads the splits this replica leases from the split ledger
//! (`crate::cluster`), its elements name their records, and their acknowledgements are
//! committed to the ledger. Its sequence ends only when the whole job is done: until
//! then, at its end it looks again for splits of replicas that died.

use std::collections::HashMap;
use std::sync::Arc;

use super::Reader;
use super::records::ReaderState;
use crate::cluster::JobFeed;
use crate::element::RecordId;
use crate::error::{Result, ServeError};
use crate::pipeline::RecordPipeline;
use crate::source::Record;

impl Reader {
    /// Makes this new shared reader read through `job` (before any stream reads it).
    pub fn join_cluster(self: &Arc<Self>, job: Arc<JobFeed>) -> Result<()> {
        let refused = |what: &str| {
            Err(ServeError::InvalidSpec(format!(
                "{what} is not served by replicas yet: read {} from a server without a postgres:// state store",
                self.name
            )))
        };
        if self.spec.pipeline.global_shuffle {
            return refused("pipeline.shuffle.global");
        }
        if self.spec.unbatch {
            return refused("unbatch");
        }
        if self.spec.mix.is_some() {
            return refused("a mixture (mix)");
        }
        if !self.spec.select.is_empty() {
            return refused("a selection (skip, take, filters)");
        }
        let pipeline = RecordPipeline::fed(
            self.files.clone(),
            self.source.clone(),
            self.spec.pipeline.clone(),
            self.settings.pipeline.clone(),
            job.clone(),
        );
        *self.lock() = ReaderState::new(pipeline);
        let index: HashMap<Arc<str>, u32> =
            self.files.iter().enumerate().map(|(i, file)| (file.name.clone(), i as u32)).collect();
        let _ = self.file_index.set(index);
        self.delivery.commit_to(job.clone());
        let reader = Arc::downgrade(self);
        job.report_usage(Box::new(move || {
            reader.upgrade().map_or((0, 0), |reader| {
                let stats = reader.stats();
                (stats.elements_in_flight, stats.active_streams)
            })
        }));
        let _ = self.job.set(job);
        Ok(())
    }

    /// `UNIMPLEMENTED` for `verb` on a reader served by replicas: its position is the
    /// job's in the ledger, not this replica's pipeline state.
    pub fn refuse_in_cluster(&self, verb: &str) -> Result<()> {
        match self.job.get() {
            Some(_) => Err(ServeError::Unimplemented(format!(
                "{verb} of reader {}, served by replicas through the split ledger, is not built yet",
                self.name
            ))),
            None => Ok(()),
        }
    }

    /// The job this reader serves with other replicas, if it does.
    pub fn cluster_job(&self) -> Option<&Arc<JobFeed>> {
        self.job.get()
    }

    /// The ledger's names of `batch`'s records (empty outside a cluster).
    pub(super) fn record_ids(&self, batch: &[Record]) -> Vec<RecordId> {
        let Some(index) = self.file_index.get() else { return Vec::new() };
        batch
            .iter()
            .filter_map(|record| {
                let file = *index.get(&record.file)?;
                Some(RecordId { epoch: record.epoch, file, number: record.number })
            })
            .collect()
    }

    /// At the end of this replica's sequence (blocking): whether the job is done on every
    /// replica. When it is not, the pipeline is set to look for free splits again (those
    /// of a replica that died) at the next chunk.
    pub fn job_finished_or_look_again(&self) -> Result<bool> {
        let Some(job) = self.job.get() else { return Ok(true) };
        let Some(epochs) = self.spec.pipeline.num_epochs else {
            self.lock().pipeline.look_again();
            return Ok(false);
        };
        let finished = job.finished(epochs)?;
        if !finished {
            self.lock().pipeline.look_again();
        }
        Ok(finished)
    }
}
