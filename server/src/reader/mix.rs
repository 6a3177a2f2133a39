//! A mixture's reader: one private reader per component (each with its own pipeline and
//! decoder, unbatched), records taken from them as the choice says
//! ([`crate::pipeline::mix::MixChoice`]), batched and decoded (`mix_decode.rs`). Its
//! state is every component's state plus the choice's; keys are the component's keys
//! with `<component index>/` in front (`1/tabular/part-0.csv:12`).

use super::mix_decode::TakenBatches;
use super::records::ReaderState;
use super::{Chunk, Reader, in_component};
use crate::decode::Decoder;
use crate::error::{Result, ServeError};
use crate::pipeline::Next;
use crate::pipeline::mix::{MixChoice, MixChoiceState, MixProgress};
use crate::source::{DataRoots, Record};
use crate::spec::{MixSpec, ReaderSpec};
use readerd_proto::v1 as pb;

/// A mixture at its first record: the choice from the outer seed, nothing taken.
fn start(mix: &MixSpec, seed: u64) -> MixProgress {
    MixProgress {
        choice: MixChoice::new(mix.weights.clone(), mix.choice.clone(), seed, mix.stop_on_empty),
        taken: vec![0; mix.weights.len()],
        looked_again_at: None,
    }
}

/// Opens each component's reader and checks that they decode to the same features
/// (names, kinds, dtypes and shapes), naming the first component and feature that
/// differ; batched mixtures of components that decode differently refuse dense features
/// of varying length (`fixedLenSequence`). The outer spec takes
/// the first component's decoder (its CSV columns named from the headers).
pub(super) fn open_components(
    name: &str,
    spec: &mut ReaderSpec,
    roots: &DataRoots,
    settings: &super::ReaderSettings,
) -> Result<Vec<Reader>> {
    let mix = spec.mix.clone().expect("a mixture");
    let mut components = Vec::with_capacity(mix.components.len());
    for (i, component) in mix.components.iter().enumerate() {
        let reader = Reader::open(format!("{name}[{i}]"), component.clone(), roots, settings)
            .map_err(|err| in_component(i, err))?;
        components.push(reader);
    }
    let signature = |i: usize| {
        let mut features = components[i].spec.decoder.signature();
        features.sort();
        features
    };
    let first = signature(0);
    for i in 1..components.len() {
        let other = signature(i);
        for (name, description) in &first {
            match other.iter().find(|(n, _)| n == name) {
                None => return Err(mismatch(i, &format!("has no feature {name} (mix.datasets[0] has {description})"))),
                Some((_, d)) if d != description => {
                    return Err(mismatch(i, &format!("decodes {name} as {d}, mix.datasets[0] as {description}")));
                }
                Some(_) => {}
            }
        }
        if let Some((name, _)) = other.iter().find(|(n, _)| !first.iter().any(|(f, _)| f == n)) {
            return Err(mismatch(i, &format!("has feature {name}, which mix.datasets[0] has not")));
        }
    }
    // Batched, components that decode differently each decode their own records, and each
    // batch is gathered from them. Each pads a varying dense dimension (and SequenceExample
    // steps) to its own longest record, so such rows would not stack (sparse and ragged
    // rows are gathered as they are). Components that decode alike decode each batch as
    // one, padded as a single spec's.
    if spec.batch_size > 0
        && let Some(i) = super::mix_gather::first_decoding_otherwise(&components)
    {
        if components.iter().any(|c| matches!(*c.spec.decoder, Decoder::SequenceExample(_))) {
            return Err(ServeError::InvalidSpec(format!(
                "mix.datasets[{i}] decodes otherwise than mix.datasets[0]: a batched mixture of SequenceExample \
                 components needs every component to have the same decoder and onError (or read it unbatched, \
                 pipeline.batchSize 0)"
            )));
        }
        if let Some((name, description)) = first.iter().find(|(_, d)| d.starts_with("dense") && d.contains('?')) {
            return Err(ServeError::InvalidSpec(format!(
                "a batched mixture stacks dense features of a fixed shape; feature {name} is {description} (read \
                 the mixture unbatched, pipeline.batchSize 0, decode it as a VarLen or ragged feature, or give \
                 every component the same decoder and onError)"
            )));
        }
    }
    spec.decoder = components[0].spec.decoder.clone();
    Ok(components)
}

