//! Where a shared reader joins a cluster: with replicas (a `postgres://` state store), a
//! [`ReplicaJob`] adapts the reader to its job in the split ledger (`crate::cluster`). Its
//! pipeline reads the splits this replica leases (a mixture's components each their own
//! files'), its elements name their records (`Record::id`), and their acknowledgements
//! are committed to the ledger. Its sequence ends only when the whole job is done: until
//! then, at its end it looks again for splits of replicas that died. A mixture that
//! stops at its first exhausted component ends where its own choice found one
//! ([`ReplicaJob::finished_or_look_again`]).

use std::sync::Arc;

use super::Reader;
use super::mix::Mixture;
use super::records::InLedger;
use crate::cluster::mix_feed::{ComponentFeed, ComponentFiles, mixture_order};
use crate::cluster::{EpochOrder, JobFeed};
use crate::element::RecordId;
use crate::error::Result;
use crate::pipeline::RecordPipeline;
use crate::pipeline::feed::{FedFile, FileFeed};
use crate::pipeline::mix::MixProgress;
use crate::source::{Record, SourceError, SplitRef};
use readerd_common::sync::MutexUnpoisoned;

/// How often a mixture on replicas takes back components that had no free split.
const LOOK_AGAIN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A shared reader's job in the split ledger, which it serves with other replicas.
pub struct ReplicaJob {
    feed: Arc<JobFeed>,
    /// Of the jobs' window's producer: what it does in its ledger job, for the jobs that
    /// follow it (`super::job_window`).
    window_log: Option<Arc<WindowLog>>,
    /// When [`ReplicaJob::finished_or_look_again`] last asked the ledger, and its answer:
    /// every stream at its end asks, but the ledger is asked once per [`POLL_EVERY`].
    polled: std::sync::Mutex<Option<(std::time::Instant, bool)>>,
}

/// How often a replica asks the ledger whether a job it is done with is done everywhere
/// (and looks for splits of replicas that died), however many of its streams wait.
const POLL_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

impl ReplicaJob {
    /// Makes new shared reader `reader` read through `feed`'s job (before any stream reads
    /// it).
    /// A mixture that stops at its first exhausted component joins a job stopped elsewhere
    /// ended (blocking: asks the ledger).
    pub fn join(reader: &Arc<Reader>, feed: Arc<JobFeed>) -> Result<()> {
        if stops_on_empty(reader) {
            let weak = Arc::downgrade(reader);
            let on_stopped = Box::new(move || {
                if let Some(reader) = weak.upgrade()
                    && let Some(job) = reader.job.get()
                {
                    job.stopped_elsewhere(&reader);
                }
            });
            if feed.join_stoppable(on_stopped)? {
                end_mixture(reader);
            }
        }
        if let Some(mixture) = &reader.mixture {
            for (i, (component, files)) in mixture.components.iter().zip(component_ranges(reader)?).enumerate() {
                let component_feed = Arc::new(ComponentFeed::new(feed.clone(), files.clone()));
                read_fed(component, component_feed, InLedger::new(feed.clone(), 1 + i as u32));
            }
            // Its components' dropped records are settled with the mixture's chunks.
            reader.lock().ledger = Some(InLedger::new(feed.clone(), 0));
        } else {
            read_fed(reader, feed.clone(), InLedger::new(feed.clone(), 0));
        }
        reader.books.delivery.commit_to(feed.clone());
        let weak = Arc::downgrade(reader);
        feed.report_usage(Box::new(move || {
            weak.upgrade().map_or((0, 0), |reader| (reader.books.delivery.in_flight(), reader.stream_count() as u64))
        }));
        let _ = reader.job.set(ReplicaJob { feed, window_log: None, polled: Default::default() });
        Ok(())
    }

    /// The ledger's split order of each epoch of `reader`'s job: its own files' (or, with
    /// the global shuffle, its permutation's ranges), or a mixture's components' one after
    /// the other (`crate::cluster::mix_feed`). Blocking: the global shuffle loads its
    /// files' record indexes to count the epoch's records.
    pub fn order(reader: &Reader) -> Result<EpochOrder> {
        if reader.spec.mix.is_some() {
            return Ok(mixture_order(mixture_files(reader)?).1);
        }
        let splits = ledger_splits(reader)?;
        let pipeline = reader.spec.pipeline.clone();
        Ok(Box::new(move |epoch| RecordPipeline::ledger_order(splits, &pipeline, epoch)))
    }

    pub fn feed(&self) -> &Arc<JobFeed> {
        &self.feed
    }

