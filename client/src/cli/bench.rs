//! `readerctl bench`: readerd started on the data written by `gen-demo` (or the server at
//! --addr), measured by the load generator of [`readerd_client::bench`], and its report
//! as a table or one JSON document.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use readerd_client::bench::BenchReport;

use super::args::Output;

/// A readerd process `readerctl bench` started on the data, with a state directory of its
/// own.
struct BenchServer {
    process: std::process::Child,
    addr: String,
    state: PathBuf,
}

impl BenchServer {
    /// Starts `binary` (default: the readerd beside readerctl) and waits for its address.
    fn start(binary: Option<&Path>, data: &Path, name: &str) -> anyhow::Result<Self> {
        use std::io::BufRead;
        let binary = match binary {
            Some(path) => path.to_owned(),
            None => std::env::current_exe()?.with_file_name("readerd"),
        };
        let state = std::env::temp_dir().join(format!("readerctl-bench-{}-{name}", std::process::id()));
        let mut process = std::process::Command::new(&binary)
            .args(["--listen", "127.0.0.1:0", "--allow-unauthenticated", "--data-root"])
            .arg(data)
            .arg("--state-dir")
            .arg(&state)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|err| anyhow::anyhow!("{}: {err}", binary.display()))?;
        let mut line = String::new();
        std::io::BufReader::new(process.stdout.take().expect("piped")).read_line(&mut line)?;
        let server = Self { process, addr: String::new(), state };
        match line.trim().strip_prefix("listening on ") {
            Some(listening) => Ok(Self { addr: format!("http://{listening}"), ..server }),
            None => {
                server.stop();
                anyhow::bail!("readerd did not start: {line:?}")
            }
        }
    }

    fn pid(&self) -> String {
        self.process.id().to_string()
    }

    fn stop(mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// `readerctl bench`: starts readerd on the data (unless told to use --addr), runs the
/// load generator and prints a table or one JSON document.
pub async fn bench(
    addr: &str,
    use_addr: bool,
    server: Option<PathBuf>,
    data: &Path,
    workloads: &[String],
    consumers: &[usize],
    output: Output,
) -> anyhow::Result<ExitCode> {
    let mut report = BenchReport {
        runs: Vec::new(),
        workloads: Vec::new(),
        tonic_loopback_mb_per_s: readerd_client::bench::tonic_loopback_mb_per_s().await?,
    };
    for workload in workloads {
        // A server of its own per workload: its peak memory is this workload's alone, not
        // what the allocator kept from the one before.
        let started = if use_addr { None } else { Some(BenchServer::start(server.as_deref(), data, workload)?) };
        let (addr, pid) = match &started {
            Some(server) => (server.addr.clone(), Some(server.pid())),
            None => (addr.to_owned(), None),
        };
        let measured = readerd_client::bench::run_workload(&addr, pid.as_deref(), data, workload, consumers).await;
        if let Some(started) = started {
            started.stop();
        }
        let (rows, reference) = measured?;
        report.runs.extend(rows);
        report.workloads.push(reference);
    }
    print_report(&report, output)
}

/// `readerctl bench --use-addr --shared-name NAME`: each workload as one shared reader
/// read from every server of `addr` (a comma-separated list: replicas) by K consumers.
pub async fn bench_shared(
    addr: &str,
    shared_name: &str,
    data: &Path,
    workloads: &[String],
    consumers: &[usize],
    output: Output,
) -> anyhow::Result<ExitCode> {
    let addrs: Vec<String> = addr.split(',').map(str::trim).filter(|a| !a.is_empty()).map(str::to_owned).collect();
    let mut report = BenchReport { runs: Vec::new(), workloads: Vec::new(), tonic_loopback_mb_per_s: 0.0 };
    for workload in workloads {
        let rows = readerd_client::bench::run_shared_workload(&addrs, data, workload, consumers, shared_name).await?;
        report.runs.extend(rows);
    }
    print_report(&report, output)
}

/// The report on stdout, as a table or one JSON document.
fn print_report(report: &BenchReport, output: Output) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match output {
        Output::Jsonl => writeln!(out, "{}", serde_json::to_string(report)?)?,
        Output::Text => print_table(&mut out, report)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The text report: a row per workload and consumer count, each workload's reference
/// figures, and tonic's loopback rate.
fn print_table(out: &mut impl Write, report: &BenchReport) -> std::io::Result<()> {
    let (rows, references) = (&report.runs, &report.workloads);
    writeln!(
        out,
        "{:<12} {:>3} {:>12} {:>10} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}",
        "workload",
        "K",
        "records/s",
        "MB/s",
        "first ms",
        "gap p50",
        "gap p99",
        "server MB",
        "budget MB",
        "client MB",
        "cpu s/GB",
        "srv cores",
        "cli cores"
    )?;
    let show = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
    let show2 = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    for row in rows {
        let load = &row.load;
        writeln!(
            out,
            "{:<12} {:>3} {:>12.0} {:>10.1} {:>9.1} {:>9.2} {:>9.2} {:>10} {:>10.1} {:>10} {:>9} {:>9} {:>9}",
            row.workload,
            load.consumers,
            load.records_per_s,
            load.mb_per_s,
            load.first_batch_ms,
            load.gap_p50_ms,
            load.gap_p99_ms,
            show(row.server_peak_rss_mb),
            row.server_rss_budget_mb,
            show(row.client_peak_rss_mb),
            show(row.server_cpu_s_per_gb),
            show2(row.server_cores),
            show2(row.client_cores)
        )?;
    }
    writeln!(out)?;
    for reference in references {
        writeln!(
            out,
            "{}: {:.1} MB of files, page-cache read {:.0} MB/s; first batch {:.1} ms fresh, {} ms after resume",
            reference.workload,
            reference.file_bytes as f64 / 1e6,
            reference.raw_read_mb_per_s,
            reference.first_batch_ms,
            reference.first_batch_after_resume_ms.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.1}"))
        )?;
    }
    writeln!(out, "tonic loopback, 1 MiB messages: {:.0} MB/s", report.tonic_loopback_mb_per_s)?;
    Ok(())
}
