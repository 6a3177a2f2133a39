//! The server's configuration: command-line flags, each also a `READERD_*` variable, and
//! a TOML file (`--config`) whose keys are the flags' names (`data-root = ["/data"]`,
//! `stream-buffer = 32`, `allow-unauthenticated = true`). Precedence: flags, then
//! variables, then the file, then the defaults. `--print-config` shows the result.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use readerd_common::object::StoreSettings;

use crate::source::RootLocation;
use crate::source::object::ObjectSettings;

#[derive(Debug, Clone, clap::Parser)]
#[command(name = "readerd", version, about = "Serves framed and decoded training records to remote trainers over gRPC")]
pub struct Config {
    /// Address to listen on; port 0 picks a free port. The bound address is printed on
    /// stdout as `listening on HOST:PORT`.
    #[arg(long, env = "READERD_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// A directory, or an object-store prefix (`s3://bucket/prefix`, `gs://...`,
    /// `az://container/prefix`, `http(s)://host/prefix`), specs may read from
    /// (repeatable; in the variable, comma-separated). Spec file names are relative to a
    /// data root and cannot leave it. Object-store credentials come from each cloud's
    /// standard variables and chain (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, AZURE_*).
    #[arg(long = "data-root", env = "READERD_DATA_ROOT", value_delimiter = ',', required = true)]
    pub data_roots: Vec<RootLocation>,
    /// An S3-compatible endpoint for `s3://` roots (`http://127.0.0.1:9000`), addressed
    /// with path-style requests.
    #[arg(long, env = "READERD_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// The region of `s3://` roots (default: AWS_REGION, else us-east-1).
    #[arg(long, env = "READERD_S3_REGION")]
    pub s3_region: Option<String>,
    /// Allow plain `http://` object-store endpoints (local servers), for every store
    /// (`--object-allow-http` says the same). Without it, the store's own variable decides
    /// (AWS_ALLOW_HTTP, AZURE_ALLOW_HTTP, ...).
    #[arg(long, visible_alias = "object-allow-http", env = "READERD_S3_ALLOW_HTTP")]
    pub s3_allow_http: bool,
    /// An `object_store` setting, `KEY=VALUE` (repeatable; in the variable,
    /// comma-separated): `aws_...`, `google_...` or `azure_...` keys. Values are never
    /// printed.
    #[arg(long = "object-option", env = "READERD_OBJECT_OPTIONS", value_delimiter = ',', value_parser = parse_key_value)]
    pub object_options: Vec<(String, String)>,
    /// Bytes of each ranged GET of an object.
    #[arg(long, env = "READERD_OBJECT_BLOCK_BYTES", default_value_t = 8 << 20)]
    pub object_block_bytes: usize,
    /// Blocks' worth of bytes (of --object-block-bytes) fetched ahead of the reader per
    /// open object (they count in the memory budget).
    #[arg(long, env = "READERD_OBJECT_READ_AHEAD", default_value_t = 4)]
    pub object_read_ahead: usize,
    /// Retries of a failed object-store request (throttling, 5xx, timeouts, a body cut
    /// short), with jittered backoff; then the stream ends UNAVAILABLE.
    #[arg(long, env = "READERD_OBJECT_RETRIES", default_value_t = 5)]
    pub object_retries: usize,
    /// Time limit of one object-store request (default: the store's own variable,
    /// AWS_TIMEOUT / GOOGLE_TIMEOUT / AZURE_TIMEOUT, else 60s).
    #[arg(long, env = "READERD_OBJECT_TIMEOUT", value_parser = parse_duration)]
    pub object_timeout: Option<Duration>,
    /// Directory of the embedded state store (created when missing).
    #[arg(long, env = "READERD_STATE_DIR", default_value = "readerd-state")]
    pub state_dir: PathBuf,
    /// State store: `sqlite://PATH` (default: `<state-dir>/readerd.db`) or `postgres://...`.
    #[arg(long, env = "READERD_STATE_URL")]
    pub state_url: Option<StateUrl>,
    /// This replica's name in a cluster (replicas sharing a `postgres://` state store
    /// serve each shared reader together through the split ledger); the ledger adds a
    /// suffix per process. Default: the host name.
    #[arg(long, env = "READERD_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// The address clients reach this replica at, as other replicas' stats show it.
    /// Default: `http://` and the bound address.
    #[arg(long, env = "READERD_ADVERTISE_ADDR")]
    pub advertise_addr: Option<String>,
    /// How long a replica's leases of splits last without renewal (renewed every third
    /// of it): how soon a dead replica's work is taken over. The default is
    /// `readerd_proto::REPLICA_LEASE` (a test checks it), which clients size their patience
    /// with a replica by.
    #[arg(long, env = "READERD_LEASE_TIME", default_value = "10s", value_parser = parse_duration)]
    pub lease_time: Duration,
    /// After a dead replica's leases expired, how long its consumers have to re-send
    /// their acknowledgements through another replica before its splits are produced
    /// again without them.
    #[arg(long, env = "READERD_FAILOVER_GRACE", default_value = "10s", value_parser = parse_duration)]
    pub failover_grace: Duration,
    /// How long a `postgres://` state store may stay unreachable (stopped, restarting,
    /// cut off) before what needs it fails: until then checkpoints, acknowledgements and
    /// leases wait for it and streams pause; then they end UNAVAILABLE naming the store.
    #[arg(long, env = "READERD_STORE_OUTAGE_LIMIT", default_value = "60s", value_parser = parse_duration)]
    pub store_outage_limit: Duration,
    /// Checkpoints kept per stream lineage; older ones are deleted (their tokens then
    /// answer NOT_FOUND).
    #[arg(long, env = "READERD_CHECKPOINTS_KEPT", default_value_t = 16)]
    pub checkpoints_kept: usize,
    /// Largest record (and claimed record length) accepted; larger is DATA_LOSS.
    #[arg(long, env = "READERD_MAX_RECORD_BYTES", default_value_t = 256 << 20)]
    pub max_record_bytes: u64,
    /// Most pixels an image a transform decodes may have (`decodeImage`); a larger one is
    /// INVALID_ARGUMENT, found from its header before anything is allocated.
    #[arg(long, env = "READERD_MAX_IMAGE_PIXELS", default_value_t = 100_000_000)]
    pub max_image_pixels: u64,
    /// Elements buffered per stream before reading waits for the trainer.
    #[arg(long, env = "READERD_STREAM_BUFFER", default_value_t = 16)]
    pub stream_buffer: usize,
    /// Payload bytes buffered per stream before reading waits for the trainer, whatever
    /// `--stream-buffer` allows (0: no limit; an element larger than this still goes,
    /// alone). What a stalled trainer holds on the server.
    #[arg(long, env = "READERD_STREAM_BUFFER_BYTES", default_value_t = 64 << 20)]
    pub stream_buffer_bytes: usize,
    /// A JSON file of named datasets, `{"imagenet-train": SPEC, ...}` (SPEC as in a spec
    /// file), so trainers can ask for a dataset by name.
    #[arg(long, env = "READERD_DATASETS")]
    pub datasets: Option<PathBuf>,
    /// Bytes of records kept in memory after a file's first read, shared by all readers
    /// (0: no cache). Later epochs read cached files from memory.
    #[arg(long, env = "READERD_CACHE_BYTES", default_value_t = 0)]
    pub cache_bytes: u64,
    /// Bytes of decoded elements the jobs of one shared reader (`readerctl read --job`)
    /// share at most, at most a quarter of the memory budget: a job further behind the
    /// fastest than this reads on its own until it catches up.
    #[arg(long, env = "READERD_JOB_WINDOW_BYTES", default_value_t = 256 << 20)]
    pub job_window_bytes: u64,
    /// Threads that decode batches, shared by every stream (default: the cores; 1: each
    /// stream decodes on its own thread).
    #[arg(long, env = "READERD_DECODE_THREADS")]
    pub decode_threads: Option<usize>,
    /// Shared readers with no stream that nobody used for this long are released (0: never).
    #[arg(long, env = "READERD_IDLE_READER_TIMEOUT", default_value = "10m", value_parser = parse_duration)]
    pub idle_reader_timeout: Duration,
    /// Log format on stderr.
    #[arg(long, env = "READERD_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Serve requests that carry no token (as if from an admin of every container).
    /// Without it, and without --auth-tokens, the server refuses to start.
    #[arg(long, env = "READERD_ALLOW_UNAUTHENTICATED")]
    pub allow_unauthenticated: bool,
    /// A JSON file of bearer tokens and what each may do:
    /// `{"tokens": [{"token": "...", "containers": ["a"], "admin": false}]}`.
    #[arg(long, env = "READERD_AUTH_TOKENS")]
    pub auth_tokens: Option<PathBuf>,
    /// TLS: the server's certificate chain (PEM). With --tls-key.
    #[arg(long, env = "READERD_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS: the server's private key (PEM).
    #[arg(long, env = "READERD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: clients must present a certificate signed by this CA (PEM).
    #[arg(long, env = "READERD_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Largest request message accepted (specs, tokens); larger is RESOURCE_EXHAUSTED.
    #[arg(long, env = "READERD_MAX_REQUEST_BYTES", default_value_t = 4 << 20)]
    pub max_request_bytes: usize,
    /// Shared readers one container may hold (0: no limit); more is RESOURCE_EXHAUSTED.
    #[arg(long, env = "READERD_MAX_READERS_PER_CONTAINER", default_value_t = 1024)]
    pub max_readers_per_container: usize,
    /// Streams one shared reader may have at once (0: no limit).
    #[arg(long, env = "READERD_MAX_CONSUMERS_PER_READER", default_value_t = 256)]
    pub max_consumers_per_reader: usize,
    /// Files all readers may hold open at once; each reader takes its cycle length (0: no
    /// limit).
    #[arg(long, env = "READERD_MAX_OPEN_FILES", default_value_t = 4096)]
    pub max_open_files: usize,
    /// Largest batch (decoded tensor bytes) a stream may send; a spec whose batches
    /// would be larger is refused before reading (0: no limit). The server's largest
    /// message grows with it.
    #[arg(long, env = "READERD_MAX_BATCH_BYTES", default_value_t = 256 << 20)]
    pub max_batch_bytes: usize,
    /// Bytes of memory that read buffers, decompressed data, decoded batches and reader
    /// state may reserve in total; what would go past it is RESOURCE_EXHAUSTED (0: no
    /// budget). Default: half of the machine's (or the container's) memory.
    #[arg(long, env = "READERD_MEMORY_BUDGET")]
    pub memory_budget: Option<usize>,
    /// Requests per second per token (or per peer address without one); 0: no limit.
    #[arg(long, env = "READERD_MAX_REQUESTS_PER_SECOND", default_value_t = 0)]
    pub max_requests_per_second: u32,
    /// Address of the Prometheus `/metrics` endpoint (plain HTTP); none when absent.
    #[arg(long, env = "READERD_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// After SIGINT/SIGTERM, how long open streams may take to end before the process
    /// exits anyway (a second signal exits at once).
    #[arg(long, env = "READERD_SHUTDOWN_GRACE", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// A TOML file of settings, keys named as the flags (`data-root = ["/data"]`); flags
    /// and variables override it.
    #[arg(long, env = "READERD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print the effective configuration (secrets hidden) as TOML and exit.
    #[arg(long)]
    pub print_config: bool,
}

