//! `readerctl top`: a server's status (`/status.json` on its `--metrics-listen` address)
//! in a terminal, redrawn in place every few seconds: per reader, its rate, how much of
//! their time its consumers wait, the replicas it needs, a progress bar through its epoch
//! with an ETA (when the epoch's files are known), its stages and its consumers. Plain
//! ANSI (home and clear), so tmux and `watch`-style terminals show it as it is.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Most bytes of a status read (a server with thousands of streams stays far below).
const MOST_STATUS_BYTES: u64 = 64 << 20;
const BAR_WIDTH: usize = 30;
const STAGES: [&str; 5] = ["reading", "framing", "decoding", "sendWait", "queueing"];

/// Shows the status of the server whose status listener is `status_addr` (HOST:PORT),
/// every `every`, `count` times (`None`: until interrupted).
pub async fn top(
    status_addr: &str,
    token: Option<&str>,
    every: Duration,
    count: Option<u64>,
) -> anyhow::Result<ExitCode> {
    let mut files_seen: HashMap<String, (Instant, u64)> = HashMap::new();
    let mut shown = 0;
    loop {
        let body = fetch_status(status_addr, token).await?;
        let status: Value = serde_json::from_str(&body).map_err(|err| anyhow::anyhow!("/status.json: {err}"))?;
        let now = Instant::now();
        let screen = render(status_addr, &status, &mut files_seen, now);
        print!("\x1b[H\x1b[2J{screen}");
        use std::io::Write as _;
        std::io::stdout().flush()?;
        shown += 1;
        if count.is_some_and(|count| shown >= count) {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(every).await;
    }
}

/// `GET /status.json` over plain HTTP/1.1, with the token as a bearer header.
async fn fetch_status(addr: &str, token: Option<&str>) -> anyhow::Result<String> {
    let addr = addr.trim_start_matches("http://").trim_end_matches('/');
    let mut socket = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|err| anyhow::anyhow!("the status listener at {addr} does not answer: {err}"))?;
    let mut request = format!("GET /status.json HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    if let Some(token) = token {
        request.push_str(&format!("authorization: Bearer {token}\r\n"));
    }
    request.push_str("\r\n");
    socket.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    socket.take(MOST_STATUS_BYTES).read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head.split(' ').nth(1).unwrap_or("");
    anyhow::ensure!(code == "200", "/status.json at {addr}: {} {}", head.lines().next().unwrap_or(""), body.trim());
    Ok(body.to_owned())
}

/// The screen for `status`; `files_seen` keeps each reader's files completed between
/// screens, for the ETA.
fn render(addr: &str, status: &Value, files_seen: &mut HashMap<String, (Instant, u64)>, now: Instant) -> String {
    let mut out = String::new();
    let readers = status["readers"].as_array().map(Vec::as_slice).unwrap_or_default();
    let memory = &status["memory"];
    let _ = writeln!(out, "readerd at {addr}: {} readers", readers.len());
    let budget = memory["budgetBytes"].as_u64().filter(|&b| b > 0).map_or("no budget".to_owned(), bytes);
    let _ = writeln!(out, "memory {} reserved of {budget}\n", bytes(memory["reservedBytes"].as_u64().unwrap_or(0)));
    for reader in readers {
        let name = match (reader["sharedName"].as_str(), reader["job"].as_str()) {
            (Some(shared), Some(job)) if !shared.is_empty() && job != "default" => {
                format!("{}/{shared} (job {job})", reader["container"].as_str().unwrap_or(""))
            }
            (Some(shared), _) if !shared.is_empty() => {
                format!("{}/{shared}", reader["container"].as_str().unwrap_or(""))
            }
            _ => format!(
                "{} (private {})",
                reader["container"].as_str().unwrap_or(""),
                reader["stream"].as_str().unwrap_or("")
            ),
        };
        let _ = writeln!(
            out,
            "{name}  {}/s  {}  replicas {} (recommended {})",
            rate(reader["elementsPerSecond"].as_f64()),
            waiting(reader["inputBound"].as_f64()),
            reader["replicas"].as_u64().unwrap_or(1),
            reader["replicasRecommended"].as_u64().unwrap_or(1),
        );
        let _ = writeln!(out, "  {}", progress(&name, reader, files_seen, now));
        let _ = writeln!(out, "  {}", stages(&reader["stages"]));
        let window = &reader["window"];
        if window.is_object() {
            let _ = writeln!(
                out,
                "  {}  shared {}  decoded alone {}  fallbacks {}",
                if window["attached"].as_bool() == Some(true) { "sharing" } else { "reading alone" },
                window["elementsShared"],
                window["elementsDecoded"],
                window["detachments"]
            );
        }
        for consumer in reader["consumers"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let _ = writeln!(
                out,
                "  consumer {}  {}/s  {}",
                consumer["id"].as_str().unwrap_or(""),
                rate(consumer["elementsPerSecond"].as_f64()),
                waiting(consumer["inputBound"].as_f64())
            );
        }
        for epoch in reader["epochs"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let _ = writeln!(
                out,
                "  epoch {}: splits {} leased {} done {} free {}",
                epoch["epoch"], epoch["splits"], epoch["leased"], epoch["done"], epoch["free"]
            );
        }
        out.push('\n');
    }
    for replica in status["replicas"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let _ = writeln!(
            out,
            "replica {} at {}: {} (heartbeat {:.1} s ago)  splits leased {} done {}  consumers {}",
            replica["id"].as_str().unwrap_or(""),
            replica["address"].as_str().unwrap_or(""),
            if replica["alive"].as_bool().unwrap_or(false) { "alive" } else { "silent" },
            replica["heartbeatAgeSeconds"].as_f64().unwrap_or(f64::NAN),
            replica["splitsLeased"],
            replica["splitsDone"],
            replica["consumers"]
        );
    }
    out
}

