//! The status of the server, as `/status.json`, the status page and `readerctl top`
//! show it: every reader this server holds (shared readers by name, private ones by
//! stream), its consumers and where their time goes (`crate::watch`), its stages, the
//! memory budget, and on a cluster the replicas and splits of each job. Built on demand
//! from the registry and the open streams ([`Status::gather`]), the history's points and
//! each job's view of the ledger, which the listener's task refreshes every 5 s
//! (`Coordinator::refresh_view`): no request asks PostgreSQL anything.
//!
//! - [`history`]: the last 15 minutes of each reader, a point every 5 s.
//! - [`http`]: the listener of `--metrics-listen`: `/metrics`, `/status.json`, and `/`,
//!   the status page (`page.html`).
//! - [`sessions`]: the page's logins, a random id in the cookie for a token kept here.

pub mod history;
pub mod http;
pub mod sessions;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::checkpoint::Streams;
use crate::coordinator::JobView;
use crate::reader::Reader;
use crate::registry::{DEFAULT_JOB, ReaderRegistry};
use crate::watch::consumer_time::together;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub readers: Vec<ReaderStatus>,
    /// On a cluster: each replica serving a job of these readers (once per job).
    pub replicas: Vec<ReplicaStatus>,
    pub memory: MemoryStatus,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReaderStatus {
    pub container: String,
    /// Empty for a private reader (one stream's own).
    pub shared_name: String,
    /// The private reader's stream; empty for a shared reader.
    pub stream: String,
    /// The job (consumer group) of a shared reader it serves: `default`, or a job sharing
    /// the shared name's window of decoded elements (then `window` says how).
    pub job: String,
    pub window: Option<WindowStatus>,
    /// Elements its consumers took per second, over their last reports.
    pub elements_per_second: Option<f64>,
    /// Its consumers' wait over their wait and step together.
    pub input_bound: Option<f64>,
    /// Servers serving it now (the live replicas of its job; 1 on a single server), and
    /// how many its consumers need (`crate::watch::replicas_recommended`).
    pub replicas: u64,
    pub replicas_recommended: u64,
    pub records_produced: u64,
    pub elements_produced: u64,
    /// Where its pipeline is (none for a mixture): the epoch (from 1), the epochs it reads
    /// (none: forever), and the epoch's files read and in all (none when not known: the
    /// global shuffle, a job's files).
    pub epoch: Option<u64>,
    pub num_epochs: Option<u64>,
    pub epoch_files_done: Option<u64>,
    pub epoch_files: Option<u64>,
    /// Files read to their end, over all epochs.
    pub files_completed: u64,
    pub elements_sent: u64,
    pub bytes_sent: u64,
    pub consumers: Vec<ConsumerStatus>,
    /// Seconds in each stage so far (`crate::watch::stages`).
    pub stages: BTreeMap<&'static str, f64>,
    /// Served by replicas: its job's splits per epoch, as the ledger has them.
    pub epochs: Vec<EpochStatus>,
    /// Its last 15 minutes (`history`), or the points after `?since=`.
    pub history: Vec<history::Point>,
}