impl Config {
    /// How object-store roots are reached and read.
    pub fn object_settings(&self) -> ObjectSettings {
        ObjectSettings {
            store: StoreSettings {
                s3_endpoint: self.s3_endpoint.clone(),
                s3_region: self.s3_region.clone(),
                allow_http: self.s3_allow_http,
                options: self.object_options.clone(),
                retries: self.object_retries,
                timeout: self.object_timeout,
            },
            block_bytes: self.object_block_bytes,
            read_ahead: self.object_read_ahead,
        }
    }

    /// `--memory-budget`, or its default from the machine's memory.
    pub fn memory_budget(&self) -> usize {
        self.memory_budget.unwrap_or_else(crate::memory::default_limit)
    }

    /// `--job-window-bytes`, within a quarter of the memory budget.
    pub fn job_window_bytes(&self) -> usize {
        let flag = usize::try_from(self.job_window_bytes).unwrap_or(usize::MAX);
        match self.memory_budget() {
            0 => flag,
            budget => flag.min(budget / 4),
        }
    }

    /// The configuration from the process's arguments, variables and `--config` file.
    pub fn load() -> Result<Self, clap::Error> {
        Self::load_from(std::env::args_os().collect(), |name| std::env::var_os(name).is_some())
    }

    /// `load`, with the arguments and the test "is this variable set" given.
    pub fn load_from(args: Vec<std::ffi::OsString>, env_set: impl Fn(&str) -> bool) -> Result<Self, clap::Error> {
        use clap::{CommandFactory, FromArgMatches};
        let file = config_file_argument(&args).or_else(|| std::env::var_os("READERD_CONFIG").map(PathBuf::from));
        let mut full = args.clone();
        if let Some(path) = file {
            let from_file = file_arguments(&path, &args, &env_set)
                .map_err(|message| clap::Error::raw(clap::error::ErrorKind::InvalidValue, message + "\n"))?;
            // The program name, then the file's settings, then the real arguments.
            full = args.iter().take(1).cloned().chain(from_file).chain(args.iter().skip(1).cloned()).collect();
        }
        let matches = Self::command().try_get_matches_from(full)?;
        Self::from_arg_matches(&matches)
    }

