//! Where a reader is checkpointed. Its state as bytes (`pb::ReaderState`: positions,
//! seeds and counters, never record bytes): TensorFlow's `ReaderSerializeState` and
//! `ReaderRestoreState`, which every checkpoint holds, and the conversions of the
//! pipeline's state to and from its proto, which check a (possibly forged) state before it
//! is used. A shared reader's checkpoint is taken from the snapshots in its books
//! (`shared_books.rs`) and restored by replay ([`Reader::shared_checkpoint`],
//! [`Reader::restore_shared`]). Private streams' checkpoints are [`crate::checkpoint`]'s;
//! the store that keeps them is [`crate::state`].

use super::Reader;
use super::records::ReaderState;
use crate::error::{Result, ServeError};
use crate::format::Position;
use crate::pipeline::interleave::InterleaveState;
use crate::pipeline::{PipelineConfig, PipelineState, RecordPipeline, RecordRef};
use readerd_proto::v1 as pb;

impl Reader {
    /// The classic `ReaderSerializeState`: positions, seeds and counters (a
    /// `pb::ReaderState`), never record bytes.
    pub fn serialize_state(&self) -> Result<Vec<u8>> {
        self.coordinator().refuse("SerializeReaderState", &self.name)?;
        let mut state = self.lock();
        if let Some(seat) = self.seat() {
            seat.leave(self, &mut state, "SerializeReaderState")?;
        }
        self.state_bytes(&state)
    }

    pub(super) fn state_bytes(&self, state: &ReaderState) -> Result<Vec<u8>> {
        if let Some(err) = &state.failed {
            return Err(err.clone());
        }
        if !state.pending_examples.is_empty() {
            return Err(ServeError::FailedPrecondition(
                "the reader is inside an unbatched record: its state can be taken at a record boundary".into(),
            ));
        }
        let saved = pb::ReaderState {
            fingerprint: self.spec.fingerprint.clone(),
            files_digest: self.files_digest.clone(),
            pipeline: Some(pipeline_state_to_pb(&state.pipeline.state())),
            selected_in_epoch: state.selected_in_epoch,
            records_produced: state.records_produced,
            elements_produced: state.elements_produced,
            records_skipped: state.records_skipped + self.decoding.skipped(),
            files_cut_short: state.files_cut_short,
            file_versions: self.file_versions(),
            mix: match &self.mixture {
                Some(mixture) => Some(mixture.state(state)?),
                None => None,
            },
            read_raw: state.read_raw,
        };
        Ok(prost::Message::encode_to_vec(&saved))
    }

    /// The version of each file when any is an object ("" for local files), else none.
    fn file_versions(&self) -> Vec<String> {
        if self.files.iter().all(|file| file.version().is_none()) {
            return Vec::new();
        }
        self.files.iter().map(|file| file.version().unwrap_or_default().to_owned()).collect()
    }

    /// A state restores only over the objects it read: an object replaced since (another
    /// ETag or generation) is named.
    fn check_file_versions(&self, saved: &[String]) -> Result<()> {
        for (file, saved) in self.files.iter().zip(saved) {
            let now = file.version().unwrap_or_default();
            if !saved.is_empty() && saved != now {
                return Err(ServeError::FailedPrecondition(format!(
                    "{} changed since the checkpoint (version {saved}, now {now}): the checkpoint cannot resume over it",
                    file.identity()
                )));
            }
        }
        Ok(())
    }

    /// The classic `ReaderRestoreState`: continues exactly where `bytes` (from
    /// [`Reader::serialize_state`] of a reader with the same spec and files) was taken.
    pub fn restore_state(&self, bytes: &[u8]) -> Result<()> {
        self.coordinator().refuse("RestoreReaderState", &self.name)?;
        // A mixture's components are restored under its lock: no read sees them half done.
        let mut state = self.lock();
        *state = self.restored_state(bytes)?;
        if let Some(seat) = self.seat() {
            seat.detach();
        }
        Ok(())
    }

