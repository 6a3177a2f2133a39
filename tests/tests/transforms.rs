//! Transforms through a real server: TensorFlow's pixels and the CIFAR-10 eval path over
//! the wire; random transforms the same per element at any parallelism and batch size,
//! anew each epoch, and exact across a resume after SIGKILL; undecodable images refused
//! naming the record and the feature, or skipped and counted; a batch of differing shapes
//! refused naming the feature and both shapes.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use prost::Message;
use readerd_proto::tensorflow as tf;
use readerd_tests::{ServerProcess, golden_dir, golden_float, jsonl, readerctl, write_file, write_spec};
use serde_json::{Value, json};

/// Three files of CIFAR-10's binary format: 1 label byte, then 3 planes of 32×32 bytes.
fn write_cifar(root: &Path, records_per_file: usize) {
    let mut state = 12345u32;
    for f in 0..3 {
        let mut bytes = Vec::new();
        for r in 0..records_per_file {
            bytes.push(((f * records_per_file + r) % 10) as u8);
            for p in 0..3072u32 {
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                // Smooth gradients with some noise: an image, not white noise.
                bytes.push(((p % 32) * 4 + (p / 96) + (state >> 28)) as u8);
            }
        }
        write_file(root, &format!("cifar-{f}.bin"), &bytes);
    }
}

/// The CIFAR-10 reader's training distortions.
fn cifar_spec(pipeline: Value) -> Value {
    json!({
        "source": {"files": ["cifar-*.bin"], "format": "FIXED_LENGTH", "recordBytes": 3073},
        "decoder": {"raw": {"outType": "UINT8"}},
        "transforms": [
            {"slice": {"feature": "value", "begin": [0], "size": [1], "output": "label"}},
            {"slice": {"feature": "value", "begin": [1], "size": [3072], "output": "image"}},
            {"reshape": {"feature": "image", "shape": [3, 32, 32]}},
            {"transpose": {"feature": "image", "perm": [1, 2, 0]}},
            {"cast": {"feature": "image", "dtype": "FLOAT32"}},
            {"randomCrop": {"feature": "image", "size": [24, 24, 3]}},
            {"randomFlipLeftRight": {"feature": "image"}},
            {"randomBrightness": {"feature": "image", "maxDelta": 63}},
            {"randomContrast": {"feature": "image", "lower": 0.2, "upper": 1.8}},
            {"perImageStandardization": {"feature": "image"}},
            {"drop": {"features": ["value"]}}
        ],
        "pipeline": pipeline
    })
}