fn mismatch(component: usize, what: &str) -> ServeError {
    ServeError::InvalidSpec(format!("mix.datasets[{component}] {what}: components must decode to the same features"))
}

impl Reader {
    /// `next_chunk` for a mixture: records chosen from the components and batched under
    /// the reader's lock, in sets (`elements_decoded_together`) decoded (`mix_decode.rs`)
    /// on the server's decoding threads while the next are taken, as `next_chunk` does.
    pub(super) fn next_mixed_chunk(&self, max_elements: usize, max_bytes: usize) -> Chunk {
        let decoded = std::sync::Mutex::new(Vec::new());
        let decode = |set: TakenBatches| {
            let elements = self.decode_mixed_set(set);
            decoded.lock().unwrap_or_else(|p| p.into_inner()).extend(elements);
        };
        let taken = match &self.settings.decode_pool {
            Some(pool) if max_elements > 1 => pool.in_place_scope(|scope| {
                self.take_mixed_sets(max_elements, max_bytes, |set| {
                    let decode = &decode;
                    scope.spawn(move |_| decode(set));
                })
            }),
            _ => {
                let mut sets = Vec::new();
                let taken = self.take_mixed_sets(max_elements, max_bytes, |set| sets.push(set));
                sets.into_iter().for_each(decode);
                taken
            }
        };
        let mut decoded = decoded.into_inner().unwrap_or_else(|p| p.into_inner());
        decoded.sort_unstable_by_key(|(index, _)| *index);
        let (first_index, error, end) = taken;
        let chunk = Chunk { error, end_of_sequence: end, first_index, ..Chunk::default() };
        self.chunk_of(decoded.into_iter().map(|(_, result)| result), chunk)
    }

    /// `take_mixed_batches`, handing the batches to `on_set` in sets of
    /// `elements_decoded_together` (the last one maybe smaller).
    fn take_mixed_sets(
        &self,
        max_elements: usize,
        max_bytes: usize,
        mut on_set: impl FnMut(TakenBatches),
    ) -> (Option<u64>, Option<ServeError>, bool) {
        let set_size = self.elements_decoded_together();
        let mut set = Vec::with_capacity(set_size);
        let taken = self.take_mixed_batches(max_elements, max_bytes, |batch| {
            set.push(batch);
            if set.len() == set_size {
                on_set(std::mem::replace(&mut set, Vec::with_capacity(set_size)));
            }
        });
        if !set.is_empty() {
            on_set(set);
        }
        taken
    }

    /// Elements one decoding thread takes at once: 1, or for a batched mixture whose
    /// components decode differently a set of as many batches as it has components (up to
    /// 4), so that each component decodes about a whole batch's worth at once
    /// (`mix_decode.rs`).
    pub fn elements_decoded_together(&self) -> usize {
        if self.spec.batch_size > 0 && !self.mix_layout.alike { self.components.len().clamp(1, 4) } else { 1 }
    }