    /// The state `bytes` holds, checked against this reader (a mixture's components are
    /// restored to it already: call it under the reader's lock).
    pub(super) fn restored_state(&self, bytes: &[u8]) -> Result<ReaderState> {
        let saved: pb::ReaderState = prost::Message::decode(bytes)
            .map_err(|err| ServeError::InvalidArgument(format!("not a reader state: {err}")))?;
        if saved.fingerprint != self.spec.fingerprint {
            return Err(ServeError::FailedPrecondition(format!(
                "the state is of spec {}, this reader's is {}",
                saved.fingerprint, self.spec.fingerprint
            )));
        }
        if saved.files_digest != self.files_digest {
            return Err(ServeError::FailedPrecondition("the state was taken over other files".into()));
        }
        self.check_file_versions(&saved.file_versions)?;
        let pipeline_state = pipeline_state_from_pb(
            saved.pipeline.as_ref().ok_or_else(|| ServeError::InvalidArgument("the state has no pipeline".into()))?,
            self.files.len(),
            &self.spec.pipeline,
        )?;
        let pipeline = RecordPipeline::restore(
            self.files.clone(),
            self.source.clone(),
            self.spec.pipeline.clone(),
            self.settings.pipeline.clone(),
            &pipeline_state,
        )?;
        let mix = match (&self.mixture, &saved.mix) {
            (None, _) => None,
            (Some(mixture), Some(saved)) => Some(mixture.restore(saved)?),
            (Some(_), None) => return Err(ServeError::InvalidArgument("the state is not of a mixture".into())),
        };
        let mut state = ReaderState::new(pipeline);
        state.mix = mix;
        state.selected_in_epoch = saved.selected_in_epoch;
        state.records_produced = saved.records_produced;
        state.elements_produced = saved.elements_produced;
        state.records_skipped = saved.records_skipped;
        self.decoding.forget_skipped();
        state.files_cut_short = saved.files_cut_short;
        state.read_raw = saved.read_raw;
        Ok(state)
    }

    /// A shared reader's checkpoint (blocking): the state before the oldest element not
    /// yet acknowledged, how many elements had been produced, and which of those were
    /// acknowledged. Restoring replays from that state and delivers the others again
    /// (also those taken from the reader but not yet handed to a stream).
    pub fn shared_checkpoint(&self) -> Result<pb::SharedCheckpoint> {
        self.coordinator().refuse("A checkpoint", &self.name)?;
        // Read `produced` first: whatever is produced after is not in the checkpoint.
        let produced = self.lock().elements_produced;
        let oldest = self.books.oldest_unacknowledged(produced);
        let (from, state) = self.books.snapshot_before(oldest).ok_or_else(|| {
            ServeError::FailedPrecondition(
                "no state of the reader before its oldest unacknowledged element is kept".into(),
            )
        })?;
        let acknowledged = self.books.delivery.acknowledged_since(from).into_iter().filter(|&i| i < produced).collect();
        Ok(pb::SharedCheckpoint { reader_state: state.into(), from_index: from, produced, acknowledged })
    }

    /// Continues a shared reader from its checkpoint (blocking): replays to where it was
    /// and queues the unacknowledged elements for delivery.
    pub fn restore_shared(&self, checkpoint: &pb::SharedCheckpoint) -> Result<()> {
        self.coordinator().refuse("Resuming a single server's checkpoint", &self.name)?;
        self.restore_state(&checkpoint.reader_state)?;
        let acknowledged: std::collections::BTreeSet<u64> = checkpoint.acknowledged.iter().copied().collect();
        let mut requeued = Vec::new();
        while self.lock().elements_produced < checkpoint.produced {
            let left = (checkpoint.produced - self.lock().elements_produced) as usize;
            let chunk = self.next_chunk(left.min(64), usize::MAX);
            if let Some(err) = chunk.error {
                return Err(err);
            }
            if let Some(first) = chunk.first_index {
                self.books.chunk_delivered(first);
            }
            requeued.extend(chunk.elements.into_iter().filter(|e| !acknowledged.contains(&e.index)));
            if chunk.end_of_sequence {
                break;
            }
        }
        self.books.delivery.requeue(requeued);
        Ok(())
    }
}

