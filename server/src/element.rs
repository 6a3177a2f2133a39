//! Elements for the wire: records (or batches of them) as `pb::Element`s. Payloads are
//! `Bytes` slices of the read buffer, so building a message copies no record.

use readerd_proto::v1 as pb;

use crate::source::Record;

/// The feature that carries raw records when the spec has no decoder.
pub const RAW_FEATURE: &str = "value";

/// One element: a single record (`batched == false`: shape `[]`) or a batch (`[B]`).
pub fn raw_element(seq: i64, records: Vec<Record>, batched: bool) -> pb::Element {
    let keys = records.iter().map(Record::key_string).collect();
    let shape = if batched { vec![records.len() as i64] } else { Vec::new() };
    let strings = records.into_iter().map(|record| record.value).collect();
    let tensor = pb::DenseTensor { dtype: pb::DataType::String as i32, shape, data: Default::default(), strings };
    pb::Element {
        seq,
        keys,
        features: vec![pb::Feature {
            name: RAW_FEATURE.to_owned(),
            tensor: Some(pb::Tensor { kind: Some(pb::tensor::Kind::Dense(tensor)) }),
        }],
    }
}
