//! `ReaderRegistry`: the named reader resources, keyed by `(container, shared_name)` as
//! TensorFlow's resource manager keys them. Cloning is an `Arc` bump.
//!
//! A shared reader's jobs (consumer groups, `ReadRequest.job`) other than `default` have
//! readers of their own, keyed by `(container, shared_name, job)`, which share one window
//! of decoded elements per shared name (`crate::reader::JobWindow`); the shared reader
//! itself, the job `default`, joins that window once another job reads the name. On
//! replicas each job's reader is keyed the same way and is also its own job in the split
//! ledger (`crate::cluster::JobKey`), seated at its shared name's window on that replica
//! (`registry/replica_jobs.rs`).
//!
//! Creating a reader resolves its files: blocking work, so call `lookup_or_create` and
//! `private` from blocking threads. On a replica of a cluster, a new reader joins its job
//! in the split ledger, and jobs are checkpointed, restored and deleted there, through
//! `crate::reader::LedgerJobs`.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use readerd_proto::v1 as pb;

use crate::error::{Result, ServeError};
use crate::limits::{FileBudget, Limits};
use crate::reader::{CheckpointedJob, JobWindow, LedgerJobs, Reader, ReaderSettings};
use crate::source::DataRoots;
use crate::spec::{self, ReaderSpec};
use readerd_common::sync::RwLockUnpoisoned;

mod replica_jobs;

const MAX_NAME_BYTES: usize = 512;

type ReaderKey = (String, String);
/// A job's reader: container, shared name and job.
type JobReaderKey = (String, String, String);

pub use crate::coordinator::DEFAULT_JOB;

/// `INVALID_ARGUMENT` when a name is longer than [`MAX_NAME_BYTES`].
fn check_names(names: &[&str]) -> Result<()> {
    if names.iter().any(|name| name.len() > MAX_NAME_BYTES) {
        return Err(ServeError::InvalidArgument(format!("names are limited to {MAX_NAME_BYTES} bytes")));
    }
    Ok(())
}

#[derive(Clone)]
pub struct ReaderRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    readers: RwLock<BTreeMap<ReaderKey, Arc<Reader>>>,
    /// The readers of jobs other than `default`, and each shared name's window of
    /// decoded elements they share.
    jobs: RwLock<Jobs>,
    setup: RegistrySetup,
}

#[derive(Default)]
struct Jobs {
    readers: BTreeMap<JobReaderKey, Arc<Reader>>,
    windows: BTreeMap<ReaderKey, Arc<JobWindow>>,
}

impl Jobs {
    /// Forgets job `job` of `container/shared_name`, releasing its reader; and the name's
    /// window once no job of it is left and `window_kept` (the job default's reader) is
    /// false. Whether there was the job.
    fn remove_job(&mut self, (container, shared_name, job): (&str, &str, &str), window_kept: bool) -> bool {
        let key = (container.to_owned(), shared_name.to_owned(), job.to_owned());
        let Some(reader) = self.readers.remove(&key) else { return false };
        reader.release();
        if !window_kept && self.readers.keys().all(|(c, n, _)| (c.as_str(), n.as_str()) != (container, shared_name)) {
            self.windows.remove(&(key.0, key.1));
        }
        true
    }

    /// Forgets the jobs of `container` (and of `shared_name` when given), releasing their readers.
    fn remove(&mut self, container: &str, shared_name: Option<&str>) -> usize {
        let matches = |c: &str, n: &str| c == container && shared_name.is_none_or(|name| name == n);
        let keys: Vec<JobReaderKey> = self.readers.keys().filter(|(c, n, _)| matches(c, n)).cloned().collect();
        for key in &keys {
            if let Some(reader) = self.readers.remove(key) {
                reader.release();
            }
        }
        self.windows.retain(|(c, n), _| !matches(c, n));
        keys.len()
    }
}

