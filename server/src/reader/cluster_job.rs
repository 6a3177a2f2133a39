//! Where a shared reader joins a cluster: with replicas (a `postgres://` state store),
//! its pipeline reads the splits this replica leases from the split ledger
//! (`crate::cluster`), its elements name their records, and their acknowledgements are
//! committed to the ledger. Its sequence ends only when the whole job is done: until
//! then, at its end it looks again for splits of replicas that died. A mixture that stops
//! at its first exhausted component ends where its own choice found one
//! ([`Reader::job_finished_or_look_again`]).

use std::sync::Arc;

use super::Reader;
use super::in_component;
use super::mix::Mixture;
use super::records::ReaderState;
use crate::cluster::mix_feed::{ComponentFeed, ComponentFiles, mixture_order};
use crate::cluster::{EpochOrder, JobFeed};
use crate::element::RecordId;
use crate::error::{Result, ServeError};
use crate::pipeline::RecordPipeline;
use crate::pipeline::feed::FileFeed;
use crate::pipeline::mix::MixProgress;
use crate::source::Record;

/// How often a mixture on replicas takes back components that had no free split.
const LOOK_AGAIN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Reader {
    /// `INVALID_ARGUMENT` for what replicas do not serve yet; checked before the job is
    /// made in the ledger.
    pub fn check_for_cluster(&self) -> Result<()> {
        if self.spec.unbatch {
            return self.refused("unbatch");
        }
        for (i, component) in self.mixture.iter().flat_map(|mixture| &mixture.components).enumerate() {
            component.check_for_cluster().map_err(|err| in_component(i, err))?;
        }
        if self.spec.pipeline.global_shuffle {
            return self.refused("pipeline.shuffle.global");
        }
        if !self.spec.select.is_empty() {
            return self.refused("a selection (skip, take, filters)");
        }
        Ok(())
    }

    /// Makes this new shared reader read through `job` (before any stream reads it); the
    /// caller refused what [`Reader::check_for_cluster`] refuses before it made the job.
    /// A mixture that stops at its first exhausted component joins a job stopped elsewhere
    /// ended (blocking: asks the ledger).
    pub fn join_cluster(self: &Arc<Self>, job: Arc<JobFeed>) -> Result<()> {
        if self.stops_on_empty() {
            let reader = Arc::downgrade(self);
            let on_stopped = Box::new(move || {
                if let Some(reader) = reader.upgrade() {
                    reader.stopped_elsewhere();
                }
            });
            if job.join_stoppable(on_stopped)? {
                self.end_mixture();
            }
        }
        if let Some(mixture) = &self.mixture {
            for (component, files) in mixture.components.iter().zip(self.component_ranges()) {
                component.read_fed(Arc::new(ComponentFeed::new(job.clone(), files.clone())));
            }
        } else {
            self.read_fed(job.clone());
        }
        self.books.delivery.commit_to(job.clone());
        let reader = Arc::downgrade(self);
        job.report_usage(Box::new(move || {
            reader.upgrade().map_or((0, 0), |reader| (reader.books.delivery.in_flight(), reader.stream_count() as u64))
        }));
        let _ = self.job.set(job);
        Ok(())
    }

    /// A mixture that ends at its first exhausted component (`mix.stopOnEmptyDataset`).
    fn stops_on_empty(&self) -> bool {
        self.spec.mix.as_ref().is_some_and(|mix| mix.stop_on_empty)
    }

    /// Reads the files `feed` gives from now on (their records carry their splits).
    fn read_fed(&self, feed: Arc<dyn FileFeed>) {
        let pipeline = RecordPipeline::fed(
            self.files.clone(),
            self.source.clone(),
            self.spec.pipeline.clone(),
            self.settings.pipeline.clone(),
            feed,
        );
        *self.lock() = ReaderState::new(pipeline);
    }

    /// `INVALID_ARGUMENT`: replicas do not serve `what` yet.
    fn refused(&self, what: &str) -> Result<()> {
        Err(ServeError::InvalidSpec(format!(
            "{what} is not served by replicas yet: read {} from a server without a postgres:// state store",
            self.name
        )))
    }

    /// The ledger's file order of each epoch of this reader's job: its own files', or a
    /// mixture's components' one after the other (`crate::cluster::mix_feed`).
    pub fn job_order(&self) -> EpochOrder {
        if self.spec.mix.is_some() {
            return mixture_order(self.mixture_files()).1;
        }
        let (files, pipeline) = (self.files.len(), self.spec.pipeline.clone());
        Box::new(move |epoch| RecordPipeline::epoch_order(files, &pipeline, epoch))
    }

    /// Each component's files among the mixture job's.
    fn component_ranges(&self) -> Vec<std::ops::Range<u32>> {
        mixture_order(self.mixture_files()).0
    }

    /// A mixture's components as its job plans them: a component of weight 0 is never
    /// chosen, so it has no splits (they would never be done).
    fn mixture_files(&self) -> Vec<ComponentFiles> {
        let weights = self.spec.mix.as_ref().map(|mix| mix.weights.clone()).unwrap_or_default();
        let component = |(reader, weight): (&Reader, &f64)| ComponentFiles {
            files: reader.files.len(),
            pipeline: reader.spec.pipeline.clone(),
            planned: *weight > 0.0,
        };
        self.mixture.iter().flat_map(|mixture| &mixture.components).zip(&weights).map(component).collect()
    }

    /// The epochs the job reads: a mixture's, its chosen components' most (`None`:
    /// forever).
    fn job_epochs(&self) -> Option<u64> {
        if self.mixture.is_none() {
            return self.spec.pipeline.num_epochs;
        }
        self.mixture_files()
            .into_iter()
            .filter(|component| component.planned)
            .map(|component| component.pipeline.num_epochs)
            .try_fold(0, |most, epochs| epochs.map(|epochs| most.max(epochs)))
    }

    /// A mixture on replicas takes back the components it found with no free split (their
    /// pipelines look at the ledger again) at most once every [`LOOK_AGAIN_EVERY`] while
    /// it goes on: splits of a replica that died are then taken over although other
    /// components still run. The caller holds the mixture's lock.
    pub(super) fn look_again_while_mixing(&self, mixture: &Mixture, progress: &mut MixProgress) {
        if self.job.get().is_none() || !progress.choice.any_exhausted() {
            return;
        }
        if progress.looked_again_at.is_some_and(|at| at.elapsed() < LOOK_AGAIN_EVERY) {
            return;
        }
        progress.looked_again_at = Some(std::time::Instant::now());
        mixture.take_back_exhausted(progress);
    }

    /// Whether the mixture's choice ended (nothing chosen yet: not ended).
    fn mixture_ended(&self) -> bool {
        Mixture::ended(&self.lock())
    }

    /// Ends the mixture before its next choice: it reads nothing more.
    fn end_mixture(&self) {
        if let Some(mixture) = &self.mixture {
            mixture.end(&mut self.lock());
        }
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

    /// The ledger's names of `records` (empty outside a cluster, without looking at
    /// them).
    pub(super) fn ledger_ids<'a>(&self, records: impl IntoIterator<Item = &'a Record>) -> Vec<RecordId> {
        if self.job.get().is_none() {
            return Vec::new();
        }
        records.into_iter().map(Record::id).collect()
    }

    /// Records taken but never handed out (a remainder that `dropRemainder` drops, a batch
    /// whose records `onError: SKIP` all dropped) are settled in the ledger as acknowledged:
    /// no replica produces them again, and their splits can be done.
    pub(super) fn settle(&self, records: &[RecordId]) {
        if let Some(job) = self.job.get()
            && !records.is_empty()
        {
            job.acknowledge(records.iter().map(|r| (r.epoch, r.file as usize, r.number)));
        }
    }

    /// At the end of this replica's sequence (blocking): whether the job is done on every
    /// replica. When it is not, the pipeline is set to look for free splits again (those
    /// of a replica that died) at the next chunk.
    ///
    /// A mixture that stops at its first exhausted component ends on this replica once
    /// its choice fell on a component with nothing left for it (no free split, its own
    /// read to their end), as `sample_from_datasets` on each tf.data service worker with
    /// dynamic sharding: no replica waits for another's splits. The job is then marked
    /// stopped (readers that join it later read nothing), and this replica ended once
    /// every element it delivered was consumed. The job is done when every live replica
    /// serving it ended: an end of the sequence still means that nothing more comes from
    /// any replica, as consumers reading from all of them expect.
    pub fn job_finished_or_look_again(&self) -> Result<bool> {
        let Some(job) = self.job.get() else { return Ok(true) };
        if self.stops_on_empty() && self.mixture_ended() {
            job.stop()?;
            self.end_here_if_delivered(job)?;
            return Ok(job.stopped_finished()?);
        }
        let finished = match self.job_epochs() {
            Some(epochs) => job.finished(epochs)?,
            None => false,
        };
        if !finished {
            self.look_again();
        }
        Ok(finished)
    }

    /// This replica's mixture of a stopped job ended and everything it took was delivered
    /// and acknowledged (or it has no stream left to deliver through): it is marked ended
    /// in the job (blocking).
    fn end_here_if_delivered(&self, job: &JobFeed) -> Result<()> {
        let delivered = || self.books.all_delivered();
        // The mixture's lock last: a chunk being taken holds it (the renewal thread would
        // wait for it).
        if (self.stream_count() == 0 || delivered()) && self.mixture_ended() {
            job.replica_ended()?;
        }
        Ok(())
    }

    /// A report found the job stopped (on the cluster thread). With no stream reading it,
    /// this replica's mixture ends here (a consumer that comes later gets the end, as
    /// from a single server) and the replica is marked ended; with streams, they end it
    /// when its choice does.
    fn stopped_elsewhere(&self) {
        let Some(job) = self.job.get() else { return };
        if job.has_ended() {
            return;
        }
        if self.stream_count() == 0 {
            self.end_mixture();
        }
        if let Err(err) = self.end_here_if_delivered(job) {
            tracing::warn!(reader = %self.name, error = %err, "not marked ended in the stopped job");
        }
    }

    /// Looks for free splits again at the next chunk; a mixture takes back the components
    /// it found exhausted.
    fn look_again(&self) {
        let mut state = self.lock();
        state.pipeline.look_again();
        if let (Some(mixture), Some(progress)) = (&self.mixture, &mut state.mix) {
            mixture.take_back_exhausted(progress);
        }
    }
}
