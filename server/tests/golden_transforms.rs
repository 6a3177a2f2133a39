//! TensorFlow 2.21's outputs for the transforms (tests/golden, recorded by
//! `tests/golden/record_transforms.py`): `decodeImage` on JPEG, PNG, GIF and BMP files
//! (pixels bit for bit), every deterministic operation on several shapes and dtypes
//! (integers exact, floats within the case's tolerance), TensorFlow's messages for the
//! inputs it refuses, and two readers end to end (CIFAR-10's eval path, MNIST's).

mod golden;

use std::io::Read;

use golden::{check_dense, dtype_of, golden_dir, golden_float};
use readerd_proto::v1 as pb;
use readerd_server::decode::{DType, Dense, Tensor, Values};
use readerd_server::transform::Transforms;
use readerd_server::transform::values::numbers;
use serde_json::Value;

/// A golden tensor, its values inline or in a file (`"file"`: an encoded image's bytes
/// for a string scalar, else gzip'd little-endian elements).
fn tensor_of(value: &Value) -> Dense {
    let dtype = dtype_of(value["dtype"].as_str().unwrap());
    let shape: Vec<usize> = value["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
    if let Some(file) = value["file"].as_str() {
        let bytes = std::fs::read(golden_dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        if dtype == DType::String {
            return Dense::strings(shape, vec![bytes.into()]);
        }
        let mut raw = Vec::new();
        if file.ends_with(".gz") {
            flate2::read::GzDecoder::new(&bytes[..]).read_to_end(&mut raw).unwrap();
        } else {
            raw = bytes;
        }
        return Dense { dtype, shape, values: Values::Bytes(raw.into()) };
    }
    let values = value["values"].as_array().unwrap();
    if dtype == DType::String {
        return Dense::strings(shape, values.iter().map(|v| golden::b64(v).into()).collect());
    }
    let mut raw = Vec::new();
    for v in values {
        match dtype {
            DType::Uint8 => raw.push(v.as_u64().unwrap() as u8),
            DType::Int8 => raw.push(v.as_i64().unwrap() as i8 as u8),
            DType::Bool => raw.push(u8::from(v.as_bool().unwrap())),
            DType::Int16 => raw.extend((v.as_i64().unwrap() as i16).to_le_bytes()),
            DType::Uint16 => raw.extend((v.as_u64().unwrap() as u16).to_le_bytes()),
            DType::Int32 => raw.extend((v.as_i64().unwrap() as i32).to_le_bytes()),
            DType::Int64 => raw.extend(v.as_i64().unwrap().to_le_bytes()),
            DType::Float16 => raw.extend(half::f16::from_f64(golden_float(v)).to_le_bytes()),
            DType::Bfloat16 => raw.extend(half::bf16::from_f64(golden_float(v)).to_le_bytes()),
            DType::Float32 => raw.extend((golden_float(v) as f32).to_le_bytes()),
            DType::Float64 => raw.extend(golden_float(v).to_le_bytes()),
            other => panic!("no golden input of {other:?}"),
        }
    }
    Dense { dtype, shape, values: Values::Bytes(raw.into()) }
}

/// Compares `actual` with the golden tensor: integers exactly, floats within `rtol`/`atol`.
fn check(expected: &Value, actual: &Dense, rtol: f64, atol: f64) -> Result<(), String> {
    let is_float = matches!(actual.dtype, DType::Float16 | DType::Bfloat16 | DType::Float32 | DType::Float64);
    if expected.get("values").is_some() && (!is_float || (rtol == 0.0 && atol == 0.0)) {
        return check_dense(expected, actual);
    }
    let want = tensor_of(expected);
    if want.dtype != actual.dtype || want.shape != actual.shape {
        return Err(format!("{:?} {:?}, expected {:?} {:?}", actual.dtype, actual.shape, want.dtype, want.shape));
    }
    if !is_float {
        if want.values != actual.values {
            let (Values::Bytes(a), Values::Bytes(w)) = (&actual.values, &want.values) else {
                return Err("strings differ".into());
            };
            let first = a.iter().zip(w.iter()).position(|(a, w)| a != w).unwrap_or(0);
            let differing = a.iter().zip(w.iter()).filter(|(a, w)| a != w).count();
            return Err(format!(
                "{differing} of {} bytes differ, the first at {first}: {} vs {}",
                a.len(),
                a[first],
                w[first]
            ));
        }
        return Ok(());
    }
    let (got, want) = (numbers(actual).unwrap(), numbers(&want).unwrap());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let (g, w) = (g.as_f64(), w.as_f64());
        let close = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= atol + rtol * w.abs();
        if !close {
            return Err(format!("value {i}: {g}, expected {w} (rtol {rtol}, atol {atol})"));
        }
    }
    Ok(())
}

fn transforms_of(case: &Value) -> Result<Transforms, String> {
    let list: Vec<pb::Transform> =
        serde_json::from_value(case["inputs"]["transforms"].clone()).map_err(|e| e.to_string())?;
    readerd_server::spec::transforms::transforms_of(&list, 0)
}

/// Runs one case; `Err` says how it differs from TensorFlow.
fn run_case(case: &Value) -> Result<(), String> {
    let expected = &case["expected"];
    let tolerance = &case["tolerance"];
    let (rtol, atol) = (tolerance["rtol"].as_f64().unwrap_or(0.0), tolerance["atol"].as_f64().unwrap_or(0.0));
    let result = transforms_of(case).and_then(|transforms| {
        let features = case["inputs"]["features"].as_object().unwrap();
        let features = features.iter().map(|(name, value)| (name.clone(), Tensor::Dense(tensor_of(value)))).collect();
        transforms.apply(features, 1, "golden:0")
    });
    match (expected["status"].as_str().unwrap(), result) {
        ("ok", Ok(features)) => {
            let want = expected["features"].as_object().unwrap();
            if want.len() != features.len() {
                let names: Vec<&String> = features.iter().map(|(n, _)| n).collect();
                return Err(format!("features {names:?}, expected {:?}", want.keys().collect::<Vec<_>>()));
            }
            for (name, tensor) in &features {
                let Tensor::Dense(dense) = tensor else { return Err(format!("{name} is not dense")) };
                let want = want.get(name).ok_or_else(|| format!("unexpected feature {name}"))?;
                check(want, dense, rtol, atol).map_err(|e| format!("{name}: {e}"))?;
            }
            Ok(())
        }
        ("ok", Err(message)) => Err(format!("failed where TensorFlow did not: {message}")),
        ("error", Ok(_)) => Err(format!("succeeded where TensorFlow failed: {}", expected["error"]["message_core"])),
        ("error", Err(message)) => {
            let mut core = expected["error"]["message_core"].as_str().unwrap();
            // An eager `Assert` (random_crop's) words its data as Python prints it: ours
            // must hold the assertion's own message.
            if core.starts_with("Expected 'tf.Tensor(False") {
                core = core.split("b'").nth(1).and_then(|rest| rest.split('\'').next()).unwrap().trim_end();
                return if message.contains(core) {
                    Ok(())
                } else {
                    Err(format!("message {message:?} lacks {core:?}"))
                };
            }
            // Ours is prefixed with the step that failed: `transforms[i] (op) of feature f: `.
            let ours = message.split_once(": ").map_or(message.as_str(), |(_, rest)| rest);
            if ours == core || message == core || core.contains(ours) {
                Ok(())
            } else {
                Err(format!("message {message:?}, TensorFlow's {core:?}"))
            }
        }
        (status, _) => Err(format!("unknown status {status}")),
    }
}

fn run_category(category: &str) {
    let cases = golden::cases(&[category]);
    assert!(!cases.is_empty(), "no {category} cases");
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| run_case(case).err().map(|e| format!("{}: {e}", case["id"].as_str().unwrap())))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} {category} cases differ from TensorFlow:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn decode_image_gives_tensorflows_pixels() {
    run_category("image_decode");
}

