//! `unbatch`: a record decoded on its own and split along the first dimension of its
//! features into examples ([`unbatch_record`]), and examples stacked again into the
//! spec's batches ([`stack_examples`]).

use super::decoding::Decoding;
use crate::decode::{Dense, Tensor};
use crate::element::{Element, Keys, RecordId};
use crate::error::{Result, ServeError};
use crate::source::Record;

/// One example of an unbatched record: `<record key>[i]` and its dense features.
#[derive(Debug)]
pub(super) struct Example {
    key: String,
    features: Vec<(String, Dense)>,
    /// On replicas, its name in the ledger (`RecordId::example`).
    pub(super) id: Option<RecordId>,
}

impl Example {
    /// Its features' bytes (as they count in a stacked element's payload).
    pub(super) fn payload_bytes(&self) -> usize {
        self.features.iter().map(|(_, dense)| dense.payload_bytes()).sum()
    }
}

/// Decodes a record on its own and splits every feature along its first dimension.
pub(super) fn unbatch_record(decoding: &Decoding, record: &Record) -> Result<Vec<Example>> {
    let key = record.key_string();
    let features = decoding.decode_record(record, &key)?;
    let mut columns = Vec::with_capacity(features.len());
    for (name, tensor) in features {
        let Tensor::Dense(dense) = tensor else {
            return Err(ServeError::Decode(format!("unbatch takes dense features; {name} of record {key} is not")));
        };
        let parts = dense.unstack().ok_or_else(|| {
            ServeError::Decode(format!(
                "unbatch: feature {name} of record {key} is a scalar, with no examples to split"
            ))
        })?;
        columns.push((name, parts));
    }
    let n = columns.first().map_or(0, |(_, parts)| parts.len());
    if let Some((name, parts)) = columns.iter().find(|(_, parts)| parts.len() != n) {
        return Err(ServeError::Decode(format!(
            "unbatch: record {key} holds {n} examples in {} but {} in {name}",
            columns[0].0,
            parts.len()
        )));
    }
    let example = |i: usize| -> Result<Example> {
        let key = format!("{key}[{i}]");
        let features = columns.iter().map(|(name, parts)| (name.clone(), Tensor::Dense(parts[i].clone()))).collect();
        let features = decoding.transform_example(features, &key, record.epoch)?;
        let features = features
            .into_iter()
            .map(|(name, tensor)| match tensor {
                Tensor::Dense(dense) => Ok((name, dense)),
                _ => Err(ServeError::Decode(format!("unbatch: feature {name} of {key} is not dense"))),
            })
            .collect::<Result<_>>()?;
        Ok(Example { key, features, id: None })
    };
    (0..n).map(example).collect()
}

/// Examples as one element: stacked into `[B, ...]` tensors (`batched`), or the one
/// example as it is. On replicas it is named by its examples' ledger ids.
pub(super) fn stack_examples(examples: Vec<Example>, batched: bool) -> Result<Element> {
    let keys = Keys::Strings(examples.iter().map(|e| e.key.clone()).collect());
    let records: Vec<RecordId> = examples.iter().filter_map(|e| e.id).collect();
    if !batched {
        let example = examples.into_iter().next().expect("one example");
        let features = example.features.into_iter().map(|(name, dense)| (name, Tensor::Dense(dense))).collect();
        return Ok(Element::new(keys, features, records));
    }
    let mut features = Vec::with_capacity(examples[0].features.len());
    for (j, (name, _)) in examples[0].features.iter().enumerate() {
        let parts: Vec<Dense> = examples.iter().map(|e| e.features[j].1.clone()).collect();
        let stacked = Dense::stack(&parts).ok_or_else(|| {
            ServeError::Decode(format!("unbatch: the examples of one batch differ in the shape of {name}"))
        })?;
        features.push((name.clone(), Tensor::Dense(stacked)));
    }
    Ok(Element::new(keys, features, records))
}
