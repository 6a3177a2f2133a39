//! `/metrics` scraped from a real server: the counters move while streams run; with
//! `--auth-tokens` a scrape needs a token and shows only the containers it may read; and
//! connections that send nothing do not keep a scraper out.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use readerd_tests::{ServerProcess, free_address, http_exchange, readerctl, scrape_metrics, write_file};

/// The value of the sample `name` (with its labels, as written).
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{name} not in:\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn counters_move_during_streams() {
    let data = tempfile::tempdir().unwrap();
    let text: String = (0..50).map(|i| format!("line {i}\n")).collect();
    write_file(data.path(), "lines.txt", text.as_bytes());
    readerd_tests::write_tfrecord(&data.path().join("bad.tfrecord"), &[b"good".to_vec(), b"bad".to_vec()]);
    let mut bytes = std::fs::read(data.path().join("bad.tfrecord")).unwrap();
    let last = bytes.len() - 6;
    bytes[last] ^= 1; // the second record's data
    std::fs::write(data.path().join("bad.tfrecord"), bytes).unwrap();
    let spec = data.path().join("spec.json");
    std::fs::write(&spec, r#"{"source": {"files": ["lines.txt"], "format": "TEXT_LINE"}}"#).unwrap();
    let bad_spec = data.path().join("bad.json");
    std::fs::write(&bad_spec, r#"{"source": {"files": ["bad.tfrecord"], "format": "TFRECORD"}}"#).unwrap();

    let metrics_addr = free_address();
    let server = ServerProcess::start_with(&[data.path()], &["--metrics-listen", &metrics_addr]);
    let before = scrape_metrics(&metrics_addr);
    assert_eq!(sample(&before, "readerd_records_sent_total"), 0.0);
    assert_eq!(sample(&before, "readerd_checkpoint_commit_seconds_count"), 0.0);

    let spec = spec.to_str().unwrap();
    let shared = ["--container", "c", "--shared-name", "s", "--max-batches", "20", "--checkpoint-every", "10", "-q"];
    let mut args = vec!["read", "--spec", spec];
    args.extend(shared);
    assert!(readerctl(&server.addr, &args).status.success());
    let failed = readerctl(&server.addr, &["read", "--spec", bad_spec.to_str().unwrap(), "-q"]);
    assert!(!failed.status.success());

    let after = scrape_metrics(&metrics_addr);
    assert!(sample(&after, "readerd_records_sent_total") >= 20.0, "{after}");
    assert!(sample(&after, "readerd_bytes_sent_total") >= 20.0 * 6.0);
    assert_eq!(sample(&after, "readerd_streams_opened_total"), 2.0);
    assert_eq!(sample(&after, "readerd_checkpoint_commit_seconds_count"), 2.0);
    assert_eq!(sample(&after, "readerd_checkpoint_commit_seconds_bucket{le=\"+Inf\"}"), 2.0);
    assert_eq!(sample(&after, "readerd_stream_errors_total{code=\"DataLoss\"}"), 1.0);
    assert!(sample(&after, "readerd_reader_records_produced_total{container=\"c\",reader=\"s\"}") >= 20.0);
    // The server sees the trainers go a moment after they exit.
    let mut settled = after;
    for _ in 0..100 {
        if sample(&settled, "readerd_streams_active") == 0.0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        settled = scrape_metrics(&metrics_addr);
    }
    assert_eq!(sample(&settled, "readerd_streams_active"), 0.0, "both streams ended");
    assert_eq!(sample(&settled, "readerd_stream_buffered_elements"), 0.0, "no stream left anything buffered");
}

/// `GET /metrics` with `authorization: Bearer <token>` (none: no header): the status, the
/// response's head and its body. Retried after a second when the listener rates the
/// token checks of this address (5 a second).
fn scrape_with(addr: &str, token: Option<&str>) -> (u16, String, String) {
    let header = token.map(|token| format!("Bearer {token}"));
    let headers: Vec<(&str, &str)> = header.iter().map(|value| ("authorization", value.as_str())).collect();
    loop {
        let (code, head, body) = http_exchange(addr, "GET", "/metrics", &headers, "");
        if code != 429 {
            return (code, head, body);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn with_tokens_a_scrape_needs_one_and_sees_only_its_containers() {
    let data = tempfile::tempdir().unwrap();
    let text: String = (0..50).map(|i| format!("line {i}\n")).collect();
    write_file(data.path(), "lines.txt", text.as_bytes());
    let spec = data.path().join("spec.json");
    std::fs::write(&spec, r#"{"source": {"files": ["lines.txt"], "format": "TEXT_LINE"}}"#).unwrap();
    let tokens = data.path().join("tokens.json");
    let (team_a, team_b, operator) =
        ("team-a-scraper-0123456789", "team-b-scraper-0123456789", "operator-0123456789abcdef");
    std::fs::write(
        &tokens,
        format!(
            r#"{{"tokens": [{{"token": "{team_a}", "containers": ["a"]}}, {{"token": "{team_b}", "containers": ["b"]}},
                {{"token": "{operator}", "containers": ["*"], "admin": true}}]}}"#
        ),
    )
    .unwrap();
    let metrics_addr = free_address();
    let args = ["--auth-tokens", tokens.to_str().unwrap(), "--metrics-listen", metrics_addr.as_str()];
    let server = ServerProcess::start_with(&[data.path()], &args);
    for (token, container) in [(team_a, "a"), (team_b, "b")] {
        let shared_name = format!("reader-of-{container}");
        let read = readerctl(
            &server.addr,
            &["--token", token, "read", "--spec", spec.to_str().unwrap(), "--container", container]
                .into_iter()
                .chain(["--shared-name", shared_name.as_str(), "--max-batches", "5", "-q"])
                .collect::<Vec<_>>(),
        );
        assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    }

    // No token, or one the server does not know: 401, naming the scheme.
    for token in [None, Some("not-a-token-at-all-0000000")] {
        let (code, head, body) = scrape_with(&metrics_addr, token);
        assert_eq!(code, 401, "{token:?}: {head}\n{body}");
        assert!(head.to_ascii_lowercase().contains("www-authenticate: bearer"), "{head}");
        assert!(!body.contains("readerd_"), "{body}");
    }
    // A team's token: the server-wide series, and its own container's only.
    for (token, own, other) in [(team_a, "a", "b"), (team_b, "b", "a")] {
        let (code, head, body) = scrape_with(&metrics_addr, Some(token));
        assert_eq!(code, 200, "{head}\n{body}");
        assert!(sample(&body, "readerd_records_sent_total") >= 5.0, "{body}");
        assert!(body.contains("# TYPE readerd_checkpoint_commit_seconds histogram"), "{body}");
        let own_series =
            format!("readerd_reader_records_produced_total{{container=\"{own}\",reader=\"reader-of-{own}\"}}");
        assert!(sample(&body, &own_series) >= 5.0, "{body}");
        assert!(!body.contains(&format!("container=\"{other}\"")), "team {own} sees container {other}:\n{body}");
        assert!(!body.contains(&format!("reader-of-{other}")), "team {own} sees container {other}:\n{body}");
    }
    // The operator's token (every container): both.
    let (code, head, body) = scrape_with(&metrics_addr, Some(operator));
    assert_eq!(code, 200, "{head}\n{body}");
    for container in ["a", "b"] {
        let series = format!(
            "readerd_reader_records_produced_total{{container=\"{container}\",reader=\"reader-of-{container}\"}}"
        );
        assert!(sample(&body, &series) >= 5.0, "{body}");
    }
}

/// `GET /metrics` on a new connection: the status and body, or why there is none; the
/// answer must come within `within`.
fn get_within(addr: &str, within: Duration) -> Result<(u16, String), String> {
    let mut socket = TcpStream::connect(addr).map_err(|err| format!("connect: {err}"))?;
    socket.set_read_timeout(Some(within)).unwrap();
    let request = "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    socket.write_all(request.as_bytes()).map_err(|err| format!("write: {err}"))?;
    let mut response = String::new();
    socket.read_to_string(&mut response).map_err(|err| format!("read: {err}"))?;
    let (head, body) = response.split_once("\r\n\r\n").ok_or_else(|| format!("no answer: {response:?}"))?;
    let status = head.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    Ok((status, body.to_owned()))
}

/// Connections that send nothing, or half a request line, and stay open do not keep a
/// scraper out: with as many held open as the listener serves at once (and then as many
/// again), a scrape on a new connection is answered at once (here: within 5 s, a
/// liveness bound), every time.
#[test]
fn half_open_connections_do_not_keep_a_scraper_out() {
    let data = tempfile::tempdir().unwrap();
    write_file(data.path(), "lines.txt", b"line\n");
    let metrics_addr = free_address();
    let _server = ServerProcess::start_with(&[data.path()], &["--metrics-listen", &metrics_addr]);
    assert!(scrape_metrics(&metrics_addr).contains("readerd_"));

    let mut held = Vec::new();
    for round in 0..2 {
        for i in 0..64 {
            let mut socket = TcpStream::connect(&metrics_addr).unwrap();
            if i % 2 == 1 {
                socket.write_all(b"GET /metr").unwrap();
            }
            held.push(socket);
        }
        // The listener has taken them all from its queue.
        std::thread::sleep(Duration::from_millis(300));
        for attempt in 0..3 {
            match get_within(&metrics_addr, Duration::from_secs(5)) {
                Ok((200, body)) => assert!(body.contains("readerd_streams_active"), "{body}"),
                other => {
                    panic!("round {round}, scrape {attempt} with {} silent connections held: {other:?}", held.len())
                }
            }
        }
    }
    drop(held);
}