    /// Takes batches of `(component, record)` for up to `max_elements` elements (about
    /// `max_bytes` of records), handing each to `on_batch` with its number as soon as it
    /// is whole. Returns, for a shared reader, the number of the first (marked as being
    /// handed to a stream while the lock is held, as `take_batches` does, so that a
    /// checkpoint meanwhile replays from before it), then the error or the end of the
    /// sequence that stopped it early.
    fn take_mixed_batches(
        &self,
        max_elements: usize,
        max_bytes: usize,
        on_batch: impl FnMut((u64, Vec<(usize, Record)>)),
    ) -> (Option<u64>, Option<ServeError>, bool) {
        let mut state = self.lock();
        self.keep_snapshot(&state);
        let first = state.elements_produced;
        let (error, end) = self.take_mixed_batches_locked(&mut state, max_elements, max_bytes, on_batch);
        let first_index = (self.shared.load(std::sync::atomic::Ordering::Relaxed) && state.elements_produced > first)
            .then(|| {
                self.producing.lock().unwrap_or_else(|p| p.into_inner()).insert(first);
                first
            });
        (first_index, error, end)
    }

    fn take_mixed_batches_locked(
        &self,
        state: &mut ReaderState,
        max_elements: usize,
        max_bytes: usize,
        mut on_batch: impl FnMut((u64, Vec<(usize, Record)>)),
    ) -> (Option<ServeError>, bool) {
        let batch_size = self.spec.batch_size.max(1);
        let max_element_bytes = self.spec.source.max_record_bytes as usize;
        let (mut batches, mut bytes) = (0, 0);
        while batches < max_elements && bytes < max_bytes {
            let mut taken = Vec::with_capacity(batch_size.min(1024));
            let mut batch_bytes = 0;
            let last_of_sequence = match self.take_mixed(state, &mut taken, batch_size, &mut batch_bytes) {
                Ok(end) => end,
                Err(err) => return fail(state, err),
            };
            if batch_bytes > max_element_bytes {
                let err = ServeError::ResourceExhausted(format!(
                    "a batch of {} records of the mixture reached {batch_bytes} bytes, above the limit of \
                     {max_element_bytes} bytes per element (--max-record-bytes); lower pipeline.batchSize",
                    taken.len()
                ));
                return fail(state, err);
            }
            bytes += batch_bytes;
            if !taken.is_empty() && (taken.len() == batch_size || !self.spec.drop_remainder) {
                on_batch((state.elements_produced, taken));
                state.elements_produced += 1;
                batches += 1;
            } else if !taken.is_empty() {
                self.settle(&self.mixed_record_ids(&taken));
            }
            if last_of_sequence {
                return (None, true);
            }
        }
        (None, false)
    }

    /// Takes up to `want` records of the mixture into `taken` with their components,
    /// adding their sizes to `bytes` and stopping early once that passes the limit per
    /// element; `true` at the end. A component's epochs follow one another unseen (as a
    /// repeated dataset's do). A component's lock is taken the first time the choice falls
    /// on it and kept for the batch. Holding several is safe: everywhere else a component's
    /// lock is taken alone, under the mixture's or with no other lock held.
    fn take_mixed(
        &self,
        state: &mut ReaderState,
        taken: &mut Vec<(usize, Record)>,
        want: usize,
        bytes: &mut usize,
    ) -> Result<bool> {
        if let Some(err) = &state.failed {
            return Err(err.clone());
        }
        let mix = self.spec.mix.as_ref().expect("a mixture");
        let progress = state.mix.get_or_insert_with(|| start(mix, self.spec.pipeline.seed));
        self.look_again_while_mixing(progress);
        let mut locked: Vec<Option<std::sync::MutexGuard<'_, ReaderState>>> =
            self.components.iter().map(|_| None).collect();
        let max_bytes = self.spec.source.max_record_bytes as usize;
        let mut left = want;
        while left > 0 && *bytes <= max_bytes {
            let Some(i) = progress.choice.choose() else { return Ok(true) };
            let component = &self.components[i];
            let component_state = locked[i].get_or_insert_with(|| component.lock());
            loop {
                match component_state.next_selected(&component.spec) {
                    Ok(Next::Record(record)) => {
                        progress.taken[i] += 1;
                        *bytes += record.value.len();
                        taken.push((i, record));
                        left -= 1;
                        break;
                    }
                    Ok(Next::EndOfEpoch) => continue,
                    Ok(Next::End) => {
                        progress.choice.exhausted(i);
                        break;
                    }
                    Err(err) => return Err(in_component(i, err)),
                }
            }
        }
        Ok(false)
    }

