//! Open streams and the checkpoints of private ones.
//!
//! [`Streams`] opens a stream (a shared reader's, or a private reader fresh or restored
//! from a token) and keeps what each needs: its consumer (acknowledgements) and, when
//! private, its snapshots.
//!
//! A stream keeps snapshots of its reader's state at chunk boundaries (positions, not
//! records). The state after any element the trainer received is rebuilt by restoring a
//! copy of the reader from the nearest earlier snapshot and replaying the few elements in
//! between; it is committed to the state store before its token is returned. A token is
//! the checkpoint's id with an HMAC-SHA256 under the server's secret (kept in the store),
//! so a forged or altered token is refused; the checkpoint names its container, so a
//! token of one container cannot be used in another, and the reader it resumes: a shared
//! reader's token resumes that shared reader only, a private stream's a private stream.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use base64::Engine;
use hmac::{Hmac, Mac};
use readerd_proto::v1 as pb;
use sha2::Sha256;

use crate::consumer::Consumer;
use crate::error::{Result, ServeError};
use crate::metrics::METRICS;
use crate::reader::{CheckpointedJob, Reader};
use crate::registry::{DEFAULT_JOB, ReaderRegistry};
use crate::state::{StateStore, StoredCheckpoint};
use readerd_common::sync::MutexUnpoisoned;

/// Snapshots a stream keeps (one per chunk; when full, see [`crate::snapshots::least_needed`]).
const SNAPSHOTS_PER_STREAM: usize = 64;
const TOKEN_PREFIX: &str = "rd1.";
const MAC_BYTES: usize = 16;

/// Issues and checks tokens.
pub struct Tokens {
    key: Vec<u8>,
}

impl Tokens {
    pub fn new(key: Vec<u8>) -> Self {
        Self { key }
    }

    fn mac(&self, id: i64) -> [u8; MAC_BYTES] {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(&id.to_le_bytes());
        let full = mac.finalize().into_bytes();
        full[..MAC_BYTES].try_into().expect("16 bytes")
    }

    pub fn issue(&self, id: i64) -> String {
        let mut raw = id.to_le_bytes().to_vec();
        raw.extend_from_slice(&self.mac(id));
        format!("{TOKEN_PREFIX}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw))
    }

    /// The checkpoint id of a genuine token.
    pub fn verify(&self, token: &str) -> Result<i64> {
        let malformed = || {
            ServeError::InvalidArgument(
                "the checkpoint token is not valid: it is not a token readerd issued (cut short or changed on the way?)".into(),
            )
        };
        let raw = token
            .strip_prefix(TOKEN_PREFIX)
            .and_then(|body| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(body).ok())
            .filter(|raw| raw.len() == 8 + MAC_BYTES)
            .ok_or_else(malformed)?;
        let id = i64::from_le_bytes(raw[..8].try_into().expect("8 bytes"));
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(&id.to_le_bytes());
        // Well formed but not signed with this state store's key: most often a token of
        // another server (another --state-dir or --state-url), else one changed on the way.
        mac.verify_truncated_left(&raw[8..]).map_err(|_| {
            ServeError::InvalidArgument(
                "the checkpoint token is not valid here: it was issued by a server with another state store \
                 (another --state-dir or --state-url), or changed; resume where it was issued"
                    .into(),
            )
        })?;
        Ok(id)
    }
}

/// An open stream: its consumer and, for a private reader, what checkpoints need.
pub struct StreamRecord {
    pub id: String,
    pub container: String,
    /// The shared reader the stream reads (empty: a private reader).
    pub shared_name: String,
    /// Its job (consumer group) of the shared reader: `default` when it names none.
    pub job: String,
    pub spec: pb::DatasetSpec,
    pub lineage: String,
    pub reader: Arc<Reader>,
    pub consumer: Arc<Consumer>,
    /// Private readers only: a shared reader's state is not this stream's alone.
    pub checkpointable: bool,
    /// `(seq of the next element, reader state)` before each chunk, oldest first.
    snapshots: Mutex<VecDeque<(i64, Vec<u8>)>>,
    /// When a call last named the stream (an acknowledgement, a report of the trainer's
    /// time, a checkpoint asked for, begun or ended): its trainer is still reading it.
    last_call: Mutex<Instant>,
    /// Checkpoints of the stream being committed now (one may wait out a store outage).
    committing: AtomicU64,
}

impl StreamRecord {
    /// A call named the stream now: its trainer is still there.
    pub fn touch(&self) {
        *self.last_call.lock_unpoisoned() = Instant::now();
    }

