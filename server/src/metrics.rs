//! Prometheus metrics: process-wide counters kept in atomics, and the shared readers' own
//! counters read at scrape time, in the text exposition format (served at `/metrics` by
//! `crate::status::http`).

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::registry::ReaderRegistry;
use readerd_common::sync::MutexUnpoisoned;

/// Upper bounds (seconds) of the checkpoint commit latency histogram.
const COMMIT_BUCKETS: [f64; 10] = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0];

/// The process's counters.
#[derive(Debug)]
pub struct Metrics {
    pub elements_sent: AtomicU64,
    pub records_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub streams_opened: AtomicU64,
    pub streams_active: AtomicU64,
    pub state_store_errors: AtomicU64,
    /// Panics caught while a reader read or decoded, or an element was cut into messages
    /// (each ended its stream with INTERNAL).
    /// Elements waiting in streams' buffers for their trainers (all streams).
    pub stream_buffered: std::sync::atomic::AtomicI64,
    commit_buckets: [AtomicU64; COMMIT_BUCKETS.len()],
    commit_count: AtomicU64,
    commit_micros: AtomicU64,
    /// Streams that ended with an error, by gRPC code name.
    stream_errors: Mutex<Vec<(String, u64)>>,
}

pub static METRICS: Metrics = Metrics {
    elements_sent: AtomicU64::new(0),
    records_sent: AtomicU64::new(0),
    bytes_sent: AtomicU64::new(0),
    streams_opened: AtomicU64::new(0),
    streams_active: AtomicU64::new(0),
    state_store_errors: AtomicU64::new(0),
    stream_buffered: std::sync::atomic::AtomicI64::new(0),
    commit_buckets: [const { AtomicU64::new(0) }; COMMIT_BUCKETS.len()],
    commit_count: AtomicU64::new(0),
    commit_micros: AtomicU64::new(0),
    stream_errors: Mutex::new(Vec::new()),
};