/// What every reader of a registry is made with and bounded by.
pub struct RegistrySetup {
    pub roots: DataRoots,
    pub max_record_bytes: u64,
    /// Pixels an image a transform decodes may have (`--max-image-pixels`).
    pub max_image_pixels: u64,
    pub settings: ReaderSettings,
    /// Specs the configuration names.
    pub datasets: BTreeMap<String, pb::DatasetSpec>,
    /// Readers, streams and batches.
    pub limits: Limits,
    /// Open files.
    pub files: Arc<FileBudget>,
    /// On a replica of a cluster (a `postgres://` state store), the split ledger's jobs:
    /// shared readers are jobs there.
    pub ledger_jobs: Option<Arc<LedgerJobs>>,
    /// Bytes of decoded elements the jobs of one shared reader share at most.
    pub job_window_bytes: usize,
}

fn display_name(container: &str, shared_name: &str) -> String {
    format!("{container}/{shared_name}")
}

impl ReaderRegistry {
    /// An empty registry.
    pub fn new(setup: RegistrySetup) -> Self {
        Self { inner: Arc::new(Inner { readers: RwLock::default(), jobs: RwLock::default(), setup }) }
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.setup.limits
    }

    /// The spec a request means: its own, or the configuration's dataset of that name.
    pub fn resolve_spec(&self, spec: Option<pb::DatasetSpec>, dataset: &str) -> Result<Option<pb::DatasetSpec>> {
        match (spec, dataset) {
            (spec, "") => Ok(spec),
            (Some(_), _) => Err(ServeError::InvalidArgument("give a spec or a dataset name, not both".into())),
            (None, name) => self
                .inner
                .setup
                .datasets
                .get(name)
                .cloned()
                .map(Some)
                .ok_or_else(|| ServeError::DatasetNotFound(name.to_owned())),
        }
    }

    /// What the elements of a spec (its own, or the configuration's dataset of that name)
    /// hold after its decoder and transforms, parsed as `open` parses it and typed from its
    /// files as a reader opening it would be (blocking: reads CSV headers and a columnar
    /// source's first footer).
    pub fn describe(&self, spec: Option<pb::DatasetSpec>, dataset: &str) -> Result<pb::DescribeSpecResponse> {
        let spec = self
            .resolve_spec(spec, dataset)?
            .ok_or_else(|| ServeError::InvalidArgument("DescribeSpec needs a spec or a dataset".into()))?;
        let mut spec = ReaderSpec::from_proto(spec, self.inner.setup.max_record_bytes)?
            .with_max_image_pixels(self.inner.setup.max_image_pixels);
        // One listing for both: a mixture's files type it, and it is not counted.
        let files = crate::reader::files_of(crate::reader::typed_by(&spec), &self.inner.setup.roots)?;
        crate::reader::type_from_files(&mut spec, &files)?;
        let element_count = crate::reader::element_count(&spec, &files)?;
        Ok(crate::spec::describe(&spec, element_count))
    }

    pub fn datasets(&self) -> &BTreeMap<String, pb::DatasetSpec> {
        &self.inner.setup.datasets
    }

