//! A mixture's reader: one private reader per component (each with its own pipeline and
//! decoder, unbatched), elements taken from them as the choice says
//! ([`crate::pipeline::mix::MixChoice`]) and stacked into the outer spec's batches. Its
//! state is every component's state plus the choice's; keys are the component's keys
//! with `<component index>/` in front (`1/tabular/part-0.csv:12`).

use std::sync::Arc;

use super::records::ReaderState;
use super::{Chunk, Reader};
use crate::decode::{Dense, Tensor};
use crate::element::{Element, Keys};
use crate::error::{Result, ServeError};
use crate::pipeline::mix::{MixChoice, MixChoiceState, MixProgress};
use crate::source::DataRoots;
use crate::spec::{MixSpec, ReaderSpec};
use readerd_proto::v1 as pb;

fn start(mix: &MixSpec, seed: u64) -> MixProgress {
    MixProgress {
        choice: MixChoice::new(mix.weights.clone(), seed, mix.stop_on_empty),
        taken: vec![0; mix.weights.len()],
    }
}

/// Opens each component's reader and checks that they decode to the same features
/// (names, kinds, dtypes and shapes), naming the first component and feature that
/// differ; batched mixtures take dense features only. The outer spec takes the first
/// component's decoder (its CSV columns named from the headers).
pub(super) fn open_components(
    name: &str,
    spec: &mut ReaderSpec,
    roots: &DataRoots,
    settings: &super::ReaderSettings,
) -> Result<Vec<Reader>> {
    let mix = spec.mix.clone().expect("a mixture");
    let mut components = Vec::with_capacity(mix.components.len());
    for (i, component) in mix.components.iter().enumerate() {
        let reader =
            Reader::open(format!("{name}[{i}]"), component.clone(), roots, settings).map_err(|err| match err {
                ServeError::InvalidSpec(message) => ServeError::InvalidSpec(format!("mix.datasets[{i}]: {message}")),
                other => other,
            })?;
        components.push(reader);
    }
    let signature = |i: usize| {
        let mut features = components[i].spec.decoder.signature().unwrap_or_default();
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
    if spec.batch_size > 0
        && let Some((name, description)) = first.iter().find(|(_, d)| !d.starts_with("dense"))
    {
        return Err(ServeError::InvalidSpec(format!(
            "a batched mixture stacks dense features; feature {name} is {description} (batch each component instead, \
             or read the mixture unbatched)"
        )));
    }
    spec.decoder = components[0].spec.decoder.clone();
    Ok(components)
}

fn mismatch(component: usize, what: &str) -> ServeError {
    ServeError::InvalidSpec(format!("mix.datasets[{component}] {what}: components must decode to the same features"))
}

impl Reader {
    /// `next_chunk` for a mixture: elements chosen from the components, batched.
    pub(super) fn next_mixed_chunk(&self, max_elements: usize, max_bytes: usize) -> Chunk {
        let mut state = self.lock();
        self.keep_snapshot(&state);
        let batch_size = self.spec.batch_size.max(1);
        let max_element_bytes = self.spec.source.max_record_bytes as usize;
        let mut chunk = Chunk::default();
        let mut bytes = 0;
        while chunk.elements.len() < max_elements && bytes < max_bytes {
            let mut examples = Vec::with_capacity(batch_size.min(1024));
            let mut last_of_sequence = false;
            while examples.len() < batch_size {
                match self.take_mixed(&mut state) {
                    Ok(Some(element)) => examples.push(element),
                    Ok(None) => {
                        last_of_sequence = true;
                        break;
                    }
                    Err(err) => {
                        state.failed = Some(err.clone());
                        chunk.error = Some(err);
                        return chunk;
                    }
                }
            }
            if !examples.is_empty() && (examples.len() == batch_size || !self.spec.drop_remainder) {
                match stack_elements(examples, self.spec.batch_size > 0, max_element_bytes) {
                    Ok(mut element) => {
                        bytes += element.payload_bytes();
                        element.index = state.elements_produced;
                        state.elements_produced += 1;
                        chunk.elements.push(element);
                    }
                    Err(err) => {
                        state.failed = Some(err.clone());
                        chunk.error = Some(err);
                        return chunk;
                    }
                }
            }
            if last_of_sequence {
                chunk.end_of_sequence = true;
                break;
            }
        }
        self.mark_producing(&mut chunk);
        chunk
    }

    /// The next element of the mixture, its keys prefixed with its component; `None` at
    /// the end.
    fn take_mixed(&self, state: &mut ReaderState) -> Result<Option<Element>> {
        if let Some(err) = &state.failed {
            return Err(err.clone());
        }
        let mix = self.spec.mix.as_ref().expect("a mixture");
        let progress = state.mix.get_or_insert_with(|| start(mix, self.spec.pipeline.seed));
        while let Some(i) = progress.choice.choose() {
            // A chunk may come back empty before the end (every record skipped).
            loop {
                let chunk = self.components[i].next_chunk(1, usize::MAX);
                if let Some(err) = chunk.error {
                    return Err(in_component(i, err));
                }
                if let Some(element) = chunk.elements.into_iter().next() {
                    progress.taken[i] += 1;
                    return Ok(Some(Element { keys: prefixed(i, element.keys), ..element }));
                }
                if chunk.end_of_sequence {
                    progress.choice.exhausted(i);
                    break;
                }
            }
        }
        Ok(None)
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

    /// Restores the components and the choice from `saved` (of this mixture's spec).
    pub(super) fn restore_mix(&self, saved: &pb::MixState) -> Result<MixProgress> {
        let mix = self.spec.mix.as_ref().expect("a mixture");
        let n = self.components.len();
        if saved.components.len() != n || saved.taken.len() != n {
            return Err(ServeError::InvalidArgument(format!("the state is not of a mixture of {n} components")));
        }
        let state = MixChoiceState { rng: saved.rng, exhausted: saved.exhausted.clone(), ended: saved.ended };
        let choice = MixChoice::restore(mix.weights.clone(), mix.stop_on_empty, &state)
            .ok_or_else(|| ServeError::InvalidArgument(format!("the state is not of a mixture of {n} components")))?;
        for (i, (component, bytes)) in self.components.iter().zip(&saved.components).enumerate() {
            component.restore_state(bytes).map_err(|err| in_component(i, err))?;
        }
        Ok(MixProgress { choice, taken: saved.taken.clone() })
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

/// An error of component `i`, named so.
fn in_component(i: usize, err: ServeError) -> ServeError {
    match err {
        ServeError::InvalidSpec(message) => ServeError::InvalidSpec(format!("mix.datasets[{i}]: {message}")),
        ServeError::InvalidArgument(message) => ServeError::InvalidArgument(format!("mix.datasets[{i}]: {message}")),
        other => other,
    }
}

/// `keys` with `<i>/` before each file name.
fn prefixed(i: usize, keys: Keys) -> Keys {
    match keys {
        Keys::Table { files, file, number } => Keys::Table {
            files: files.iter().map(|name| Arc::from(format!("{i}/{name}").as_str())).collect(),
            file,
            number,
        },
        Keys::Strings(keys) => Keys::Strings(keys.into_iter().map(|key| format!("{i}/{key}")).collect()),
    }
}

/// Single elements as one: stacked into `[B, ...]` (`batched`, features by the first
/// element's names), or the one element as it is.
fn stack_elements(elements: Vec<Element>, batched: bool, max_bytes: usize) -> Result<Element> {
    if !batched {
        return Ok(elements.into_iter().next().expect("one element"));
    }
    let keys = merged_keys(elements.iter().map(|e| &e.keys));
    let mut features = Vec::with_capacity(elements[0].features.len());
    for (name, _) in &elements[0].features {
        let mut parts = Vec::with_capacity(elements.len());
        for element in &elements {
            match element.features.iter().find(|(n, _)| n == name) {
                Some((_, Tensor::Dense(dense))) => parts.push(dense.clone()),
                _ => return Err(ServeError::Decode(format!("a mixture's batch cannot stack feature {name}"))),
            }
        }
        let stacked = Dense::stack(&parts).ok_or_else(|| {
            ServeError::Decode(format!(
                "the elements of one batch differ in the shape of {name} (TensorFlow's batch needs equal shapes)"
            ))
        })?;
        features.push((name.clone(), Tensor::Dense(stacked)));
    }
    let element = Element { index: 0, keys, features, records: Vec::new() };
    let size = element.payload_bytes();
    if size > max_bytes {
        return Err(ServeError::ResourceExhausted(format!(
            "a batch of the mixture reached {size} bytes, above the limit of {max_bytes} bytes per element \
             (--max-record-bytes); lower pipeline.batchSize"
        )));
    }
    Ok(element)
}

/// The keys of several elements, in order: one table (file names shared) when all are
/// tables, else strings.
fn merged_keys<'a>(parts: impl Iterator<Item = &'a Keys>) -> Keys {
    let parts: Vec<&Keys> = parts.collect();
    if !parts.iter().all(|keys| matches!(keys, Keys::Table { .. })) {
        return Keys::Strings(parts.iter().flat_map(|keys| keys.to_strings()).collect());
    }
    let (mut files, mut file, mut number): (Vec<Arc<str>>, Vec<u32>, Vec<u64>) = Default::default();
    for keys in parts {
        let Keys::Table { files: names, file: at, number: n } = keys else { continue };
        for (&f, &k) in at.iter().zip(n) {
            let name = &names[f as usize];
            let index = files.iter().position(|known| known == name).unwrap_or_else(|| {
                files.push(name.clone());
                files.len() - 1
            });
            file.push(index as u32);
            number.push(k);
        }
    }
    Keys::Table { files, file, number }
}