    /// The effective settings as TOML, with the password of a state URL hidden.
    pub fn to_toml(&self) -> String {
        let mut table = toml::Table::new();
        let path = |p: &PathBuf| toml::Value::String(p.display().to_string());
        let mut set = |key: &str, value: toml::Value| {
            table.insert(key.to_owned(), value);
        };
        set("listen", self.listen.to_string().into());
        set("data-root", toml::Value::Array(self.data_roots.iter().map(|root| root.to_string().into()).collect()));
        if let Some(endpoint) = &self.s3_endpoint {
            set("s3-endpoint", endpoint.clone().into());
        }
        if let Some(region) = &self.s3_region {
            set("s3-region", region.clone().into());
        }
        set("s3-allow-http", self.s3_allow_http.into());
        // Values may be secrets (keys, SAS tokens): only the keys are shown.
        let options = self.object_options.iter().map(|(key, _)| format!("{key}=***").into()).collect();
        set("object-option", toml::Value::Array(options));
        set("object-block-bytes", (self.object_block_bytes as i64).into());
        set("object-read-ahead", (self.object_read_ahead as i64).into());
        set("object-retries", (self.object_retries as i64).into());
        if let Some(timeout) = self.object_timeout {
            set("object-timeout", format!("{}ms", timeout.as_millis()).into());
        }
        set("state-dir", path(&self.state_dir));
        set("state-url", hide_password(&self.state_url()).into());
        if let Some(id) = &self.replica_id {
            set("replica-id", id.clone().into());
        }
        if let Some(addr) = &self.advertise_addr {
            set("advertise-addr", addr.clone().into());
        }
        set("lease-time", format!("{}ms", self.lease_time.as_millis()).into());
        set("failover-grace", format!("{}ms", self.failover_grace.as_millis()).into());
        set("store-outage-limit", format!("{}ms", self.store_outage_limit.as_millis()).into());
        set("checkpoints-kept", (self.checkpoints_kept as i64).into());
        set("max-record-bytes", (self.max_record_bytes as i64).into());
        set("max-image-pixels", (self.max_image_pixels as i64).into());
        set("stream-buffer", (self.stream_buffer as i64).into());
        set("stream-buffer-bytes", (self.stream_buffer_bytes as i64).into());
        set("cache-bytes", (self.cache_bytes as i64).into());
        set("job-window-bytes", (self.job_window_bytes as i64).into());
        set("idle-reader-timeout", format!("{}ms", self.idle_reader_timeout.as_millis()).into());
        set("shutdown-grace", format!("{}ms", self.shutdown_grace.as_millis()).into());
        set("log-format", format!("{:?}", self.log_format).to_lowercase().into());
        set("allow-unauthenticated", self.allow_unauthenticated.into());
        set("max-request-bytes", (self.max_request_bytes as i64).into());
        set("max-readers-per-container", (self.max_readers_per_container as i64).into());
        set("max-consumers-per-reader", (self.max_consumers_per_reader as i64).into());
        set("max-open-files", (self.max_open_files as i64).into());
        set("max-batch-bytes", (self.max_batch_bytes as i64).into());
        set("memory-budget", (self.memory_budget() as i64).into());
        set("max-requests-per-second", i64::from(self.max_requests_per_second).into());
        let optional_paths = [
            ("datasets", &self.datasets),
            ("auth-tokens", &self.auth_tokens),
            ("tls-cert", &self.tls_cert),
            ("tls-key", &self.tls_key),
            ("tls-client-ca", &self.tls_client_ca),
        ];
        for (key, value) in optional_paths {
            if let Some(value) = value {
                set(key, path(value));
            }
        }
        if let Some(threads) = self.decode_threads {
            set("decode-threads", (threads as i64).into());
        }
        if let Some(addr) = self.metrics_listen {
            set("metrics-listen", addr.to_string().into());
        }
        toml::to_string(&table).unwrap_or_default()
    }
}

