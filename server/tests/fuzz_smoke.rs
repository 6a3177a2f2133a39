//! A bounded, deterministic fuzz run in the test suite: the golden vectors' inputs,
//! mutated (bit flips, truncation, duplicated and inserted bytes, huge lengths), go through
//! the TFRecord and CSV framers and the Example and CSV decoders, which must answer
//! (records or errors) without panicking; so must the columnar reader and the `columns`
//! decoder with mutated Parquet and Arrow IPC files (arrow-rs panics on some: those are
//! caught as the file's DATA_LOSS). The open-ended runs are the `fuzz/` targets.

use readerd_server::fuzzing;
use readerd_server::pipeline::rng::SplitMix64;

/// Uniform in `0..n` (0 when `n` is 0).
fn below(rng: &mut SplitMix64, n: usize) -> usize {
    if n == 0 { 0 } else { rng.below(n as u64) as usize }
}

fn mutate(rng: &mut SplitMix64, input: &[u8]) -> Vec<u8> {
    let mut data = input.to_vec();
    for _ in 0..1 + below(rng, 4) {
        match below(rng, 5) {
            0 if !data.is_empty() => {
                let i = below(rng, data.len());
                data[i] ^= 1 << below(rng, 8);
            }
            1 => data.truncate(below(rng, data.len() + 1)),
            2 if !data.is_empty() => {
                let (start, len) = (below(rng, data.len()), below(rng, 16));
                let copy: Vec<u8> = data[start..(start + len).min(data.len())].to_vec();
                let at = below(rng, data.len() + 1);
                data.splice(at..at, copy);
            }
            3 => {
                let at = below(rng, data.len() + 1);
                data.splice(at..at, (rng.next_u64() as u32).to_le_bytes());
            }
            _ => {
                // A length field claiming far more than there is.
                let at = below(rng, data.len() + 1);
                data.splice(at..at, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f]);
            }
        }
    }
    data
}

/// The serialized Examples of a golden parse_example case (its `inputs.serialized`, base64).
fn serialized_examples(case: &[u8]) -> Vec<Vec<u8>> {
    use base64::Engine;
    let Ok(case) = serde_json::from_slice::<serde_json::Value>(case) else { return Vec::new() };
    let records = case["inputs"]["serialized"].as_array().cloned().unwrap_or_default();
    let decode = |r: &serde_json::Value| base64::engine::general_purpose::STANDARD.decode(r.as_str()?).ok();
    let records: Vec<Vec<u8>> = records.iter().filter_map(decode).collect();
    // Also the batch as one input, split where the targets split it.
    let joined = records.join(&0xffu8);
    records.into_iter().chain([joined]).collect()
}

/// Serialized Examples, TFRecord files and CSV text from the golden vectors.
fn seeds() -> Vec<Vec<u8>> {
    let dir = std::env::var("READERD_GOLDEN_DIR").unwrap_or_else(|_| "../tests/golden".into());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut seeds = vec![b"a,1.5,x\n2,,\"q\"\"uoted\"\n".to_vec()];
    let mut stack = vec![dir];
    while let Some(path) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                seeds.extend(serialized_examples(&bytes));
                seeds.push(bytes);
            }
        }
    }
    seeds.sort();
    seeds.dedup();
    seeds
}

#[test]
fn mutated_inputs_never_panic_the_framers_or_decoders() {
    let seeds = seeds();
    assert!(seeds.len() > 10, "the golden vectors are the seeds: {}", seeds.len());
    let mut rng = SplitMix64 { state: 20261122 };
    let mut records = 0usize;
    for round in 0..8_000 {
        let seed = &seeds[round % seeds.len()];
        let data = mutate(&mut rng, seed);
        records += fuzzing::frame_tfrecord(&data);
        records += fuzzing::frame_csv(&data);
        fuzzing::decode_example(&data);
        fuzzing::decode_csv(&data);
    }
    assert!(records > 0, "some mutated inputs still frame records");
}

