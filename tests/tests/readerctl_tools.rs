//! readerctl's file tools against a real server: `gen-demo` writes the benchmark
//! workloads (tabular and tabular_csv hold the same rows), `convert` turns CSV into
//! Examples that read back as the CSV's values, `inspect` shows a local file's records
//! under the server's keys, `checkpoint` saves and restores a shared reader's state, and
//! `completions` prints a script. `gen-demo`, `inspect` and `convert` also read and write
//! `s3://` URLs (moto's S3 server, tests/src/s3.rs): the same bytes as with local files.

use std::path::{Path, PathBuf};

use readerd_tests::{ServerProcess, readerctl};
use serde_json::Value;

fn lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn run(args: &[&str]) -> std::process::Output {
    let output = readerctl("http://127.0.0.1:9", args);
    assert!(output.status.success(), "readerctl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output
}

fn read_all(addr: &str, spec: &Path) -> Vec<Value> {
    let spec = spec.to_str().unwrap();
    let out = readerctl(addr, &["read", "--spec", spec, "--output", "jsonl", "--quiet"]);
    let lines = lines(&out.stdout);
    assert_eq!(lines.last().unwrap()["end_of_sequence"], true, "{lines:?}");
    lines.into_iter().filter(|l| l.get("seq").is_some()).collect()
}

#[test]
fn gen_demo_writes_workloads_whose_csv_and_tfrecord_rows_agree() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    run(&["gen-demo", "--out", dir, "--images", "5", "--tabular", "100", "--batch-size", "16", "--quiet"]);
    let server = ServerProcess::start(&[out.path()]);

    let tabular = read_all(&server.addr, &out.path().join("specs/tabular.json"));
    let csv = read_all(&server.addr, &out.path().join("specs/tabular_csv.json"));
    let records: usize = tabular.iter().map(|b| b["keys"].as_array().unwrap().len()).sum();
    assert_eq!(records, 100);
    assert_eq!(tabular.len(), csv.len());
    for (a, b) in tabular.iter().zip(&csv) {
        assert_eq!(a["features"], b["features"], "the same rows, decoded from Examples and from CSV");
    }
    assert_eq!(tabular[0]["features"].as_object().unwrap().len(), 40);

    let images = read_all(&server.addr, &out.path().join("specs/images.json"));
    let batch = &images[0]["features"];
    assert_eq!(batch["shape"]["shape"], serde_json::json!([5, 3]));
    assert_eq!(batch["shape"]["values"].as_array().unwrap()[..3], [192, 192, 3]);
    let image = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        batch["image"]["values"][0].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(image.len(), 192 * 192 * 3);
    let total: usize = images.iter().map(|b| b["keys"].as_array().unwrap().len()).sum();
    assert_eq!(total, 5);
}