    /// The ledger's names of `records`.
    pub(super) fn ledger_ids<'a>(&self, records: impl IntoIterator<Item = &'a Record>) -> Vec<RecordId> {
        records.into_iter().map(Record::id).collect()
    }

    /// Records taken but never handed out (a remainder that `dropRemainder` drops, a batch
    /// whose records `onError: SKIP` all dropped) are settled in the ledger as acknowledged:
    /// no replica produces them again, and their splits can be done.
    pub(super) fn settle(&self, records: &[RecordId]) {
        if !records.is_empty() {
            self.feed.acknowledge(records);
            if let Some(log) = &self.window_log {
                log.push(WindowEvent::Settled(records.to_vec()));
            }
        }
    }

    /// Makes `reader` (the jobs' window's producer, a plain spec: no mixture) read the
    /// splits it leases in `feed`'s job (the window's), each done once read (see
    /// `JobWindow::on_replicas`): what it does there is logged for the jobs that follow.
    pub fn produce_for_window(reader: &Reader, feed: Arc<JobFeed>) -> Arc<WindowLog> {
        let log = Arc::new(WindowLog::default());
        let recording = Arc::new(RecordingFeed { feed: feed.clone(), log: log.clone() });
        read_fed(reader, recording, InLedger::new(feed.clone(), 0));
        let window_log = Some(log.clone());
        let _ = reader.job.set(ReplicaJob { feed, window_log, polled: Default::default() });
        log
    }

    /// A mixture on replicas takes back the components it found with no free split (their
    /// pipelines look at the ledger again) at most once every [`LOOK_AGAIN_EVERY`] while
    /// it goes on: splits of a replica that died are then taken over although other
    /// components still run. The caller holds the mixture's lock.
    pub(super) fn look_again_while_mixing(&self, mixture: &Mixture, progress: &mut MixProgress) {
        if !progress.choice.any_exhausted() {
            return;
        }
        if progress.looked_again_at.is_some_and(|at| at.elapsed() < LOOK_AGAIN_EVERY) {
            return;
        }
        progress.looked_again_at = Some(std::time::Instant::now());
        mixture.take_back_exhausted(progress);
    }

    /// At the end of this replica's sequence of `reader` (blocking): whether the job is
    /// done on every replica. When it is not, the pipeline is set to look for free splits
    /// again (those of a replica that died) at the next chunk.
    ///
    /// A mixture that stops at its first exhausted component ends on this replica once
    /// its choice fell on a component with nothing left for it (no free split, its own
    /// read to their end), as `sample_from_datasets` on each tf.data service worker with
    /// dynamic sharding: no replica waits for another's splits. The job is then marked
    /// stopped (readers that join it later read nothing), and this replica ended once
    /// every element it delivered was consumed. The job is done when every live replica
    /// serving it ended: an end of the sequence still means that nothing more comes from
    /// any replica, as consumers reading from all of them expect.
    pub fn finished_or_look_again(&self, reader: &Reader) -> Result<bool> {
        let mut polled = self.polled.lock_unpoisoned();
        if let Some((at, finished)) = *polled
            && (finished || at.elapsed() < POLL_EVERY)
        {
            return Ok(finished);
        }
        let finished = self.poll(reader)?;
        *polled = Some((std::time::Instant::now(), finished));
        Ok(finished)
    }

    /// [`ReplicaJob::finished_or_look_again`], asking the ledger.
    fn poll(&self, reader: &Reader) -> Result<bool> {
        let job = &self.feed;
        if stops_on_empty(reader) && mixture_ended(reader) {
            job.stop()?;
            self.end_here_if_delivered(reader)?;
            return Ok(job.stopped_finished()?);
        }
        let finished = match job_epochs(reader) {
            Some(epochs) => job.finished(epochs)?,
            None => false,
        };
        if !finished {
            look_again(reader);
        }
        Ok(finished)
    }

    /// This replica's mixture of a stopped job ended and everything it took was delivered
    /// and acknowledged (or it has no stream left to deliver through): it is marked ended
    /// in the job (blocking).
    fn end_here_if_delivered(&self, reader: &Reader) -> Result<()> {
        let delivered = || reader.books.all_delivered();
        // The mixture's lock last: a chunk being taken holds it (the renewal thread would
        // wait for it).
        if (reader.stream_count() == 0 || delivered()) && mixture_ended(reader) {
            self.feed.replica_ended()?;
        }
        Ok(())
    }

    /// A report found the job stopped (on the cluster thread). With no stream reading
    /// `reader`, this replica's mixture ends here (a consumer that comes later gets the
    /// end, as from a single server) and the replica is marked ended; with streams, they
    /// end it when its choice does.
    fn stopped_elsewhere(&self, reader: &Reader) {
        if self.feed.has_ended() {
            return;
        }
        if reader.stream_count() == 0 {
            end_mixture(reader);
        }
        if let Err(err) = self.end_here_if_delivered(reader) {
            tracing::warn!(reader = %reader.name, error = %err, "not marked ended in the stopped job");
        }
    }
}