    /// The reader `container/shared_name`; created from `spec` when absent (then the
    /// flag is true). With a spec that differs from the existing reader's:
    /// `FAILED_PRECONDITION` naming both fingerprints.
    pub fn lookup_or_create(
        &self,
        container: &str,
        shared_name: &str,
        spec: Option<pb::DatasetSpec>,
    ) -> Result<(Arc<Reader>, bool)> {
        if shared_name.is_empty() {
            return Err(ServeError::InvalidArgument("shared_name is empty (use a private read)".into()));
        }
        check_names(&[container, shared_name])?;
        let key = (container.to_owned(), shared_name.to_owned());
        let requested = spec.as_ref().map(spec::fingerprint);
        self.forget_stale_reader(&key)?;
        if let Some(existing) = self.read_lock().get(&key) {
            check_same_spec(existing, requested.as_deref())?;
            existing.mark_used();
            return Ok((existing.clone(), false));
        }
        let name = display_name(container, shared_name);
        let spec = spec.ok_or_else(|| ServeError::ReaderNotFound(name.clone()))?;
        let in_container = self.read_lock().keys().filter(|(c, _)| c == container).count();
        self.inner.setup.limits.check_readers(container, in_container)?;
        let reader = Arc::new(self.open(name, spec)?);
        // Its job in the ledger first: on replicas, a seat at the window is one in its
        // leases too.
        if let Some(jobs) = &self.inner.setup.ledger_jobs {
            jobs.join(&reader, (container, shared_name, DEFAULT_JOB))?;
        }
        if let Some(window) = self.job_window(container, shared_name) {
            // Its other jobs came first: it shares their window.
            match window.matches(&reader) {
                true => reader.join_window(window.seat(DEFAULT_JOB.to_owned(), &reader)),
                // On replicas each job is a shared reader of its own: of another spec, it
                // reads alone.
                false if window.is_on_replicas() => tracing::warn!(reader = reader.name(), "reads alone"),
                false => return Err(mismatch(display_name(container, shared_name), window.fingerprint(), &reader)),
            }
        }
        let mut readers = self.inner.readers.write_unpoisoned();
        if let Some(existing) = readers.get(&key) {
            // Created by a concurrent call while the files were resolved.
            check_same_spec(existing, requested.as_deref())?;
            return Ok((existing.clone(), false));
        }
        readers.insert(key, reader.clone());
        drop(readers);
        // A job created meanwhile found no job default to seat: it is seated here (each
        // side looks for the other after publishing itself, so one of them sees it).
        let unseated = || reader.seat().is_none();
        if let Some(window) = self.job_window(container, shared_name).filter(|w| unseated() && w.matches(&reader)) {
            reader.join_window(window.seat(DEFAULT_JOB.to_owned(), &reader));
        }
        Ok((reader, true))
    }

    /// Whether this server is a replica of a cluster (its shared readers' jobs are the
    /// split ledger's).
    pub fn is_cluster(&self) -> bool {
        self.inner.setup.ledger_jobs.is_some()
    }

    /// Job `job`'s reader of shared reader `container/shared_name` (`job` other than
    /// [`DEFAULT_JOB`], whose reader is [`Self::lookup_or_create`]'s); created from `spec`
    /// (or the spec of the shared name's other jobs) when absent, then the flag is true.
    /// Every job of a shared name has the same spec, and takes its elements from their
    /// shared window of decoded elements.
    pub fn lookup_or_create_job(
        &self,
        container: &str,
        shared_name: &str,
        job: &str,
        spec: Option<pb::DatasetSpec>,
    ) -> Result<(Arc<Reader>, bool)> {
        if shared_name.is_empty() {
            return Err(ServeError::InvalidArgument(format!("job {job:?} needs a shared reader (a shared_name)")));
        }
        check_names(&[container, shared_name, job])?;
        let name = display_name(container, shared_name);
        if self.is_cluster() {
            return self.replica_job((container, shared_name, job), spec);
        }
        let key = (container.to_owned(), shared_name.to_owned(), job.to_owned());
        let requested = spec.as_ref().map(spec::fingerprint);
        let window = self.inner.jobs.read_unpoisoned().windows.get(&(key.0.clone(), key.1.clone())).cloned();
        if let Some(existing) = self.inner.jobs.read_unpoisoned().readers.get(&key) {
            check_same_spec(existing, requested.as_deref())?;
            existing.mark_used();
            return Ok((existing.clone(), false));
        }
        let spec = match (spec, &window) {
            (Some(spec), _) => spec,
            (None, Some(window)) => window.spec(),
            (None, None) => return Err(ServeError::ReaderNotFound(crate::reader::job_reader_name(&name, job))),
        };
        let reader = self.open(name.clone(), spec)?;
        // The job `default` (the shared reader itself) shares the window too.
        let default_job = self.read_lock().get(&(key.0.clone(), key.1.clone())).cloned();
        let mut jobs = self.inner.jobs.write_unpoisoned();
        if let Some(existing) = jobs.readers.get(&key) {
            // Created by a concurrent call while the files were resolved.
            check_same_spec(existing, requested.as_deref())?;
            return Ok((existing.clone(), false));
        }
        let limit = self.inner.setup.job_window_bytes;
        // The window the job default already shares, if it outlived the registry's entry
        // (its other jobs released while idle); else a new one.
        let seated = default_job.as_deref().and_then(Reader::seat).map(|seat| seat.window().clone());
        let window = jobs.windows.entry((key.0.clone(), key.1.clone())).or_insert_with(|| {
            seated.unwrap_or_else(|| {
                JobWindow::new(default_job.as_deref().map_or_else(|| reader.replica(), Reader::replica), limit)
            })
        });
        if !window.matches(&reader) {
            let existing = window.fingerprint();
            if jobs.readers.keys().all(|(c, n, _)| (c, n) != (&key.0, &key.1)) {
                jobs.windows.remove(&(key.0.clone(), key.1.clone()));
            }
            return Err(mismatch(name, existing, &reader));
        }
        let window = window.clone();
        let seat = window.seat(job.to_owned(), &reader);
        let reader = Arc::new(reader.into_job(seat));
        jobs.readers.insert(key, reader.clone());
        drop(jobs);
        // Its state's lock is taken here: never under the registry's. The job default
        // created meanwhile is looked for again (see `lookup_or_create`).
        let default_job =
            default_job.or_else(|| self.read_lock().get(&(container.to_owned(), shared_name.to_owned())).cloned());
        if let Some(default_job) = default_job.filter(|reader| reader.seat().is_none()) {
            default_job.join_window(window.seat(DEFAULT_JOB.to_owned(), &default_job));
        }
        Ok((reader, true))
    }

