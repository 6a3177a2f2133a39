//! A mixture's records: a [`Mixture`] holds one private reader per component (each with
//! its own pipeline and decoder, unbatched); [`MixedRecords`], the batcher's source,
//! takes records from them as the choice says ([`crate::pipeline::mix::MixChoice`]), and
//! `mix_decode.rs` decodes them. Its state is every component's state plus the choice's;
//! keys are the component's keys with `<component index>/` in front
//! (`1/tabular/part-0.csv:12`).

use super::batcher::BatchSource;
use super::figures::Figures;
use super::mix_gather::Layout;
use super::records::ReaderState;
use super::{Reader, in_component};
use crate::decode::Decoder;
use crate::error::{Result, ServeError};
use crate::pipeline::Next;
use crate::pipeline::mix::{MixChoice, MixChoiceState, MixProgress};
use crate::source::{DataRoots, Record};
use crate::spec::{MixSpec, ReaderSpec};
use readerd_proto::v1 as pb;

/// A mixture of specs: its components' readers, and how their batches are decoded.
pub(super) struct Mixture {
    /// The mixture's reader's name, for messages.
    pub(super) name: String,
    pub(super) mix: std::sync::Arc<MixSpec>,
    /// The mixture's batch size (0: unbatched) and seed (its choice's).
    pub(super) batch_size: usize,
    seed: u64,
    /// A reader per component, in the spec's order.
    pub(super) components: Vec<Reader>,
    /// The mixture's features and where each component's decoder puts them
    /// (`mix_gather.rs`).
    pub(super) layout: Layout,
}

/// Opens each component's reader and checks that they decode to the same features
/// (names, kinds, dtypes and shapes), naming the first component and feature that
/// differ; batched mixtures of components that decode differently refuse dense features
/// of varying length (`fixedLenSequence`). The outer spec takes
/// the first component's decoder (its CSV columns named from the headers).
pub(super) fn open_mixture(
    name: &str,
    spec: &mut ReaderSpec,
    roots: &DataRoots,
    settings: &super::ReaderSettings,
) -> Result<Mixture> {
    let mix = spec.mix.clone().expect("a mixture");
    let mut components = Vec::with_capacity(mix.components.len());
    for (i, component) in mix.components.iter().enumerate() {
        let reader = Reader::open(format!("{name}[{i}]"), component.clone(), roots, settings)
            .map_err(|err| in_component(i, err))?;
        components.push(reader);
    }
    let signature = |i: usize| {
        let mut features = components[i].spec.signature();
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
    let layout = Layout::of(&components);
    Ok(Mixture {
        name: name.to_owned(),
        mix,
        batch_size: spec.batch_size,
        seed: spec.pipeline.seed,
        components,
        layout,
    })
}

fn mismatch(component: usize, what: &str) -> ServeError {
    ServeError::InvalidSpec(format!("mix.datasets[{component}] {what}: components must decode to the same features"))
}

/// A mixture's records, chosen among its components: `(component, record)`. A
/// component's epochs follow one another unseen (as a repeated dataset's do). A
/// component's lock is taken the first time the choice falls on it and kept for the
/// batch. Holding several is safe: everywhere else a component's lock is taken alone,
/// under the mixture's or with no other lock held.
pub(super) struct MixedRecords<'a> {
    mixture: &'a Mixture,
    /// The mixture's state (its lock held).
    state: &'a mut ReaderState,
    locked: Vec<Option<super::figures::StateGuard<'a>>>,
    /// Called before each batch, with the choice (on replicas: takes back components
    /// exhausted for a while, `Mixture::look_again_while_mixing`).
    before_batch: &'a dyn Fn(&mut MixProgress),
}

impl<'a> MixedRecords<'a> {
    pub fn new(mixture: &'a Mixture, state: &'a mut ReaderState, before_batch: &'a dyn Fn(&mut MixProgress)) -> Self {
        let locked = mixture.components.iter().map(|_| None).collect();
        Self { mixture, state, locked, before_batch }
    }
}

