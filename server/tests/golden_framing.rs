//! Every `tfrecord`, `tfrecord_corrupt`, `fixed_length` and `text_line` case of the
//! TensorFlow golden vectors (tests/golden, copied from TensorFlow 2.21), run through the framing layer: records,
//! keys, and for errors the gRPC code of TensorFlow's error class and its message.

mod golden;

use std::sync::Arc;

use golden::{b64, golden_dir, tf_class_code};
use readerd_server::error::ServeError;
use readerd_server::format::FormatConfig;
use readerd_server::format::fixed_length::FixedLengthConfig;
use readerd_server::pipeline::{Next, PipelineConfig, PipelineEnv, RecordPipeline};
use readerd_server::source::{Compression, DataRoots, Record, SourceConfig};
use serde_json::Value;

fn int(inputs: &Value, name: &str) -> u64 {
    inputs[name].as_u64().unwrap_or(0)
}

fn config_of(case: &Value) -> SourceConfig {
    let inputs = &case["inputs"];
    let format = match case["category"].as_str().unwrap() {
        "tfrecord" | "tfrecord_corrupt" => FormatConfig::TfRecord,
        "text_line" => FormatConfig::TextLine { skip_header_lines: int(inputs, "skip_header_lines") },
        "fixed_length" => FormatConfig::FixedLength(FixedLengthConfig {
            header_bytes: int(inputs, "header_bytes"),
            record_bytes: int(inputs, "record_bytes"),
            footer_bytes: int(inputs, "footer_bytes"),
            // The classic reader's hop 0 means "one record"; the Dataset has no hop.
            hop_bytes: (case["op"] == "tf.compat.v1.FixedLengthRecordReader")
                .then(|| Some(int(inputs, "hop_bytes")).filter(|&h| h > 0).unwrap_or(int(inputs, "record_bytes"))),
        }),
        other => panic!("not a framing category: {other}"),
    };
    let compression = match inputs["compression_type"].as_str().unwrap_or("") {
        "" => Compression::None,
        "GZIP" => Compression::Gzip,
        "ZLIB" => Compression::Zlib,
        other => panic!("unknown compression {other}"),
    };
    SourceConfig { format: format.into(), compression: Some(compression), max_record_bytes: 256 << 20 }
}

/// Runs one case; returns a description of the first mismatch.
fn check(case: &Value, roots: &DataRoots) -> Result<(), String> {
    let files: Vec<_> = case["inputs"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| roots.resolve(f.as_str().unwrap()).unwrap())
        .collect();
    // The files one after the other, in order: the pipeline with its defaults.
    let mut cursor =
        RecordPipeline::new(files.into(), Arc::new(config_of(case)), PipelineConfig::default(), PipelineEnv::default());
    let mut records: Vec<Record> = Vec::new();
    let outcome = loop {
        match cursor.next_step() {
            Ok(Next::Item(record)) => records.push(record),
            Ok(Next::End | Next::EndOfEpoch) => break Ok(()),
            Err(err) => break Err(ServeError::from(err)),
        }
    };
    let expected = &case["expected"];
    let expected_records: Vec<Vec<u8>> = expected["records"].as_array().unwrap().iter().map(b64).collect();
    let got: Vec<Vec<u8>> = records.iter().map(|r| r.value.as_bytes().unwrap().to_vec()).collect();
    if got != expected_records {
        return Err(format!("records differ: got {} records, expected {}", got.len(), expected_records.len()));
    }
    if let Some(keys) = expected["keys"].as_array() {
        let got: Vec<String> = records.iter().map(Record::key_string).collect();
        let want: Vec<&str> = keys.iter().map(|k| k.as_str().unwrap()).collect();
        if got != want {
            return Err(format!("keys differ: got {got:?}, expected {want:?}"));
        }
    }
    match (expected["status"].as_str().unwrap(), outcome) {
        ("ok", Ok(())) => Ok(()),
        ("ok", Err(err)) => Err(format!("unexpected error: {err}")),
        ("error", Ok(())) => Err("expected an error, got none".into()),
        ("error", Err(err)) => {
            let error = &expected["error"];
            let want_code = tf_class_code(error["class"].as_str().unwrap());
            let core = error["message_core"].as_str().unwrap();
            let message = err.to_string();
            if err.code() != want_code {
                Err(format!("code {:?}, expected {want_code:?} ({message})", err.code()))
            } else if !message.contains(core) {
                Err(format!("message {message:?} lacks {core:?}"))
            } else {
                Ok(())
            }
        }
        // TensorFlow segfaults; the recommended behaviour is DataLoss at that record.
        ("crash", Err(err)) if err.code() == tonic::Code::DataLoss => Ok(()),
        ("crash", other) => Err(format!("expected DATA_LOSS instead of TF's crash, got {other:?}")),
        (status, _) => Err(format!("unknown status {status}")),
    }
}

#[test]
fn golden_framing_cases_match_tensorflow() {
    let dir = golden_dir();
    let index: Value = serde_json::from_slice(
        &std::fs::read(dir.join("cases/index.json"))
            .expect("golden vectors at tests/golden (or set READERD_GOLDEN_DIR)"),
    )
    .unwrap();
    let roots = DataRoots::new(std::slice::from_ref(&dir)).unwrap();
    let mut passed = 0;
    let mut failures = Vec::new();
    for entry in index["cases"].as_array().unwrap() {
        let category = entry["category"].as_str().unwrap();
        if !matches!(category, "tfrecord" | "tfrecord_corrupt" | "fixed_length" | "text_line") {
            continue;
        }
        let case: Value =
            serde_json::from_slice(&std::fs::read(dir.join(entry["file"].as_str().unwrap())).unwrap()).unwrap();
        match check(&case, &roots) {
            Ok(()) => passed += 1,
            Err(why) => failures.push(format!("{}: {why}", entry["id"].as_str().unwrap())),
        }
    }
    println!("golden framing cases: {passed} passed, {} failed", failures.len());
    assert!(failures.is_empty(), "failing cases:\n{}", failures.join("\n"));
    assert_eq!(passed, 61, "every framing case of the dev set runs");
}