    /// The readers of shared reader `container/shared_name`'s jobs other than `default`, by
    /// job.
    pub fn jobs_of(&self, container: &str, shared_name: &str) -> Vec<(String, Arc<Reader>)> {
        let jobs = self.inner.jobs.read_unpoisoned();
        let of_name = |(c, n, _): &&JobReaderKey| c == container && n == shared_name;
        jobs.readers
            .iter()
            .filter(|(key, _)| of_name(key))
            .map(|((_, _, job), reader)| (job.clone(), reader.clone()))
            .collect()
    }

    /// The elements decoded for the jobs of `container/shared_name` other than `default`
    /// (by their window's reader, and by each on its own while detached), and each job's
    /// figures.
    pub fn job_stats(&self, container: &str, shared_name: &str) -> (u64, Vec<pb::JobStats>) {
        let mut decoded = self.job_window(container, shared_name).map_or(0, |window| window.decoded());
        let mut jobs = Vec::new();
        // The job `default`'s own decoding is in its reader's stats.
        let default_job = self.read_lock().get(&(container.to_owned(), shared_name.to_owned())).cloned();
        let default_job =
            default_job.filter(|reader| reader.seat().is_some()).map(|reader| (DEFAULT_JOB.to_owned(), reader));
        for (name, reader) in default_job.into_iter().chain(self.jobs_of(container, shared_name)) {
            let Some(seat) = reader.seat() else { continue };
            let figures = seat.figures();
            if name != DEFAULT_JOB {
                decoded += figures.decoding();
            }
            jobs.push(pb::JobStats {
                name,
                attached: seat.is_attached(),
                detachments: figures.detachments as i64,
                reattachments: figures.reattachments as i64,
                elements_shared: figures.shared as i64,
                elements_decoded: figures.decoded as i64,
                elements_read_again: figures.read_again as i64,
                position: reader.stats().elements_produced as i64,
                active_streams: reader.stream_count() as i64,
            });
        }
        (decoded, jobs)
    }

