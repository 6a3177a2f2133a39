//! The load generator behind `readerctl bench`: K consumers read a spec from a server at
//! once, each its own private stream of the whole dataset, and report what a trainer
//! sees: records/s, decoded MB/s, time to the first batch (fresh, and after resuming from
//! a checkpoint), and the p50/p99 gap between batches.

use std::time::{Duration, Instant};

use readerd_proto::v1 as pb;
use serde::Serialize;

use crate::client::{Client, parse_spec};
use crate::replicas::ReplicaSession;
use crate::resume::{Event, Received, received};
// Counted by `echo` too, so it lives in `payload`; kept here as `bench::element_bytes`.
pub use crate::payload::element_bytes;

/// What one run of K consumers measured.
#[derive(Debug, Serialize)]
pub struct LoadReport {
    pub consumers: usize,
    pub records: u64,
    pub batches: u64,
    /// Decoded tensor bytes delivered (values and strings).
    pub bytes: u64,
    /// The largest batch's tensor bytes.
    pub max_batch_bytes: u64,
    pub seconds: f64,
    pub records_per_s: f64,
    pub mb_per_s: f64,
    /// Median over consumers of the time from opening the stream to its first batch.
    pub first_batch_ms: f64,
    pub gap_p50_ms: f64,
    pub gap_p99_ms: f64,
}

struct ConsumerRun {
    records: u64,
    batches: u64,
    bytes: u64,
    max_batch_bytes: u64,
    first_batch: Duration,
    gaps: Vec<Duration>,
    /// When the stream was opened, and when the last element arrived.
    opened: Instant,
    last: Instant,
}

impl ConsumerRun {
    fn new() -> Self {
        let now = Instant::now();
        Self {
            records: 0,
            batches: 0,
            bytes: 0,
            max_batch_bytes: 0,
            first_batch: Duration::ZERO,
            gaps: Vec::new(),
            opened: now,
            last: now,
        }
    }

    /// Counts an element that just arrived.
    fn element(&mut self, element: &pb::Element) {
        let now = Instant::now();
        if self.batches == 0 {
            self.first_batch = now - self.opened;
        } else {
            self.gaps.push(now - self.last);
        }
        self.last = now;
        self.records += element.keys.len() as u64;
        let bytes = element_bytes(element);
        self.bytes += bytes;
        self.max_batch_bytes = self.max_batch_bytes.max(bytes);
        self.batches += 1;
    }
}

/// Reads one stream of `request` to its end (or `max_batches`).
async fn consume(addr: &str, request: pb::ReadRequest, max_batches: Option<u64>) -> anyhow::Result<ConsumerRun> {
    let mut client = Client::connect(addr).await?;
    let mut run = ConsumerRun::new();
    let mut stream = client.read_with(request).await?;
    while let Some(response) = stream.message().await? {
        match received(response) {
            Some(Received::Element(element)) => {
                run.element(&element);
                if max_batches.is_some_and(|max| run.batches >= max) {
                    break;
                }
            }
            Some(Received::EndOfSequence { .. }) => break,
            Some(Received::Checkpoint { .. }) | None => {}
        }
    }
    Ok(run)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index].as_secs_f64() * 1e3
}

/// `consumers` private streams of `spec` at once, each to the end of the data.
pub async fn run_load(addr: &str, spec: &pb::DatasetSpec, consumers: usize) -> anyhow::Result<LoadReport> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..consumers)
        .map(|_| {
            let request = pb::ReadRequest { spec: Some(spec.clone()), ..Default::default() };
            let addr = addr.to_owned();
            tokio::spawn(async move { consume(&addr, request, None).await })
        })
        .collect();
    let mut runs = Vec::with_capacity(consumers);
    for task in tasks {
        runs.push(task.await??);
    }
    Ok(report(consumers, start.elapsed(), &runs))
}

/// `consumers` consumers of one shared reader `shared_name` of `spec` at once, each
/// reading it from every server of `addrs` (replicas: a [`ReplicaSession`]), to the end
/// of the data. Each element is acknowledged when the next is asked for, as a trainer's
/// loop does.
pub async fn run_shared_load(
    addrs: &[String],
    spec: &pb::DatasetSpec,
    consumers: usize,
    shared_name: &str,
) -> anyhow::Result<LoadReport> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..consumers)
        .map(|_| {
            let request = pb::ReadRequest {
                reader: Some(crate::client::reader_ref("bench", shared_name)),
                spec: Some(spec.clone()),
                ..Default::default()
            };
            let addrs = addrs.to_vec();
            tokio::spawn(async move { consume_shared(&addrs, request).await })
        })
        .collect();
    let mut runs = Vec::with_capacity(consumers);
    for task in tasks {
        runs.push(task.await??);
    }
    Ok(report(consumers, start.elapsed(), &runs))
}