    /// How long since a call last named the stream (or since it opened); zero while one
    /// of its checkpoints is being committed.
    pub fn since_last_call(&self) -> std::time::Duration {
        if self.committing.load(Ordering::Relaxed) > 0 {
            return std::time::Duration::ZERO;
        }
        self.last_call.lock_unpoisoned().elapsed()
    }

    /// Remembers the reader's state before the element `next_seq` (blocking).
    pub fn snapshot(&self, next_seq: i64) {
        // A reader inside an unbatched record or failed has no state to keep here.
        let Ok(state) = self.reader.serialize_state() else { return };
        let mut snapshots = self.snapshots.lock_unpoisoned();
        if snapshots.len() == SNAPSHOTS_PER_STREAM {
            let seqs: Vec<i64> = snapshots.iter().map(|(seq, _)| *seq).collect();
            snapshots.remove(crate::snapshots::least_needed(&seqs, next_seq));
        }
        snapshots.push_back((next_seq, state));
    }

    /// The reader's state right after element `after_seq` (blocking: replays from the
    /// nearest snapshot on a copy of the reader).
    pub fn state_after(&self, after_seq: i64) -> Result<Vec<u8>> {
        let next = after_seq + 1;
        let (first_seq, snapshot) = {
            let snapshots = self.snapshots.lock_unpoisoned();
            snapshots.iter().rev().find(|(seq, _)| *seq <= next).cloned().ok_or_else(|| {
                ServeError::FailedPrecondition(format!(
                    "no state of stream {} before element {next} is kept: checkpoint more often",
                    self.id
                ))
            })?
        };
        let replica = self.reader.replica();
        replica.restore_state(&snapshot)?;
        let mut to_skip = (next - first_seq) as usize;
        while to_skip > 0 {
            let chunk = replica.next_chunk(to_skip, usize::MAX);
            if let Some(err) = chunk.error {
                return Err(err);
            }
            if chunk.elements.is_empty() {
                return Err(ServeError::FailedPrecondition(format!("element {after_seq} was never produced")));
            }
            to_skip -= chunk.elements.len().min(to_skip);
        }
        replica.serialize_state()
    }
}

/// What a trainer asks to read.
pub struct OpenStream {
    pub container: String,
    /// Empty: a private reader for this stream.
    pub shared_name: String,
    pub spec: Option<pb::DatasetSpec>,
    /// A dataset of the configuration, instead of `spec`.
    pub dataset: String,
    /// Resume a private stream after this checkpoint.
    pub resume_token: String,
    /// The job of a shared reader the stream belongs to (empty: `default`).
    pub job: String,
}

/// The open streams of this server.
#[derive(Default)]
pub struct Streams {
    records: Mutex<HashMap<String, Arc<StreamRecord>>>,
    next_id: AtomicU64,
}

impl Streams {
    fn register(
        &self,
        (container, shared_name, job): (String, String, String),
        spec: pb::DatasetSpec,
        lineage: Option<String>,
        reader: Arc<Reader>,
        checkpointable: bool,
    ) -> Arc<StreamRecord> {
        let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let id = format!("{:x}-{}", started.as_micros(), self.next_id.fetch_add(1, Ordering::Relaxed));
        let consumer = reader.delivery().attach(id.clone());
        let record = Arc::new(StreamRecord {
            lineage: lineage.unwrap_or_else(|| id.clone()),
            id: id.clone(),
            container,
            shared_name,
            job,
            spec,
            reader,
            consumer,
            checkpointable,
            snapshots: Mutex::default(),
            last_call: Mutex::new(Instant::now()),
            committing: AtomicU64::new(0),
        });
        self.records.lock_unpoisoned().insert(id, record.clone());
        record
    }