    /// Job `job`'s reader of shared reader `container/shared_name`.
    pub fn get_job(&self, container: &str, shared_name: &str, job: &str) -> Result<Arc<Reader>> {
        let key = (container.to_owned(), shared_name.to_owned(), job.to_owned());
        let reader = self.inner.jobs.read_unpoisoned().readers.get(&key).cloned();
        let name = || crate::reader::job_reader_name(&display_name(container, shared_name), job);
        let reader = reader.ok_or_else(|| ServeError::ReaderNotFound(name()))?;
        reader.mark_used();
        Ok(reader)
    }

    /// Every job's reader (jobs other than `default`): container, shared name, job, reader.
    pub fn all_jobs(&self) -> Vec<(String, String, String, Arc<Reader>)> {
        let jobs = self.inner.jobs.read_unpoisoned();
        jobs.readers.iter().map(|((c, n, job), reader)| (c.clone(), n.clone(), job.clone(), reader.clone())).collect()
    }

    /// The window the jobs of `container/shared_name` share, if they have one.
    pub fn job_window(&self, container: &str, shared_name: &str) -> Option<Arc<JobWindow>> {
        self.inner.jobs.read_unpoisoned().windows.get(&(container.to_owned(), shared_name.to_owned())).cloned()
    }

    /// On a replica: job `job` of shared reader `container/shared_name` as the ledger
    /// holds it, as a checkpoint restored once per `restore_id`, with every
    /// acknowledgement this replica has received committed first (blocking). `None` on a
    /// single server.
    pub fn job_checkpoint(
        &self,
        (container, shared_name, job): (&str, &str, &str),
        restore_id: String,
    ) -> Result<Option<CheckpointedJob>> {
        let Some(jobs) = &self.inner.setup.ledger_jobs else { return Ok(None) };
        let local = match job {
            DEFAULT_JOB => self.read_lock().get(&(container.to_owned(), shared_name.to_owned())).cloned(),
            job => self.job_reader(&(container.to_owned(), shared_name.to_owned(), job.to_owned())),
        };
        if let Some(reader) = &local {
            reader.coordinator().commit()?;
        }
        jobs.checkpoint((container, shared_name, job), restore_id).map(Some)
    }

    /// On a replica: makes job `job_name` of shared reader `container/shared_name` the one
    /// checkpoint `job` (of `job_spec`) holds, once per checkpoint (its restore id: a later
    /// resume with the same token joins the job as it went on). `FAILED_PRECONDITION` on a
    /// single server.
    pub fn restore_job(
        &self,
        named: (&str, &str, &str),
        job_spec: &pb::DatasetSpec,
        job: &pb::JobCheckpoint,
    ) -> Result<()> {
        let Some(jobs) = &self.inner.setup.ledger_jobs else {
            return Err(ServeError::FailedPrecondition(format!(
                "the token checkpoints {}, served by replicas: resume it on a replica (a postgres:// state store)",
                display_name(named.0, named.1)
            )));
        };
        jobs.restore(named, job_spec, job)
    }

    /// Forgets the shared reader of `key` when it is stale ([`Stale`]), so that the next
    /// stream reads its job through a new one.
    fn forget_stale_reader(&self, key: &ReaderKey) -> Result<()> {
        let Some(reader) = self.read_lock().get(key).cloned() else { return Ok(()) };
        match Stale::of(&reader)? {
            Stale::No => {}
            stale => stale.forget(&mut self.write_lock(), key, &reader),
        }
        Ok(())
    }

    /// Job `key`'s reader, if the registry holds one.
    fn job_reader(&self, key: &JobReaderKey) -> Option<Arc<Reader>> {
        self.inner.jobs.read_unpoisoned().readers.get(key).cloned()
    }

    /// A reader for one stream, in no container.
    pub fn private(&self, spec: Option<pb::DatasetSpec>) -> Result<Arc<Reader>> {
        let spec =
            spec.ok_or_else(|| ServeError::InvalidArgument("a private read (empty shared_name) needs a spec".into()))?;
        Ok(Arc::new(self.open("(private)".into(), spec)?))
    }

