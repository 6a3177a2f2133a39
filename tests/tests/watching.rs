//! "Is my trainer input-bound?", answered by a real server: `readerctl read` consumers
//! report where their time goes, and `/status.json` and `/metrics` (on
//! `--metrics-listen`) say how much of it they spend waiting, and in which stage the
//! server's time goes. A consumer slower than the server is not input-bound; a server
//! slowed by its object store (a proxy delaying each request by 20 ms in front of moto)
//! makes its consumer input-bound, with the reading stage dominant; and a trainer stuck
//! inside `next()` (its store stopped answering) shows as waiting while it waits.

use std::process::Command;
use std::time::Duration;

use readerd_tests::s3::{FaultProxy, S3Server, one_line_objects};
use readerd_tests::{ServerProcess, binary, free_address, http_get, scrape_metrics, spawn_reader, write_file};
use serde_json::Value;

fn status(metrics_addr: &str) -> Value {
    let (code, body) = http_get(metrics_addr, "/status.json", &[]);
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The reader of `status` whose `field` is `value` (`sharedName`, or `container` for a
/// private one).
fn reader<'a>(status: &'a Value, field: &str, value: &str) -> &'a Value {
    let readers = status["readers"].as_array().unwrap();
    readers.iter().find(|reader| reader[field] == value).unwrap_or_else(|| panic!("no reader {value}: {status:#}"))
}

/// The only consumer of `reader`, once it reported (its first report comes after a second).
fn only_consumer(reader: &Value) -> &Value {
    let consumers = reader["consumers"].as_array().unwrap();
    assert_eq!(consumers.len(), 1, "{reader:#}");
    &consumers[0]
}