#[test]
fn convert_makes_examples_that_read_back_as_the_csv() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("in.csv"), "id,price,name\n1,2.5,apple\n2,,pear\n3,4,\"fig, dried\"\n").unwrap();
    let input = dir.path().join("in.csv");
    let output = dir.path().join("out.tfrecord");
    let spec = dir.path().join("spec.json");
    run(&[
        "convert",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--spec-output",
        spec.to_str().unwrap(),
        "--quiet",
    ]);
    let server = ServerProcess::start(&[dir.path()]);
    let elements = read_all(&server.addr, &spec);
    assert_eq!(elements.len(), 3);
    // A column every row fills is a scalar (fixedLen, dense); one with a gap is varLen
    // (sparse: its values are a dense tensor), the gap a missing value.
    let ids: Vec<&Value> = elements.iter().map(|e| &e["features"]["id"]).collect();
    for (id, want) in ids.iter().zip(1..) {
        assert_eq!(**id, serde_json::json!({"kind": "dense", "dtype": "int64", "shape": [], "values": [want]}));
    }
    assert_eq!(elements[1]["features"]["price"]["kind"], "sparse");
    assert_eq!(elements[1]["features"]["price"]["values"]["values"], serde_json::json!([]), "empty field: missing");
    assert_eq!(elements[2]["features"]["price"]["values"]["values"], serde_json::json!([4.0]));
    let name = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        elements[2]["features"]["name"]["values"][0].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(name, b"fig, dried");

    // inspect shows the same records under the server's keys.
    let inspected = lines(&run(&["inspect", output.to_str().unwrap()]).stdout);
    let keys: Vec<&Value> = inspected.iter().map(|l| &l["key"]).collect();
    let served: Vec<&Value> = elements.iter().map(|e| &e["keys"][0]).collect();
    assert_eq!(keys, served);
    assert_eq!(inspected[0]["features"]["name"], serde_json::json!({"bytes": ["apple"]}));
    assert_eq!(inspected[0]["features"]["price"], serde_json::json!({"float": [2.5]}));
    let limited = lines(&run(&["inspect", output.to_str().unwrap(), "--limit", "1", "--raw"]).stdout);
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0]["key"], inspected[0]["key"]);
    // The serialized Example: as text when it is valid UTF-8, else base64.
    let raw = match (limited[0]["bytes"].as_str(), limited[0]["base64"].as_str()) {
        (Some(text), _) => text.as_bytes().to_vec(),
        (None, Some(b64)) => base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64).unwrap(),
        _ => panic!("--raw shows the record's bytes: {}", limited[0]),
    };
    assert!(raw.windows(5).any(|w| w == b"apple"), "--raw shows the serialized Example");
    assert!(limited[0].get("features").is_none(), "--raw does not parse it");
}

#[test]
fn inspect_reports_a_corrupt_record_with_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.tfrecord");
    readerd_tests::write_tfrecord(&path, &[b"first".to_vec(), b"second".to_vec()]);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[21 + 14] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    let out = readerctl("http://127.0.0.1:9", &["inspect", path.to_str().unwrap(), "--raw"]);
    assert!(!out.status.success());
    assert_eq!(lines(&out.stdout).len(), 1, "the good record is printed first");
    assert!(String::from_utf8_lossy(&out.stderr).contains("corrupted record at 21"));
}

#[test]
fn a_shared_readers_checkpoint_resumes_it_on_a_new_server() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let text: String = (0..30).map(|i| format!("line {i}\n")).collect();
    std::fs::write(dir.path().join("lines.txt"), text).unwrap();
    let spec = dir.path().join("spec.json");
    std::fs::write(
        &spec,
        r#"{"source": {"files": ["lines.txt"], "format": "TEXT_LINE"}, "pipeline": {"prefetch": 2}}"#,
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    let shared = ["--container", "c", "--shared-name", "s", "--output", "jsonl", "--quiet"];
    let keys = |out: &std::process::Output| -> Vec<String> {
        lines(&out.stdout).iter().filter_map(|l| l["keys"][0].as_str().map(str::to_owned)).collect()
    };
    let server = ServerProcess::start_in(state.path(), &[dir.path()], &[]);
    let mut args = vec!["read", "--spec", spec, "--max-batches", "3"];
    args.extend(shared);
    let first = keys(&readerctl(&server.addr, &args));
    assert_eq!(first, ["lines.txt:1", "lines.txt:2", "lines.txt:3"]);
    let saved = readerctl(&server.addr, &["checkpoint", "--container", "c", "--shared-name", "s"]);
    assert!(saved.status.success(), "{}", String::from_utf8_lossy(&saved.stderr));
    let token = lines(&saved.stdout)[0]["checkpoint"].as_str().unwrap().to_owned();
    let missing = readerctl(&server.addr, &["checkpoint", "--container", "c", "--shared-name", "nobody"]);
    assert!(!missing.status.success());
    server.kill();

    let server = ServerProcess::start_in(state.path(), &[dir.path()], &[]);
    let mut args = vec!["read", "--resume", &token];
    args.extend(shared);
    let rest = keys(&readerctl(&server.addr, &args));
    let expected: Vec<String> = (4..=30).map(|line| format!("lines.txt:{line}")).collect();
    assert_eq!(rest, expected, "every line not acknowledged before the checkpoint, once");
}