    /// Opens a stream (blocking): attaches to a shared reader, or makes a private one,
    /// fresh or restored from a checkpoint. Returns the reader, the stream and the seq of
    /// its first element.
    pub fn open(
        &self,
        registry: &ReaderRegistry,
        checkpointer: &Checkpointer,
        request: OpenStream,
    ) -> Result<(Arc<Reader>, Arc<StreamRecord>, i64)> {
        let OpenStream { container, shared_name, spec, dataset, resume_token, job: job_name } = request;
        let job_name = if job_name.is_empty() { DEFAULT_JOB.to_owned() } else { job_name };
        if shared_name.is_empty() && job_name != DEFAULT_JOB {
            return Err(ServeError::InvalidArgument(format!("job {job_name:?} needs a shared reader (a shared_name)")));
        }
        if !shared_name.is_empty() {
            let (spec, checkpoint) = if resume_token.is_empty() {
                (registry.resolve_spec(spec, &dataset)?, None)
            } else {
                let checkpoint = checkpointer.load(&resume_token, &container, &shared_name)?;
                let resumes = if checkpoint.job_name.is_empty() { DEFAULT_JOB } else { &checkpoint.job_name };
                if resumes != job_name {
                    return Err(ServeError::FailedPrecondition(format!(
                        "the token resumes job {resumes:?} of {container}/{shared_name}, not job {job_name:?}"
                    )));
                }
                if let Some(job) = &checkpoint.job {
                    let spec = checkpoint.spec.clone().unwrap_or_default();
                    registry.restore_job((&container, &shared_name, &job_name), &spec, job)?;
                }
                (checkpoint.spec.clone(), Some(checkpoint))
            };
            let (reader, created) = match job_name.as_str() {
                DEFAULT_JOB => registry.lookup_or_create(&container, &shared_name, spec)?,
                job => registry.lookup_or_create_job(&container, &shared_name, job, spec)?,
            };
            registry.limits().check_consumers(reader.name(), reader.stream_count())?;
            reader.set_shared();
            let first_seq = match &checkpoint {
                Some(checkpoint) => {
                    // A reader live in this server is already where its streams left it
                    // (and one served by replicas is where its restored job is).
                    if let Some(shared) = checkpoint.shared.as_ref().filter(|_| created) {
                        reader.restore_shared(shared)?;
                    }
                    checkpoint.after_seq + 1
                }
                None => 0,
            };
            let lineage = checkpoint.map(|checkpoint| checkpoint.lineage);
            let spec = reader.spec().proto.clone();
            let record = self.register((container, shared_name, job_name), spec, lineage, reader.clone(), false);
            return Ok((reader, record, first_seq));
        }
        if resume_token.is_empty() {
            let spec = registry.resolve_spec(spec, &dataset)?;
            let reader = registry.private(spec.clone())?;
            let named = (container, shared_name, DEFAULT_JOB.to_owned());
            let record = self.register(named, spec.unwrap_or_default(), None, reader.clone(), true);
            return Ok((reader, record, 0));
        }
        let checkpoint = checkpointer.load(&resume_token, &container, &shared_name)?;
        let stored_spec = checkpoint.spec.clone().unwrap_or_default();
        if spec.is_some_and(|spec| crate::spec::fingerprint(&spec) != crate::spec::fingerprint(&stored_spec)) {
            return Err(ServeError::FailedPrecondition("the spec differs from the checkpoint's".into()));
        }
        let reader = registry.private(Some(stored_spec.clone()))?;
        reader.restore_state(&checkpoint.reader_state)?;
        let lineage = Some(checkpoint.lineage.clone());
        let record =
            self.register((container, shared_name, DEFAULT_JOB.to_owned()), stored_spec, lineage, reader.clone(), true);
        Ok((reader, record, checkpoint.after_seq + 1))
    }

    /// The stream `id`, for a call that names it. A call its caller may make counts as the
    /// trainer's sign of life: the caller [`StreamRecord::touch`]es it once access is
    /// checked (a refused call keeps no stream of another container alive).
    pub fn get(&self, id: &str) -> Result<Arc<StreamRecord>> {
        self.records
            .lock_unpoisoned()
            .get(id)
            .cloned()
            .ok_or_else(|| ServeError::NotFound(format!("stream {id} is not open on this server")))
    }