    /// Whether the mixture's choice ended (nothing chosen yet: not ended).
    pub(super) fn mixture_ended(&self) -> bool {
        self.lock().mix.as_ref().is_some_and(|progress| progress.choice.ended())
    }

    /// Ends the mixture before its next choice: it reads nothing more.
    pub(super) fn end_mixture(&self) {
        let mix = self.spec.mix.as_ref().expect("a mixture");
        let mut state = self.lock();
        state.mix.get_or_insert_with(|| start(mix, self.spec.pipeline.seed)).choice.end();
    }

    /// The mixture's state: its components', and the choice's.
    pub(super) fn mix_state(&self, state: &ReaderState) -> Result<pb::MixState> {
        let mut components = Vec::with_capacity(self.components.len());
        for component in &self.components {
            components.push(component.state_bytes(&component.lock())?.into());
        }
        let (choice, taken) = match &state.mix {
            Some(progress) => (progress.choice.state(), progress.taken.clone()),
            None => {
                let mix = self.spec.mix.as_ref().expect("a mixture");
                let fresh = start(mix, self.spec.pipeline.seed);
                (fresh.choice.state(), fresh.taken)
            }
        };
        Ok(pb::MixState { components, rng: choice.rng, exhausted: choice.exhausted, taken, ended: choice.ended })
    }

    /// Restores the components and the choice from `saved` (of this mixture's spec); the
    /// caller holds the mixture's lock.
    pub(super) fn restore_mix(&self, saved: &pb::MixState) -> Result<MixProgress> {
        let mix = self.spec.mix.as_ref().expect("a mixture");
        let n = self.components.len();
        if saved.components.len() != n || saved.taken.len() != n {
            return Err(ServeError::InvalidArgument(format!("the state is not of a mixture of {n} components")));
        }
        let state = MixChoiceState { rng: saved.rng, exhausted: saved.exhausted.clone(), ended: saved.ended };
        let choice = MixChoice::restore(mix.weights.clone(), mix.choice.clone(), mix.stop_on_empty, &state)
            .ok_or_else(|| ServeError::InvalidArgument(format!("the state is not of a mixture of {n} components")))?;
        // All or none: a component that does not restore puts the ones before it back.
        let before: Vec<Option<Vec<u8>>> =
            self.components.iter().map(|component| component.state_bytes(&component.lock()).ok()).collect();
        for (i, (component, bytes)) in self.components.iter().zip(&saved.components).enumerate() {
            if let Err(err) = component.restore_state(bytes) {
                for (earlier, state) in self.components[..i].iter().zip(&before) {
                    if let Some(state) = state {
                        let _ = earlier.restore_state(state);
                    }
                }
                return Err(in_component(i, err));
            }
        }
        Ok(MixProgress { choice, taken: saved.taken.clone(), looked_again_at: None })
    }

    /// Each component's figures (a mixture's stats).
    pub(super) fn component_stats(&self, state: &ReaderState) -> Vec<pb::ComponentStats> {
        self.components
            .iter()
            .enumerate()
            .map(|(i, component)| {
                let stats = component.stats();
                let taken = state.mix.as_ref().map_or(0, |progress| progress.taken[i]);
                let exhausted = state.mix.as_ref().is_some_and(|progress| progress.choice.is_exhausted(i));
                pb::ComponentStats {
                    elements_taken: taken as i64,
                    epochs_completed: component.epochs_completed() as i64,
                    records_produced: stats.records_produced as i64,
                    exhausted,
                }
            })
            .collect()
    }
}

/// The error that fails the reader (and stops the chunk).
fn fail(state: &mut ReaderState, err: ServeError) -> (Option<ServeError>, bool) {
    state.failed = Some(err.clone());
    (Some(err), false)
}