/// `--config PATH` or `--config=PATH` among the arguments.
fn config_file_argument(args: &[std::ffi::OsString]) -> Option<PathBuf> {
    let mut args = args.iter().skip(1);
    while let Some(arg) = args.next() {
        let arg = arg.to_string_lossy();
        if arg == "--config" {
            return args.next().map(PathBuf::from);
        }
        if let Some(path) = arg.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    None
}

/// The file's settings as arguments (`--key value`), leaving out the keys the command line
/// or a variable already sets. Unknown keys and values of the wrong kind name the key.
fn file_arguments(
    path: &std::path::Path,
    args: &[std::ffi::OsString],
    env_set: &impl Fn(&str) -> bool,
) -> Result<Vec<std::ffi::OsString>, String> {
    use clap::CommandFactory;
    let place = path.display();
    let text = std::fs::read_to_string(path).map_err(|err| format!("config file {place}: {err}"))?;
    let table: toml::Table = text.parse().map_err(|err| format!("config file {place}: {err}"))?;
    let command = Config::command();
    let mut out = Vec::new();
    for (key, value) in table {
        let Some(arg) = command.get_arguments().find(|a| a.get_long() == Some(key.as_str()) && key != "config") else {
            let known: Vec<&str> = command.get_arguments().filter_map(|a| a.get_long()).collect();
            return Err(format!("config file {place}: unknown key `{key}` (keys: {})", known.join(", ")));
        };
        let on_command_line = args.iter().skip(1).any(|a| {
            a.to_string_lossy() == format!("--{key}") || a.to_string_lossy().starts_with(&format!("--{key}="))
        });
        let from_env = arg.get_env().is_some_and(|name| env_set(&name.to_string_lossy()));
        if on_command_line || from_env {
            continue;
        }
        let is_flag = matches!(arg.get_action(), clap::ArgAction::SetTrue);
        let values = match value {
            toml::Value::Array(items) => items,
            other => vec![other],
        };
        for value in values {
            let text = match (&value, is_flag) {
                (toml::Value::Boolean(true), true) => {
                    out.push(format!("--{key}").into());
                    continue;
                }
                (toml::Value::Boolean(false), true) => continue,
                (_, true) => return Err(format!("config file {place}: `{key}` takes true or false")),
                (toml::Value::String(s), false) => s.clone(),
                (toml::Value::Integer(i), false) => i.to_string(),
                (toml::Value::Float(f), false) => f.to_string(),
                (other, false) => {
                    return Err(format!("config file {place}: `{key}` takes a string or a number, not {other}"));
                }
            };
            // `--key=value`, so clap's own checks of the value name the key too.
            out.push(format!("--{key}={text}").into());
        }
    }
    Ok(out)
}

/// A state URL for display: `postgres://user:***@host/db`.
pub fn hide_password(url: &StateUrl) -> String {
    match url {
        StateUrl::Sqlite(path) => format!("sqlite://{}", path.display()),
        StateUrl::Postgres(url) => match (url.find("://"), url.find('@')) {
            (Some(scheme), Some(at)) if url[scheme + 3..at].contains(':') => {
                let colon = scheme + 3 + url[scheme + 3..at].find(':').unwrap_or(0);
                format!("{}:***{}", &url[..colon], &url[at..])
            }
            _ => url.clone(),
        },
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Where iterator state is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateUrl {
    Sqlite(PathBuf),
    Postgres(String),
}

impl FromStr for StateUrl {
    type Err = String;

    fn from_str(url: &str) -> Result<Self, String> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err("sqlite:// needs a path".into());
            }
            Ok(StateUrl::Sqlite(PathBuf::from(path)))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(StateUrl::Postgres(url.to_owned()))
        } else {
            Err(format!("unsupported state URL {url:?}: use sqlite://PATH or postgres://..."))
        }
    }
}

