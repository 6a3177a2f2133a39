//! Every `decode_csv` and `csv_dataset` case of the TensorFlow golden vectors
//! (tests/golden): `decode_csv` through `decode::csv::decode_csv`, `csv_dataset`
//! through the CSV framer (read by the pipeline) and `CsvDialect::CsvDataset` decoding, one row
//! of scalars per record. Outputs must match bit for bit; errors must have the gRPC code
//! of TensorFlow's error class and contain its message.

mod golden;

use std::sync::Arc;

use bytes::Bytes;
use golden::{b64, check_dense, dtype_of, golden_dir, golden_float, tf_class_code};
use readerd_server::decode::csv::{CsvColumn, CsvConfig, CsvDefault, CsvDialect, decode_csv, decode_records};
use readerd_server::decode::{DType, DecodeError, Dense};
use readerd_server::error::ServeError;
use readerd_server::format::FormatConfig;
use readerd_server::pipeline::{Next, PipelineConfig, PipelineEnv, RecordPipeline};
use readerd_server::source::{Compression, DataRoots, SourceConfig};
use serde_json::Value;

/// `record_defaults` → columns: `"default": null` is a required column.
fn columns(inputs: &Value) -> Vec<CsvColumn> {
    inputs["record_defaults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            let dtype = dtype_of(entry["dtype"].as_str().unwrap());
            let default = &entry["default"];
            let default = (!default.is_null()).then(|| match dtype {
                DType::Int32 | DType::Int64 => CsvDefault::Int(default.as_i64().unwrap()),
                DType::Float32 | DType::Float64 => CsvDefault::Float(golden_float(default)),
                DType::String => CsvDefault::String(Bytes::from(b64(default))),
                other => panic!("no CSV default for {other:?}"),
            });
            CsvColumn { dtype, default }
        })
        .collect()
}

fn config(inputs: &Value) -> Result<CsvConfig, DecodeError> {
    let select_cols = inputs["select_cols"].as_array().map(|cols| cols.iter().map(|c| c.as_i64().unwrap()).collect());
    CsvConfig::new(
        columns(inputs),
        inputs["field_delim"].as_str().unwrap(),
        inputs["use_quote_delim"].as_bool().unwrap(),
        inputs["na_value"].as_str().unwrap(),
        select_cols,
    )
}

/// An error against the case's `expected.error`: code and message.
fn check_error(expected: &Value, code: tonic::Code, message: &str) -> Result<(), String> {
    let error = &expected["error"];
    let want_code = tf_class_code(error["class"].as_str().unwrap());
    let core = error["message_core"].as_str().unwrap();
    if code != want_code {
        Err(format!("code {code:?}, expected {want_code:?} ({message})"))
    } else if !message.contains(core) {
        Err(format!("message {message:?} lacks {core:?}"))
    } else {
        Ok(())
    }
}

fn check_outputs(expected: &[Value], got: &[Dense]) -> Result<(), String> {
    if expected.len() != got.len() {
        return Err(format!("{} tensors, expected {}", got.len(), expected.len()));
    }
    for (i, (want, got)) in expected.iter().zip(got).enumerate() {
        check_dense(want, got).map_err(|why| format!("output {i}: {why}"))?;
    }
    Ok(())
}

