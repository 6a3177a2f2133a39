//! Every `decode_raw` case of the TensorFlow golden vectors, compared exactly.

mod golden;

use bytes::Bytes;
use golden::{b64, cases, check_dense, dtype_of, tf_class_code};
use readerd_server::decode::raw::{RawConfig, decode_raw};
use serde_json::Value;

fn run(case: &Value) -> Result<(), String> {
    let inputs = &case["inputs"];
    let records: Vec<Bytes> = inputs["bytes"].as_array().unwrap().iter().map(|b| Bytes::from(b64(b))).collect();
    let shape: Vec<usize> =
        inputs["input_shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
    let fixed_length = inputs["fixed_length"].as_u64().map(|f| f as usize);
    let result = RawConfig::new(
        dtype_of(inputs["out_type"].as_str().unwrap()),
        inputs["little_endian"].as_bool().unwrap(),
        fixed_length,
    )
    .and_then(|config| decode_raw(&config, &records, &shape));
    let expected = &case["expected"];
    match (expected["status"].as_str().unwrap(), result) {
        ("ok", Ok(tensor)) => check_dense(&expected["output"], &tensor),
        ("error", Err(err)) => {
            assert_eq!(tf_class_code(expected["error"]["class"].as_str().unwrap()), tonic::Code::InvalidArgument);
            let core = expected["error"]["message_core"].as_str().unwrap();
            if err.message.contains(core) { Ok(()) } else { Err(format!("message {:?} lacks {core:?}", err.message)) }
        }
        (status, result) => Err(format!("expected {status}, got {result:?}")),
    }
}

#[test]
fn golden_decode_raw_cases_match_tensorflow() {
    let all = cases(&["decode_raw"]);
    let failures: Vec<String> = all
        .iter()
        .filter_map(|case| run(case).err().map(|why| format!("{}: {why}", case["id"].as_str().unwrap())))
        .collect();
    println!("decode_raw: {} passed, {} failed", all.len() - failures.len(), failures.len());
    assert!(failures.is_empty(), "failing cases:\n{}", failures.join("\n"));
    assert_eq!(all.len(), 28);
}