impl BatchSource for MixedRecords<'_> {
    type Item = (usize, Record);
    const ITEMS: &'static str = "records of the mixture";

    fn start_batch(&mut self) -> Result<()> {
        self.locked.iter_mut().for_each(|guard| *guard = None);
        if let Some(err) = &self.state.failed {
            return Err(err.clone());
        }
        let progress = self.state.mix.get_or_insert_with(|| self.mixture.start());
        (self.before_batch)(progress);
        Ok(())
    }

    fn next(&mut self) -> Result<Next<(usize, Record)>> {
        let progress = self.state.mix.as_mut().expect("started by start_batch");
        loop {
            let Some(i) = progress.choice.choose() else { return Ok(Next::End) };
            let component = &self.mixture.components[i];
            let component_state = self.locked[i].get_or_insert_with(|| component.lock());
            loop {
                let next = component_state.next_selected(&component.spec, &component.decoding);
                if let Some(ledger) = &mut self.state.ledger {
                    ledger.settle_later(component_state.take_dropped());
                }
                match next {
                    Ok(Next::Item(record)) => {
                        progress.taken[i] += 1;
                        return Ok(Next::Item((i, record)));
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
    }

    fn bytes((_, record): &(usize, Record)) -> usize {
        record.value.len()
    }
}

impl Mixture {
    /// The mixture at its first record: the choice from the outer seed, nothing taken.
    fn start(&self) -> MixProgress {
        let mix = &self.mix;
        MixProgress {
            choice: MixChoice::new(mix.weights.clone(), mix.choice.clone(), self.seed, mix.stop_on_empty),
            taken: vec![0; mix.weights.len()],
            looked_again_at: None,
        }
    }

    /// The same mixture, its components at their first records (to replay from a state).
    pub(super) fn replica(&self) -> Mixture {
        Mixture {
            name: self.name.clone(),
            mix: self.mix.clone(),
            batch_size: self.batch_size,
            seed: self.seed,
            components: self.components.iter().map(Reader::replica).collect(),
            layout: self.layout.clone(),
        }
    }

    /// Elements one decoding thread takes at once: 1, or for a batched mixture whose
    /// components decode differently a set of as many batches as it has components (up to
    /// 4), so that each component decodes about a whole batch's worth at once
    /// (`mix_decode.rs`).
    pub(super) fn elements_decoded_together(&self) -> usize {
        if self.batch_size > 0 && !self.layout.alike { self.components.len().clamp(1, 4) } else { 1 }
    }

    /// Whether the mixture's choice ended (nothing chosen yet: not ended).
    pub(super) fn ended(state: &ReaderState) -> bool {
        state.mix.as_ref().is_some_and(|progress| progress.choice.ended())
    }

    /// Ends the mixture before its next choice: it reads nothing more.
    pub(super) fn end(&self, state: &mut ReaderState) {
        state.mix.get_or_insert_with(|| self.start()).choice.end();
    }

    /// The mixture's state: its components', and the choice's.
    pub(super) fn state(&self, state: &ReaderState) -> Result<pb::MixState> {
        let mut components = Vec::with_capacity(self.components.len());
        for component in &self.components {
            components.push(component.state_bytes(&component.lock())?.into());
        }
        let (choice, taken) = match &state.mix {
            Some(progress) => (progress.choice.state(), progress.taken.clone()),
            None => {
                let fresh = self.start();
                (fresh.choice.state(), fresh.taken)
            }
        };
        Ok(pb::MixState { components, rng: choice.rng, exhausted: choice.exhausted, taken, ended: choice.ended })
    }

    /// Restores the components and the choice from `saved` (of this mixture's spec); the
    /// caller holds the mixture's lock.
    pub(super) fn restore(&self, saved: &pb::MixState) -> Result<MixProgress> {
        let mix = &self.mix;
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

    /// Each component's figures (a mixture's stats), with what `mixture` published of them.
    pub(super) fn component_stats(&self, mixture: &Figures) -> Vec<pb::ComponentStats> {
        self.components
            .iter()
            .enumerate()
            .map(|(i, component)| {
                let stats = component.stats();
                let (taken, exhausted) = mixture.components.get(i).copied().unwrap_or_default();
                pb::ComponentStats {
                    elements_taken: taken as i64,
                    epochs_completed: component.epochs_completed() as i64,
                    records_produced: stats.records_produced as i64,
                    exhausted,
                }
            })
            .collect()
    }

    /// While it goes on, takes back the components it found with nothing left at most
    /// once every `coordinator.look_again_every()` (on replicas: splits of a replica that
    /// died are then taken over although other components still run). The caller holds
    /// the mixture's lock.
    pub(super) fn look_again_while_mixing(
        &self,
        coordinator: &dyn crate::coordinator::Coordinator,
        progress: &mut MixProgress,
    ) {
        let Some(every) = coordinator.look_again_every() else { return };
        if !progress.choice.any_exhausted() || progress.looked_again_at.is_some_and(|at| at.elapsed() < every) {
            return;
        }
        progress.looked_again_at = Some(std::time::Instant::now());
        self.take_back_exhausted(progress);
    }

    /// The components the choice found exhausted look at the ledger again, and the
    /// choice takes them back. The caller holds the mixture's lock.
    pub(super) fn take_back_exhausted(&self, progress: &mut MixProgress) {
        for (i, component) in self.components.iter().enumerate() {
            if progress.choice.is_exhausted(i) {
                component.lock().pipeline.look_again();
            }
        }
        progress.choice.look_again();
    }
}