/// `epoch 3/50 [#####.....] 41% files 82/200 ETA 1m12s`: the ETA from the rate at which
/// files were completed since the last screen; for an endless spec, `epoch 272 (repeats
/// forever) ... this epoch ends in 2s`.
fn progress(name: &str, reader: &Value, files_seen: &mut HashMap<String, (Instant, u64)>, now: Instant) -> String {
    let Some(epoch) = reader["epoch"].as_u64() else { return "epoch: a mixture's components each have theirs".into() };
    let epochs = reader["numEpochs"].as_u64().map_or("∞".to_owned(), |n| n.to_string());
    let completed = reader["filesCompleted"].as_u64().unwrap_or(0);
    let rate = files_seen.insert(name.to_owned(), (now, completed)).and_then(|(then, before)| {
        let seconds = now.duration_since(then).as_secs_f64();
        (seconds > 0.0 && completed > before).then(|| (completed - before) as f64 / seconds)
    });
    let (Some(done), Some(files)) = (reader["epochFilesDone"].as_u64(), reader["epochFiles"].as_u64()) else {
        return format!("epoch {epoch}/{epochs}  {} records", reader["recordsProduced"]);
    };
    let share = if files == 0 { 1.0 } else { (done as f64 / files as f64).min(1.0) };
    let filled = (share * BAR_WIDTH as f64).round() as usize;
    let bar = format!("{}{}", "#".repeat(filled), ".".repeat(BAR_WIDTH - filled));
    let left = rate.map(|rate| duration(files.saturating_sub(done) as f64 / rate));
    if reader["numEpochs"].as_u64().is_none() {
        // Endless: no end to estimate, only this epoch's.
        let ends = left.map_or("-".to_owned(), |left| format!("in {left}"));
        return format!(
            "epoch {epoch} (repeats forever) [{bar}] {:>3.0}%  files {done}/{files}  this epoch ends {ends}",
            share * 100.0
        );
    }
    let eta = left.map_or("ETA -".to_owned(), |left| format!("ETA {left}"));
    format!("epoch {epoch}/{epochs} [{bar}] {:>3.0}%  files {done}/{files}  {eta}", share * 100.0)
}

/// The stages' shares of the reader's time so far.
fn stages(stages: &Value) -> String {
    let seconds: Vec<f64> = STAGES.iter().map(|stage| stages[*stage].as_f64().unwrap_or(0.0)).collect();
    let total: f64 = seconds.iter().sum();
    let shares = STAGES.iter().zip(&seconds).map(|(stage, s)| {
        let share = if total > 0.0 { 100.0 * s / total } else { 0.0 };
        format!("{stage} {share:.0}%")
    });
    format!("stages  {}", shares.collect::<Vec<_>>().join("  "))
}

fn waiting(input_bound: Option<f64>) -> String {
    input_bound.map_or("waiting -".to_owned(), |share| format!("waiting {:.0}%", 100.0 * share))
}

fn rate(rate: Option<f64>) -> String {
    match rate {
        None => "-".to_owned(),
        Some(rate) if rate >= 1000.0 => format!("{:.1}k", rate / 1000.0),
        Some(rate) => format!("{rate:.1}"),
    }
}

fn duration(seconds: f64) -> String {
    let seconds = seconds.round() as u64;
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h{:02}m", seconds / 3600, seconds / 60 % 60),
    }
}

fn bytes(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut value, mut unit) = (bytes as f64, 0);
    while value >= 1024.0 && unit < units.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", units[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_screen_shows_each_readers_progress_rate_wait_and_stages() {
        let status: Value = serde_json::from_str(
            r#"{"readers": [{"container": "a", "sharedName": "train", "stream": "", "elementsPerSecond": 1500.0,
                "inputBound": 0.42, "replicas": 1, "replicasRecommended": 2, "epoch": 2, "numEpochs": 5,
                "epochFilesDone": 5, "epochFiles": 10, "filesCompleted": 15, "recordsProduced": 99,
                "stages": {"reading": 3.0, "framing": 1.0}, "epochs": [],
                "consumers": [{"id": "s-1", "elementsPerSecond": 1500.0, "inputBound": 0.42}]}],
                "replicas": [], "memory": {"budgetBytes": 0, "reservedBytes": 2048}}"#,
        )
        .unwrap();
        let mut seen = HashMap::new();
        let start = Instant::now();
        let first = render("h:1", &status, &mut seen, start);
        assert!(first.contains("a/train  1.5k/s  waiting 42%  replicas 1 (recommended 2)"), "{first}");
        assert!(first.contains("epoch 2/5 [###############...............]  50%  files 5/10  ETA -"), "{first}");
        assert!(first.contains("stages  reading 75%  framing 25%  decoding 0%"), "{first}");
        assert!(first.contains("consumer s-1  1.5k/s  waiting 42%") && first.contains("2.0 KiB reserved of no budget"));
        // One more file in 10 s: the 4 left take 40 s.
        let mut later = status.clone();
        later["readers"][0]["filesCompleted"] = 16.into();
        later["readers"][0]["epochFilesDone"] = 6.into();
        let second = render("h:1", &later, &mut seen, start + Duration::from_secs(10));
        assert!(second.contains("files 6/10  ETA 40s"), "{second}");
        // Endless: the epoch is counted, and only its own end is estimated.
        let mut endless = later.clone();
        endless["readers"][0].as_object_mut().unwrap().remove("numEpochs");
        let third = render("h:1", &endless, &mut seen, start + Duration::from_secs(20));
        assert!(third.contains("epoch 2 (repeats forever) ["), "{third}");
        assert!(!third.contains('∞'), "{third}");
    }
}
