//! The status page (`/` on `--metrics-listen`) in a real browser: headless Chromium driven
//! by `tests/browser/status_page.py` (selenium, chromedriver). A server with tokens and
//! two consumers, one stepping 50 ms an element and one starved by an object store behind
//! a proxy that delays each request by 20 ms, and a cluster of 2 replicas on the real
//! PostgreSQL. The screenshots go to `target/artifacts/`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use readerd_tests::postgres::Database;
use readerd_tests::s3::{FaultProxy, one_line_objects};
use readerd_tests::{ServerProcess, free_address, http_exchange, http_get, readerctl, spawn_reader, write_file};

fn write_spec(dir: &Path, name: &str, spec: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, spec).unwrap();
    path
}

/// Where CI keeps the screenshots: `target/artifacts/`.
fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_status_page_shows_who_waits_and_the_cluster_in_a_real_browser() {
    let Some(db) = Database::new() else { return };
    assert!(
        Path::new("/usr/bin/chromium").exists() && Path::new("/usr/bin/chromedriver").exists(),
        "the browser test needs Debian's chromium and chromium-driver (tests/run.sh installs them)"
    );
    let data = tempfile::tempdir().unwrap();
    let lines: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    write_file(data.path(), "lines.txt", lines.as_bytes());
    let steady =
        write_spec(data.path(), "steady.json", r#"{"source": {"files": ["lines.txt"], "format": "TEXT_LINE"}}"#);
    // Small objects behind a proxy that delays each request by 20 ms, read for many
    // epochs: the server is slower than its trainer.
    let s3 = one_line_objects("training", "slow", 200);
    let starved = write_spec(
        data.path(),
        "starved.json",
        r#"{"source": {"files": ["part-*.txt"], "format": "TEXT_LINE"}, "pipeline": {"numEpochs": 50}}"#,
    );
    let proxy = FaultProxy::start(&s3.endpoint);
    proxy.set_delay(Duration::from_millis(20));
    let tokens = data.path().join("tokens.json");
    let (token_a, token_b) = ("team-a-watcher-0123456789", "team-b-watcher-0123456789");
    let grants = format!(
        r#"{{"tokens": [{{"token": "{token_a}", "containers": ["a"]}}, {{"token": "{token_b}", "containers": ["b"]}}]}}"#
    );
    std::fs::write(&tokens, grants).unwrap();
    let metrics = free_address();
    let roots = [data.path().to_str().unwrap(), "s3://training/slow"];
    let args = ["--auth-tokens", tokens.to_str().unwrap(), "--metrics-listen", metrics.as_str()];
    let server = ServerProcess::start_with_env(&roots, &args, &proxy.s3_env());
    let mut children = vec![
        spawn_reader(
            &server.addr,
            &["--token", token_a],
            &steady,
            &["--container", "a", "--shared-name", "steady", "--step-ms", "50"],
        ),
        spawn_reader(&server.addr, &["--token", token_a], &starved, &["--container", "a", "--shared-name", "starved"]),
        spawn_reader(
            &server.addr,
            &["--token", token_b],
            &steady,
            &["--container", "b", "--shared-name", "hidden", "--step-ms", "50"],
        ),
    ];

    // Two replicas on PostgreSQL serving one shared reader to a consumer of both.
    let cluster_metrics = free_address();
    let url = db.url();
    let replica_args =
        ["--state-url", url.as_str(), "--lease-time", "2s", "--metrics-listen", cluster_metrics.as_str()];
    let states = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let first = ServerProcess::start_in(states[0].path(), &[data.path()], &replica_args);
    let second = ServerProcess::start_in(states[1].path(), &[data.path()], &replica_args[..4]);
    let both = format!("{},{}", first.addr, second.addr);
    let cluster_spec = write_spec(
        data.path(),
        "cluster.json",
        r#"{"source": {"files": ["lines.txt"], "format": "TEXT_LINE"}, "pipeline": {"numEpochs": 20}}"#,
    );
    children.push(spawn_reader(
        &both,
        &[],
        &cluster_spec,
        &["--container", "c", "--shared-name", "cluster", "--step-ms", "20"],
    ));

    let artifacts = artifacts();
    let (page, cluster_page) = (artifacts.join("status-page.png"), artifacts.join("status-page-cluster.png"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("browser/status_page.py");
    let output = Command::new("python3")
        .arg(script)
        .args(["--url", &format!("http://{metrics}/"), "--token", token_a, "--container", "a", "--hidden", "b"])
        .args(["--cluster-url", &format!("http://{cluster_metrics}/")])
        .args(["--screenshot", page.to_str().unwrap(), "--cluster-screenshot", cluster_page.to_str().unwrap()])
        .output()
        .unwrap();
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    println!("{stdout}");
    assert!(output.status.success(), "the browser found the page wrong:\n{stdout}\n{stderr}");
    assert!(std::fs::metadata(&page).unwrap().len() > 10_000, "a screenshot of the page");

    // The page asks for the points after the newest it has: `?since=T` gives exactly
    // those of the full history after T.
    let auth = format!("Bearer {token_a}");
    let history = |path: &str| {
        let (code, body) = http_get(&metrics, path, &[("authorization", auth.as_str())]);
        assert_eq!(code, 200, "{body}");
        let status: serde_json::Value = serde_json::from_str(&body).unwrap();
        let readers = status["readers"].as_array().unwrap();
        let steady = readers.iter().find(|reader| reader["sharedName"] == "steady").unwrap();
        steady["history"].as_array().unwrap().iter().map(|point| point["time"].as_u64().unwrap()).collect::<Vec<_>>()
    };
    let all = history("/status.json");
    assert!(all.len() >= 2, "the browser saw the plots grow: {all:?}");
    let since = all[all.len() - 2];
    let newer = history(&format!("/status.json?since={since}"));
    let expected: Vec<u64> = history("/status.json").into_iter().filter(|time| *time > since).collect();
    assert!(!newer.is_empty() && newer.iter().all(|time| *time > since), "{newer:?} after {since}");
    assert!(expected.starts_with(&newer), "{newer:?} is the full history's tail after {since}: {expected:?}");
}

/// The header `name` (lower case) of a response's `head`, if sent.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then_some(value.trim())
    })
}