/// Each element's features, row by row, by `(epoch pass, key)`: a batch's tensors cut
/// into their records (`batched`), so that runs at other batch sizes compare.
fn rows_by_key(lines: &[Value], batched: bool) -> BTreeMap<(usize, String), BTreeMap<String, Value>> {
    let mut rows = BTreeMap::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for line in lines.iter().filter(|l| l.get("seq").is_some()) {
        let keys = line["keys"].as_array().unwrap();
        for (i, key) in keys.iter().enumerate() {
            let key = key.as_str().unwrap().to_owned();
            let mut features = BTreeMap::new();
            for (name, tensor) in line["features"].as_object().unwrap() {
                let shape: Vec<usize> =
                    tensor["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
                let values = tensor["values"].as_array().unwrap();
                let (row_shape, row) = if batched {
                    let per: usize = shape[1..].iter().product();
                    (shape[1..].to_vec(), values[i * per..(i + 1) * per].to_vec())
                } else {
                    (shape, values.clone())
                };
                features.insert(name.clone(), json!({"shape": row_shape, "values": row}));
            }
            let pass = seen.entry(key.clone()).or_default();
            rows.insert((*pass, key), features);
            *pass += 1;
        }
    }
    rows
}

fn read(addr: &str, spec: &str, extra: &[&str]) -> Vec<Value> {
    let out = readerctl(addr, &[&["read", "--spec", spec, "--output", "jsonl"], extra].concat());
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    jsonl(&out.stdout)
}

#[test]
fn random_transforms_give_an_element_the_same_output_at_any_parallelism_and_batch_size_and_anew_each_epoch() {
    let data = tempfile::tempdir().unwrap();
    write_cifar(data.path(), 12);
    let server = ServerProcess::start(&[data.path()]);
    let dir = tempfile::tempdir().unwrap();
    let run = |pipeline: Value, batched: bool| {
        let spec = write_spec(&dir, &cifar_spec(pipeline));
        rows_by_key(&read(&server.addr, &spec, &[]), batched)
    };
    let narrow = run(json!({"seed": 7, "numEpochs": 2, "cycleLength": 1, "prefetch": 1, "batchSize": 4}), true);
    let wide = run(
        json!({"seed": 7, "numEpochs": 2, "shuffleFiles": true, "cycleLength": 3, "prefetch": 16, "shuffle": {"bufferSize": 9}, "batchSize": 5}),
        true,
    );
    let single = run(json!({"seed": 7, "numEpochs": 2, "cycleLength": 2}), false);
    assert_eq!(narrow.len(), 72, "36 records, 2 epochs");
    assert_eq!(narrow, wide, "the same output per element, whatever the order, parallelism and batching");
    assert_eq!(narrow, single, "and unbatched");
    let first = &narrow[&(0, "cifar-0.bin:0".to_owned())];
    assert_eq!(first["image"]["shape"], json!([24, 24, 3]));
    assert_eq!(first["label"]["shape"], json!([1]));
    let anew = (0..36).filter(|i| {
        let key = format!("cifar-{}.bin:{}", i / 12, i % 12);
        narrow[&(0, key.clone())]["image"] != narrow[&(1, key)]["image"]
    });
    assert_eq!(anew.count(), 36, "each epoch draws anew");
    let other_seed = run(json!({"seed": 8, "numEpochs": 2, "cycleLength": 1, "batchSize": 4}), true);
    assert_ne!(other_seed[&(0, "cifar-0.bin:0".to_owned())]["image"], first["image"], "the seed drives the draws");
}

#[test]
fn resume_after_sigkill_with_random_transforms_is_exact() {
    let data = tempfile::tempdir().unwrap();
    write_cifar(data.path(), 10);
    let state = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(
        &dir,
        &cifar_spec(
            json!({"seed": 3, "numEpochs": 2, "shuffleFiles": true, "cycleLength": 2, "shuffle": {"bufferSize": 7}, "batchSize": 4}),
        ),
    );
    let server = ServerProcess::start_in(state.path(), &[data.path()], &[]);
    let whole: Vec<Value> = read(&server.addr, &spec, &[]).into_iter().filter(|l| l.get("seq").is_some()).collect();
    assert_eq!(whole.len(), 16, "30 records an epoch in batches of 4 (the last of 2), two epochs");
    let head = read(&server.addr, &spec, &["--max-batches", "6", "--checkpoint-every", "3"]);
    let token = head.last().unwrap()["checkpoint"].as_str().unwrap().to_owned();
    server.kill();
    let server = ServerProcess::start_in(state.path(), &[data.path()], &[]);
    let tail = readerctl(&server.addr, &["read", "--resume", &token, "--output", "jsonl"]);
    assert!(tail.status.success(), "{}", String::from_utf8_lossy(&tail.stderr));
    let tail = jsonl(&tail.stdout);
    let resumed: Vec<&Value> = head.iter().chain(&tail).filter(|l| l.get("seq").is_some()).collect();
    assert_eq!(resumed.len(), whole.len());
    for (got, want) in resumed.iter().zip(&whole) {
        assert_eq!(got["keys"], want["keys"]);
        assert_eq!(got["features"], want["features"], "element {} after the resume", want["seq"]);
    }
}

/// A TFRecord of Examples, each an encoded image under `image/encoded` and a label.
fn write_images(root: &Path, name: &str, images: &[Vec<u8>]) {
    let records: Vec<Vec<u8>> = images
        .iter()
        .enumerate()
        .map(|(i, image)| {
            let bytes = tf::Feature {
                kind: Some(tf::feature::Kind::BytesList(tf::BytesList { value: vec![image.clone().into()] })),
            };
            let label =
                tf::Feature { kind: Some(tf::feature::Kind::Int64List(tf::Int64List { value: vec![i as i64] })) };
            let features = BTreeMap::from([("image/encoded".to_owned(), bytes), ("label".to_owned(), label)]);
            tf::Example { features: Some(tf::Features { feature: features }) }.encode_to_vec()
        })
        .collect();
    readerd_tests::write_tfrecord(&root.join(name), &records);
}

fn image_spec(transforms: Value, pipeline: Value) -> Value {
    json!({
        "source": {"files": ["images.tfrecord"], "format": "TFRECORD"},
        "decoder": {"example": {"features": {
            "image/encoded": {"fixedLen": {"dtype": "STRING", "shape": []}},
            "label": {"fixedLen": {"dtype": "INT64", "shape": []}}}}},
        "transforms": transforms,
        "pipeline": pipeline
    })
}

fn golden_file(name: &str) -> Vec<u8> {
    std::fs::read(golden_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A golden case's expected pixels (gzip'd little-endian bytes) and shape.
fn golden_pixels(case: &str) -> (Vec<u8>, Value) {
    let case = readerd_tests::golden_case(case);
    let image = &case["expected"]["features"]["image"];
    let mut pixels = Vec::new();
    match image["file"].as_str() {
        Some(file) => {
            flate2::read::GzDecoder::new(&golden_file(file)[..]).read_to_end(&mut pixels).unwrap();
        }
        None => pixels = image["values"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u8).collect(),
    }
    (pixels, image["shape"].clone())
}

#[test]
fn decoded_images_arrive_with_tensorflows_pixels() {
    let data = tempfile::tempdir().unwrap();
    let cases = [
        "img_jpeg_420_q90_48x64_c0",
        "img_jpeg_420_prog_q85_48x64_c0",
        "img_png_rgb8_33x17_c0",
        "img_gif_anim3_48x64_c0",
    ];
    let images: Vec<Vec<u8>> = cases
        .iter()
        .map(|case| {
            let case = readerd_tests::golden_case(case);
            golden_file(case["inputs"]["features"]["image"]["file"].as_str().unwrap())
        })
        .collect();
    write_images(data.path(), "images.tfrecord", &images);
    let server = ServerProcess::start(&[data.path()]);
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(
        &dir,
        &image_spec(
            json!([{"decodeImage": {"feature": "image/encoded", "channels": 0, "output": "image"}},
                                                   {"drop": {"features": ["image/encoded"]}}]),
            json!({}),
        ),
    );
    let lines = read(&server.addr, &spec, &[]);
    let elements: Vec<&Value> = lines.iter().filter(|l| l.get("seq").is_some()).collect();
    assert_eq!(elements.len(), cases.len());
    for (element, case) in elements.iter().zip(cases) {
        let (pixels, shape) = golden_pixels(case);
        let image = &element["features"]["image"];
        assert_eq!(image["dtype"], "uint8", "{case}");
        assert_eq!(image["shape"], shape, "{case}");
        let got: Vec<u8> = image["values"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u8).collect();
        assert!(got == pixels, "{case}: the pixels differ from TensorFlow's");
        let mut names: Vec<&String> = element["features"].as_object().unwrap().keys().collect();
        names.sort();
        assert_eq!(names, ["image", "label"], "image/encoded dropped");
    }
}

#[test]
fn the_cifar_eval_path_gives_tensorflows_elements_end_to_end() {
    let case = readerd_tests::golden_case("xfp_cifar10_eval");
    let data = tempfile::tempdir().unwrap();
    let file = case["inputs"]["files"][0].as_str().unwrap();
    write_file(data.path(), "cifar.bin", &golden_file(file));
    let server = ServerProcess::start(&[data.path()]);
    let dir = tempfile::tempdir().unwrap();
    let spec = json!({
        "source": {"files": ["cifar.bin"], "format": "FIXED_LENGTH", "recordBytes": case["inputs"]["record_bytes"]},
        "decoder": {"raw": {"outType": "UINT8"}},
        "transforms": case["inputs"]["transforms"],
        "pipeline": {"batchSize": 5}
    });
    let spec = write_spec(&dir, &spec);
    let rows = rows_by_key(&read(&server.addr, &spec, &[]), true);
    let want = case["expected"]["elements"].as_array().unwrap();
    assert_eq!(rows.len(), want.len());
    let (rtol, atol) = (case["tolerance"]["rtol"].as_f64().unwrap(), case["tolerance"]["atol"].as_f64().unwrap());
    for (i, want) in want.iter().enumerate() {
        let got = &rows[&(0, format!("cifar.bin:{i}"))];
        for (name, tensor) in want["features"].as_object().unwrap() {
            assert_eq!(got[name]["shape"], tensor["shape"], "record {i} {name}");
            let pairs = got[name]["values"].as_array().unwrap().iter().zip(tensor["values"].as_array().unwrap());
            for (g, w) in pairs {
                let (g, w) = (golden_float(g), golden_float(w));
                assert!((g - w).abs() <= atol + rtol * w.abs(), "record {i} {name}: {g} vs TensorFlow's {w}");
            }
        }
    }
}

#[test]
fn an_undecodable_image_is_invalid_argument_naming_the_record_and_feature_or_skipped_and_counted() {
    let data = tempfile::tempdir().unwrap();
    let jpeg = golden_file(
        readerd_tests::golden_case("img_jpeg_420_q90_48x64_c0")["inputs"]["features"]["image"]["file"]
            .as_str()
            .unwrap(),
    );
    let mut broken = jpeg.clone();
    broken.truncate(jpeg.len() / 2);
    write_images(data.path(), "images.tfrecord", &[jpeg.clone(), jpeg.clone(), broken, jpeg.clone(), jpeg]);
    let server = ServerProcess::start(&[data.path()]);
    let dir = tempfile::tempdir().unwrap();
    let transforms = json!([{"decodeImage": {"feature": "image/encoded", "channels": 3, "output": "image"}},
                            {"resize": {"feature": "image", "size": [16, 16]}}]);
    let spec = write_spec(&dir, &image_spec(transforms.clone(), json!({"batchSize": 2})));
    let out = readerctl(&server.addr, &["read", "--spec", &spec, "--output", "jsonl"]);
    assert!(!out.status.success());
    let lines = jsonl(&out.stdout);
    let error = &lines.last().unwrap()["error"];
    assert_eq!(error["code"], "INVALID_ARGUMENT");
    let message = error["message"].as_str().unwrap();
    for part in ["decodeImage", "image/encoded", "jpeg::Uncompress failed", "images.tfrecord:"] {
        assert!(message.contains(part), "{message} lacks {part}");
    }
    assert_eq!(lines.iter().filter(|l| l.get("seq").is_some()).count(), 1, "the batch before the bad record arrives");

    // onError: SKIP: the bad record is dropped and counted, the others all arrive.
    let spec = write_spec(&dir, &image_spec(transforms, json!({"batchSize": 2, "onError": "SKIP"})));
    let out = readerctl(
        &server.addr,
        &["read", "--container", "c", "--shared-name", "skip", "--spec", &spec, "--output", "jsonl"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let rows = rows_by_key(&jsonl(&out.stdout), true);
    assert_eq!(rows.len(), 4);
    assert!(rows.values().all(|row| row["image"]["shape"] == json!([16, 16, 3])));
    let stats = readerctl(&server.addr, &["stats", "--container", "c", "--shared-name", "skip"]);
    let stats = String::from_utf8(stats.stdout).unwrap();
    assert!(stats.contains("records skipped 1\n"), "{stats}");
}

#[test]
fn a_batch_of_images_of_differing_shapes_is_invalid_argument_naming_the_feature_and_both_shapes() {
    let data = tempfile::tempdir().unwrap();
    let file = |case: &str| {
        golden_file(readerd_tests::golden_case(case)["inputs"]["features"]["image"]["file"].as_str().unwrap())
    };
    write_images(data.path(), "images.tfrecord", &[file("img_jpeg_420_q90_48x64_c0"), file("img_png_rgb8_33x17_c0")]);
    let server = ServerProcess::start(&[data.path()]);
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(
        &dir,
        &image_spec(
            json!([{"decodeImage": {"feature": "image/encoded", "channels": 3, "output": "image"}}]),
            json!({"batchSize": 2}),
        ),
    );
    let out = readerctl(&server.addr, &["read", "--spec", &spec, "--output", "jsonl"]);
    let lines = jsonl(&out.stdout);
    let error = &lines.last().unwrap()["error"];
    assert_eq!(error["code"], "INVALID_ARGUMENT");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("Cannot batch tensors with different shapes in feature image. First element had shape [48, 64, 3] and element 1 had shape [33, 17, 3]"),
        "{message}"
    );
}

#[test]
fn a_transform_that_does_not_fit_the_decoder_is_refused_before_reading() {
    let data = tempfile::tempdir().unwrap();
    write_cifar(data.path(), 1);
    let server = ServerProcess::start(&[data.path()]);
    let dir = tempfile::tempdir().unwrap();
    for (transforms, words) in [
        (json!([{"resize": {"feature": "missing", "size": [2, 2]}}]), "no such feature"),
        (
            json!([{"resize": {"feature": "value", "size": [0, 2]}}]),
            "transforms[0].resize.size: output dimensions must be positive",
        ),
        (json!([{"cast": {"feature": "value"}}]), "transforms[0].cast.dtype is required"),
    ] {
        let mut spec = cifar_spec(json!({}));
        spec["transforms"] = transforms;
        let out = readerctl(&server.addr, &["read", "--spec", &write_spec(&dir, &spec), "--output", "jsonl"]);
        let lines = jsonl(&out.stdout);
        let error = &lines.last().unwrap()["error"];
        assert_eq!(error["code"], "INVALID_ARGUMENT", "{words}");
        assert!(error["message"].as_str().unwrap().contains(words), "{error}");
    }
}

#[test]
fn an_image_over_the_pixel_limit_is_refused_from_its_header() {
    let data = tempfile::tempdir().unwrap();
    let case = readerd_tests::golden_case("img_jpeg_420_q90_48x64_c0");
    write_images(
        data.path(),
        "images.tfrecord",
        &[golden_file(case["inputs"]["features"]["image"]["file"].as_str().unwrap())],
    );
    let server = ServerProcess::start_with(&[data.path()], &["--max-image-pixels", "3000"]);
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(
        &dir,
        &image_spec(json!([{"decodeImage": {"feature": "image/encoded", "output": "image"}}]), json!({})),
    );
    let lines = jsonl(&readerctl(&server.addr, &["read", "--spec", &spec, "--output", "jsonl"]).stdout);
    let error = &lines.last().unwrap()["error"];
    assert_eq!(error["code"], "INVALID_ARGUMENT");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("image of 64x48 pixels is larger than the server's limit of 3000 pixels"), "{message}");
    assert!(message.contains("images.tfrecord:0"), "{message}");
}

/// Each key's rows (a batch cut into its records), sorted: what a key got over all its
/// epochs, whichever consumer printed which.
fn rows_of_each_key(lines: &[Value]) -> BTreeMap<String, Vec<String>> {
    let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for ((_, key), features) in rows_by_key(lines, true) {
        rows.entry(key).or_default().push(serde_json::to_string(&features).unwrap());
    }
    for list in rows.values_mut() {
        list.sort();
    }
    rows
}

/// The keys' rows of several outputs put together (each output's passes apart).
fn merged_rows(outputs: &[Vec<Value>]) -> BTreeMap<String, Vec<String>> {
    let mut all: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for lines in outputs {
        for (key, rows) in rows_of_each_key(lines) {
            all.entry(key).or_default().extend(rows);
        }
    }
    all.values_mut().for_each(|rows| rows.sort());
    all
}

#[test]
fn three_replicas_with_random_transforms_deliver_every_element_once_as_a_single_server_makes_it() {
    let Some(db) = readerd_tests::postgres::Database::new() else { return };
    let data = tempfile::tempdir().unwrap();
    write_cifar(data.path(), 10);
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(
        &dir,
        &cifar_spec(
            json!({"seed": 5, "numEpochs": 2, "shuffleFiles": true, "cycleLength": 2, "shuffle": {"bufferSize": 5}, "batchSize": 3}),
        ),
    );
    let single = ServerProcess::start(&[data.path()]);
    let want = rows_of_each_key(&read(&single.addr, &spec, &[]));
    assert_eq!(want.len(), 30);
    assert!(want.values().all(|rows| rows.len() == 2 && rows[0] != rows[1]), "two epochs, drawn anew");
    drop(single);

    let url = db.url();
    let replicas: Vec<(ServerProcess, tempfile::TempDir)> = (0..3)
        .map(|_| {
            let state = tempfile::tempdir().unwrap();
            (ServerProcess::start_in(state.path(), &[data.path()], &["--state-url", &url, "--lease-time", "2s"]), state)
        })
        .collect();
    let addrs: Vec<String> = replicas.iter().map(|(replica, _)| replica.addr.clone()).collect();
    let outputs: Vec<PathBuf> = (0..4).map(|i| dir.path().join(format!("consumer-{i}.jsonl"))).collect();
    let consumers: Vec<_> = outputs
        .iter()
        .enumerate()
        .flat_map(|(i, output)| {
            readerd_tests::shared_reads::spawn_consumers(
                &addrs[i % 3],
                &["--spec", &spec],
                std::slice::from_ref(output),
            )
        })
        .collect();
    readerd_tests::shared_reads::wait_for_consumers(consumers, &outputs, true);
    let printed: Vec<Vec<Value>> = outputs.iter().map(|path| jsonl(&std::fs::read(path).unwrap())).collect();
    assert_eq!(merged_rows(&printed), want, "every element once per epoch, each as the single server makes it");
}

#[test]
fn jobs_of_a_sweep_get_equal_elements() {
    let data = tempfile::tempdir().unwrap();
    write_cifar(data.path(), 8);
    let server = ServerProcess::start(&[data.path()]);
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(
        &dir,
        &cifar_spec(
            json!({"seed": 11, "numEpochs": 2, "shuffleFiles": true, "shuffle": {"bufferSize": 6}, "batchSize": 4}),
        ),
    );
    let jobs: Vec<Vec<Value>> = std::thread::scope(|scope| {
        let readers: Vec<_> = ["lr-0.1", "lr-0.01"]
            .into_iter()
            .map(|job| {
                let (addr, spec) = (&server.addr, &spec);
                scope.spawn(move || read(addr, spec, &["--container", "c", "--shared-name", "sweep", "--job", job]))
            })
            .collect();
        readers.into_iter().map(|reader| reader.join().unwrap()).collect()
    });
    let (first, second) = (rows_of_each_key(&jobs[0]), rows_of_each_key(&jobs[1]));
    assert_eq!(first.len(), 24);
    assert!(first.values().all(|rows| rows.len() == 2), "each job every element once per epoch");
    assert_eq!(first, second, "both jobs get the same elements");
}

/// A mixture component of CIFAR files `pattern`, with `transforms` of its own.
fn cifar_component(pattern: &str, transforms: Value) -> Value {
    json!({
        "source": {"files": [pattern], "format": "FIXED_LENGTH", "recordBytes": 3073},
        "decoder": {"raw": {"outType": "UINT8"}},
        "transforms": transforms,
        "pipeline": {"seed": 2}
    })
}

/// The image of a CIFAR record as float32 [32, 32, 3], then `tail`.
fn cifar_image(tail: &[Value]) -> Value {
    let mut list = vec![
        json!({"slice": {"feature": "value", "begin": [1], "size": [3072], "output": "image"}}),
        json!({"reshape": {"feature": "image", "shape": [3, 32, 32]}}),
        json!({"transpose": {"feature": "image", "perm": [1, 2, 0]}}),
    ];
    list.extend(tail.iter().cloned());
    list.push(json!({"drop": {"features": ["value"]}}));
    Value::Array(list)
}

#[test]
fn each_component_of_a_mixture_runs_its_own_transforms() {
    let data = tempfile::tempdir().unwrap();
    write_cifar(data.path(), 6);
    let server = ServerProcess::start(&[data.path()]);
    let dir = tempfile::tempdir().unwrap();
    let standardized = cifar_image(&[json!({"perImageStandardization": {"feature": "image"}})]);
    let scaled = cifar_image(&[json!({"convertImageDtype": {"feature": "image", "dtype": "FLOAT32"}})]);
    let mixture = |batch: i64| {
        json!({"mix": {"datasets": [cifar_component("cifar-0.bin", standardized.clone()), cifar_component("cifar-[12].bin", scaled.clone())],
                       "weights": [0.5, 0.5]},
               "pipeline": {"seed": 4, "batchSize": batch}})
    };
    let mixed = rows_by_key(&read(&server.addr, &write_spec(&dir, &mixture(4)), &[]), true);
    assert_eq!(mixed.len(), 18, "every record of both components once");
    let unbatched = rows_by_key(&read(&server.addr, &write_spec(&dir, &mixture(0)), &[]), false);
    assert_eq!(mixed, unbatched, "batched or not, each record the same");
    // Each as its component alone makes it (deterministic transforms: no draws).
    for (component, pattern, transforms) in [(0, "cifar-0.bin", &standardized), (1, "cifar-[12].bin", &scaled)] {
        let alone = rows_by_key(
            &read(&server.addr, &write_spec(&dir, &cifar_component(pattern, transforms.clone())), &[]),
            false,
        );
        for ((pass, key), row) in alone {
            assert_eq!(mixed[&(pass, format!("{component}/{key}"))], row, "{component}/{key}");
        }
    }

    // Random transforms in a component: the same per element at any batch size.
    let random = cifar_image(&[
        json!({"randomBrightness": {"feature": "image", "maxDelta": 20}}),
        json!({"cast": {"feature": "image", "dtype": "FLOAT32"}}),
    ]);
    let random_mixture = |batch: i64| {
        json!({"mix": {"datasets": [cifar_component("cifar-0.bin", random.clone()), cifar_component("cifar-[12].bin", scaled.clone())]},
               "pipeline": {"seed": 4, "batchSize": batch}})
    };
    let (three, seven) = (
        rows_by_key(&read(&server.addr, &write_spec(&dir, &random_mixture(3)), &[]), true),
        rows_by_key(&read(&server.addr, &write_spec(&dir, &random_mixture(7)), &[]), true),
    );
    assert_eq!(three.len(), 18);
    assert_eq!(three, seven);
}

#[test]
fn transforms_read_csv_columns_as_they_read_example_features() {
    let data = tempfile::tempdir().unwrap();
    write_file(data.path(), "prices.csv", b"1,0.5,2\n2,1.5,4\n3,2.5,6\n");
    let server = ServerProcess::start(&[data.path()]);
    let dir = tempfile::tempdir().unwrap();
    let spec = json!({
        "source": {"files": ["prices.csv"], "format": "TEXT_LINE"},
        "decoder": {"csv": {"columns": [{"name": "id", "dtype": "INT64"}, {"name": "price", "dtype": "FLOAT32"},
                                        {"name": "qty", "dtype": "INT32"}]}},
        "transforms": [{"scale": {"feature": "price", "multiply": 2, "add": 1, "output": "scaled"}},
                       {"cast": {"feature": "qty", "dtype": "FLOAT64"}},
                       {"reshape": {"feature": "id", "shape": [1]}}],
        "pipeline": {"batchSize": 2}
    });
    let lines = read(&server.addr, &write_spec(&dir, &spec), &[]);
    let first = &lines[0]["features"];
    assert_eq!(first["scaled"], json!({"kind": "dense", "dtype": "float32", "shape": [2], "values": [2.0, 4.0]}));
    assert_eq!(first["qty"], json!({"kind": "dense", "dtype": "float64", "shape": [2], "values": [2.0, 4.0]}));
    assert_eq!(first["id"]["shape"], json!([2, 1]));
    assert_eq!(first["price"]["values"], json!([0.5, 1.5]), "a feature read, not replaced, stays");
}

#[test]
fn transforms_read_parquet_columns_too() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../demo");
    let server = ServerProcess::start(&[&demo]);
    let dir = tempfile::tempdir().unwrap();
    let mut spec: Value =
        serde_json::from_str(&std::fs::read_to_string(demo.join("specs/train_parquet.json")).unwrap()).unwrap();
    let plain = read(&server.addr, &write_spec(&dir, &spec), &[]);
    spec["transforms"] = json!([{"scale": {"feature": "x1", "multiply": 10, "add": 1, "output": "x1_scaled"}},
                                {"drop": {"features": ["x2"]}}]);
    let transformed = read(&server.addr, &write_spec(&dir, &spec), &[]);
    let (plain, transformed) = (&plain[0]["features"], &transformed[0]["features"]);
    assert!(transformed.get("x2").is_none());
    assert_eq!(transformed["x1"], plain["x1"]);
    let want: Vec<f64> = plain["x1"]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| f64::from(golden_float(v) as f32 * 10.0 + 1.0))
        .collect();
    let got: Vec<f64> = transformed["x1_scaled"]["values"].as_array().unwrap().iter().map(golden_float).collect();
    assert_eq!(got, want);
}