/// Specs with every number replaced, one at a time, by a hostile value (negative, huge,
/// past 2^63, as a string), and with bytes mutated as above: the spec checks answer, and
/// a spec they accept decodes without allocating what it claims.
#[test]
fn hostile_specs_never_panic_or_allocate_what_they_claim() {
    let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../demo/specs");
    let mut seeds: Vec<String> = std::fs::read_dir(&demo)
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .collect();
    seeds.extend([
        r#"{"source": {"files": ["a"], "format": "TFRECORD"}, "decoder": {"raw": {"outType": "FLOAT32", "fixedLength": 8}}, "pipeline": {"batchSize": 2}}"#.to_owned(),
        r#"{"source": {"files": ["a"], "format": "FIXED_LENGTH", "headerBytes": 1, "recordBytes": 4, "footerBytes": 2, "hopBytes": 3}}"#.to_owned(),
        r#"{"source": {"files": ["a"], "format": "TFRECORD"}, "decoder": {"example": {"features": {
            "x": {"fixedLen": {"dtype": "INT64", "shape": [2, 3], "default": {"int64Values": [1, 2, 3, 4, 5, 6]}}},
            "s": {"sparse": {"indexKeys": ["i"], "valueKey": "v", "dtype": "FLOAT32", "size": [10]}},
            "r": {"ragged": {"dtype": "INT64", "valueKey": "v", "partitions": [{"uniformRowLength": 2}]}}}}},
            "pipeline": {"batchSize": 3, "shuffle": {"bufferSize": 10}, "cycleLength": 2, "prefetch": 2,
                         "select": {"keyBuckets": {"buckets": 4, "keep": [1]}}}}"#.to_owned(),
        r#"{"source": {"files": ["a"], "format": "TEXT_LINE"}, "decoder": {"csv": {"columns": [
            {"name": "a", "dtype": "INT32"}, {"name": "b", "dtype": "STRING"}], "selectCols": [0, 2]}}, "pipeline": {"batchSize": 5}}"#.to_owned(),
    ]);
    let hostile = [
        "-1",
        "0",
        "2147483648",
        "1099511627776",
        "9223372036854775807",
        "18446744073709551615",
        "\"1099511627776\"",
        "1e300",
    ];
    let mut accepted = 0;
    let mut rng = SplitMix64 { state: 20261123 };
    for seed in &seeds {
        assert!(fuzzing::check_spec(seed.as_bytes()), "the seed is a valid spec: {seed}");
        // Each number (a run of digits) in turn.
        let digits: Vec<(usize, usize)> = {
            let bytes = seed.as_bytes();
            let mut runs = Vec::new();
            let mut i = 0;
            while i < bytes.len() {
                if bytes[i].is_ascii_digit() {
                    let start = i;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                    runs.push((start, i));
                } else {
                    i += 1;
                }
            }
            runs
        };
        for &(start, end) in &digits {
            for value in hostile {
                let spec = format!("{}{value}{}", &seed[..start], &seed[end..]);
                accepted += usize::from(fuzzing::check_spec(spec.as_bytes()));
            }
        }
        for _ in 0..500 {
            fuzzing::check_spec(&mutate(&mut rng, seed.as_bytes()));
        }
    }
    assert!(accepted > 0, "some hostile numbers are still valid specs");
}

/// Specs and records made together from random bytes (`fuzzing::decode_with_spec`, the
/// `spec_and_records` fuzz target's entry point): zero-size shapes, defaults of any
/// length, partitions and lists of every kind meet, and nothing panics.
#[test]
fn generated_specs_with_their_records_never_panic() {
    let mut rng = SplitMix64 { state: 20261124 };
    let rounds: usize = std::env::var("READERD_FUZZ_ROUNDS").ok().and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let mut decoded = 0;
    for _ in 0..rounds {
        let len = 8 + below(&mut rng, 400);
        let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        decoded += usize::from(fuzzing::decode_with_spec(&data));
    }
    println!("{decoded} of {rounds} generated specs decoded their records");
    assert!(decoded > rounds / 20, "only {decoded} of {rounds} generated specs decoded their records");
}

