//! `http://` data roots against a real WebDAV server (WsgiDAV): the golden framing cases
//! read the same records, keys and errors over HTTP as from local files; globs list (by
//! PROPFIND) and sort; names that leave the root's path or do not exist get the same
//! codes as on files. Against a server that misbehaves on purpose (tests/hostile_http.py):
//! a redirect is never followed (the other host receives nothing), a server that ignores
//! Range is FAILED_PRECONDITION naming it, and a ranged body far longer than asked for is
//! refused at its first byte too many, with the server's memory bounded.

use std::path::Path;

use readerd_tests::hostile_http::HostileHttp;
use readerd_tests::webdav::WebDavServer;
use readerd_tests::{ServerProcess, framing_spec, golden_cases, golden_dir, jsonl, readerctl, write_spec};
use serde_json::{Value, json};

/// What `readerctl read --output jsonl` prints for `spec`.
fn read_jsonl(server: &ServerProcess, spec: &Value) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let output = readerctl(&server.addr, &["read", "--spec", &write_spec(&dir, spec), "--output", "jsonl"]);
    jsonl(&output.stdout)
}

#[test]
fn golden_framing_cases_read_the_same_over_http_as_from_files() {
    let golden = golden_dir();
    let folders: Vec<(&str, std::path::PathBuf)> =
        ["tfrecord", "fixed_length", "text"].iter().map(|folder| (*folder, golden.join(folder))).collect();
    let folders: Vec<(&str, &Path)> = folders.iter().map(|(prefix, dir)| (*prefix, dir.as_path())).collect();
    let http = WebDavServer::start(&folders);
    let local = ServerProcess::start(&[&golden]);
    let remote = ServerProcess::start_with_env(&[&http.endpoint], &[], &[]);
    let cases = golden_cases(&["tfrecord", "tfrecord_corrupt", "fixed_length", "text_line"]);
    for case in &cases {
        let spec = framing_spec(case);
        let from_files = read_jsonl(&local, &spec);
        assert!(!from_files.is_empty(), "{}: readerctl printed nothing", case["id"]);
        assert_eq!(read_jsonl(&remote, &spec), from_files, "{}: http:// and local files differ", case["id"]);
    }
    assert!(cases.len() >= 40, "only {} golden cases", cases.len());
    println!("{} golden framing cases read the same from WsgiDAV as from files", cases.len());
}

#[test]
fn globs_list_the_server_sorted_and_names_cannot_leave_the_root() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../demo");
    let http = WebDavServer::start(&[("data/demo", &demo), ("data/other", &demo)]);
    let server = ServerProcess::start_with_env(&[&format!("{}/data/demo", http.endpoint)], &[], &[]);
    let spec = json!({"source": {"files": ["*.csv"], "format": "TEXT_LINE"}, "pipeline": {"batchSize": 100000}});
    let lines = read_jsonl(&server, &spec);
    let keys: Vec<&str> = lines[0]["keys"]
        .as_array()
        .unwrap_or_else(|| panic!("{lines:?}"))
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    let mut files: Vec<&str> = keys.iter().map(|k| k.rsplit_once(':').unwrap().0).collect();
    files.dedup();
    assert_eq!(files, ["prices.csv", "train.csv"], "glob matches in name order");
    let records = read_jsonl(&server, &json!({"source": {"files": ["records.tfrecord"], "format": "TFRECORD"}}));
    assert_eq!(records.iter().filter(|line| line.get("features").is_some()).count(), 64);
    let elsewhere = format!("{}/data/other/records.tfrecord", http.endpoint);
    for (name, code) in [
        ("../other/records.tfrecord", "PERMISSION_DENIED"),
        (elsewhere.as_str(), "PERMISSION_DENIED"),
        ("missing.tfrecord", "NOT_FOUND"),
    ] {
        let lines = read_jsonl(&server, &json!({"source": {"files": [name], "format": "TFRECORD"}}));
        let error = &lines.last().unwrap()["error"];
        assert_eq!(error["code"], code, "{name}: {error}");
        assert!(error["message"].as_str().unwrap().contains(name), "{name}: {error}");
    }
}

/// The error line `readerctl read` ends with for the one file `name` of `server`'s root,
/// after no record.
fn read_error(server: &ServerProcess, name: &str) -> Value {
    let lines = read_jsonl(server, &json!({"source": {"files": [name], "format": "TEXT_LINE"}}));
    assert_eq!(lines.len(), 1, "{name}: records were read: {lines:?}");
    lines[0]["error"].clone()
}