#[test]
fn completions_print_a_script_naming_the_subcommands() {
    let script = String::from_utf8(run(&["completions", "bash"]).stdout).unwrap();
    assert!(script.contains("readerctl") && script.contains("gen-demo") && script.contains("inspect"));
}

#[test]
fn bench_runs_the_workloads_and_reports_every_figure() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    run(&["gen-demo", "--out", dir, "--images", "6", "--tabular", "400", "--batch-size", "16", "--quiet"]);
    let report = run(&[
        "bench",
        "--data",
        dir,
        "--consumers",
        "1,2",
        "--output",
        "jsonl",
        "--server",
        readerd_tests::binary("readerd").to_str().unwrap(),
    ]);
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3 * 2);
    for run in runs {
        let records = if run["workload"] == "images" { 6 } else { 400 };
        assert_eq!(run["records"], records * run["consumers"].as_u64().unwrap(), "{run}");
        assert!(run["records_per_s"].as_f64().unwrap() > 0.0);
        assert!(run["server_peak_rss_mb"].as_f64().unwrap() > 0.0);
        // CPU in cores over the run (/proc counts in 10 ms ticks: a tiny run may show 0).
        for side in ["server_cores", "client_cores"] {
            assert!(run[side].as_f64().is_some_and(|cores| cores >= 0.0), "{side}: {run}");
        }
        // 2 × K × prefetch 4 × the largest batch, + 64 MB.
        let budget = 64.0 + 8.0 * run["consumers"].as_f64().unwrap() * run["max_batch_bytes"].as_f64().unwrap() / 1e6;
        assert!((run["server_rss_budget_mb"].as_f64().unwrap() - budget).abs() < 1e-6, "{run}");
    }
    let tabular = report["workloads"].as_array().unwrap().iter().find(|w| w["workload"] == "tabular").unwrap();
    assert!(tabular["first_batch_after_resume_ms"].as_f64().is_some(), "{tabular}");
    assert!(report["tonic_loopback_mb_per_s"].as_f64().unwrap() > 0.0, "the reference line");
}

const BUCKET: &str = "tools";

/// `readerctl` with `env` added to its environment (the S3 endpoint and credentials).
fn readerctl_env(env: &[(String, String)], args: &[&str]) -> std::process::Output {
    let mut command = std::process::Command::new(readerd_tests::binary("readerctl"));
    command.args(["--addr", "http://127.0.0.1:9"]).args(args);
    let output = command.envs(env.iter().map(|(k, v)| (k, v))).output().expect("run readerctl");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains(readerd_tests::s3::SECRET_ACCESS_KEY), "readerctl {args:?} printed the secret: {stderr}");
    output
}

fn run_env(env: &[(String, String)], args: &[&str]) -> std::process::Output {
    let output = readerctl_env(env, args);
    assert!(output.status.success(), "readerctl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output
}

/// The files under `dir`, relative to it with `/` separators, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() { walk(&path, out) } else { out.push(path) }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    let mut names: Vec<String> =
        files.iter().map(|f| f.strip_prefix(dir).unwrap().to_str().unwrap().replace('\\', "/")).collect();
    names.sort();
    names
}