/// Polls `/status.json` until `ready` holds of it (up to 30 s).
fn status_once(metrics_addr: &str, ready: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..150 {
        let status = status(metrics_addr);
        if ready(&status) {
            return status;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("the status never got there: {:#}", status(metrics_addr));
}

/// Whether every consumer of `status`'s readers reported at least `seconds` of its time.
fn reported(status: &Value, seconds: f64) -> bool {
    let readers = status["readers"].as_array().unwrap();
    !readers.is_empty()
        && readers.iter().flat_map(|reader| reader["consumers"].as_array().unwrap()).all(|consumer| {
            consumer["waitSeconds"].as_f64().unwrap_or(0.0) + consumer["stepSeconds"].as_f64().unwrap_or(0.0) >= seconds
        })
}

#[test]
fn a_trainer_slower_than_the_server_is_not_input_bound() {
    let data = tempfile::tempdir().unwrap();
    let lines: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    write_file(data.path(), "lines.txt", lines.as_bytes());
    let spec = data.path().join("spec.json");
    std::fs::write(&spec, r#"{"source": {"files": ["lines.txt"], "format": "TEXT_LINE"}}"#).unwrap();
    let metrics_addr = free_address();
    let server = ServerProcess::start_with(&[data.path()], &["--metrics-listen", &metrics_addr]);
    // Each takes 50 ms per element, as a trainer's step: a shared reader's consumer, and a
    // private stream's (whose client reports on its own, without acknowledgements).
    let slow = ["--step-ms", "50", "--max-batches", "200"];
    let shared = ["--container", "c", "--shared-name", "s"];
    let mut children = vec![
        spawn_reader(&server.addr, &[], &spec, &[&slow[..], &shared[..]].concat()),
        spawn_reader(&server.addr, &[], &spec, &[&slow[..], &["--container", "p"][..]].concat()),
    ];
    let status =
        status_once(&metrics_addr, |status| status["readers"].as_array().unwrap().len() == 2 && reported(status, 3.0));
    for (field, value) in [("sharedName", "s"), ("container", "p")] {
        let reader = reader(&status, field, value);
        let consumer = only_consumer(reader);
        let bound = consumer["inputBound"].as_f64().unwrap();
        println!("{value}: input-bound {bound}, {} elements/s", consumer["elementsPerSecond"]);
        assert!(bound < 0.1, "a consumer sleeping 50 ms an element waits {bound} of its time: {reader:#}");
        let rate = consumer["elementsPerSecond"].as_f64().unwrap();
        assert!((5.0..=21.0).contains(&rate), "at most 20 elements a second: {rate}");
        assert!(reader["inputBound"].as_f64().unwrap() < 0.1, "{reader:#}");
        assert_eq!(reader["replicasRecommended"], 1, "one server does: {reader:#}");
    }
    // The shared reader's figure is a metric too, labelled by container and reader.
    let metrics = scrape_metrics(&metrics_addr);
    let line =
        metrics.lines().find(|line| line.starts_with("readerd_reader_input_bound{container=\"c\",reader=\"s\"}"));
    let bound: f64 = line.unwrap_or_else(|| panic!("{metrics}")).rsplit(' ').next().unwrap().parse().unwrap();
    assert!(bound < 0.1, "{bound}");
    assert!(metrics.contains("readerd_reader_stage_seconds_total{container=\"c\",reader=\"s\",stage=\"reading\"}"));
    let sent = "readerd_reader_elements_sent_total{container=\"c\",reader=\"s\"} ";
    let sent: u64 = metrics.lines().find_map(|l| l.strip_prefix(sent)).unwrap().parse().unwrap();
    assert!(sent >= 40, "the reader's streams sent its elements: {sent}");
    for child in &mut children {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

#[test]
fn a_server_slowed_by_its_object_store_makes_its_trainer_input_bound_reading_first() {
    // Many small objects, a line each: a GET per element (three in flight: the
    // pipeline prefetches the next files).
    let s3 = one_line_objects("training", "slow", 600);
    let files = tempfile::tempdir().unwrap();
    let spec = files.path().join("spec.json");
    std::fs::write(&spec, r#"{"source": {"files": ["part-*.txt"], "format": "TEXT_LINE"}}"#).unwrap();
    // Every request to the object store takes 20 ms more.
    let proxy = FaultProxy::start(&s3.endpoint);
    proxy.set_delay(Duration::from_millis(20));
    let metrics_addr = free_address();
    let args = ["--metrics-listen", metrics_addr.as_str()];
    let server = ServerProcess::start_with_env(&["s3://training/slow"], &args, &proxy.s3_env());
    let mut child = spawn_reader(&server.addr, &[], &spec, &["--container", "c", "--shared-name", "slow"]);
    let status = status_once(&metrics_addr, |status| reported(status, 3.0));
    let reader = reader(&status, "sharedName", "slow");
    let bound = only_consumer(reader)["inputBound"].as_f64().unwrap();
    println!("input-bound {bound}, stages {}", reader["stages"]);
    assert!(bound > 0.8, "a trainer with no step of its own waits {bound} of its time: {reader:#}");
    // Waiting about 88% of the time, the trainer would take about 7 times as much at 10%:
    // more servers are recommended, as a metric and by `readerctl stats` too.
    let recommended = reader["replicasRecommended"].as_u64().unwrap();
    assert!(recommended >= 3, "{reader:#}");
    let metrics = scrape_metrics(&metrics_addr);
    let line = "readerd_reader_replicas_recommended{container=\"c\",reader=\"slow\"} ";
    let metric: u64 =
        metrics.lines().find_map(|l| l.strip_prefix(line)).unwrap_or_else(|| panic!("{metrics}")).parse().unwrap();
    assert!(metric >= 3, "{metric}");
    let stats = readerd_tests::readerctl(&server.addr, &["stats", "--container", "c", "--shared-name", "slow"]);
    let stats = String::from_utf8_lossy(&stats.stdout);
    let printed: u64 = stats.lines().find_map(|l| l.strip_prefix("replicas recommended ")).unwrap().parse().unwrap();
    assert!(printed >= 3, "{stats}");
    assert!(stats.contains("input-bound "), "{stats}");
    let stages = reader["stages"].as_object().unwrap();
    let reading = stages["reading"].as_f64().unwrap();
    for (stage, seconds) in stages {
        if stage != "reading" {
            assert!(reading > seconds.as_f64().unwrap(), "reading dominates: {stages:?}");
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_trainer_stuck_in_next_shows_as_waiting_while_it_waits() {
    // 160 objects of one 512 KiB line each: the server's read-ahead (the pipeline's
    // prefetch, the stream's buffers, the connection's 16 MiB window) holds a few dozen of
    // them, and the trainer takes a few dozen before the store stops answering.
    let s3 = S3Server::start();
    s3.create_bucket("training");
    let files = tempfile::tempdir().unwrap();
    for f in 0..160 {
        let line = format!("{f}{}\n", "x".repeat(512 << 10));
        std::fs::write(files.path().join(format!("part-{f:03}.txt")), line).unwrap();
    }
    s3.upload_dir("training", "big", files.path());
    let spec = files.path().join("spec.json");
    std::fs::write(&spec, r#"{"source": {"files": ["part-*.txt"], "format": "TEXT_LINE"}}"#).unwrap();
    let proxy = FaultProxy::start(&s3.endpoint);
    let metrics_addr = free_address();
    let args = ["--metrics-listen", metrics_addr.as_str()];
    let server = ServerProcess::start_with_env(&["s3://training/big"], &args, &proxy.s3_env());
    // A trainer with a step of 50 ms, faster data: not input-bound.
    let mut child = spawn_reader(&server.addr, &[], &spec, &["--container", "c", "--step-ms", "50"]);
    let before = status_once(&metrics_addr, |status| reported(status, 2.0));
    let consumer = only_consumer(reader(&before, "container", "c")).clone();
    assert!(consumer["inputBound"].as_f64().unwrap() < 0.3, "{consumer:#}");
    // The store stops answering for a minute: once the read-ahead is used up the trainer
    // waits inside `next()`, and its client says so while it waits.
    proxy.set_delay(Duration::from_secs(60));
    let stuck = |status: &Value| {
        let readers = status["readers"].as_array().unwrap();
        let consumer = readers.iter().find(|reader| reader["container"] == "c").map(only_consumer);
        consumer.is_some_and(|consumer| consumer["inputBound"].as_f64().unwrap_or(0.0) > 0.8)
    };
    let during = status_once(&metrics_addr, stuck);
    println!("before: {consumer}\nwhile stuck: {}", only_consumer(reader(&during, "container", "c")));
    assert!(child.try_wait().unwrap().is_none(), "the trainer still waits for its elements");
    // `/metrics` answers too while the reader's producer waits on the store.
    assert!(scrape_metrics(&metrics_addr).contains("readerd_"));
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn with_tokens_the_status_needs_one_and_shows_only_the_containers_it_may_read() {
    let data = tempfile::tempdir().unwrap();
    let lines: String = (0..50).map(|i| format!("line {i}\n")).collect();
    write_file(data.path(), "lines.txt", lines.as_bytes());
    let spec = data.path().join("spec.json");
    std::fs::write(&spec, r#"{"source": {"files": ["lines.txt"], "format": "TEXT_LINE"}}"#).unwrap();
    let tokens = data.path().join("tokens.json");
    let (token_a, token_b) = ("team-a-watcher-0123456789", "team-b-watcher-0123456789");
    let grants = format!(
        r#"{{"tokens": [{{"token": "{token_a}", "containers": ["a"]}}, {{"token": "{token_b}", "containers": ["b"]}}]}}"#
    );
    std::fs::write(&tokens, grants).unwrap();
    let metrics_addr = free_address();
    let args = ["--auth-tokens", tokens.to_str().unwrap(), "--metrics-listen", metrics_addr.as_str()];
    let server = ServerProcess::start_with(&[data.path()], &args);
    for (token, container) in [(token_a, "a"), (token_b, "b")] {
        let read = ["--token", token, "read", "--spec", spec.to_str().unwrap(), "--container", container];
        let read = [&read[..], &["--shared-name", "s", "--max-batches", "5", "-q"][..]].concat();
        assert!(readerd_tests::readerctl(&server.addr, &read).status.success());
    }
    let containers = |status: &Value| -> Vec<String> {
        let readers = status["readers"].as_array().unwrap();
        readers.iter().map(|reader| reader["container"].as_str().unwrap().to_owned()).collect()
    };

    // No token: no data; the page (which holds none) offers a login form.
    let (code, _) = http_get(&metrics_addr, "/status.json", &[]);
    assert_eq!(code, 401);
    let (code, page) = http_get(&metrics_addr, "/", &[]);
    assert_eq!(code, 200);
    assert!(page.contains(r#"action="/login""#));
    // Self-contained: nothing loaded from another host (SVG's namespace is a name, not a load).
    let elsewhere = page.replace("http://www.w3.org/2000/svg", "");
    assert!(!elsewhere.contains("http://") && !elsewhere.contains("https://") && !elsewhere.contains("src="));
    // A bearer token sees its containers only.
    let bearer = format!("Bearer {token_a}");
    let (code, body) = http_get(&metrics_addr, "/status.json", &[("authorization", &bearer)]);
    assert_eq!(code, 200, "{body}");
    assert_eq!(containers(&serde_json::from_str(&body).unwrap()), ["a"]);
    // The login form sets the token as an HttpOnly cookie (never in a URL), and a token
    // the server does not know sets nothing.
    let form = [("content-type", "application/x-www-form-urlencoded")];
    let (code, _) = readerd_tests::http_call(&metrics_addr, "POST", "/login", &form, "token=not-a-token-000000000");
    assert_eq!(code, 401);
    let login = format!("token={token_b}");
    let (code, head, _) = readerd_tests::http_exchange(&metrics_addr, "POST", "/login", &form, &login);
    assert_eq!(code, 303);
    let set_cookies: Vec<&str> = (head.lines())
        .filter(|line| line.to_ascii_lowercase().starts_with("set-cookie:"))
        .map(|line| line["set-cookie:".len()..].trim())
        .collect();
    let cookie = set_cookies.iter().find(|c| c.starts_with("readerd_session=")).unwrap_or_else(|| panic!("{head}"));
    // The cookie earlier versions set, which held the token, is cleared.
    assert!(set_cookies.iter().any(|c| c.starts_with("readerd_token=;") && c.contains("Max-Age=0")), "{head}");
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(head.lines().any(|line| line.eq_ignore_ascii_case("location: /")), "{head}");
    let cookie = cookie.split(';').next().unwrap();
    assert!(!cookie.contains(token_b), "the cookie holds a session id, not the token: {cookie}");
    let (code, body) = http_get(&metrics_addr, "/status.json", &[("cookie", cookie)]);
    assert_eq!(code, 200, "{body}");
    assert_eq!(containers(&serde_json::from_str(&body).unwrap()), ["b"]);
    // Another site's page can neither log a browser in nor out.
    for (name, value) in [("origin", "http://elsewhere.example"), ("sec-fetch-site", "cross-site")] {
        let headers = [form[0], (name, value), ("cookie", cookie)];
        let (code, _) = readerd_tests::http_call(&metrics_addr, "POST", "/login", &headers, &login);
        assert_eq!(code, 403, "a login with {name}: {value}");
        let (code, _) = readerd_tests::http_call(&metrics_addr, "POST", "/logout", &headers, "");
        assert_eq!(code, 403, "a logout with {name}: {value}");
    }
    let (code, _) = http_get(&metrics_addr, "/status.json", &[("cookie", cookie)]);
    assert_eq!(code, 200, "the session outlives a refused logout");
    // This listener's own page (the request's Host, or the browser's word) logs in.
    for (name, value) in [("origin", "http://x"), ("sec-fetch-site", "same-origin")] {
        let headers = [form[0], (name, value)];
        let (code, _) = readerd_tests::http_call(&metrics_addr, "POST", "/login", &headers, &login);
        assert_eq!(code, 303, "a login with {name}: {value}");
    }
    // A logout ends the session: its cookie shows nothing after.
    let (code, _) = readerd_tests::http_call(&metrics_addr, "POST", "/logout", &[("cookie", cookie)], "");
    assert_eq!(code, 303);
    let (code, _) = http_get(&metrics_addr, "/status.json", &[("cookie", cookie)]);
    assert_eq!(code, 401, "a session ended by its logout");
    // Tokens are not guessed online: past 5 attempts a second, an address is told to wait.
    let guesses: Vec<u16> = (0..20)
        .map(|i| readerd_tests::http_call(&metrics_addr, "POST", "/login", &form, &format!("token=guess-{i:020}")).0)
        .collect();
    assert!(guesses.contains(&429) && guesses.iter().all(|code| [401, 429].contains(code)), "{guesses:?}");
    // Nor through /status.json's bearer header: the same limit on token checks.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let guesses: Vec<u16> = (0..20)
        .map(|i| http_get(&metrics_addr, "/status.json", &[("authorization", &format!("Bearer guess-{i:020}"))]).0)
        .collect();
    assert!(guesses.contains(&429) && guesses.iter().all(|code| [401, 429].contains(code)), "{guesses:?}");
}

/// A tmux session of 160 columns running a shell command, ended when dropped.
struct Terminal {
    session: String,
}

impl Terminal {
    /// Starts `command` in a detached session named `name` (and this process's id) of
    /// `rows` rows.
    fn start(name: &str, rows: u16, command: &str) -> Self {
        let session = format!("{name}-{}", std::process::id());
        let rows = rows.to_string();
        let args = ["new-session", "-d", "-s", &session, "-x", "160", "-y", &rows, command];
        let started = Command::new("tmux").args(args).status();
        assert!(started.unwrap().success(), "tmux is needed");
        Self { session }
    }

    /// `tmux capture-pane`: what the terminal shows now.
    fn pane(&self) -> String {
        let captured = Command::new("tmux").args(["capture-pane", "-p", "-t", &self.session]).output().unwrap();
        String::from_utf8_lossy(&captured.stdout).into_owned()
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.session]).status();
    }
}

#[test]
fn readerctl_top_under_tmux_shows_the_readers_and_updates_in_place() {
    let data = tempfile::tempdir().unwrap();
    for f in 0..20 {
        let lines: String = (0..100).map(|l| format!("{f}-{l}\n")).collect();
        write_file(data.path(), &format!("part-{f:02}.txt"), lines.as_bytes());
    }
    let spec = data.path().join("spec.json");
    std::fs::write(
        &spec,
        r#"{"source": {"files": ["part-*.txt"], "format": "TEXT_LINE"}, "pipeline": {"numEpochs": 3}}"#,
    )
    .unwrap();
    let metrics_addr = free_address();
    let server = ServerProcess::start_with(&[data.path()], &["--metrics-listen", &metrics_addr]);
    let mut child =
        spawn_reader(&server.addr, &[], &spec, &["--container", "c", "--shared-name", "s", "--step-ms", "5"]);
    let top = format!("{} top --status {metrics_addr} --every 0.5", binary("readerctl").display());
    let terminal = Terminal::start("readerd-top", 50, &top);
    let mut first = String::new();
    for _ in 0..60 {
        first = terminal.pane();
        if first.contains("c/s ") && first.contains("files ") && first.contains("consumer ") {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let drawn = first.clone();
    std::thread::sleep(Duration::from_secs(2));
    let second = terminal.pane();
    drop(terminal);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(drawn.contains("c/s ") && drawn.contains("epoch ") && drawn.contains("stages  reading"), "{drawn}");
    assert!(drawn.contains("consumer ") && drawn.contains("waiting "), "{drawn}");
    // Redrawn in place: one screen, not a scroll of them, and its figures moved.
    assert_eq!(second.matches("readerd at ").count(), 1, "{second}");
    assert_ne!(drawn, second, "the screen did not change in 2 s");
}

#[test]
fn readerctl_read_on_a_terminal_shows_its_progress_out_of_the_described_total() {
    let data = tempfile::tempdir().unwrap();
    write_file(data.path(), "records.bin", &(0..400u32).map(|i| i as u8).collect::<Vec<u8>>());
    let spec = data.path().join("spec.json");
    std::fs::write(
        &spec,
        r#"{"source": {"files": ["records.bin"], "format": "FIXED_LENGTH", "recordBytes": 4}, "pipeline": {"batchSize": 10}}"#,
    )
    .unwrap();
    let server = ServerProcess::start(&[data.path()]);
    // stdout (the elements) away; the progress line is stderr's, on the terminal.
    let read = format!(
        "{} --addr {} read --spec {} --step-ms 300 > /dev/null; sleep 30",
        binary("readerctl").display(),
        server.addr,
        spec.display()
    );
    let terminal = Terminal::start("readerd-read", 10, &read);
    let mut shown = String::new();
    for _ in 0..80 {
        shown = terminal.pane();
        if shown.contains("/10 elements (") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(terminal);
    // 100 records in batches of 10: the server says 10 elements before any is read.
    assert!(shown.contains("/10 elements (") && shown.contains(" records in "), "{shown}");
}
