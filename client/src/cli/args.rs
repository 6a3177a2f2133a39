//! The arguments of `readerctl`: the global flags ([`Cli`]), the subcommands and their
//! flags ([`Command`]), and the output formats ([`Output`]). Their help texts are the
//! command-line contract (README, DESIGN.md); the handlers live in the sibling modules.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "readerctl", version, about = "Read from and manage a readerd server")]
pub struct Cli {
    /// Server address (`http://host:port`).
    #[arg(long, global = true, env = "READERD_ADDR", default_value = "http://127.0.0.1:50051")]
    pub addr: String,
    /// No progress line on stderr.
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// TLS: the CA certificate (PEM) that signed the server's certificate.
    #[arg(long, global = true, env = "READERD_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Mutual TLS: this client's certificate (PEM), with --tls-key.
    #[arg(long, global = true, env = "READERD_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    #[arg(long, global = true, env = "READERD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The name the server's certificate must carry (default: the address's host).
    #[arg(long, global = true)]
    pub tls_domain: Option<String>,
    /// Bearer token sent with every call.
    #[arg(long, global = true, env = "READERD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Readable lines.
    Text,
    /// One JSON object per line (the contract of DESIGN.md).
    Jsonl,
}

#[derive(Subcommand)]
pub enum Command {
    /// Stream a reader's elements to stdout.
    Read {
        /// Dataset spec (proto3 JSON of readerd.v1.DatasetSpec).
        #[arg(long, conflicts_with = "dataset")]
        spec: Option<PathBuf>,
        /// A dataset the server's configuration defines by name (instead of --spec).
        #[arg(long, default_value = "")]
        dataset: String,
        #[arg(long, default_value = "")]
        container: String,
        /// Shared reader name; empty: a private reader for this stream.
        #[arg(long, default_value = "")]
        shared_name: String,
        /// Resume from a checkpoint token.
        #[arg(long)]
        resume: Option<String>,
        /// The job (consumer group) of the shared reader this consumer belongs to: every
        /// job receives every element, decoded once for all of them; the consumers of a
        /// job split its elements.
        #[arg(long, default_value = "default")]
        job: String,
        /// Stop after this many elements (exit 0).
        #[arg(long)]
        max_batches: Option<u64>,
        /// Checkpoint after every N elements.
        #[arg(long)]
        checkpoint_every: Option<u64>,
        /// Sleep this many milliseconds after each element, as a trainer's step would
        /// (to see the server's input-bound figures move).
        #[arg(long, default_value_t = 0)]
        step_ms: u64,
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// List the readers of a container.
    List {
        #[arg(long, default_value = "")]
        container: String,
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Show a server's readers, their consumers' wait and their progress, refreshed in
    /// place (from the server's status listener, its `--metrics-listen`).
    Top {
        /// The server's status listener, HOST:PORT (its `--metrics-listen`).
        #[arg(long)]
        status: String,
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 2.0)]
        every: f64,
        /// Stop after this many screens (default: until interrupted).
        #[arg(long)]
        count: Option<u64>,
    },
    /// Show a reader's counters.
    Stats {
        #[arg(long, default_value = "")]
        container: String,
        #[arg(long)]
        shared_name: String,
    },
    /// Rewind a reader to its first record.
    Reset {
        #[arg(long, default_value = "")]
        container: String,
        #[arg(long)]
        shared_name: String,
    },
    /// Release a reader; its streams end.
    Delete {
        #[arg(long, default_value = "")]
        container: String,
        #[arg(long)]
        shared_name: String,
        /// Only this job (`default`: the shared reader's own); without it, the reader
        /// and every job on it.
        #[arg(long, default_value = "")]
        job: String,
    },
    /// Release every reader of a container.
    ResetContainer {
        #[arg(long, default_value = "")]
        container: String,
    },
    /// List the datasets the server defines by name.
    Datasets,
    /// Exit 0 when the server's readerd.v1 service is SERVING (gRPC health), 1 otherwise.
    Health,
    /// Checkpoint a shared reader as a whole: prints `{"checkpoint": TOKEN}`; `read --resume
    /// TOKEN` with the same --container and --shared-name continues it (also on a new server).
    Checkpoint {
        #[arg(long, default_value = "")]
        container: String,
        #[arg(long)]
        shared_name: String,
        /// The job to checkpoint (its token resumes that job's consumers).
        #[arg(long, default_value = "default")]
        job: String,
    },
    /// Print the records of a file (TFRecord Examples with their features).
    ///
    /// FILE may be an object-store URL (s3://bucket/key, gs://, az://, http(s)://), read
    /// whole into memory first; credentials come from the environment as readerd's do
    /// (AWS_*, GOOGLE_*, AZURE_*, READERD_S3_ENDPOINT, READERD_S3_ALLOW_HTTP).
    Inspect {
        /// A local file or an object's URL.
        file: PathBuf,
        /// Default: by extension (.tfrecord: tfrecord; else text lines).
        #[arg(long, value_enum)]
        format: Option<readerd_client::inspect::FileFormat>,
        /// Record size of a fixed-length file.
        #[arg(long, default_value_t = 0)]
        record_bytes: usize,
        /// Stop after N records.
        #[arg(long)]
        limit: Option<u64>,
        /// Show records as raw bytes, not as Examples.
        #[arg(long)]
        raw: bool,
    },
    /// Convert a CSV file (header line) to a TFRecord file of tf.train.Example, or Parquet to
    /// TFRecord and back (by the `.parquet` extension of the input or the output).
    ///
    /// The input, --output and --spec-output may be object-store URLs (s3://bucket/key,
    /// gs://, az://, http(s)://; credentials from the environment as readerd's): an input
    /// object is read whole into memory, an output object written to a temporary file
    /// first, then uploaded (multipart when large).
    Convert {
        /// A local CSV, Parquet or TFRecord file, or an object's URL.
        input: PathBuf,
        /// A local file or an object's URL.
        #[arg(long)]
        output: PathBuf,
        /// Column types, `name:int64,name:float,name:bytes`; others are inferred.
        #[arg(long, default_value = "")]
        schema: String,
        /// Also write the readerd spec that reads the output (files relative to its directory).
        #[arg(long)]
        spec_output: Option<PathBuf>,
    },
    /// Write the benchmark workloads of DESIGN.md (images, tabular, tabular_csv) and their specs.
    ///
    /// --out may be an object-store prefix (s3://bucket/prefix, gs://, az://; credentials
    /// from the environment as readerd's): the files are written to a temporary folder
    /// first, then uploaded under it, ready for `readerd --data-root s3://bucket/prefix`.
    GenDemo {
        /// A folder, or an object-store URL prefix.
        #[arg(long)]
        out: PathBuf,
        /// Workloads to write.
        #[arg(long, value_delimiter = ',', default_value = "images,tabular,tabular_csv")]
        workloads: Vec<String>,
        /// Records of the images workload.
        #[arg(long, default_value_t = 2_400)]
        images: usize,
        /// Rows of the tabular workloads.
        #[arg(long, default_value_t = 1_000_000)]
        tabular: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Batch size of the specs written.
        #[arg(long, default_value_t = 256)]
        batch_size: u32,
        /// Epochs of the specs written.
        #[arg(long, default_value_t = 1)]
        epochs: i32,
        /// Write only the specs (for files already there, e.g. from tfdata-bench's gen_data.py).
        #[arg(long)]
        specs_only: bool,
    },
    /// Measure the server: K consumers at once on the workloads written by gen-demo.
    Bench {
        /// A directory written by `readerctl gen-demo`.
        #[arg(long)]
        data: PathBuf,
        #[arg(long, value_delimiter = ',', default_value = "images,tabular,tabular_csv")]
        workloads: Vec<String>,
        /// Consumer counts to run, each a run of its own.
        #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
        consumers: Vec<usize>,
        /// Measure the server at --addr instead of starting one on --data.
        #[arg(long)]
        use_addr: bool,
        /// With --use-addr: read each workload as one shared reader (named
        /// `NAME-<workload>-<K>` in container `bench`) from every server of --addr
        /// (replicas of a cluster, `--addr A,B,C`) instead of private streams.
        #[arg(long, requires = "use_addr")]
        shared_name: Option<String>,
        /// The readerd binary to start (default: the one beside readerctl).
        #[arg(long)]
        server: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
}