impl Metrics {
    pub fn element_sent(&self, records: usize, bytes: usize) {
        self.elements_sent.fetch_add(1, Ordering::Relaxed);
        self.records_sent.fetch_add(records as u64, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn checkpoint_committed(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        for (bucket, bound) in self.commit_buckets.iter().zip(COMMIT_BUCKETS) {
            if seconds <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.commit_count.fetch_add(1, Ordering::Relaxed);
        self.commit_micros.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn stream_failed(&self, code: tonic::Code) {
        let code = format!("{code:?}");
        let mut errors = self.stream_errors.lock_unpoisoned();
        match errors.iter_mut().find(|(name, _)| *name == code) {
            Some((_, count)) => *count += 1,
            None => errors.push((code, 1)),
        }
    }

    /// The text exposition of every metric: the server-wide ones, and those of the
    /// readers of the containers `visible` lets through (labelled `container`; the
    /// listener passes the caller's grant, as for `/status.json`).
    pub fn render(&self, registry: &ReaderRegistry, visible: &dyn Fn(&str) -> bool) -> String {
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, kind: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        counter(
            "readerd_elements_sent_total",
            "Elements (examples or batches) sent to trainers.",
            "counter",
            load(&self.elements_sent),
        );
        counter("readerd_records_sent_total", "Records sent to trainers.", "counter", load(&self.records_sent));
        counter(
            "readerd_bytes_sent_total",
            "Tensor payload bytes sent to trainers.",
            "counter",
            load(&self.bytes_sent),
        );
        counter("readerd_streams_opened_total", "Streams opened.", "counter", load(&self.streams_opened));
        counter("readerd_streams_active", "Streams open now.", "gauge", load(&self.streams_active));
        render_job_windows(&mut counter);
        let buffered = self.stream_buffered.load(Ordering::Relaxed).max(0) as u64;
        let help = "Elements in streams' buffers, not yet taken by the network.";
        counter("readerd_stream_buffered_elements", help, "gauge", buffered);
        let memory = crate::memory::server();
        let help = "Bytes reserved from the memory budget (--memory-budget) now.";
        counter("readerd_memory_reserved_bytes", help, "gauge", memory.reserved() as u64);
        counter("readerd_memory_budget_bytes", "The memory budget (0: none).", "gauge", memory.limit() as u64);
        let help = "What the process held beyond its reservations when last measured (network buffers, the allocator).";
        counter("readerd_memory_unreserved_bytes", help, "gauge", memory.unreserved() as u64);
        counter(
            "readerd_state_store_errors_total",
            "Failed state store operations.",
            "counter",
            load(&self.state_store_errors),
        );
        counter(
            "readerd_decode_panics_total",
            "Panics caught while reading, decoding or cutting an element into messages; each ended its stream.",
            "counter",
            crate::reader::DECODE_PANICS.load(Ordering::Relaxed),
        );

        let _ =
            writeln!(out, "# HELP readerd_checkpoint_commit_seconds Time to commit a checkpoint to the state store.");
        let _ = writeln!(out, "# TYPE readerd_checkpoint_commit_seconds histogram");
        for (bucket, bound) in self.commit_buckets.iter().zip(COMMIT_BUCKETS) {
            let _ = writeln!(out, "readerd_checkpoint_commit_seconds_bucket{{le=\"{bound}\"}} {}", load(bucket));
        }
        let count = load(&self.commit_count);
        let _ = writeln!(out, "readerd_checkpoint_commit_seconds_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "readerd_checkpoint_commit_seconds_sum {}", load(&self.commit_micros) as f64 / 1e6);
        let _ = writeln!(out, "readerd_checkpoint_commit_seconds_count {count}");

        let _ = writeln!(out, "# HELP readerd_stream_errors_total Streams that ended with an error, by gRPC code.");
        let _ = writeln!(out, "# TYPE readerd_stream_errors_total counter");
        for (code, n) in self.stream_errors.lock_unpoisoned().iter() {
            let _ = writeln!(out, "readerd_stream_errors_total{{code=\"{code}\"}} {n}");
        }

        let per_reader: [ReaderMetric; 7] = [
            ("readerd_reader_records_produced_total", "Records a reader produced.", "counter", |s| s.records_produced),
            ("readerd_reader_elements_produced_total", "Elements a reader produced.", "counter", |s| {
                s.elements_produced
            }),
            ("readerd_reader_records_skipped_total", "Corrupt or undecodable records skipped.", "counter", |s| {
                s.records_skipped
            }),
            (
                "readerd_reader_files_cut_short_total",
                "Files whose rest was dropped at a corrupt record (its number of records unknown).",
                "counter",
                |s| s.files_cut_short,
            ),
            ("readerd_reader_streams", "Streams attached to a reader.", "gauge", |s| s.active_streams),
            ("readerd_reader_elements_in_flight", "Elements sent and not yet acknowledged.", "gauge", |s| {
                s.elements_in_flight
            }),
            ("readerd_reader_elements_awaiting_redelivery", "Elements waiting to be delivered again.", "gauge", |s| {
                s.elements_awaiting_redelivery
            }),
        ];
        let shown: Vec<_> = registry.all().into_iter().filter(|(container, _, _)| visible(container)).collect();
        let readers: Vec<_> = shown.iter().map(|(c, n, reader)| (c.clone(), n.clone(), reader.stats())).collect();
        for (name, help, kind, value) in per_reader {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (container, shared_name, stats) in &readers {
                let _ = writeln!(
                    out,
                    "{name}{{container=\"{}\",reader=\"{}\"}} {}",
                    escape(container),
                    escape(shared_name),
                    value(stats)
                );
            }
        }
        render_components(&mut out, &readers);
        render_watch(&mut out, &shown);
        out
    }
}

/// Where each shared reader's time goes (`crate::watch`): its consumers' input-bound
/// fraction and elements per second over their last reports, and its seconds by stage.
fn render_watch(out: &mut String, readers: &[(String, String, std::sync::Arc<crate::reader::Reader>)]) {
    let labels = |container: &str, shared_name: &str| {
        format!("container=\"{}\",reader=\"{}\"", escape(container), escape(shared_name))
    };
    let _ = writeln!(
        out,
        "# HELP readerd_reader_input_bound Share of its consumers' time spent waiting inside next() (0: the data is always there, 1: they only wait), over their last 10 s.\n# TYPE readerd_reader_input_bound gauge"
    );
    for (container, shared_name, reader) in readers {
        if let Some(fraction) = reader.input_bound() {
            let _ = writeln!(out, "readerd_reader_input_bound{{{}}} {fraction}", labels(container, shared_name));
        }
    }
    type Sent = fn(&crate::watch::ReaderWatch) -> u64;
    let sent: [(&str, &str, Sent); 2] = [
        ("readerd_reader_elements_sent_total", "Elements a shared reader's streams sent.", |w| w.elements_sent()),
        ("readerd_reader_bytes_sent_total", "Tensor payload bytes a shared reader's streams sent.", |w| w.bytes_sent()),
    ];
    for (name, help, count) in sent {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (container, shared_name, reader) in readers {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(container, shared_name), count(reader.watch()));
        }
    }
    let help = "Servers a shared reader's job needs for its consumers to wait at most 10% of their time (the live replicas serving it while they wait less).";
    let _ = writeln!(
        out,
        "# HELP readerd_reader_replicas_recommended {help}\n# TYPE readerd_reader_replicas_recommended gauge"
    );
    for (container, shared_name, reader) in readers {
        // From the job as the status last saw it: a scrape asks the ledger nothing.
        let recommended =
            crate::watch::replicas_recommended(reader.coordinator().servers_serving(), reader.input_bound());
        let labels = labels(container, shared_name);
        let _ = writeln!(out, "readerd_reader_replicas_recommended{{{labels}}} {recommended}");
    }
    let _ = writeln!(
        out,
        "# HELP readerd_reader_stage_seconds_total Time a reader spent in each stage (reading, framing, decoding, sendWait, queueing).\n# TYPE readerd_reader_stage_seconds_total counter"
    );
    for (container, shared_name, reader) in readers {
        for (stage, seconds) in reader.watch().stages.seconds() {
            let labels = labels(container, shared_name);
            let _ =
                writeln!(out, "readerd_reader_stage_seconds_total{{{labels},stage=\"{}\"}} {seconds}", stage.name());
        }
    }
}

/// A mixture's figures per component (`component` is its index in `mix.datasets`).
fn render_components(out: &mut String, readers: &[(String, String, crate::reader::ReaderStats)]) {
    type ComponentMetric = (&'static str, &'static str, &'static str, fn(&readerd_proto::v1::ComponentStats) -> i64);
    let per_component: [ComponentMetric; 2] = [
        ("readerd_mix_component_elements_total", "Elements a mixture took from a component.", "counter", |c| {
            c.elements_taken
        }),
        (
            "readerd_mix_component_epochs_completed",
            "Epochs of a mixture's component read to their end.",
            "gauge",
            |c| c.epochs_completed,
        ),
    ];
    for (name, help, kind, value) in per_component {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (container, shared_name, stats) in readers {
            for (i, component) in stats.components.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{name}{{container=\"{}\",reader=\"{}\",component=\"{i}\"}} {}",
                    escape(container),
                    escape(shared_name),
                    value(component)
                );
            }
        }
    }
}

/// A per-reader metric: name, help, type and how to read it from the reader's stats.
type ReaderMetric = (&'static str, &'static str, &'static str, fn(&crate::reader::ReaderStats) -> u64);

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The counters of jobs sharing shared readers' windows (`crate::reader::JOB_WINDOWS`).
fn render_job_windows(counter: &mut impl FnMut(&str, &str, &str, u64)) {
    let windows = &crate::reader::JOB_WINDOWS;
    let load = |value: &AtomicU64| value.load(Ordering::Relaxed);
    let help = "Jobs of shared readers that fell behind their window and read on their own.";
    counter("readerd_job_detachments_total", help, "counter", load(&windows.detachments));
    let help = "Elements decoded once for the jobs of shared readers (their windows' readers).";
    counter("readerd_job_window_decoded_elements_total", help, "counter", load(&windows.decoded));
    let help = "Elements jobs took from their shared windows, without decoding them again.";
    counter("readerd_job_window_shared_elements_total", help, "counter", load(&windows.shared));
    let help = "Elements jobs that fell behind inside an unbatched record decoded again, unsent.";
    counter("readerd_job_read_again_elements_total", help, "counter", load(&windows.read_again));
}