#[test]
fn gen_demo_inspect_and_convert_write_and_read_s3_urls_as_local_files() {
    let s3 = readerd_tests::s3::S3Server::start();
    s3.create_bucket(BUCKET);
    let env = s3.s3_env();
    let sizes = ["--workloads", "images,tabular", "--images", "50", "--tabular", "1000", "--batch-size", "16"];

    // gen-demo to a folder and to a prefix: every file (specs too) with the same bytes.
    let local = tempfile::tempdir().unwrap();
    let mut args = vec!["gen-demo", "--out", local.path().to_str().unwrap(), "--quiet"];
    args.extend(sizes);
    run(&args);
    let mut args = vec!["gen-demo", "--out", "s3://tools/demo"];
    args.extend(sizes);
    let summary = String::from_utf8(run_env(&env, &args).stderr).unwrap();
    let names = files_under(local.path());
    // The files, the two workloads' specs and tabular_halves' (a mixture of tabular's files).
    assert_eq!(names.len(), 16 + 8 + 3, "{names:?}");
    assert!(names.contains(&"specs/tabular_halves.json".to_owned()), "{names:?}");
    assert!(summary.contains(&format!("uploaded {} files", names.len())), "{summary}");
    for workload in ["images", "tabular"] {
        assert!(
            summary.contains(&format!("wrote {workload}; spec s3://tools/demo/specs/{workload}.json")),
            "{summary}"
        );
    }
    for name in &names {
        let uploaded = s3.get(BUCKET, &format!("demo/{name}")).unwrap_or_else(|| panic!("{name} was not uploaded"));
        assert!(uploaded == std::fs::read(local.path().join(name)).unwrap(), "{name}: other bytes");
    }

    // readerd reads each uploaded spec to its end from the bucket, as from the folder.
    let remote = ServerProcess::start_with_env(&["s3://tools/demo"], &[], &env);
    let folder = ServerProcess::start(&[local.path()]);
    let specs = tempfile::tempdir().unwrap();
    for (workload, records) in [("images", 50), ("tabular", 1000)] {
        let spec = specs.path().join(format!("{workload}.json"));
        std::fs::write(&spec, s3.get(BUCKET, &format!("demo/specs/{workload}.json")).unwrap()).unwrap();
        let from_s3 = read_all(&remote.addr, &spec);
        let total: usize = from_s3.iter().map(|b| b["keys"].as_array().unwrap().len()).sum();
        assert_eq!(total, records, "{workload}");
        assert!(from_s3 == read_all(&folder.addr, &spec), "{workload}: other elements from S3 than from the folder");
    }

    // inspect of an object prints what inspect of the local copy prints.
    for (name, extra) in [
        ("images/images-003-of-016.tfrecord", &[][..]),
        ("tabular/tabular-000-of-008.tfrecord", &["--limit", "7", "--raw"][..]),
    ] {
        let url = format!("s3://tools/demo/{name}");
        let path = local.path().join(name);
        let mut args = vec!["inspect", url.as_str()];
        args.extend(extra);
        let from_s3 = run_env(&env, &args).stdout;
        args[1] = path.to_str().unwrap();
        let from_file = run(&args).stdout;
        assert!(!from_file.is_empty() && from_s3 == from_file, "inspect {name} {extra:?}: other lines");
    }
    s3_errors_name_the_url_and_no_secret(&env);
    convert_reads_and_writes_s3_urls(&s3, &env);
}