    /// How many streams are known now (open, or lingering after their end).
    pub fn count(&self) -> u64 {
        self.records.lock_unpoisoned().len() as u64
    }

    /// Every stream known now (open, or lingering after its end).
    pub fn all(&self) -> Vec<Arc<StreamRecord>> {
        self.records.lock_unpoisoned().values().cloned().collect()
    }

    /// The stream is over: what it did not acknowledge goes to the reader's other streams.
    pub fn remove(&self, id: &str) {
        let record = self.records.lock_unpoisoned().remove(id);
        if let Some(record) = record {
            record.reader.delivery().detach(&record.consumer);
        }
    }
}

/// The lineage of checkpoints of job `job` of shared reader `shared_name` taken outside
/// any stream: each job's own (a commit prunes its lineage's older checkpoints).
fn reader_lineage(shared_name: &str, job: &str) -> String {
    match job {
        "" | DEFAULT_JOB => format!("reader:{shared_name}"),
        job => format!("reader:{shared_name} job:{job}"),
    }
}

/// The job (consumer group) whose reader `reader` is, for its checkpoints ("" for `default`).
fn job_name_of(reader: &Reader) -> String {
    reader.seat().map(|seat| seat.job().to_owned()).unwrap_or_default()
}

/// A restore id for a job's checkpoint: its restore happens once per id.
fn restore_id() -> String {
    crate::state::random_secret()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// Commits checkpoints and loads them back from tokens.
pub struct Checkpointer {
    store: Arc<dyn StateStore>,
    tokens: Tokens,
    /// Checkpoints kept per stream lineage (older ones are deleted).
    keep: usize,
}

impl Checkpointer {
    /// Uses (or creates) the token secret kept in the store.
    /// The store checkpoints are committed to.
    pub fn store(&self) -> Arc<dyn StateStore> {
        self.store.clone()
    }

    pub fn new(store: Arc<dyn StateStore>, keep: usize) -> Result<Self> {
        let key = store.secret("checkpoint-token-key", &crate::state::random_secret)?;
        Ok(Self { store, tokens: Tokens::new(key), keep: keep.max(1) })
    }

    /// Commits the state after `after_seq` of a stream; returns its token (blocking).
    pub fn checkpoint(&self, stream: &StreamRecord, after_seq: i64) -> Result<String> {
        // A checkpoint may wait out a store outage (up to `--store-outage-limit`): the
        // stream stays known while it does, and from its end.
        struct Committing<'a>(&'a StreamRecord);
        impl Drop for Committing<'_> {
            fn drop(&mut self) {
                self.0.touch();
                self.0.committing.fetch_sub(1, Ordering::Relaxed);
            }
        }
        stream.committing.fetch_add(1, Ordering::Relaxed);
        let _committing = Committing(stream);
        self.checkpoint_now(stream, after_seq)
    }

    fn checkpoint_now(&self, stream: &StreamRecord, after_seq: i64) -> Result<String> {
        let (reader_state, shared) = if stream.checkpointable {
            (stream.state_after(after_seq)?, None)
        } else {
            (Vec::new(), Some(stream.reader.shared_checkpoint()?))
        };
        let state = pb::CheckpointState {
            container: stream.container.clone(),
            spec: Some(stream.spec.clone()),
            reader_state: reader_state.into(),
            after_seq,
            lineage: stream.lineage.clone(),
            shared,
            shared_name: stream.shared_name.clone(),
            job: None,
            job_name: job_name_of(&stream.reader),
        };
        self.commit(&state, &stream.reader.spec().fingerprint)
    }

    /// A checkpoint a caller asked for through `stream`, after its element `after_seq`
    /// (blocking): the stream's own, replaying its reader, or where the reader's
    /// coordinator checkpoints the job instead (on replicas), the whole job.
    pub fn checkpoint_asked(&self, registry: &ReaderRegistry, stream: &StreamRecord, after_seq: i64) -> Result<String> {
        if stream.reader.coordinator().checkpoints_by_replay() {
            return self.checkpoint(stream, after_seq);
        }
        let named = (stream.container.as_str(), stream.shared_name.as_str(), stream.job.as_str());
        let job = registry.job_checkpoint(named, restore_id())?;
        let job = job.ok_or_else(|| ServeError::ReaderNotFound(stream.shared_name.clone()))?;
        let lineage = Some(stream.lineage.clone());
        self.checkpoint_job(named, after_seq, lineage, job)
    }