/// The page comes with a strict Content-Security-Policy (its inline script and style by
/// hash, nothing else inline, nothing from elsewhere) and `nosniff`, as does every answer
/// of the listener; and it still works under that policy in headless Chromium: its script
/// runs, draws a reader's card with its stage bar (styles set through the DOM), and the
/// browser reports no violation of the policy.
#[test]
fn the_status_page_has_a_strict_content_security_policy_and_works_under_it() {
    let data = tempfile::tempdir().unwrap();
    let lines: String = (0..100).map(|i| format!("line {i}\n")).collect();
    write_file(data.path(), "lines.txt", lines.as_bytes());
    let spec = write_spec(data.path(), "spec.json", r#"{"source": {"files": ["lines.txt"], "format": "TEXT_LINE"}}"#);
    let metrics = free_address();
    let server = ServerProcess::start_with(&[data.path()], &["--metrics-listen", metrics.as_str()]);
    let read = ["read", "--spec", spec.to_str().unwrap(), "--container", "c", "--shared-name", "s"];
    assert!(readerctl(&server.addr, &[&read[..], &["--max-batches", "10", "-q"]].concat()).status.success());

    let (code, head, _) = http_exchange(&metrics, "GET", "/", &[], "");
    assert_eq!(code, 200, "{head}");
    let policy = header(&head, "content-security-policy").unwrap_or_else(|| panic!("no policy:\n{head}"));
    for directive in ["default-src 'none'", "script-src 'sha256-", "style-src 'sha256-", "connect-src 'self'"] {
        assert!(policy.contains(directive), "{directive} not in {policy}");
    }
    for directive in ["frame-ancestors 'none'", "form-action 'self'", "base-uri 'none'"] {
        assert!(policy.contains(directive), "{directive} not in {policy}");
    }
    assert!(!policy.contains("unsafe") && !policy.contains('*'), "{policy}");
    for path in ["/", "/status.json", "/metrics", "/nothing"] {
        let (_, head, _) = http_exchange(&metrics, "GET", path, &[], "");
        assert_eq!(header(&head, "x-content-type-options"), Some("nosniff"), "{path}:\n{head}");
        assert!(header(&head, "content-security-policy").is_some(), "{path}:\n{head}");
    }

    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "the browser test needs Debian's chromium (tests/run.sh installs it)"
    );
    let profile = tempfile::tempdir().unwrap();
    let output = Command::new("/usr/bin/chromium")
        .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .args(["--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("http://{metrics}/"))
        .output()
        .unwrap();
    let (dom, log) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "chromium failed:\n{log}");
    assert!(!log.contains("Content Security Policy"), "the page broke its own policy:\n{log}");
    assert!(dom.contains(r#"data-reader="c/s""#), "the page's script did not draw the reader:\n{dom}\n{log}");
    assert!(
        dom.contains(r#"data-stage="reading""#) && dom.contains("style=\"width:"),
        "the stage bar has no widths:\n{dom}"
    );
}
