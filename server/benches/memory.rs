//! Peak memory of a real `readerd` streaming a 1 GiB dataset to a slow consumer: the
//! bounded buffers (file read-ahead, decode chunks, stream buffer, HTTP/2 windows) must
//! keep the server's peak RSS far below the dataset size.
//!
//! Run: `cargo bench -p readerd-server --bench memory`. Prints the server's peak RSS
//! (VmHWM) and exits with status 1 if it reaches 300 MB.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use readerd_client::{Client, v1 as pb};
use readerd_server::format::tfrecord::write_record;

const RECORD_BYTES: usize = 110_000;
const DATASET_BYTES: usize = 1 << 30;
const LIMIT_BYTES: u64 = 300_000_000;

fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let records_per_file = DATASET_BYTES / RECORD_BYTES / 4;
    let mut seed = 1u64;
    for file in 0..4 {
        let mut out = Vec::with_capacity(records_per_file * (RECORD_BYTES + 16));
        for _ in 0..records_per_file {
            let record: Vec<u8> = (0..RECORD_BYTES)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (seed >> 56) as u8
                })
                .collect();
            write_record(&mut out, &record);
        }
        std::fs::write(dir.path().join(format!("images-{file}.tfrecord")), out).unwrap();
    }
    let mut server = Command::new(env!("CARGO_BIN_EXE_readerd"))
        .args(["--listen", "127.0.0.1:0", "--allow-unauthenticated", "--data-root"])
        .arg(dir.path())
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("listening on ").unwrap().to_owned();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (records, bytes, seconds) = runtime.block_on(async {
        let mut client = Client::connect(&addr).await.unwrap();
        let spec: pb::DatasetSpec = serde_json::from_value(serde_json::json!({
            "source": {"files": ["images-*.tfrecord"], "format": "TFRECORD"},
            "pipeline": {"cycleLength": 2, "batchSize": 32, "shuffle": {"bufferSize": 256}}
        }))
        .unwrap();
        let started = Instant::now();
        let mut stream = client.read("", "", Some(spec)).await.unwrap();
        let (mut records, mut bytes) = (0usize, 0usize);
        while let Some(response) = stream.message().await.unwrap() {
            let Some(pb::read_response::Kind::Element(element)) = response.kind else { break };
            records += element.keys.len();
            if let Some(pb::tensor::Kind::Dense(value)) = element.features[0].tensor.as_ref().unwrap().kind.as_ref() {
                bytes += value.strings.iter().map(|s| s.len()).sum::<usize>();
            }
            // A slow trainer: 5 ms per batch of 32 images.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (records, bytes, started.elapsed().as_secs_f64())
    });
    let peak = peak_rss_bytes(server.id());
    let _ = server.kill();
    let _ = server.wait();
    println!(
        "streamed {records} records ({:.2} GiB) in {seconds:.1} s to a consumer sleeping 5 ms per batch; \
         server peak RSS {:.1} MB (limit {} MB)",
        bytes as f64 / f64::from(1u32 << 30),
        peak as f64 / 1e6,
        LIMIT_BYTES / 1_000_000
    );
    if peak >= LIMIT_BYTES || records == 0 {
        std::process::exit(1);
    }
}