    /// A checkpoint of job `job` (empty: `default`) of shared reader
    /// `container/shared_name`, taken outside any stream (blocking): on replicas the
    /// job as the ledger holds it, on one server a replay of the job's reader.
    pub fn checkpoint_named(
        &self,
        registry: &ReaderRegistry,
        container: &str,
        shared_name: &str,
        job: &str,
    ) -> Result<String> {
        let job = if job.is_empty() { DEFAULT_JOB } else { job };
        if let Some(checkpoint) = registry.job_checkpoint((container, shared_name, job), restore_id())? {
            return self.checkpoint_job((container, shared_name, job), -1, None, checkpoint);
        }
        let reader = match job {
            DEFAULT_JOB => registry.get(container, shared_name)?,
            job => registry.get_job(container, shared_name, job)?,
        };
        self.checkpoint_shared_reader(container, shared_name, &reader)
    }

    /// A checkpoint of a shared reader as a whole, taken outside any stream (blocking).
    pub fn checkpoint_shared_reader(&self, container: &str, shared_name: &str, reader: &Reader) -> Result<String> {
        if !reader.is_shared() {
            return Err(ServeError::FailedPrecondition(format!(
                "reader {container}/{shared_name} has no shared stream yet; checkpoint a stream instead"
            )));
        }
        let state = pb::CheckpointState {
            container: container.to_owned(),
            spec: Some(reader.spec().proto.clone()),
            reader_state: Default::default(),
            after_seq: -1,
            lineage: reader_lineage(shared_name, &job_name_of(reader)),
            shared: Some(reader.shared_checkpoint()?),
            shared_name: shared_name.to_owned(),
            job: None,
            job_name: job_name_of(reader),
        };
        self.commit(&state, &reader.spec().fingerprint)
    }

    /// A checkpoint of a shared reader served by replicas: its job as the ledger holds it
    /// (blocking). `after_seq` and `lineage` are the stream's it was asked through, or
    /// `-1` and `None` outside a stream.
    fn checkpoint_job(
        &self,
        (container, shared_name, job_name): (&str, &str, &str),
        after_seq: i64,
        lineage: Option<String>,
        CheckpointedJob { fingerprint, spec, job }: CheckpointedJob,
    ) -> Result<String> {
        let state = pb::CheckpointState {
            container: container.to_owned(),
            spec: Some(spec),
            reader_state: Default::default(),
            after_seq,
            lineage: lineage.unwrap_or_else(|| reader_lineage(shared_name, job_name)),
            shared: None,
            shared_name: shared_name.to_owned(),
            job: Some(job),
            job_name: if job_name == DEFAULT_JOB { String::new() } else { job_name.to_owned() },
        };
        self.commit(&state, &fingerprint)
    }

    /// Stores `state`, prunes its lineage's old checkpoints and returns its token.
    fn commit(&self, state: &pb::CheckpointState, fingerprint: &str) -> Result<String> {
        let stored = StoredCheckpoint {
            container: state.container.clone(),
            reader: state.lineage.clone(),
            fingerprint: fingerprint.to_owned(),
            state: prost::Message::encode_to_vec(state),
            created_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
        };
        let started = std::time::Instant::now();
        let committed = self.store.put_checkpoint(&stored).and_then(|id| {
            self.store.prune(&state.container, &state.lineage, self.keep)?;
            Ok(id)
        });
        match committed {
            Ok(id) => {
                METRICS.checkpoint_committed(started.elapsed());
                Ok(self.tokens.issue(id))
            }
            Err(err) => {
                METRICS.state_store_errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Err(err.into())
            }
        }
    }

