//! End to end: the golden CSV cases through a real server and `readerctl read --output
//! jsonl`: `CsvDataset` files with the `CSV` format, and `decode_csv` cases as the lines
//! of a text file with `TEXT_LINE` and the csv decoder.

use readerd_tests::{ServerProcess, check_json_tensor, csv_decoder, golden_cases, golden_dir, readerctl, write_file};
use serde_json::{Value, json};

fn read_jsonl(server: &ServerProcess, dir: &std::path::Path, id: &str, spec: &Value) -> (Vec<Value>, bool) {
    let spec_path = dir.join(format!("{id}.json"));
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let output = readerctl(&server.addr, &["read", "--spec", spec_path.to_str().unwrap(), "--output", "jsonl"]);
    let lines = String::from_utf8_lossy(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (lines, output.status.success())
}

fn check_error(expected: &Value, last: &Value) -> Result<(), String> {
    let code = match expected["error"]["class"].as_str().unwrap() {
        "DataLossError" => "DATA_LOSS",
        _ => "INVALID_ARGUMENT",
    };
    let core = expected["error"]["message_core"].as_str().unwrap();
    let error = &last["error"];
    if error["code"] != code || !error["message"].as_str().unwrap_or_default().contains(core) {
        return Err(format!("got {error}, expected {code} with {core:?}"));
    }
    Ok(())
}

#[test]
fn golden_csv_dataset_files_stream_as_tensorflow_reads_them() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let cases = golden_cases(&["csv_dataset"]);
    for case in &cases {
        let id = case["id"].as_str().unwrap();
        let inputs = &case["inputs"];
        let compression = match inputs["compression_type"].as_str().unwrap() {
            "" => "NONE",
            other => other,
        };
        let spec = json!({"source": {"files": inputs["files"], "format": "CSV", "compression": compression,
                                     "header": inputs["header"]},
                          "decoder": csv_decoder(inputs, true)});
        let (lines, ok) = read_jsonl(&server, dir.path(), id, &spec);
        let expected = &case["expected"];
        let rows = expected["rows"].as_array().unwrap();
        let elements: Vec<&Value> = lines.iter().filter(|l| l.get("seq").is_some()).collect();
        let verdict = (|| {
            if elements.len() != rows.len() {
                return Err(format!("{} rows, expected {}", elements.len(), rows.len()));
            }
            for (element, row) in elements.iter().zip(rows) {
                for (i, want) in row.as_array().unwrap().iter().enumerate() {
                    check_json_tensor(want, &element["features"][format!("c{i}")]).map_err(|e| format!("c{i}: {e}"))?;
                }
            }
            match expected["status"].as_str().unwrap() {
                "ok" if ok => Ok(()),
                "error" if !ok => check_error(expected, lines.last().unwrap()),
                status => Err(format!("expected {status}, got {:?}", lines.last())),
            }
        })();
        if let Err(why) = verdict {
            failures.push(format!("{id}: {why}"));
        }
    }
    println!("csv_dataset cases end to end: {} of {} passed", cases.len() - failures.len(), cases.len());
    assert!(failures.is_empty(), "failing cases:\n{}", failures.join("\n"));
}