fn position_to_pb(position: Position) -> pb::Position {
    pb::Position { offset: position.offset, record: position.record }
}

fn position_from_pb(position: Option<&pb::Position>) -> Position {
    position.map_or_else(Position::default, |p| Position { offset: p.offset, record: p.record })
}

fn pipeline_state_to_pb(state: &PipelineState) -> pb::PipelineState {
    let interleave = &state.interleave;
    pb::PipelineState {
        epoch: state.epoch,
        ordinal: state.ordinal,
        emitted: state.emitted,
        input_done: state.input_done,
        finished: state.finished,
        files_completed: state.files_completed,
        cycle_index: interleave.cycle_index as u64,
        block_index: interleave.block_index as u64,
        next_file: interleave.next_file as u64,
        slots: interleave
            .slots
            .iter()
            .map(|slot| match slot {
                Some((file, position)) => {
                    pb::InterleaveSlot { open: true, file: *file as u64, position: position.map(position_to_pb) }
                }
                None => pb::InterleaveSlot::default(),
            })
            .collect(),
        has_shuffle: state.shuffle.is_some(),
        shuffle_rng: state.shuffle.as_ref().map_or(0, |(rng, _)| *rng),
        shuffle_records: state.shuffle.as_ref().map_or_else(Vec::new, |(_, refs)| {
            refs.iter()
                .map(|at| pb::RecordRef { file: at.file as u64, start: Some(position_to_pb(at.start)) })
                .collect()
        }),
        global_cursor: state.global_cursor.map(|c| c as u64),
    }
}

/// Checks a (possibly forged) state against the reader before anything uses its indices.
fn pipeline_state_from_pb(saved: &pb::PipelineState, files: usize, config: &PipelineConfig) -> Result<PipelineState> {
    let invalid = |what: &str| ServeError::InvalidArgument(format!("reader state: {what}"));
    if saved.slots.len() != config.cycle_length {
        return Err(invalid("the interleave has another cycle length"));
    }
    let slots = saved
        .slots
        .iter()
        .map(|slot| {
            if !slot.open {
                return Ok(None);
            }
            if slot.file as usize >= files {
                return Err(invalid("a slot names a file the reader does not have"));
            }
            Ok(Some((slot.file as usize, slot.position.as_ref().map(|p| position_from_pb(Some(p))))))
        })
        .collect::<Result<Vec<_>>>()?;
    let shuffle = match (saved.has_shuffle, config.shuffle) {
        (false, None) => None,
        (true, Some(shuffle)) => {
            if saved.shuffle_records.len() > shuffle.capacity {
                return Err(invalid("the shuffle buffer holds more than its capacity"));
            }
            let refs = saved
                .shuffle_records
                .iter()
                .map(|at| {
                    if at.file as usize >= files {
                        return Err(invalid("a buffered record names a file the reader does not have"));
                    }
                    Ok(RecordRef { file: at.file as usize, start: position_from_pb(at.start.as_ref()) })
                })
                .collect::<Result<Vec<_>>>()?;
            Some((saved.shuffle_rng, refs))
        }
        _ => return Err(invalid("the shuffle buffer does not match the spec")),
    };
    if saved.next_file as usize > files
        || saved.cycle_index as usize >= config.cycle_length.max(1)
        || saved.block_index as usize >= config.block_length.max(1)
    {
        return Err(invalid("the interleave position is out of range"));
    }
    Ok(PipelineState {
        epoch: saved.epoch.max(1),
        ordinal: saved.ordinal,
        emitted: saved.emitted,
        input_done: saved.input_done,
        finished: saved.finished,
        files_completed: saved.files_completed,
        interleave: InterleaveState {
            cycle_index: saved.cycle_index as usize,
            block_index: saved.block_index as usize,
            next_file: saved.next_file as usize,
            slots,
        },
        shuffle,
        global_cursor: saved.global_cursor.map(|c| c as usize),
    })
}
