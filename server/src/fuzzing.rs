//! Entry points for fuzzing (the `fuzz/` targets of cargo fuzz, and the bounded smoke run
//! in the tests): each takes arbitrary bytes and must return, never panic or allocate
//! what the bytes claim.

use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use readerd_proto::v1 as pb;

use crate::decode::Decoder;
use crate::format::{FormatConfig, Framed, WorkUnit};
use crate::limits::Limits;
use crate::spec::ReaderSpec;

/// Frames `data` as a whole TFRecord file; returns the records framed before the end or
/// the first error.
pub fn frame_tfrecord(data: &[u8]) -> usize {
    frame(&FormatConfig::TfRecord, data)
}

/// Frames `data` as a whole CSV file (`CsvDataset` framing with a header).
pub fn frame_csv(data: &[u8]) -> usize {
    frame(&FormatConfig::Csv { header: true, field_delim: b',', use_quote_delim: true }, data)
}

fn frame(format: &FormatConfig, data: &[u8]) -> usize {
    let mut framer = format.framer(&WorkUnit { name: "fuzz", len: Some(data.len() as u64) }, 1 << 20);
    let (mut start, mut records) = (0usize, 0usize);
    loop {
        match framer.frame(&data[start..], true) {
            Ok(Framed::Record { consume, .. }) => {
                records += 1;
                start += consume;
            }
            Ok(Framed::Skip { consume }) => start += consume,
            Ok(Framed::NeedMore { .. } | Framed::End) | Err(_) => return records,
        }
        assert!(start <= data.len(), "a framer consumed past the end of its window");
    }
}

fn decoder(spec: serde_json::Value) -> Arc<Decoder> {
    let proto: pb::DatasetSpec = serde_json::from_value(spec).expect("a valid spec");
    let spec = ReaderSpec::from_proto(proto, 1 << 20).expect("a valid spec");
    spec.decoder.clone()
}

/// An Example decoder with every kind of feature.
static EXAMPLE: LazyLock<Arc<Decoder>> = LazyLock::new(|| {
    decoder(serde_json::json!({
        "source": {"files": ["x"], "format": "TFRECORD"},
        "decoder": {"example": {"features": {
            "label": {"fixedLen": {"dtype": "INT64", "shape": [], "default": {"int64Values": [0]}}},
            "emb": {"fixedLenSequence": {"dtype": "FLOAT32", "shape": [2], "allowMissing": true}},
            "tokens": {"varLen": {"dtype": "STRING"}},
            "pairs": {"sparse": {"indexKeys": ["ix"], "valueKey": "vals", "dtype": "FLOAT32", "size": [50]}},
            "spans": {"ragged": {"dtype": "INT64", "valueKey": "spans", "partitions": [{"rowLengths": "lens"}]}}
        }}}
    }))
});

/// A `decode_csv` decoder of three columns (int, float, string).
static CSV: LazyLock<Arc<Decoder>> = LazyLock::new(|| {
    decoder(serde_json::json!({
        "source": {"files": ["x"], "format": "TEXT_LINE"},
        "decoder": {"csv": {"columns": [
            {"name": "id", "dtype": "INT64", "default": {"int64Values": [0]}},
            {"name": "x", "dtype": "FLOAT32"},
            {"name": "s", "dtype": "STRING", "default": {"bytesValues": []}}
        ]}}
    }))
});

/// Decodes `data` as a batch of serialized Examples (split at each `0xff`) and as one.
pub fn decode_example(data: &[u8]) -> bool {
    decode(&EXAMPLE, data)
}

/// Decodes `data`'s lines as a batch of CSV records.
pub fn decode_csv(data: &[u8]) -> bool {
    let lines: Vec<Bytes> = data.split(|&b| b == b'\n').map(Bytes::copy_from_slice).collect();
    let keys: Vec<String> = (0..lines.len()).map(|i| format!("fuzz:{i}")).collect();
    CSV.decode(&lines, &keys, true).is_ok()
}

fn decode(decoder: &Decoder, data: &[u8]) -> bool {
    let records: Vec<Bytes> = data.split(|&b| b == 0xff).map(Bytes::copy_from_slice).collect();
    let keys: Vec<String> = (0..records.len()).map(|i| format!("fuzz:{i}")).collect();
    let batch = decoder.decode(&records, &keys, true).is_ok();
    let single = decoder.decode(&[Bytes::copy_from_slice(data)], &keys[..1], false).is_ok();
    batch || single
}

/// Checks `data` as a spec, in its JSON form and in its protobuf encoding, as `Read` does
/// (`--max-batch-bytes` of 1 MiB); a spec that passes decodes a batch of empty records.
/// Returns whether one of the forms was accepted. Nothing may panic, and nothing the spec
/// claims may be allocated before the checks.
pub fn check_spec(data: &[u8]) -> bool {
    let json = serde_json::from_slice::<pb::DatasetSpec>(data).ok();
    let binary = <pb::DatasetSpec as prost::Message>::decode(data).ok();
    let limits = Limits { batch_bytes: 1 << 20, ..Limits::default() };
    let mut accepted = false;
    for proto in json.into_iter().chain(binary) {
        let Ok(spec) = ReaderSpec::from_proto(proto, 1 << 20) else { continue };
        if limits.check_spec(&spec).is_err() {
            continue;
        }
        accepted = true;
        let records = vec![Bytes::new(); spec.batch_size.clamp(1, 4)];
        let keys: Vec<String> = (0..records.len()).map(|i| format!("fuzz:{i}")).collect();
        let _ = spec.decoder.decode(&records, &keys, spec.batch_size > 0);
    }
    accepted
}