#[test]
fn csv_headers_name_the_columns_and_must_agree() {
    let root = tempfile::tempdir().unwrap();
    write_file(root.path(), "a.csv", b"id,price,name\n1,2.5,x\n");
    write_file(root.path(), "b.csv", b"id,price,name\n2,3.5,y\n");
    write_file(root.path(), "other.csv", b"id,cost,name\n3,4.5,z\n");
    let server = ServerProcess::start(&[root.path()]);
    let columns = json!([{"dtype": "INT64"}, {"dtype": "FLOAT32", "name": "p"}, {"dtype": "STRING"}]);
    let spec = json!({"source": {"files": ["a.csv", "b.csv"], "format": "CSV", "header": true},
                      "decoder": {"csv": {"columns": columns}}, "pipeline": {"batchSize": 2}});
    let (lines, ok) = read_jsonl(&server, root.path(), "agree", &spec);
    assert!(ok, "{lines:?}");
    let features = lines[0]["features"].as_object().unwrap();
    assert_eq!(features.keys().collect::<Vec<_>>(), ["id", "name", "p"], "header names, the spec's name wins");
    assert_eq!(features["id"]["values"], json!([1, 2]));
    assert_eq!(lines[0]["keys"], json!(["a.csv:2", "b.csv:2"]));

    let spec = json!({"source": {"files": ["a.csv", "other.csv"], "format": "CSV", "header": true},
                      "decoder": {"csv": {"columns": columns}}});
    let (lines, ok) = read_jsonl(&server, root.path(), "disagree", &spec);
    assert!(!ok);
    assert_eq!(lines.last().unwrap()["error"]["code"], "INVALID_ARGUMENT");

    // The header names the first column `id`, the spec names the third `id` too.
    let named_twice = json!([{"dtype": "INT64"}, {"dtype": "FLOAT32"}, {"dtype": "STRING", "name": "id"}]);
    let spec = json!({"source": {"files": ["a.csv"], "format": "CSV", "header": true},
                      "decoder": {"csv": {"columns": named_twice}}});
    let (lines, ok) = read_jsonl(&server, root.path(), "twice", &spec);
    assert!(!ok);
    let error = &lines.last().unwrap()["error"];
    assert_eq!(error["code"], "INVALID_ARGUMENT");
    assert!(error["message"].as_str().unwrap().contains("CSV column names repeat: id,price,id"), "{error}");

    let spec = json!({"source": {"files": ["a.csv"], "format": "CSV"}});
    let (lines, ok) = read_jsonl(&server, root.path(), "no_decoder", &spec);
    assert!(!ok);
    assert!(lines[0]["error"]["message"].as_str().unwrap().contains("decoder.csv"));
}

#[test]
fn golden_decode_csv_lines_decode_as_tensorflow_decodes_them() {
    let root = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(&[root.path()]);
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in &golden_cases(&["decode_csv"]) {
        let id = case["id"].as_str().unwrap();
        let inputs = &case["inputs"];
        let records: Vec<&str> = inputs["records"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
        // A text file carries a 1-D batch of lines without line breaks of their own.
        let one_d = inputs["records_shape"].as_array().unwrap().len() == 1;
        if !one_d || records.is_empty() || records.iter().any(|r| r.contains(['\n', '\r'])) {
            continue;
        }
        ran += 1;
        let text: String = records.iter().map(|r| format!("{r}\n")).collect();
        write_file(root.path(), &format!("{id}.txt"), text.as_bytes());
        let spec = json!({"source": {"files": [format!("{id}.txt")], "format": "TEXT_LINE"},
                          "decoder": csv_decoder(inputs, false), "pipeline": {"batchSize": records.len()}});
        let (lines, ok) = read_jsonl(&server, root.path(), id, &spec);
        let expected = &case["expected"];
        let verdict = match expected["status"].as_str().unwrap() {
            "ok" if ok && lines.len() == 2 => {
                expected["output"].as_array().unwrap().iter().enumerate().try_for_each(|(i, want)| {
                    check_json_tensor(want, &lines[0]["features"][format!("col{i}")])
                        .map_err(|e| format!("col{i}: {e}"))
                })
            }
            "error" if !ok => check_error(expected, lines.last().unwrap()),
            status => Err(format!("expected {status}, got {lines:?}")),
        };
        if let Err(why) = verdict {
            failures.push(format!("{id}: {why}"));
        }
    }
    println!("decode_csv cases end to end: {} of {ran} passed", ran - failures.len());
    assert!(failures.is_empty(), "failing cases:\n{}", failures.join("\n"));
    assert!(ran >= 40, "only {ran} cases ran");
}