/// A small Parquet file and the same table as an Arrow IPC file: ints, nullable floats,
/// strings, a dictionary column and a list column, in several row groups (batches).
fn columnar_seeds() -> Vec<(Vec<u8>, readerd_server::source::columnar::ColumnarFormat)> {
    use std::sync::Arc;

    use arrow_array::builder::{Int64Builder, ListBuilder};
    use arrow_array::types::Int32Type;
    use arrow_array::{ArrayRef, DictionaryArray, Float32Array, Int64Array, RecordBatch, StringArray};
    use readerd_server::source::columnar::ColumnarFormat;
    let mut tokens = ListBuilder::new(Int64Builder::new());
    for row in 0..40i64 {
        (0..row % 4).for_each(|i| tokens.values().append_value(row * 10 + i));
        tokens.append(true);
    }
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from_iter_values(0..40)) as ArrayRef),
        ("score", Arc::new(Float32Array::from_iter((0..40).map(|i| (i % 5 != 0).then_some(i as f32))))),
        ("name", Arc::new(StringArray::from_iter_values((0..40).map(|i| format!("n{i}"))))),
        ("kind", Arc::new(DictionaryArray::<Int32Type>::from_iter((0..40).map(|i| ["a", "b", "c"][i % 3])))),
        ("tokens", Arc::new(tokens.finish())),
    ])
    .unwrap();
    let properties =
        parquet::file::properties::WriterProperties::builder().set_max_row_group_row_count(Some(10)).build();
    let mut parquet = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut parquet, batch.schema(), Some(properties)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let mut ipc = Vec::new();
    let mut writer = arrow_ipc::writer::FileWriter::try_new(&mut ipc, &batch.schema()).unwrap();
    (0..4).for_each(|i| writer.write(&batch.slice(i * 10, 10)).unwrap());
    writer.finish().unwrap();
    drop(writer);
    vec![(parquet, ColumnarFormat::Parquet), (ipc, ColumnarFormat::ArrowIpc)]
}

#[test]
fn mutated_parquet_and_arrow_ipc_files_never_panic_the_columnar_reader() {
    let mut rng = SplitMix64 { state: 20261127 };
    for (seed, format) in columnar_seeds() {
        assert_eq!(fuzzing::read_columnar(&seed, format), 40, "the seed reads whole");
        let mut rows = 0;
        for _ in 0..300 {
            rows += fuzzing::read_columnar(&mutate(&mut rng, &seed), format);
        }
        assert!(rows > 0, "some mutated files still give rows");
    }
}

/// The golden images (JPEG, PNG, GIF, BMP), mutated, with random parameters for one
/// transform after `decodeImage` (`fuzzing::transform_image`, the `image_transforms`
/// target's entry point): decoders and operations answer, never panic.
#[test]
fn mutated_images_and_random_transform_parameters_never_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/transforms/images");
    let mut images: Vec<Vec<u8>> =
        std::fs::read_dir(&dir).unwrap().map(|entry| std::fs::read(entry.unwrap().path()).unwrap()).collect();
    images.sort();
    assert!(images.len() > 20, "the golden images are the seeds");
    let mut rng = SplitMix64 { state: 20261129 };
    let (mut succeeded, rounds) = (0, 6_000);
    for round in 0..rounds {
        let image = &images[round % images.len()];
        let mut data: Vec<u8> = rng.next_u64().to_le_bytes().to_vec();
        data.extend(if round % 3 == 0 { image.clone() } else { mutate(&mut rng, image) });
        succeeded += usize::from(fuzzing::transform_image(&data));
    }
    println!("{succeeded} of {rounds} transform chains succeeded");
    assert!(succeeded > rounds / 10, "only {succeeded} of {rounds} chains succeeded: the parameters rarely fit");
}