impl Config {
    /// The state store's URL, the default resolved.
    pub fn state_url(&self) -> StateUrl {
        self.state_url.clone().unwrap_or_else(|| StateUrl::Sqlite(self.state_dir.join("readerd.db")))
    }
}

/// `KEY=VALUE`.
fn parse_key_value(text: &str) -> Result<(String, String), String> {
    let (key, value) = text.split_once('=').ok_or_else(|| "expected KEY=VALUE".to_owned())?;
    Ok((key.trim().to_owned(), value.to_owned()))
}

/// `30s`, `500ms`, `2m`, or plain seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.find(|c: char| !c.is_ascii_digit()).map_or((text, "s"), |i| text.split_at(i));
    let value: u64 = number.parse().map_err(|_| format!("bad duration {text:?}"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(value)),
        "s" => Ok(Duration::from_secs(value)),
        "m" => Ok(Duration::from_secs(value * 60)),
        _ => Err(format!("bad duration unit in {text:?}: use ms, s or m")),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn parses_the_scripted_contract() {
        let config = Config::try_parse_from([
            "readerd",
            "--listen",
            "127.0.0.1:0",
            "--data-root",
            "/a",
            "--data-root",
            "/b",
            "--state-dir",
            "/s",
            "--allow-unauthenticated",
            "--shutdown-grace",
            "500ms",
        ])
        .unwrap();
        assert_eq!(config.data_roots, [RootLocation::Local("/a".into()), RootLocation::Local("/b".into())]);
        assert_eq!(config.state_url(), StateUrl::Sqlite(PathBuf::from("/s/readerd.db")));
        assert_eq!(config.shutdown_grace, Duration::from_millis(500));
        assert!(config.allow_unauthenticated);
        assert!("mysql://x".parse::<StateUrl>().is_err());
        assert_eq!("postgres://h/db".parse::<StateUrl>(), Ok(StateUrl::Postgres("postgres://h/db".into())));
    }

    fn load(file: &str, args: &[&str], env: &[&str]) -> Result<Config, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("readerd.toml");
        std::fs::write(&path, file).unwrap();
        let mut all: Vec<std::ffi::OsString> = vec!["readerd".into(), "--config".into(), path.clone().into()];
        all.extend(args.iter().map(Into::into));
        Config::load_from(all, |name| env.contains(&name)).map_err(|err| err.to_string())
    }

    #[test]
    fn a_config_file_fills_what_flags_and_variables_leave() {
        let file = "data-root = [\"/d1\", \"/d2\"]\nstream-buffer = 32\nallow-unauthenticated = true\n\
                    shutdown-grace = \"5s\"\nstate-url = \"postgres://u:secret@h/db\"\n";
        let config = load(file, &["--stream-buffer", "8"], &[]).unwrap();
        assert_eq!(config.data_roots, [RootLocation::Local("/d1".into()), RootLocation::Local("/d2".into())]);
        assert_eq!(config.stream_buffer, 8, "a flag beats the file");
        assert!(config.allow_unauthenticated);
        assert_eq!(config.shutdown_grace, Duration::from_secs(5));
        let shown = config.to_toml();
        assert!(shown.contains("postgres://u:***@h/db") && !shown.contains("secret"), "{shown}");
        // A variable that is set beats the file: the file's value is not used.
        let config = load(file, &[], &["READERD_STREAM_BUFFER"]).unwrap();
        assert_eq!(config.stream_buffer, 16, "the file's 32 is left out (the variable's own value is read by clap)");
    }

    #[test]
    fn the_default_lease_time_is_the_one_clients_assume() {
        let config = Config::try_parse_from(["readerd", "--data-root", "/d"]).unwrap();
        assert_eq!(config.lease_time, readerd_proto::REPLICA_LEASE);
    }

    #[test]
    fn bad_keys_and_values_are_named() {
        let err = load("data-roots = [\"/d\"]\n", &[], &[]).unwrap_err();
        assert!(err.contains("unknown key `data-roots`"), "{err}");
        let err = load("data-root = \"/d\"\nstream-buffer = \"lots\"\n", &[], &[]).unwrap_err();
        assert!(err.contains("--stream-buffer"), "{err}");
        let err = load("data-root = \"/d\"\nallow-unauthenticated = 1\n", &[], &[]).unwrap_err();
        assert!(err.contains("`allow-unauthenticated` takes true or false"), "{err}");
    }
}