/// Reads a shared reader from every server of `addrs` to its end.
async fn consume_shared(addrs: &[String], request: pb::ReadRequest) -> anyhow::Result<ConsumerRun> {
    let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let mut run = ConsumerRun::new();
    let mut session = ReplicaSession::open(&addrs, request, Default::default());
    while let Some(Event::Element(element)) = session.next().await? {
        run.element(&element);
    }
    Ok(run)
}

/// The figures of `runs`, consumers that ran at once for `elapsed`.
fn report(consumers: usize, elapsed: Duration, runs: &[ConsumerRun]) -> LoadReport {
    let seconds = elapsed.as_secs_f64();
    let records: u64 = runs.iter().map(|r| r.records).sum();
    let bytes: u64 = runs.iter().map(|r| r.bytes).sum();
    let mut firsts: Vec<Duration> = runs.iter().map(|r| r.first_batch).collect();
    firsts.sort();
    let mut gaps: Vec<Duration> = runs.iter().flat_map(|r| r.gaps.iter().copied()).collect();
    gaps.sort();
    LoadReport {
        consumers,
        records,
        batches: runs.iter().map(|r| r.batches).sum(),
        bytes,
        max_batch_bytes: runs.iter().map(|r| r.max_batch_bytes).max().unwrap_or(0),
        seconds,
        records_per_s: records as f64 / seconds,
        mb_per_s: bytes as f64 / seconds / 1e6,
        first_batch_ms: percentile(&firsts, 0.5),
        gap_p50_ms: percentile(&gaps, 0.5),
        gap_p99_ms: percentile(&gaps, 0.99),
    }
}

/// Rounds of [`first_batch_after_resume`] whose medians a workload reports.
const FIRST_BATCH_ROUNDS: usize = 5;

/// Time to the first batch of a fresh stream and of one resumed from a checkpoint taken
/// after `after_batches` batches (`None` if the data ends before).
pub async fn first_batch_after_resume(
    addr: &str,
    spec: &pb::DatasetSpec,
    after_batches: u64,
) -> anyhow::Result<(Duration, Option<Duration>)> {
    let mut client = Client::connect(addr).await?;
    let request = pb::ReadRequest { spec: Some(spec.clone()), ..Default::default() };
    let opened = Instant::now();
    let mut stream = client.read_with(request).await?;
    let (mut fresh, mut seen, mut last_seq) = (None, 0, -1);
    while seen < after_batches.max(1) {
        match stream.message().await?.and_then(received) {
            Some(Received::Element(element)) => {
                fresh.get_or_insert_with(|| opened.elapsed());
                seen += 1;
                last_seq = element.seq;
            }
            Some(Received::EndOfSequence { .. }) | None => break,
            Some(Received::Checkpoint { .. }) => {}
        }
    }
    anyhow::ensure!(last_seq >= 0, "the dataset is empty");
    let token = client.checkpoint(&stream.stream_id, last_seq).await?;
    drop(stream);
    let request = pb::ReadRequest { resume_token: token, ..Default::default() };
    let resumed = consume(addr, request, Some(1)).await?;
    Ok((fresh.unwrap_or_default(), (resumed.batches > 0).then_some(resumed.first_batch)))
}

/// Peak resident memory (VmHWM) and CPU seconds (user + system) of a process, from /proc.
pub fn process_usage(pid: &str) -> Option<(u64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let peak_kb: u64 =
        status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.split_whitespace().next()?.parse().ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some((peak_kb * 1024, ticks / 100.0))
}