    /// The checkpoint a token names, for a stream in `container` of the shared reader
    /// `shared_name` (empty: a private stream) (blocking). A token of another container is
    /// `PERMISSION_DENIED`; one of another reader `FAILED_PRECONDITION`, naming both, as a
    /// `--spec` that differs from the checkpoint's is.
    pub fn load(&self, token: &str, container: &str, shared_name: &str) -> Result<pb::CheckpointState> {
        let id = self.tokens.verify(token)?;
        let stored = self
            .store
            .get_checkpoint(id)?
            .ok_or_else(|| ServeError::NotFound("the checkpoint of this token is gone (pruned or unknown)".into()))?;
        if stored.container != container {
            return Err(ServeError::PermissionDenied(format!(
                "the token belongs to container {:?}, not {container:?}",
                stored.container
            )));
        }
        let mut checkpoint: pb::CheckpointState = prost::Message::decode(&stored.state[..])
            .map_err(|err| ServeError::Internal(format!("checkpoint {id} does not decode: {err}")))?;
        // A job's checkpoint on replicas taken before the ledger keyed its jobs by job named
        // the shared reader `NAME (job J)`: it resumes job J of NAME.
        if checkpoint.job.is_some() && checkpoint.job_name.is_empty() {
            let legacy = checkpoint.shared_name.strip_prefix(shared_name).and_then(|rest| rest.strip_prefix(" (job "));
            if let Some(job) = legacy.and_then(|rest| rest.strip_suffix(')')).filter(|_| !shared_name.is_empty()) {
                checkpoint.job_name = job.to_owned();
                checkpoint.shared_name = shared_name.to_owned();
            }
        }
        // A shared checkpoint taken before checkpoints recorded the name resumes under none.
        let wants_shared = !shared_name.is_empty();
        let is_shared = checkpoint.shared.is_some() || checkpoint.job.is_some();
        if is_shared != wants_shared || checkpoint.shared_name != shared_name {
            let resumes = |shared: bool, name: &str| match (shared, name) {
                (false, _) => "a private stream".to_owned(),
                (true, "") => "a shared reader it does not name".to_owned(),
                (true, name) => format!("shared reader {name:?}"),
            };
            return Err(ServeError::FailedPrecondition(format!(
                "the token resumes {}, not {}",
                resumes(is_shared, &checkpoint.shared_name),
                resumes(wants_shared, shared_name)
            )));
        }
        Ok(checkpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job's checkpoint on replicas from before the ledger keyed jobs by job named its
    /// shared reader `NAME (job J)`; it resumes job J of NAME, and nothing else.
    #[test]
    fn a_jobs_token_from_before_job_keys_resumes_that_job() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::state::sqlite::SqliteStore::open(&dir.path().join("state.db")).unwrap();
        let checkpointer = Checkpointer::new(Arc::new(store), 4).unwrap();
        let state = pb::CheckpointState {
            container: "team".into(),
            shared_name: "train (job a)".into(),
            job: Some(pb::JobCheckpoint { restore_id: "r".into(), ..Default::default() }),
            job_name: String::new(),
            ..Default::default()
        };
        let token = checkpointer.commit(&state, "fingerprint").unwrap();
        let loaded = checkpointer.load(&token, "team", "train").unwrap();
        assert_eq!((loaded.shared_name.as_str(), loaded.job_name.as_str()), ("train", "a"));
        let other = checkpointer.load(&token, "team", "trains").unwrap_err();
        assert!(other.to_string().contains("\"train (job a)\""), "{other}");
        assert!(checkpointer.load(&token, "team", "train (job a)").is_ok(), "as it was taken");
    }

    #[test]
    fn tokens_verify_and_forgeries_do_not() {
        let tokens = Tokens::new(vec![7; 32]);
        let token = tokens.issue(42);
        assert_eq!(tokens.verify(&token).unwrap(), 42);
        assert!(Tokens::new(vec![8; 32]).verify(&token).is_err(), "another server's secret");
        let mut altered = token.clone().into_bytes();
        let last = altered.len() - 3;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        assert!(tokens.verify(&String::from_utf8(altered).unwrap()).is_err());
        assert!(tokens.verify("rd1.").is_err());
        assert!(tokens.verify("nonsense").is_err());
    }
}