#[test]
fn a_redirect_is_refused_and_its_target_never_reached() {
    let other = HostileHttp::start(&[("secret.txt", b"the other host's secret\n")], &[]);
    let target = format!("{}/secret.txt", other.endpoint);
    let files: [(&str, &[u8]); 1] = [("root/redirect-get.txt", b"a line of the root\n")];
    let root = HostileHttp::start(&files, &["--redirect-to", &target]);
    let server = ServerProcess::start_with_env(&[&format!("{}/root", root.endpoint)], &[], &[]);
    // `redirect.txt`: its HEAD (opening the spec) is redirected; `redirect-get.txt`: its
    // HEAD is answered, its ranged GET redirected.
    for name in ["redirect.txt", "redirect-get.txt"] {
        let error = read_error(&server, name);
        assert_eq!(error["code"], "FAILED_PRECONDITION", "{name}: {error}");
        let message = error["message"].as_str().unwrap();
        let object = format!("{}/root/{name}", root.endpoint);
        for part in [object.as_str(), "redirect to", target.as_str(), "follows no redirect"] {
            assert!(message.contains(part), "{name}: {part:?} is not in {message:?}");
        }
    }
    assert!(root.requests().contains("GET /root/redirect-get.txt"), "{}", root.requests());
    assert_eq!(other.requests(), "", "the redirect's target was reached");
}

/// readerctl's own object reads (`inspect`, `convert` of a URL) follow no redirect either.
#[test]
fn readerctl_follows_no_redirect_either() {
    let other = HostileHttp::start(&[("secret.txt", b"the other host's secret\n")], &[]);
    let target = format!("{}/secret.txt", other.endpoint);
    let root = HostileHttp::start(&[("root/plain.txt", b"a line\n")], &["--redirect-to", &target]);
    let url = format!("{}/root/redirect.txt", root.endpoint);
    let output = readerctl("http://127.0.0.1:1", &["inspect", &url, "--raw"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{output:?}");
    for part in [url.as_str(), "redirect to", target.as_str()] {
        assert!(stderr.contains(part), "{part:?} is not in {stderr:?}");
    }
    assert!(!String::from_utf8_lossy(&output.stdout).contains("secret"), "{output:?}");
    assert_eq!(other.requests(), "", "the redirect's target was reached");
    assert!(root.requests().contains("/root/redirect.txt"), "{}", root.requests());
}

#[test]
fn a_server_that_ignores_range_is_failed_precondition_naming_it() {
    let files: [(&str, &[u8]); 1] = [("root/norange.txt", b"one\ntwo\nthree\n")];
    let http = HostileHttp::start(&files, &[]);
    let server = ServerProcess::start_with_env(&[&format!("{}/root", http.endpoint)], &["--object-retries", "3"], &[]);
    let error = read_error(&server, "norange.txt");
    assert_eq!(error["code"], "FAILED_PRECONDITION", "{error}");
    let message = error["message"].as_str().unwrap();
    for part in [http.endpoint.as_str(), "norange.txt", "ignores Range requests"] {
        assert!(message.contains(part), "{part:?} is not in {message:?}");
    }
    let gets = http.requests().lines().filter(|line| line.starts_with("GET")).count();
    assert_eq!(gets, 1, "no retry can help, none is made: {}", http.requests());
}

#[test]
fn a_ranged_body_longer_than_asked_is_cut_at_its_first_byte_too_many() {
    let body_bytes: u64 = 1 << 30;
    let line = b"0123456789\n".repeat(100);
    let files: [(&str, &[u8]); 1] = [("root/long.txt", &line)];
    let http = HostileHttp::start(&files, &["--long-bytes", &body_bytes.to_string()]);
    let server = ServerProcess::start_with_env(&[&format!("{}/root", http.endpoint)], &[], &[]);
    let error = read_error(&server, "long.txt");
    assert_eq!(error["code"], "FAILED_PRECONDITION", "{error}");
    let message = error["message"].as_str().unwrap();
    for part in ["long.txt", "bytes 0..1100", "more than was asked for"] {
        assert!(message.contains(part), "{part:?} is not in {message:?}");
    }
    let peak_kib = server.memory_kib("VmHWM");
    println!("readerd's VmHWM: {peak_kib} KiB against a body of {} MiB", body_bytes >> 20);
    assert!(peak_kib < 200 << 10, "readerd's memory peaked at {peak_kib} KiB: the body was buffered");
}
