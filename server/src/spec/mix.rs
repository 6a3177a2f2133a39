//! A mixture's spec (`mix`): components that are full specs of their own, unbatched, and
//! weights as `tf.data.Dataset.sample_from_datasets` takes them, or a cycle of components
//! as `choose_from_datasets` takes a repeated choice dataset. The outer `pipeline`
//! batches the mixed stream and its seed drives a choice by weight; what reads files
//! (shuffling, sharding, epochs, interleave, selection) belongs to each component.

use std::sync::Arc;

use readerd_proto::v1 as pb;

use super::{MAX_BATCH_SIZE, ReaderSpec, fingerprint, invalid, prefetch_of};
use crate::error::{Result, ServeError};
use crate::pipeline::PipelineConfig;

/// Most components a mixture may have (each is a reader with its own files).
const MAX_DATASETS: usize = 64;

/// A mixture, checked.
#[derive(Clone, Debug)]
pub struct MixSpec {
    /// Each component's spec, in the spec's order (unbatched).
    pub components: Vec<ReaderSpec>,
    /// One weight per component: finite, non-negative, with a positive sum (with a
    /// `choice`, how often each appears in it).
    pub weights: Vec<f64>,
    /// `choose_from_datasets`: the components in turn, again and again; empty: by weight.
    pub choice: Vec<usize>,
    /// The mixture ends when the choice falls on an exhausted component.
    pub stop_on_empty: bool,
}

/// Turns of a `mix.choice` cycle at most.
const MAX_CHOICE: usize = 65_536;

/// `mix.choice`, checked: indices of the `n` datasets, at most `MAX_CHOICE`.
fn choice_of(mix: &pb::Mix, n: usize) -> Result<Vec<usize>> {
    if mix.choice.len() > MAX_CHOICE {
        return Err(invalid(format!("mix.choice has {} turns; at most {MAX_CHOICE}", mix.choice.len())));
    }
    let mut choice = Vec::with_capacity(mix.choice.len());
    for (k, &c) in mix.choice.iter().enumerate() {
        match usize::try_from(c) {
            Ok(c) if c < n => choice.push(c),
            _ => return Err(invalid(format!("mix.choice[{k}] is {c}: there are {n} datasets"))),
        }
    }
    Ok(choice)
}

/// The outer pipeline of a mixture keeps only what acts on the mixed stream.
fn mixed_stream_part(pipeline: &pb::Pipeline) -> pb::Pipeline {
    pb::Pipeline {
        seed: pipeline.seed,
        batch_size: pipeline.batch_size,
        drop_remainder: pipeline.drop_remainder,
        prefetch: pipeline.prefetch,
        ..Default::default()
    }
}

pub(super) fn mixture_spec(proto: pb::DatasetSpec, max_record_bytes: u64) -> Result<ReaderSpec> {
    let mix = proto.mix.as_ref().expect("a mixture");
    if proto.source.is_some() || proto.decoder.is_some() || !proto.transforms.is_empty() {
        return Err(invalid(
            "a spec with mix has no source or decoder of its own, nor transforms: each of mix.datasets has its own",
        ));
    }
    let n = mix.datasets.len();
    if n == 0 {
        return Err(invalid("mix.datasets is empty"));
    }
    if n > MAX_DATASETS {
        return Err(invalid(format!("mix.datasets has {n} datasets; at most {MAX_DATASETS}")));
    }
    let choice = choice_of(mix, n)?;
    let weights = match mix.weights.len() {
        0 if choice.is_empty() => vec![1.0; n],
        0 => {
            let mut counts = vec![0.0; n];
            choice.iter().for_each(|&c| counts[c] += 1.0);
            counts
        }
        _ if !choice.is_empty() => return Err(invalid("mix.choice and mix.weights exclude each other")),
        len if len == n => mix.weights.clone(),
        len => return Err(invalid(format!("mix.weights has {len} weights for {n} datasets"))),
    };
    if let Some((i, w)) = weights.iter().enumerate().find(|(_, w)| !w.is_finite() || **w < 0.0) {
        return Err(invalid(format!("mix.weights[{i}] is {w}: weights must be finite and not negative")));
    }
    let sum: f64 = weights.iter().sum();
    if sum <= 0.0 {
        return Err(invalid("mix.weights sum to 0: at least one must be positive"));
    }
    if !sum.is_finite() {
        return Err(invalid("mix.weights sum past the largest double: scale them down"));
    }
    let mut components = Vec::with_capacity(n);
    for (i, dataset) in mix.datasets.iter().enumerate() {
        let field = format!("mix.datasets[{i}]");
        if dataset.mix.is_some() {
            return Err(invalid(format!("{field}: a mixture inside a mixture is not supported")));
        }
        let component = ReaderSpec::from_proto(dataset.clone(), max_record_bytes).map_err(|err| match err {
            ServeError::InvalidSpec(message) => invalid(format!("{field}: {message}")),
            other => other,
        })?;
        if component.batch_size > 0 || component.unbatch {
            return Err(invalid(format!(
                "{field}.pipeline: components are not batched (batchSize, unbatch): the outer pipeline batches the mixture"
            )));
        }
        components.push(component);
    }
    let pipeline = proto.pipeline.clone().unwrap_or_default();
    if mixed_stream_part(&pipeline) != pipeline {
        return Err(invalid(
            "the pipeline of a mixture takes seed, batchSize, dropRemainder and prefetch; \
             file shuffling, sharding, epochs, interleave, shuffling, selection and onError belong to each of mix.datasets",
        ));
    }
    if !(0..=MAX_BATCH_SIZE).contains(&pipeline.batch_size) {
        return Err(invalid(format!("pipeline.batchSize must be in 0..={MAX_BATCH_SIZE}")));
    }
    let first = &components[0];
    Ok(ReaderSpec {
        fingerprint: fingerprint(&proto),
        patterns: Vec::new(),
        source: first.source.clone(),
        batch_size: pipeline.batch_size as usize,
        drop_remainder: pipeline.drop_remainder,
        pipeline: PipelineConfig { seed: pipeline.seed as u64, ..PipelineConfig::default() },
        prefetch: prefetch_of(pipeline.prefetch)?,
        select: Default::default(),
        unbatch: false,
        decoder: first.decoder.clone(),
        transforms: Arc::default(),
        skip_errors: false,
        mix: Some(Arc::new(MixSpec { components, weights, choice, stop_on_empty: mix.stop_on_empty_dataset })),
        proto,
    })
}