#[test]
fn deterministic_transforms_give_tensorflows_outputs() {
    run_category("transform");
}

#[test]
fn the_cifar_and_mnist_readers_give_tensorflows_elements() {
    let cases = golden::cases(&["transform_pipeline"]);
    assert!(!cases.is_empty());
    for case in cases {
        let id = case["id"].as_str().unwrap();
        let inputs = &case["inputs"];
        let transforms = transforms_of(&case).unwrap();
        let record_bytes = inputs["record_bytes"].as_u64().unwrap() as usize;
        let (rtol, atol) =
            (case["tolerance"]["rtol"].as_f64().unwrap_or(0.0), case["tolerance"]["atol"].as_f64().unwrap_or(0.0));
        let mut elements = Vec::new();
        for file in inputs["files"].as_array().unwrap() {
            let file = file.as_str().unwrap();
            let bytes = std::fs::read(golden_dir().join(file)).unwrap();
            for (n, record) in bytes.chunks_exact(record_bytes).enumerate() {
                let value = Dense {
                    dtype: DType::Uint8,
                    shape: vec![record_bytes],
                    values: Values::Bytes(record.to_vec().into()),
                };
                let key = format!("{file}:{n}");
                elements.push((
                    key.clone(),
                    transforms.apply(vec![("value".into(), Tensor::Dense(value))], 1, &key).unwrap(),
                ));
            }
        }
        let want = case["expected"]["elements"].as_array().unwrap();
        assert_eq!(elements.len(), want.len(), "{id}");
        for ((key, features), want) in elements.iter().zip(want) {
            assert_eq!(want["key"], key.as_str(), "{id}");
            let want = want["features"].as_object().unwrap();
            assert_eq!(want.len(), features.len(), "{id} {key}");
            for (name, tensor) in features {
                let Tensor::Dense(dense) = tensor else { panic!("{id} {key} {name}") };
                check(&want[name], dense, rtol, atol).unwrap_or_else(|e| panic!("{id} {key} {name}: {e}"));
            }
        }
    }
}

#[test]
fn decode_and_crop_gives_tensorflows_pixels_of_the_window() {
    let cases = golden::cases(&["decode_and_crop"]);
    assert!(cases.len() > 100, "the decode_and_crop cases (tests/golden/record_decode_and_crop.py)");
    let mut failures = Vec::new();
    for case in &cases {
        let inputs = &case["inputs"];
        let contents = std::fs::read(golden_dir().join(inputs["file"].as_str().unwrap())).unwrap();
        let window: Vec<usize> =
            inputs["crop_window"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        let channels = inputs["channels"].as_u64().unwrap() as u32;
        let got = readerd_server::transform::image_decode::decode_and_crop_jpeg(
            &contents,
            channels,
            (window[0], window[1], window[2], window[3]),
            1 << 30,
        );
        let result =
            got.map_err(|e| e.to_string()).and_then(|dense| check(&case["expected"]["image"], &dense, 0.0, 0.0));
        if let Err(err) = result {
            failures.push(format!("{}: {err}", case["id"].as_str().unwrap()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} differ from TensorFlow's decode_and_crop_jpeg:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
