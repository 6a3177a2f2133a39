//! The server's configuration: command-line flags, each also a `READERD_*` variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

#[derive(Debug, Clone, clap::Parser)]
#[command(name = "readerd", version, about = "Serves framed and decoded training records to remote trainers over gRPC")]
pub struct Config {
    /// Address to listen on; port 0 picks a free port. The bound address is printed on
    /// stdout as `listening on HOST:PORT`.
    #[arg(long, env = "READERD_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// A directory specs may read from (repeatable; in the variable, comma-separated).
    /// Spec file names are relative to a data root and cannot leave it.
    #[arg(long = "data-root", env = "READERD_DATA_ROOT", value_delimiter = ',', required = true)]
    pub data_roots: Vec<PathBuf>,
    /// Directory of the embedded state store (created when missing).
    #[arg(long, env = "READERD_STATE_DIR", default_value = "readerd-state")]
    pub state_dir: PathBuf,
    /// State store: `sqlite://PATH` (default: `<state-dir>/readerd.db`) or `postgres://...`.
    #[arg(long, env = "READERD_STATE_URL")]
    pub state_url: Option<StateUrl>,
    /// Checkpoints kept per stream lineage; older ones are deleted (their tokens then
    /// answer NOT_FOUND).
    #[arg(long, env = "READERD_CHECKPOINTS_KEPT", default_value_t = 16)]
    pub checkpoints_kept: usize,
    /// Largest record (and claimed record length) accepted; larger is DATA_LOSS.
    #[arg(long, env = "READERD_MAX_RECORD_BYTES", default_value_t = 256 << 20)]
    pub max_record_bytes: u64,
    /// Elements buffered per stream before reading waits for the trainer.
    #[arg(long, env = "READERD_STREAM_BUFFER", default_value_t = 16)]
    pub stream_buffer: usize,
    /// A JSON file of named datasets, `{"imagenet-train": SPEC, ...}` (SPEC as in a spec
    /// file), so trainers can ask for a dataset by name.
    #[arg(long, env = "READERD_DATASETS")]
    pub datasets: Option<PathBuf>,
    /// Bytes of records kept in memory after a file's first read, shared by all readers
    /// (0: no cache). Later epochs read cached files from memory.
    #[arg(long, env = "READERD_CACHE_BYTES", default_value_t = 0)]
    pub cache_bytes: u64,
    /// Threads that decode the batches of one stream in parallel (default: the cores).
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
    /// Address of the Prometheus `/metrics` endpoint (plain HTTP); none when absent.
    #[arg(long, env = "READERD_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// After SIGINT/SIGTERM, how long open streams may take to end before the process
    /// exits anyway (a second signal exits at once).
    #[arg(long, env = "READERD_SHUTDOWN_GRACE", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
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
        assert_eq!(config.data_roots, [PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(config.state_url(), StateUrl::Sqlite(PathBuf::from("/s/readerd.db")));
        assert_eq!(config.shutdown_grace, Duration::from_millis(500));
        assert!(config.allow_unauthenticated);
        assert!("mysql://x".parse::<StateUrl>().is_err());
        assert_eq!("postgres://h/db".parse::<StateUrl>(), Ok(StateUrl::Postgres("postgres://h/db".into())));
    }
}