fn check_decode_csv(case: &Value) -> Result<(), String> {
    let inputs = &case["inputs"];
    let expected = &case["expected"];
    let python_level = expected["error"]["python_level"].as_bool().unwrap_or(false);
    let config = match config(inputs) {
        Ok(config) => config,
        Err(err) if expected["status"] == "error" => {
            return check_error(expected, tonic::Code::InvalidArgument, &err.message);
        }
        Err(err) => return Err(format!("unexpected config error: {err}")),
    };
    if python_level {
        return Err("TensorFlow's Python wrapper rejects these arguments; CsvConfig::new accepted them".into());
    }
    let records: Vec<Bytes> =
        inputs["records"].as_array().unwrap().iter().map(|r| Bytes::from(r.as_str().unwrap().to_owned())).collect();
    let shape: Vec<usize> =
        inputs["records_shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
    match (expected["status"].as_str().unwrap(), decode_csv(&config, &records, &shape)) {
        ("ok", Ok(outputs)) => check_outputs(expected["output"].as_array().unwrap(), &outputs),
        ("ok", Err(err)) => Err(format!("unexpected error: {err}")),
        ("error", Ok(_)) => Err("expected an error, got outputs".into()),
        ("error", Err(err)) => check_error(expected, tonic::Code::InvalidArgument, &err.message),
        (status, _) => Err(format!("unknown status {status}")),
    }
}

fn check_csv_dataset(case: &Value, roots: &DataRoots) -> Result<(), String> {
    let inputs = &case["inputs"];
    let expected = &case["expected"];
    let config = config(inputs).map_err(|err| format!("unexpected config error: {err}"))?;
    let compression = match inputs["compression_type"].as_str().unwrap_or("") {
        "" => Compression::None,
        "GZIP" => Compression::Gzip,
        "ZLIB" => Compression::Zlib,
        other => panic!("unknown compression {other}"),
    };
    let source = SourceConfig {
        format: FormatConfig::Csv {
            header: inputs["header"].as_bool().unwrap(),
            field_delim: config.field_delim,
            use_quote_delim: config.use_quote_delim,
        }
        .into(),
        compression: Some(compression),
        max_record_bytes: 256 << 20,
    };
    let files: Vec<_> =
        inputs["files"].as_array().unwrap().iter().flat_map(|f| roots.resolve(f.as_str().unwrap()).unwrap()).collect();
    // The files one after the other, in order: the pipeline with its defaults.
    let mut cursor =
        RecordPipeline::new(files.into(), Arc::new(source), PipelineConfig::default(), PipelineEnv::default());
    let mut rows: Vec<Vec<Dense>> = Vec::new();
    // Like iterating the dataset: rows until the end or the first error.
    let outcome = loop {
        match cursor.next_step() {
            Ok(Next::Item(record)) => {
                match decode_records(&config, CsvDialect::CsvDataset, &[record.value.as_bytes().unwrap().clone()], &[])
                {
                    Ok(row) => rows.push(row),
                    Err(err) => break Err((tonic::Code::InvalidArgument, err.message)),
                }
            }
            Ok(Next::End | Next::EndOfEpoch) => break Ok(()),
            Err(err) => {
                let err = ServeError::from(err);
                break Err((err.code(), err.to_string()));
            }
        }
    };
    let want_rows = expected["rows"].as_array().unwrap();
    if rows.len() != want_rows.len() {
        return Err(format!("{} rows, expected {}", rows.len(), want_rows.len()));
    }
    for (r, (want, got)) in want_rows.iter().zip(&rows).enumerate() {
        check_outputs(want.as_array().unwrap(), got).map_err(|why| format!("row {r}: {why}"))?;
    }
    match (expected["status"].as_str().unwrap(), outcome) {
        ("ok", Ok(())) => Ok(()),
        ("ok", Err((_, message))) => Err(format!("unexpected error: {message}")),
        ("error", Ok(())) => Err("expected an error, got none".into()),
        ("error", Err((code, message))) => {
            let at = expected["error_at_record_index"].as_u64().unwrap() as usize;
            if rows.len() != at {
                return Err(format!("error after {} rows, expected after {at}", rows.len()));
            }
            check_error(expected, code, &message)
        }
        (status, _) => Err(format!("unknown status {status}")),
    }
}

#[test]
fn golden_csv_cases_match_tensorflow() {
    let dir = golden_dir();
    let roots = DataRoots::new(std::slice::from_ref(&dir)).unwrap();
    let (mut decode_passed, mut dataset_passed) = (0, 0);
    let mut failures = Vec::new();
    for case in golden::cases(&["decode_csv", "csv_dataset"]) {
        let category = case["category"].as_str().unwrap();
        let outcome = match category {
            "decode_csv" => check_decode_csv(&case),
            "csv_dataset" => check_csv_dataset(&case, &roots),
            other => panic!("unexpected category {other}"),
        };
        match (outcome, category) {
            (Ok(()), "decode_csv") => decode_passed += 1,
            (Ok(()), _) => dataset_passed += 1,
            (Err(why), _) => failures.push(format!("{}: {why}", case["id"].as_str().unwrap())),
        }
    }
    println!("decode_csv: {decode_passed} passed, csv_dataset: {dataset_passed} passed");
    assert!(failures.is_empty(), "failing cases:\n{}", failures.join("\n"));
    assert_eq!((decode_passed, dataset_passed), (49, 7), "every CSV case of the dev set runs");
}