/// What the jobs' window's producer did in the window's ledger job while it read: what a
/// job that follows it does in its own before it takes the chunk read
/// (`crate::cluster::job::follow`).
#[derive(Clone, Debug)]
pub enum WindowEvent {
    /// It leased a split; `taken_over`: with records to leave out (the window's job had
    /// some of it read by a replica that died).
    Leased { split: SplitRef, taken_over: bool },
    /// It read a split to its end, taking this many records of it.
    Read(SplitRef, u64),
    /// Records it took and never handed out (settled as acknowledged).
    Settled(Vec<RecordId>),
}

/// The producer's events since the window last took them.
#[derive(Debug, Default)]
pub struct WindowLog(std::sync::Mutex<Vec<WindowEvent>>);

impl WindowLog {
    fn push(&self, event: WindowEvent) {
        self.0.lock_unpoisoned().push(event);
    }

    /// The events since the last call.
    pub fn take(&self) -> Vec<WindowEvent> {
        std::mem::take(&mut *self.0.lock_unpoisoned())
    }
}

/// The window's job's feed, logging what the producer leases and reads.
struct RecordingFeed {
    feed: Arc<JobFeed>,
    log: Arc<WindowLog>,
}

impl FileFeed for RecordingFeed {
    fn next_file(&self, epoch: u64) -> std::result::Result<Option<FedFile>, SourceError> {
        let fed = self.feed.next_file(epoch)?;
        if let Some(fed) = &fed {
            let split = SplitRef { epoch: fed.epoch, file: fed.split };
            self.log.push(WindowEvent::Leased { split, taken_over: !fed.leave_out.is_empty() });
        }
        Ok(fed)
    }

    fn file_read(&self, split: SplitRef, records: u64) {
        self.feed.file_read(split, records);
        self.log.push(WindowEvent::Read(split, records));
    }
}

/// A mixture that ends at its first exhausted component (`mix.stopOnEmptyDataset`).
fn stops_on_empty(reader: &Reader) -> bool {
    reader.spec.mix.as_ref().is_some_and(|mix| mix.stop_on_empty)
}

/// `reader` reads the files `feed` gives from now on (their records carry their splits):
/// its pipeline, as `Reader::open` built it, takes its files from the feed, and its
/// records answer to the job's ledger (`ledger`).
fn read_fed(reader: &Reader, feed: Arc<dyn FileFeed>, ledger: InLedger) {
    let mut state = reader.lock();
    state.pipeline.read_from(feed);
    state.ledger = Some(ledger);
}

/// `INVALID_ARGUMENT`: replicas do not serve `what` yet.
/// Each component's splits among the mixture job's.
fn component_ranges(reader: &Reader) -> Result<Vec<std::ops::Range<u32>>> {
    Ok(mixture_order(mixture_files(reader)?).0)
}

/// The splits of each epoch of `reader`'s own files in the ledger (its pipeline keeps the
/// record indexes it loads for them).
fn ledger_splits(reader: &Reader) -> Result<usize> {
    Ok(reader.lock().pipeline.ledger_splits()?)
}

/// A mixture's components as its job plans them: a component of weight 0 is never
/// chosen, so it has no splits (they would never be done).
fn mixture_files(reader: &Reader) -> Result<Vec<ComponentFiles>> {
    let weights = reader.spec.mix.as_ref().map(|mix| mix.weights.clone()).unwrap_or_default();
    let component = |(component, weight): (&Reader, &f64)| {
        Ok(ComponentFiles {
            files: ledger_splits(component)?,
            pipeline: component.spec.pipeline.clone(),
            planned: *weight > 0.0,
        })
    };
    reader.mixture.iter().flat_map(|mixture| &mixture.components).zip(&weights).map(component).collect()
}

/// The epochs the job reads: a mixture's, its chosen components' most (`None`: forever).
fn job_epochs(reader: &Reader) -> Option<u64> {
    if reader.mixture.is_none() {
        return reader.spec.pipeline.num_epochs;
    }
    let weights = reader.spec.mix.as_ref().map(|mix| mix.weights.as_slice()).unwrap_or_default();
    reader
        .mixture
        .iter()
        .flat_map(|mixture| &mixture.components)
        .zip(weights)
        .filter(|(_, weight)| **weight > 0.0)
        .map(|(component, _)| component.spec.pipeline.num_epochs)
        .try_fold(0, |most, epochs| epochs.map(|epochs| most.max(epochs)))
}

/// Whether the mixture's choice ended (nothing chosen yet: not ended).
fn mixture_ended(reader: &Reader) -> bool {
    Mixture::ended(&reader.lock())
}

/// Ends the mixture before its next choice: it reads nothing more.
fn end_mixture(reader: &Reader) {
    if let Some(mixture) = &reader.mixture {
        mixture.end(&mut reader.lock());
    }
}

/// Looks for free splits again at the next chunk; a mixture takes back the components it
/// found exhausted.
fn look_again(reader: &Reader) {
    let mut state = reader.lock();
    state.pipeline.look_again();
    if let (Some(mixture), Some(progress)) = (&reader.mixture, &mut state.mix) {
        mixture.take_back_exhausted(progress);
    }
}