/// A job's place at its shared name's window of decoded elements.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowStatus {
    /// It takes its elements from the window now (else it reads alone, having fallen
    /// behind).
    pub attached: bool,
    /// Its fallbacks: times it fell behind the window, and caught up again.
    pub detachments: u64,
    pub reattachments: u64,
    /// Elements it took from the window, and decoded alone (each handed out once); and
    /// those it decoded again, unsent, after falling behind inside an unbatched record.
    pub elements_shared: u64,
    pub elements_decoded: u64,
    pub elements_read_again: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerStatus {
    pub id: String,
    /// The job it reads for.
    pub job: String,
    pub elements_per_second: Option<f64>,
    pub input_bound: Option<f64>,
    /// Seconds waited and stepped over its last reports.
    pub wait_seconds: Option<f64>,
    pub step_seconds: Option<f64>,
    pub delivered: u64,
    pub acknowledged: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EpochStatus {
    pub epoch: u64,
    pub splits: u64,
    pub leased: u64,
    pub done: u64,
    pub free: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    pub container: String,
    pub shared_name: String,
    pub id: String,
    pub address: String,
    pub alive: bool,
    /// Seconds since its last heartbeat.
    pub heartbeat_age_seconds: f64,
    pub splits_leased: u64,
    /// Splits of the job it read and had acknowledged in full, over all epochs.
    pub splits_done: u64,
    pub consumers: u64,
    pub elements_in_flight: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStatus {
    /// `--memory-budget` (0: none).
    pub budget_bytes: u64,
    pub reserved_bytes: u64,
    /// Its last 15 minutes, or the points after `?since=`.
    pub history: Vec<history::MemoryPoint>,
}

/// A reader as the status finds it: its names and itself.
pub struct Watched {
    pub container: String,
    pub shared_name: String,
    pub stream: String,
    /// `default`, or the job whose reader it is.
    pub job: String,
    pub reader: Arc<Reader>,
}

/// Every reader the server holds: the registry's shared readers, and the private reader
/// of each open stream; those of containers `visible` does not let through left out.
pub fn watched(registry: &ReaderRegistry, streams: &Streams, visible: &dyn Fn(&str) -> bool) -> Vec<Watched> {
    let mut readers: Vec<Watched> = registry
        .all()
        .into_iter()
        .filter(|(container, _, _)| visible(container))
        .map(|(container, shared_name, reader)| Watched {
            container,
            shared_name,
            stream: String::new(),
            job: DEFAULT_JOB.into(),
            reader,
        })
        .collect();
    for (container, shared_name, job, reader) in registry.all_jobs() {
        if visible(&container) {
            readers.push(Watched { container, shared_name, stream: String::new(), job, reader });
        }
    }
    for record in streams.all() {
        if record.shared_name.is_empty() && visible(&record.container) {
            let (container, stream, reader) = (record.container.clone(), record.id.clone(), record.reader.clone());
            readers.push(Watched { container, shared_name: String::new(), stream, job: DEFAULT_JOB.into(), reader });
        }
    }
    let key = |w: &Watched| {
        (w.container.clone(), w.shared_name.clone(), w.job != DEFAULT_JOB, w.job.clone(), w.stream.clone())
    };
    readers.sort_by_key(key);
    readers
}

impl Status {
    /// The status of `readers`, with their history points after `since` (all without it).
    /// Blocking, briefly: it reads what readers published and asks the ledger nothing.
    pub fn gather(readers: &[Watched], history: &history::History, since: Option<u64>) -> Status {
        let mut replicas = Vec::new();
        let histories = history.points(readers.iter().map(|watched| &watched.reader), since);
        let readers = readers
            .iter()
            .zip(histories)
            .map(|(watched, history)| {
                let mut status = reader_status(watched, history);
                // The job as the listener's task last asked the ledger (`Coordinator::view`):
                // a status request asks nothing.
                if let Some(view) = watched.reader.coordinator().view() {
                    status.epochs = job_epochs(&view);
                    let serving = job_replicas(watched, &view);
                    status.replicas = serving.iter().filter(|replica| replica.alive).count() as u64;
                    replicas.extend(serving);
                }
                status.replicas_recommended = crate::watch::replicas_recommended(status.replicas, status.input_bound);
                status
            })
            .collect();
        let memory = crate::memory::server();
        let memory = MemoryStatus {
            budget_bytes: memory.limit() as u64,
            reserved_bytes: memory.reserved() as u64,
            history: history.memory_points(since),
        };
        Status { readers, replicas, memory }
    }
}

fn reader_status(watched: &Watched, history: Vec<history::Point>) -> ReaderStatus {
    let stats = watched.reader.stats();
    let together = together(stats.consumers.iter().filter_map(|consumer| consumer.time));
    let consumers = stats
        .consumers
        .iter()
        .map(|consumer| {
            let recent = consumer.time;
            ConsumerStatus {
                id: consumer.stream_id.clone(),
                job: watched.job.clone(),
                elements_per_second: recent.and_then(|r| r.elements_per_second()),
                input_bound: recent.and_then(|r| r.input_bound()),
                wait_seconds: recent.map(|r| r.wait.as_secs_f64()),
                step_seconds: recent.map(|r| r.step.as_secs_f64()),
                delivered: consumer.delivered,
                acknowledged: consumer.acknowledged,
            }
        })
        .collect::<Vec<_>>();
    let elements_per_second: Option<f64> =
        together.map(|_| consumers.iter().filter_map(|consumer| consumer.elements_per_second).sum());
    let watch = watched.reader.watch();
    let progress = watched.reader.epoch_progress();
    ReaderStatus {
        container: watched.container.clone(),
        shared_name: watched.shared_name.clone(),
        stream: watched.stream.clone(),
        job: watched.job.clone(),
        window: watched.reader.seat().map(|seat| {
            let figures = seat.figures();
            WindowStatus {
                attached: seat.is_attached(),
                detachments: figures.detachments,
                reattachments: figures.reattachments,
                elements_shared: figures.shared,
                elements_decoded: figures.decoded,
                elements_read_again: figures.read_again,
            }
        }),
        elements_per_second,
        input_bound: together.and_then(|time| time.input_bound()),
        replicas: 1,
        replicas_recommended: 1,
        records_produced: stats.records_produced,
        elements_produced: stats.elements_produced,
        epoch: progress.map(|p| p.epoch),
        num_epochs: progress.and_then(|p| p.epochs),
        epoch_files_done: progress.map(|p| p.files_done),
        epoch_files: progress.and_then(|p| p.files),
        files_completed: stats.work_units_completed,
        elements_sent: watch.elements_sent(),
        bytes_sent: watch.bytes_sent(),
        consumers,
        stages: watch.stages.seconds().into_iter().map(|(stage, seconds)| (stage.name(), seconds)).collect(),
        epochs: Vec::new(),
        history,
    }
}

/// A job's splits per epoch.
fn job_epochs(view: &JobView) -> Vec<EpochStatus> {
    view.epochs
        .iter()
        .map(|(epoch, progress)| EpochStatus {
            epoch: *epoch,
            splits: progress.splits,
            leased: progress.leased,
            done: progress.done,
            free: progress.splits.saturating_sub(progress.leased + progress.done),
        })
        .collect()
}

fn job_replicas(watched: &Watched, view: &JobView) -> Vec<ReplicaStatus> {
    view.replicas
        .iter()
        .map(|replica| ReplicaStatus {
            container: watched.container.clone(),
            shared_name: watched.shared_name.clone(),
            id: replica.replica.clone(),
            address: replica.address.clone(),
            alive: replica.alive,
            heartbeat_age_seconds: replica.heartbeat_age,
            splits_leased: replica.splits_leased,
            splits_done: replica.splits_done,
            consumers: replica.consumers,
            elements_in_flight: replica.elements_in_flight,
        })
        .collect()
}