/// A missing object is an error naming its URL; a URL with credentials is refused without
/// showing them.
fn s3_errors_name_the_url_and_no_secret(env: &[(String, String)]) {
    let missing = readerctl_env(env, &["inspect", "s3://tools/demo/nothing.tfrecord"]);
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success() && stderr.contains("s3://tools/demo/nothing.tfrecord"), "{stderr}");
    let with_password = readerctl_env(env, &["inspect", "s3://key:hunter2@tools/demo/specs/images.json"]);
    let stderr = String::from_utf8_lossy(&with_password.stderr);
    assert!(!with_password.status.success() && stderr.contains("credentials do not belong"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// CSV from an object to an object (past 10 MiB: a multipart upload): the same TFRecord
/// and spec as a local conversion.
fn convert_reads_and_writes_s3_urls(s3: &readerd_tests::s3::S3Server, env: &[(String, String)]) {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("id,price,name\n");
    for i in 0..110_000u64 {
        let price = if i % 7 == 0 { String::new() } else { format!("{}.25", i % 1000) };
        csv += &format!("{i},{price},item {i:07} {}\n", "x".repeat(i as usize % 50));
    }
    std::fs::write(dir.path().join("in.csv"), &csv).unwrap();
    s3.put(BUCKET, "csv/in.csv", csv.as_bytes());
    let (output, spec) = (dir.path().join("in.tfrecord"), dir.path().join("spec.json"));
    let input = dir.path().join("in.csv");
    let local =
        [input.to_str().unwrap(), "--output", output.to_str().unwrap(), "--spec-output", spec.to_str().unwrap()];
    run(&[&["convert", "--quiet"][..], &local].concat());
    let remote = [
        "s3://tools/csv/in.csv",
        "--output",
        "s3://tools/out/in.tfrecord",
        "--spec-output",
        "s3://tools/out/spec.json",
    ];
    let stderr = String::from_utf8(run_env(env, &[&["convert", "--quiet"][..], &remote].concat()).stderr).unwrap();
    assert!(stderr.contains("110000 records, columns id:Int64,price:Float,name:Bytes"), "{stderr}");
    let converted = std::fs::read(&output).unwrap();
    assert!(converted.len() > 10 << 20, "large enough for a multipart upload: {} bytes", converted.len());
    assert!(s3.get(BUCKET, "out/in.tfrecord").unwrap() == converted, "the uploaded TFRecord differs");
    assert!(s3.log().contains("POST /tools/out/in.tfrecord?uploads"), "a multipart upload:\n{}", s3.log());
    assert_eq!(s3.get(BUCKET, "out/spec.json").unwrap(), std::fs::read(&spec).unwrap());

    // And from an object to a local file, and from a local file to an object.
    let back = dir.path().join("back.tfrecord");
    run_env(env, &["convert", "--quiet", "s3://tools/csv/in.csv", "--output", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == converted);
    run_env(env, &["convert", "--quiet", input.to_str().unwrap(), "--output", "s3://tools/out/again.tfrecord"]);
    assert!(s3.get(BUCKET, "out/again.tfrecord").unwrap() == converted);
}

/// `inspect` of a Parquet file written by pyarrow: its rows, row groups and compression,
/// the tensor each column becomes (a column readerd cannot serve named with why), and the
/// spec that reads it; a file cut short is an error naming it.
#[test]
fn inspect_describes_a_parquet_file_from_its_footer() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rows.parquet");
    let write = r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
t = pa.table({
    "id": pa.array(range(10), pa.int64()),
    "emb": pa.array([[float(i)] * 4 for i in range(10)], pa.list_(pa.float32(), 4)),
    "tokens": pa.array([[i] * (i % 3) for i in range(10)], pa.list_(pa.int64())),
    "name": pa.array([f"n{i}" for i in range(10)]).dictionary_encode(),
    "big": pa.array(range(10), pa.uint64()),
})
pq.write_table(t, sys.argv[1], row_group_size=4, compression="snappy")
"#;
    let written = std::process::Command::new("python3").args(["-c", write, file.to_str().unwrap()]).output().unwrap();
    assert!(written.status.success(), "pyarrow: {}", String::from_utf8_lossy(&written.stderr));
    let described = &lines(&run(&["inspect", file.to_str().unwrap()]).stdout)[0];
    assert_eq!(described["rows"], 10);
    let groups: Vec<i64> =
        described["rowGroups"].as_array().unwrap().iter().map(|g| g["rows"].as_i64().unwrap()).collect();
    assert_eq!(groups, [4, 4, 2]);
    assert_eq!(described["rowGroups"][0]["columns"][0]["compression"], "SNAPPY");
    let column =
        |name: &str| described["columns"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap().clone();
    assert_eq!((column("id")["dtype"].clone(), column("id")["shape"].clone()), ("INT64".into(), serde_json::json!([])));
    assert_eq!(column("emb")["shape"], serde_json::json!([4]));
    assert_eq!(
        (column("tokens")["shape"].clone(), column("tokens")["raggedRank"].clone()),
        (serde_json::json!([-1]), 1.into())
    );
    assert_eq!(column("name")["dtype"], "STRING", "a dictionary column is its values'");
    assert!(column("big")["unsupported"].as_str().unwrap().contains("UInt64"));
    let spec = &described["spec"];
    assert_eq!(spec["source"], serde_json::json!({"files": ["rows.parquet"], "format": "PARQUET"}));
    let names: Vec<&str> =
        spec["decoder"]["columns"]["columns"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["id", "emb", "tokens", "name"], "the column readerd cannot serve is left out");

    // A footer cut short names the file.
    let bytes = std::fs::read(&file).unwrap();
    let cut = dir.path().join("cut.parquet");
    std::fs::write(&cut, &bytes[..bytes.len() - 20]).unwrap();
    let failed = readerctl("http://127.0.0.1:9", &["inspect", cut.to_str().unwrap()]);
    assert!(!failed.status.success());
    assert!(
        String::from_utf8_lossy(&failed.stderr).contains("cut.parquet"),
        "{}",
        String::from_utf8_lossy(&failed.stderr)
    );
}

/// `convert` turns a Parquet file into TFRecord Examples and back, each with the spec that
/// reads it: the server gives the same tensors from all three.
#[test]
fn convert_turns_parquet_into_tfrecord_and_back_giving_the_same_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let write = r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
t = pa.table({
    "id": pa.array(range(10), pa.int64()),
    "x": pa.array([i / 4 for i in range(10)], pa.float32()),
    "emb": pa.array([[float(i), -1.0] for i in range(10)], pa.list_(pa.float32(), 2)),
    "tokens": pa.array([[i] * (i % 3) for i in range(10)], pa.list_(pa.int64())),
    "name": pa.array([f"n{i}" for i in range(10)]),
})
pq.write_table(t, sys.argv[1], row_group_size=4)
"#;
    let parquet = dir.path().join("a.parquet");
    let written =
        std::process::Command::new("python3").args(["-c", write, parquet.to_str().unwrap()]).output().unwrap();
    assert!(written.status.success(), "pyarrow: {}", String::from_utf8_lossy(&written.stderr));
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let converted =
        run(&["convert", &path("a.parquet"), "--output", &path("a.tfrecord"), "--spec-output", &path("a.json")]);
    assert!(String::from_utf8_lossy(&converted.stderr).contains("10 records"));
    run(&["convert", &path("a.tfrecord"), "--output", &path("b.parquet"), "--spec-output", &path("b.json")]);
    // A refused conversion leaves an existing output as it was.
    let refused = readerctl("http://127.0.0.1:9", &["convert", &path("a.parquet"), "--output", &path("b.parquet")]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("written from a TFRecord file"));
    assert!(std::fs::metadata(path("b.parquet")).unwrap().len() > 0, "b.parquet kept");

    let server = ServerProcess::start(&[dir.path()]);
    let read = |spec: serde_json::Value| {
        let mut spec = spec;
        spec["pipeline"] = serde_json::json!({"batchSize": 4});
        let spec_path = dir.path().join("read.json");
        std::fs::write(&spec_path, spec.to_string()).unwrap();
        let output = readerctl(&server.addr, &["read", "--spec", spec_path.to_str().unwrap(), "--output", "jsonl"]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stdout));
        lines(&output.stdout).into_iter().filter_map(|line| line.get("features").cloned()).collect::<Vec<_>>()
    };
    let spec_of =
        |name: &str| serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(path(name)).unwrap()).unwrap();
    let from_parquet = read(serde_json::json!({"source": {"files": ["a.parquet"], "format": "PARQUET"}}));
    assert_eq!(from_parquet.len(), 3);
    assert_eq!(from_parquet[0]["tokens"]["kind"], "ragged");
    assert_eq!(read(spec_of("a.json")), from_parquet, "the Examples give the Parquet file's tensors");
    assert_eq!(read(spec_of("b.json")), from_parquet, "and so does the Parquet file made from them");
}
