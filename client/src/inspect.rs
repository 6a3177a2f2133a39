//! `readerctl inspect FILE`: the records of a local file (or of an object read whole), as
//! a TFRecord dumper shows them. TFRecord records that parse as `tf.train.Example` show
//! their features; other records, text lines and fixed-length records show their bytes.
//! Keys are readerd's (`<file>:<n>`: byte offset for TFRecord, line for text, index for
//! fixed length).

use std::io::BufRead;

use base64::Engine;
use prost::Message;
use readerd_proto::tensorflow as tf;
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FileFormat {
    Tfrecord,
    Text,
    Fixed,
    /// Its footer: schema, row groups, the spec that reads it (`crate::inspect_parquet`).
    Parquet,
}

impl FileFormat {
    /// By extension: `.tfrecord`/`.tfrecords`/`.tfr` are TFRecord, anything else text.
    pub fn of(path: &std::path::Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("tfrecord" | "tfrecords" | "tfr") => FileFormat::Tfrecord,
            Some("parquet" | "parq") => FileFormat::Parquet,
            _ => FileFormat::Text,
        }
    }
}

/// One record as JSON: `{"key", "features"}` for an Example, else `{"key", "bytes"}`
/// (UTF-8 text as is, anything else base64 under `"base64"`).
pub fn record_json(key: &str, record: &[u8], as_example: bool) -> Value {
    if as_example && let Some(features) = example_json(record) {
        return json!({"key": key, "features": features});
    }
    match std::str::from_utf8(record) {
        Ok(text) => json!({"key": key, "bytes": text}),
        Err(_) => json!({"key": key, "base64": base64::engine::general_purpose::STANDARD.encode(record)}),
    }
}

/// The features of a serialized Example, or `None` when the record is not one.
fn example_json(record: &[u8]) -> Option<Value> {
    let example = tf::Example::decode(record).ok()?;
    let features = example.features?.feature;
    if features.is_empty() && !record.is_empty() {
        return None;
    }
    let mut out = serde_json::Map::new();
    for (name, feature) in features {
        let value = match feature.kind {
            Some(tf::feature::Kind::Int64List(list)) => json!({"int64": list.value}),
            Some(tf::feature::Kind::FloatList(list)) => json!({"float": list.value}),
            Some(tf::feature::Kind::BytesList(list)) => {
                let values: Vec<Value> = list
                    .value
                    .iter()
                    .map(|bytes| match std::str::from_utf8(bytes) {
                        Ok(text) if text.len() <= 256 => json!(text),
                        _ => json!({"bytes": bytes.len()}),
                    })
                    .collect();
                json!({"bytes": values})
            }
            None => json!({}),
        };
        out.insert(name, value);
    }
    Some(Value::Object(out))
}

/// Calls `each` with (key, record) for up to `limit` records of `path`.
pub fn for_each_record(
    path: &std::path::Path,
    format: FileFormat,
    record_bytes: usize,
    limit: Option<u64>,
    each: &mut dyn FnMut(String, Vec<u8>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    for_each_record_in(&name, std::io::BufReader::new(file), len, format, record_bytes, limit, each)
}

/// [`for_each_record`] of `len` bytes read from `input` (an object read whole, say), keys
/// named after `name`.
pub fn for_each_record_in(
    name: &str,
    mut input: impl BufRead,
    len: u64,
    format: FileFormat,
    record_bytes: usize,
    limit: Option<u64>,
    each: &mut dyn FnMut(String, Vec<u8>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut count = 0u64;
    let more = |count: u64| limit.is_none_or(|limit| count < limit);
    match format {
        FileFormat::Tfrecord => {
            let mut reader = crate::tfrecord::TfRecordReader::new(input, len);
            while more(count) {
                let Some((offset, record)) = reader.next_record()? else { break };
                each(format!("{name}:{offset}"), record)?;
                count += 1;
            }
        }
        FileFormat::Text => {
            let mut line = Vec::new();
            let mut number = 0u64;
            while more(count) && input.read_until(b'\n', &mut line)? > 0 {
                number += 1;
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                each(format!("{name}:{number}"), std::mem::take(&mut line))?;
                count += 1;
            }
        }
        FileFormat::Parquet => {
            let message = "a Parquet file has rows, not records: inspect describes it (crate::inspect_parquet)";
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, message));
        }
        FileFormat::Fixed => {
            if record_bytes == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "fixed: give --record-bytes"));
            }
            let mut record = vec![0u8; record_bytes];
            while more(count) {
                match input.read_exact(&mut record) {
                    Ok(()) => each(format!("{name}:{count}"), record.clone())?,
                    Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(err) => return Err(err),
                }
                count += 1;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_show_their_features_and_other_records_their_bytes() {
        let example = tf::Example {
            features: Some(tf::Features {
                feature: [(
                    "label".to_owned(),
                    tf::Feature { kind: Some(tf::feature::Kind::Int64List(tf::Int64List { value: vec![3] })) },
                )]
                .into(),
            }),
        };
        let shown = record_json("f:0", &example.encode_to_vec(), true);
        assert_eq!(shown, json!({"key": "f:0", "features": {"label": {"int64": [3]}}}));
        assert_eq!(record_json("f:1", b"hello", true), json!({"key": "f:1", "bytes": "hello"}));
        assert_eq!(record_json("f:2", &[0xff, 0], true), json!({"key": "f:2", "base64": "/wA="}));
    }
}