    /// The reader `container/shared_name`, used now (see [`Reader::mark_used`]).
    pub fn get(&self, container: &str, shared_name: &str) -> Result<Arc<Reader>> {
        let reader = self
            .read_lock()
            .get(&(container.to_owned(), shared_name.to_owned()))
            .cloned()
            .ok_or_else(|| ServeError::ReaderNotFound(display_name(container, shared_name)))?;
        reader.mark_used();
        Ok(reader)
    }

    /// Releases a shared reader with every job on it, or job `job` alone (`default`: the
    /// shared reader's own): they leave the registry and their streams end. On a replica,
    /// their jobs leave the split ledger too (the next reader of that name starts afresh),
    /// also when no reader of theirs is on this replica.
    pub fn delete(&self, container: &str, shared_name: &str, job: Option<&str>) -> Result<()> {
        // The ledger first: if it fails, nothing was taken out here, and the call may be
        // made again.
        let in_ledger = match &self.inner.setup.ledger_jobs {
            None => 0,
            Some(jobs) => jobs.delete(container, shared_name, job)?,
        };
        // The shared reader itself (the job default).
        let removed = match job {
            None | Some(DEFAULT_JOB) => self.write_lock().remove(&(container.to_owned(), shared_name.to_owned())),
            Some(_) => None,
        };
        // Its jobs other than default.
        let jobs = match job {
            None => self.inner.jobs.write_unpoisoned().remove(container, Some(shared_name)),
            Some(DEFAULT_JOB) => 0,
            Some(job) => {
                let window_kept = self.read_lock().contains_key(&(container.to_owned(), shared_name.to_owned()));
                let removed = self.inner.jobs.write_unpoisoned().remove_job((container, shared_name, job), window_kept);
                usize::from(removed)
            }
        };
        if removed.is_none() && jobs == 0 && in_ledger == 0 {
            let name = display_name(container, shared_name);
            return Err(ServeError::ReaderNotFound(match job {
                Some(job) => format!("job {job} of {name}"),
                None => name,
            }));
        }
        removed.iter().for_each(|reader| reader.release());
        Ok(())
    }

    /// The readers of a container, by name.
    pub fn list(&self, container: &str) -> Vec<(String, Arc<Reader>)> {
        self.read_lock()
            .iter()
            .filter(|((c, _), _)| c == container)
            .map(|((_, name), reader)| (name.clone(), reader.clone()))
            .collect()
    }

    /// Every shared reader: container, name and reader.
    pub fn all(&self) -> Vec<(String, String, Arc<Reader>)> {
        self.read_lock().iter().map(|((c, name), reader)| (c.clone(), name.clone(), reader.clone())).collect()
    }

    /// Releases the readers no stream used for `timeout`; returns how many.
    pub fn release_idle(&self, timeout: std::time::Duration) -> usize {
        let released_jobs = {
            let mut jobs = self.inner.jobs.write_unpoisoned();
            let before = jobs.readers.len();
            jobs.readers.retain(|_, reader| {
                let idle = reader.is_idle(timeout);
                if idle {
                    reader.release();
                }
                !idle
            });
            let Jobs { readers, windows } = &mut *jobs;
            // A window on replicas has its jobs' readers among the shared readers: it
            // stays while a job may take from it.
            let seated = |window: &Arc<JobWindow>| window.is_on_replicas() && window.is_seated();
            windows.retain(|(c, n), window| readers.keys().any(|(rc, rn, _)| rc == c && rn == n) || seated(window));
            before - readers.len()
        };
        released_jobs + self.release_idle_readers(timeout)
    }

    fn release_idle_readers(&self, timeout: std::time::Duration) -> usize {
        let mut readers = self.write_lock();
        let idle: Vec<ReaderKey> =
            readers.iter().filter(|(_, reader)| reader.is_idle(timeout)).map(|(key, _)| key.clone()).collect();
        for key in &idle {
            if let Some(reader) = readers.remove(key) {
                tracing::info!(reader = reader.name(), "idle reader released");
                reader.release();
            }
        }
        idle.len()
    }