/// Reads every file of `paths` once and returns bytes/s (the page-cache limit when the
/// files were just read).
pub fn raw_read_rate(paths: &[std::path::PathBuf]) -> std::io::Result<f64> {
    use std::io::Read;
    let mut buffer = vec![0u8; 1 << 20];
    let start = Instant::now();
    let mut total = 0u64;
    for path in paths {
        let mut file = std::fs::File::open(path)?;
        loop {
            let n = file.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// One line of the benchmark table.
#[derive(Debug, Serialize)]
pub struct BenchRow {
    pub workload: String,
    #[serde(flatten)]
    pub load: LoadReport,
    /// Peak resident memory of the server during this run (when the harness started it).
    pub server_peak_rss_mb: Option<f64>,
    /// What the server may hold for these K streams: 2 × (prefetch + shuffle buffer bytes)
    /// + 64 MB, with this run's largest batch and average record.
    pub server_rss_budget_mb: f64,
    pub client_peak_rss_mb: Option<f64>,
    /// Server CPU seconds per GB of decoded tensors delivered.
    pub server_cpu_s_per_gb: Option<f64>,
    /// CPU the server and this client (its K consumers) used during the run, in cores
    /// (CPU seconds per second): which side bounds the rate on a small machine.
    pub server_cores: Option<f64>,
    pub client_cores: Option<f64>,
}

/// Figures of a workload measured once, beside its rows.
#[derive(Debug, Serialize)]
pub struct WorkloadReference {
    pub workload: String,
    pub file_bytes: u64,
    /// Reading the workload's files from the page cache, MB/s.
    pub raw_read_mb_per_s: f64,
    /// Medians over the rounds of [`first_batch_after_resume`].
    pub first_batch_ms: f64,
    /// `None` when the workload has too few batches to resume inside it.
    pub first_batch_after_resume_ms: Option<f64>,
}

/// Everything one `readerctl bench` measured.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub runs: Vec<BenchRow>,
    pub workloads: Vec<WorkloadReference>,
    /// tonic's own server-streaming rate on loopback, 1 MiB messages (the reference).
    pub tonic_loopback_mb_per_s: f64,
}

/// Runs the consumers of `consumers` on `workload` of `data` as one shared reader per
/// run (`<shared_name>-<workload>-<K>`), read from every server of `addrs` (replicas);
/// the load figures only (the servers' processes are the caller's to measure).
pub async fn run_shared_workload(
    addrs: &[String],
    data: &std::path::Path,
    workload: &str,
    consumers: &[usize],
    shared_name: &str,
) -> anyhow::Result<Vec<BenchRow>> {
    let spec = workload_spec(data, workload)?;
    let mut rows = Vec::new();
    for &k in consumers {
        let client_before = process_usage("self").map(|(_, cpu)| cpu);
        let load = run_shared_load(addrs, &spec, k, &format!("{shared_name}-{workload}-{k}")).await?;
        let client = process_usage("self");
        rows.push(BenchRow {
            workload: workload.to_owned(),
            server_peak_rss_mb: None,
            server_rss_budget_mb: rss_budget_mb(&spec, &load),
            client_peak_rss_mb: client.map(|(rss, _)| rss as f64 / 1e6),
            server_cpu_s_per_gb: None,
            server_cores: None,
            client_cores: client.zip(client_before).map(|((_, after), before)| (after - before) / load.seconds),
            load,
        });
    }
    Ok(rows)
}

/// Runs the consumers of `consumers` on `workload` of `data` (written by `gen-demo`)
/// against the server at `addr`, whose process id (when known) gives its memory and CPU.
pub async fn run_workload(
    addr: &str,
    server_pid: Option<&str>,
    data: &std::path::Path,
    workload: &str,
    consumers: &[usize],
) -> anyhow::Result<(Vec<BenchRow>, WorkloadReference)> {
    let mut rows = Vec::new();
    let spec = workload_spec(data, workload)?;
    let files = workload_files(data, &spec)?;
    raw_read_rate(&files)?; // warm the page cache
    let raw = raw_read_rate(&files)?;
    let file_bytes = files.iter().map(|f| std::fs::metadata(f).map_or(0, |m| m.len())).sum();
    // Medians of a few rounds: one first batch is a few milliseconds, and one
    // scheduling hiccup would be the whole figure.
    let (mut fresh, mut resumed) = (Vec::new(), Vec::new());
    for _ in 0..FIRST_BATCH_ROUNDS {
        let (f, r) = first_batch_after_resume(addr, &spec, 2).await?;
        fresh.push(f);
        resumed.extend(r);
    }
    fresh.sort();
    resumed.sort();
    let fresh = percentile(&fresh, 0.5);
    let resumed = (!resumed.is_empty()).then(|| percentile(&resumed, 0.5));
    let reference = WorkloadReference {
        workload: workload.to_owned(),
        file_bytes,
        raw_read_mb_per_s: raw / 1e6,
        first_batch_ms: fresh,
        first_batch_after_resume_ms: resumed,
    };
    for &k in consumers {
        if let Some(pid) = server_pid {
            // Resets the peak (VmHWM) so each run reports its own.
            let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
        }
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let cpu_before = server_pid.and_then(process_usage).map(|(_, cpu)| cpu);
        let client_before = process_usage("self").map(|(_, cpu)| cpu);
        let load = run_load(addr, &spec, k).await?;
        let server = server_pid.and_then(process_usage);
        let client = process_usage("self");
        let gb = load.bytes as f64 / 1e9;
        let cores = |before: Option<f64>, after: Option<f64>| Some((after? - before?) / load.seconds);
        rows.push(BenchRow {
            workload: workload.to_owned(),
            server_peak_rss_mb: server.map(|(rss, _)| rss as f64 / 1e6),
            server_rss_budget_mb: rss_budget_mb(&spec, &load),
            client_peak_rss_mb: client.map(|(rss, _)| rss as f64 / 1e6),
            server_cores: cores(cpu_before, server.map(|(_, cpu)| cpu)),
            client_cores: cores(client_before, client.map(|(_, cpu)| cpu)),
            server_cpu_s_per_gb: match (server, cpu_before) {
                (Some((_, after)), Some(before)) if gb > 0.0 => Some((after - before) / gb),
                _ => None,
            },
            load,
        });
    }
    Ok((rows, reference))
}

/// The spec `gen-demo` wrote for `workload` under `data`.
fn workload_spec(data: &std::path::Path, workload: &str) -> anyhow::Result<pb::DatasetSpec> {
    let spec_path = data.join("specs").join(format!("{workload}.json"));
    let text = std::fs::read_to_string(&spec_path)
        .map_err(|err| anyhow::anyhow!("{}: {err} (write the data with readerctl gen-demo)", spec_path.display()))?;
    parse_spec(&text).map_err(|err| anyhow::anyhow!("{}: {err}", spec_path.display()))
}

/// tonic's own server-streaming rate on loopback in MB/s: 1 MiB messages, 1 GiB in all,
/// the best of 3 runs (it is a limit, and one run can land on a busy moment).
pub async fn tonic_loopback_mb_per_s() -> anyhow::Result<f64> {
    let mut best = 0f64;
    for _ in 0..3 {
        best = best.max(crate::echo::loopback_rate(1 << 20, 1024).await? / 1e6);
    }
    Ok(best)
}

/// The memory budget for `load`'s streams of `spec`: each stream buffers
/// `prefetch` batches (the server's default of 16 when the spec names none) of the
/// largest batch's size, and its shuffle buffer holds `bufferSize` records of the average
/// size; twice that, and 64 MB for the server itself.
fn rss_budget_mb(spec: &pb::DatasetSpec, load: &LoadReport) -> f64 {
    const DEFAULT_STREAM_BUFFER: f64 = 16.0;
    let pipeline = spec.pipeline.clone().unwrap_or_default();
    let prefetch = if pipeline.prefetch > 0 { pipeline.prefetch as f64 } else { DEFAULT_STREAM_BUFFER };
    let shuffle_records = pipeline.shuffle.map_or(0.0, |shuffle| shuffle.buffer_size as f64);
    let batch_bytes = load.max_batch_bytes as f64;
    let record_bytes = load.bytes as f64 / load.records.max(1) as f64;
    let per_stream = prefetch * batch_bytes + shuffle_records * record_bytes;
    (2.0 * per_stream * load.consumers as f64 + 64e6) / 1e6
}

/// The files a spec names under `data` (glob patterns expanded, each sorted, in order).
fn workload_files(data: &std::path::Path, spec: &pb::DatasetSpec) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    // A mixture reads its components' files.
    for component in spec.mix.iter().flat_map(|mix| &mix.datasets) {
        files.extend(workload_files(data, component)?);
    }
    for pattern in spec.source.as_ref().map(|s| s.files.as_slice()).unwrap_or_default() {
        let full = data.join(pattern);
        let matched = glob::glob(&full.to_string_lossy())?.collect::<Result<Vec<_>, _>>()?;
        files.extend(matched);
    }
    Ok(files)
}