    /// Releases every reader of a container; returns how many there were.
    pub fn reset_container(&self, container: &str) -> usize {
        self.inner.jobs.write_unpoisoned().remove(container, None);
        let mut readers = self.write_lock();
        let names: Vec<ReaderKey> = readers.keys().filter(|(c, _)| c == container).cloned().collect();
        for key in &names {
            if let Some(reader) = readers.remove(key) {
                reader.release();
            }
        }
        names.len()
    }

    fn open(&self, name: String, spec: pb::DatasetSpec) -> Result<Reader> {
        let spec = ReaderSpec::from_proto(spec, self.inner.setup.max_record_bytes)?
            .with_max_image_pixels(self.inner.setup.max_image_pixels);
        self.inner.setup.limits.check_spec(&spec)?;
        // A mixture reads its components' files: each component's cycle at once.
        let components = spec.mix.as_ref().map(|mix| mix.components.as_slice()).unwrap_or_default();
        for component in components {
            self.inner.setup.limits.check_spec(component)?;
        }
        let files = match components {
            [] => spec.pipeline.cycle_length.max(1),
            _ => components.iter().map(|c| c.pipeline.cycle_length.max(1)).sum(),
        };
        let reservation = self.inner.setup.files.reserve(files)?;
        let reader = Reader::open(name, spec, &self.inner.setup.roots, &self.inner.setup.settings)?;
        reader.hold_files(reservation);
        Ok(reader)
    }

    fn read_lock(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<ReaderKey, Arc<Reader>>> {
        self.inner.readers.read_unpoisoned()
    }

    fn write_lock(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<ReaderKey, Arc<Reader>>> {
        self.inner.readers.write_unpoisoned()
    }
}

/// Whether a reader still serves its job as the coordinator holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stale {
    No,
    /// Its work was given up (it lost a lease, or the ledger for too long): its streams
    /// end `UNAVAILABLE` of themselves; the registry forgets it.
    Void,
    /// Its job is no longer the ledger's (deleted, or replaced by a restore, through
    /// another replica): released, so that the next reader starts afresh.
    Deleted,
}

impl Stale {
    /// What `reader`'s coordinator says (it asks the ledger on a replica: blocking).
    fn of(reader: &Reader) -> Result<Stale> {
        let coordinator = reader.coordinator();
        if coordinator.is_void() {
            return Ok(Stale::Void);
        }
        Ok(if coordinator.deleted_elsewhere()? { Stale::Deleted } else { Stale::No })
    }

    /// Takes stale `reader` out of `readers` (if `key` still holds it, not a newer one),
    /// releasing it if it must be.
    fn forget<K: Ord>(self, readers: &mut BTreeMap<K, Arc<Reader>>, key: &K, reader: &Arc<Reader>) {
        if !readers.get(key).is_some_and(|held| Arc::ptr_eq(held, reader)) {
            return;
        }
        readers.remove(key);
        if self == Stale::Deleted {
            reader.release();
        }
    }
}

/// A reader whose spec or files are not those of its shared name's jobs' window.
fn mismatch(name: String, existing: String, reader: &Reader) -> ServeError {
    if existing != reader.spec().fingerprint {
        return ServeError::SpecMismatch { name, existing, requested: reader.spec().fingerprint.clone() };
    }
    ServeError::FailedPrecondition(format!(
        "{name}: its files are not those its jobs read (they changed since the first job opened it)"
    ))
}

fn check_same_spec(existing: &Reader, requested: Option<&str>) -> Result<()> {
    match requested {
        Some(requested) if requested != existing.spec().fingerprint => Err(ServeError::SpecMismatch {
            name: existing.name().to_owned(),
            existing: existing.spec().fingerprint.clone(),
            requested: requested.to_owned(),
        }),
        _ => Ok(()),
    }
}
