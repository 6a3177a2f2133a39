//! `run`: builds the services (readerd.v1, Arrow Flight, health, reflection) and serves them on a bound
//! listener until `shutdown` resolves; then the health service turns NOT_SERVING and open
//! streams end with UNAVAILABLE before the server returns.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use readerd_proto::flight::flight_service_server::FlightServiceServer;
use readerd_proto::{http2, v1 as pb};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic_health::server::HealthReporter;

use crate::auth::{self, AccessPolicy};
use crate::checkpoint::Checkpointer;
use crate::cluster::{Cluster, LeaseTimes, Ledger};
use crate::config::{Config, StateUrl};
use crate::flight::FlightPlane;
use crate::grpc::{DataService, ReadWithoutCopies};
use crate::limits::{FileBudget, Limits, RateLimiter};
use crate::pipeline::PipelineEnv;
use crate::pipeline::cache::RecordCache;
use crate::reader::ReaderSettings;
use crate::registry::{ReaderRegistry, RegistrySetup};
use crate::source::DataRoots;
use crate::state::StateStore;

type DataServiceServer = pb::data_service_server::DataServiceServer<DataService>;

/// Serves on `listener` (and `/metrics` on `metrics`, when given) until `shutdown`.
/// Everything the configuration names (tokens, data roots, the state store, datasets, TLS
/// files) is checked and opened first; `ready` is called only then, as the server starts
/// accepting requests, so nothing can stop the server at start after it.
/// TLS uses rustls with *ring*, as tonic's `tls-ring` asks, and so does the object
/// stores' HTTP client (`readerd_common::object`): *ring* is installed as rustls' process
/// default here, before anything builds a TLS config.
fn use_ring_for_tls() {
    // Err: a default is already installed (an earlier run in this process).
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub async fn run(
    listener: TcpListener,
    metrics: Option<TcpListener>,
    config: Config,
    ready: impl FnOnce(),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use_ring_for_tls();
    let policy = access_policy(&config)?;
    let roots = DataRoots::open(&config.data_roots, &config.object_settings()).context("data roots")?;
    let checkpointer = open_state_store(&config).await?;
    let cluster = join_cluster(&config, &listener).await?;
    let registry = reader_registry(&config, roots, checkpointer.store(), cluster.clone())?;
    let drain = CancellationToken::new();

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<DataServiceServer>().await;
    health.set_serving::<FlightServiceServer<FlightPlane>>().await;
    // Both versions of reflection: clients still ask v1alpha (Python's grpcio-reflection).
    let (reflection_v1, reflection_v1alpha) = (reflection().build_v1()?, reflection().build_v1alpha()?);
    let data =
        DataService::new(registry.clone(), std::sync::Arc::new(checkpointer), drain.clone(), config.stream_buffer);
    let rate = std::sync::Arc::new(RateLimiter::new(config.max_requests_per_second));
    let policy = std::sync::Arc::new(policy);
    let streams = data.streams();
    let known = streams.clone();
    let opened_and_known =
        move || (crate::metrics::METRICS.streams_opened.load(std::sync::atomic::Ordering::Relaxed), known.count());
    tokio::spawn(crate::memory::release_when_idle(std::time::Duration::from_secs(2), opened_and_known));
    let check = auth::interceptor(policy.clone(), rate);
    let (data_service, flight_service) = data_and_flight_services(&config, data, check);

    if !config.idle_reader_timeout.is_zero() {
        tokio::spawn(release_idle_readers(registry.clone(), config.idle_reader_timeout, drain.clone()));
    }
    if let Some(listener) = metrics {
        tracing::info!(addr = %listener.local_addr()?, "status at /, /status.json and /metrics");
        let watch = crate::status::http::Watch::new(registry.clone(), streams, policy);
        tokio::spawn(crate::status::http::serve(listener, std::sync::Arc::new(watch)));
    }
    let on_shutdown = drain_on(shutdown, health, drain.clone());
    let router = server_builder(&config)?
        // tonic answers a request over the size limit with OUT_OF_RANGE; limits are
        // RESOURCE_EXHAUSTED (as in gRPC's other implementations).
        .layer(tower::util::MapResponseLayer::new(oversized_request_is_resource_exhausted))
        .initial_stream_window_size(Some(http2::STREAM_WINDOW_BYTES))
        .initial_connection_window_size(Some(http2::CONNECTION_WINDOW_BYTES))
        .max_frame_size(Some(http2::MAX_FRAME_BYTES))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(data_service)
        .add_service(flight_service);
    tracing::info!(addr = %listener.local_addr()?, roots = %config.data_roots.iter().map(ToString::to_string).collect::<Vec<_>>().join(","), "serving");
    ready();
    router.serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), on_shutdown).await?;
    if let Some(cluster) = cluster {
        // Acknowledgements received are committed, and the leases given up at once.
        let released = tokio::task::spawn_blocking(move || {
            cluster.tick(false);
            cluster.ledger().release_all()
        });
        if let Ok(Err(err)) = released.await {
            tracing::warn!(error = %err, "leases not given up; they expire");
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// With a `postgres://` state store, this replica joins the cluster of every replica
/// sharing it: registered in the split ledger, with its committing and renewing thread.
async fn join_cluster(config: &Config, listener: &TcpListener) -> anyhow::Result<Option<Arc<Cluster>>> {
    let StateUrl::Postgres(url) = config.state_url() else { return Ok(None) };
    let name = config.replica_id.clone().unwrap_or_else(host_name);
    let suffix: String = crate::state::random_secret()[..3].iter().map(|b| format!("{b:02x}")).collect();
    let replica = format!("{name}-{suffix}");
    let address = match &config.advertise_addr {
        Some(address) => address.clone(),
        None => format!("http://{}", listener.local_addr()?),
    };
    let times = LeaseTimes { ttl: config.lease_time, grace: config.failover_grace };
    let id = replica.clone();
    let outage_limit = config.store_outage_limit;
    let ledger = tokio::task::spawn_blocking(move || Ledger::open(&url, None, &id, &address, times))
        .await?
        .context("split ledger")?
        .with_outage_limit(outage_limit);
    tracing::info!(replica = %replica, "cluster replica: shared readers are served through the split ledger");
    Ok(Some(Cluster::start(ledger, times.renew_every())))
}

fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "readerd".to_owned())
}

/// The bearer tokens (`--auth-tokens`), or none; without tokens the server must be told
/// to serve without authentication.
fn access_policy(config: &Config) -> anyhow::Result<AccessPolicy> {
    let policy = match &config.auth_tokens {
        Some(path) => AccessPolicy::load(path, config.allow_unauthenticated)
            .with_context(|| format!("auth tokens {}", path.display()))?,
        None => AccessPolicy::new(Vec::new(), config.allow_unauthenticated),
    };
    anyhow::ensure!(
        policy.has_tokens() || config.allow_unauthenticated,
        "no --auth-tokens: every request would be refused; give tokens, or --allow-unauthenticated to serve \
         without authentication"
    );
    Ok(policy)
}

/// Makes the state directory and opens the state store where checkpoints are committed.
/// Opened at start, so a bad URL or an unreachable database stops the server now.
async fn open_state_store(config: &Config) -> anyhow::Result<Checkpointer> {
    let state_url = config.state_url();
    check_writable_folder(&config.state_dir)?;
    if let StateUrl::Sqlite(path) = &state_url
        && let Some(folder) = path.parent().filter(|folder| *folder != config.state_dir)
    {
        check_writable_folder(folder)?;
    }
    let store_url = state_url.clone();
    let (checkpoints_kept, outage_limit) = (config.checkpoints_kept, config.store_outage_limit);
    let checkpointer = tokio::task::spawn_blocking(move || -> anyhow::Result<Checkpointer> {
        let store = crate::state::open(&store_url, outage_limit)?;
        Ok(Checkpointer::new(store, checkpoints_kept)?)
    })
    .await?
    .with_context(|| format!("state store {}", crate::config::hide_password(&state_url)))?;
    match &state_url {
        StateUrl::Sqlite(path) => tracing::info!(path = %path.display(), "state store: sqlite"),
        StateUrl::Postgres(_) => tracing::info!("state store: postgres"),
    }
    Ok(checkpointer)
}

/// Creates `folder` if needed and checks that this process can create a file in it, so
/// that a `/state` mounted from a host folder the container's user cannot write is named,
/// with the fix, instead of SQLite's "unable to open database file ... Error code 14".
fn check_writable_folder(folder: &std::path::Path) -> anyhow::Result<()> {
    let probe = folder.join(".readerd-write-check");
    let result = std::fs::create_dir_all(folder)
        .and_then(|()| std::fs::File::create(&probe))
        .and_then(|_| std::fs::remove_file(&probe));
    result.map_err(|err| {
        let (who, owner) = match effective_uid() {
            Some(uid) => (format!("uid {uid}"), uid.to_string()),
            None => ("readerd's user".to_owned(), "UID".to_owned()),
        };
        anyhow::anyhow!(
            "state directory {} is not writable by {who} ({err}): readerd keeps its checkpoints there; \
             give the folder to {who} (`chown -R {owner}` it, on the host when it is a bind mount) \
             or use a named volume (`docker run -v readerd-state:{}`)",
            folder.display(),
            folder.display(),
        )
    })
}

/// The process's effective uid: the owner of `/proc/self`.
fn effective_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").ok().map(|metadata| metadata.uid())
}

/// The readers' registry over `roots`: the readers' settings (decoding threads, record
/// indexes kept in the state `store`, the record cache), the named datasets, the memory budget and the limits.
fn reader_registry(
    config: &Config,
    roots: DataRoots,
    store: Arc<dyn StateStore>,
    cluster: Option<Arc<Cluster>>,
) -> anyhow::Result<ReaderRegistry> {
    let decode_threads =
        config.decode_threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let indexes = Arc::new(crate::state::StoredIndexes(store));
    let cache = RecordCache::new(config.cache_bytes);
    let pipeline = PipelineEnv { index_store: Some(indexes), cache: cache.clone() };
    let settings = ReaderSettings::new(decode_threads, pipeline)?;
    let datasets = match &config.datasets {
        Some(path) => load_datasets(path, config.max_record_bytes)?,
        None => Default::default(),
    };
    crate::memory::server().set_limit(config.memory_budget());
    // The record cache is bounded by --cache-bytes, not by the budget: left out.
    crate::memory::watch_resident_memory(std::time::Duration::from_millis(100), move || cache.used_bytes() as usize);
    let limits = Limits {
        readers_per_container: config.max_readers_per_container,
        consumers_per_reader: config.max_consumers_per_reader,
        batch_bytes: config.max_batch_bytes,
        stream_buffer_bytes: config.stream_buffer_bytes,
    };
    let files = FileBudget::new(config.max_open_files);
    let max_record_bytes = config.max_record_bytes;
    let job_window_bytes = config.job_window_bytes();
    let max_image_pixels = config.max_image_pixels;
    let setup = RegistrySetup {
        roots,
        max_record_bytes,
        max_image_pixels,
        settings,
        datasets,
        limits,
        files,
        ledger_jobs: cluster.map(|cluster| Arc::new(crate::reader::LedgerJobs::new(cluster))),
        job_window_bytes,
    };
    Ok(ReaderRegistry::new(setup))
}

/// readerd.v1 and the Arrow Flight plane over `data`, behind `check` (tokens and the
/// request rate), with the configuration's message size limits.
fn data_and_flight_services<F: Interceptor + Clone>(
    config: &Config,
    data: DataService,
    check: F,
) -> (InterceptedService<ReadWithoutCopies, F>, InterceptedService<FlightServiceServer<FlightPlane>, F>) {
    // A message holds at least one record, which may be as large as the record limit, or
    // a whole batch, up to the batch limit.
    let largest_payload = usize::try_from(config.max_record_bytes).unwrap_or(usize::MAX).max(config.max_batch_bytes);
    let max_message = largest_payload.saturating_add(1 << 20);
    let data = std::sync::Arc::new(data);
    let flight_service = FlightServiceServer::new(FlightPlane::new(data.clone()))
        .max_decoding_message_size(config.max_request_bytes)
        .max_encoding_message_size(max_message);
    let flight_service = InterceptedService::new(flight_service, check.clone());
    let data_service = ReadWithoutCopies::new(data, config.max_request_bytes, max_message);
    (InterceptedService::new(data_service, check), flight_service)
}

/// Releases the readers unused for `timeout` (`--idle-reader-timeout`) until the drain.
async fn release_idle_readers(registry: ReaderRegistry, timeout: Duration, drained: CancellationToken) {
    let mut ticks = tokio::time::interval((timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(30)));
    loop {
        tokio::select! {
            _ = ticks.tick() => { registry.release_idle(timeout); }
            _ = drained.cancelled() => return,
        }
    }
}

/// Resolves after `shutdown`, once the health service says NOT_SERVING and `drain` is
/// cancelled (open streams end with UNAVAILABLE).
async fn drain_on(shutdown: impl Future<Output = ()>, health: HealthReporter, drain: CancellationToken) {
    shutdown.await;
    tracing::info!("shutting down: draining streams");
    health.set_not_serving::<DataServiceServer>().await;
    health.set_not_serving::<FlightServiceServer<FlightPlane>>().await;
    drain.cancel();
}

/// The server, with TLS when the configuration has a certificate and key (and mutual TLS
/// with a client CA).
fn server_builder(config: &Config) -> anyhow::Result<Server> {
    let mut builder = Server::builder();
    if let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) {
        let read = |path: &std::path::PathBuf| std::fs::read(path).with_context(|| format!("TLS {}", path.display()));
        let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(read(cert)?, read(key)?));
        if let Some(ca) = &config.tls_client_ca {
            tls = tls.client_ca_root(Certificate::from_pem(read(ca)?));
        }
        builder = builder.tls_config(tls).context("TLS configuration")?;
        tracing::info!(mutual = config.tls_client_ca.is_some(), "TLS on");
    }
    Ok(builder)
}

/// What reflection describes: readerd.v1, health, and reflection itself in both versions
/// (each version's service lists the other too).
fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .include_reflection_service(false)
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET)
}

/// Rewrites tonic's "message length too large" (OUT_OF_RANGE) to RESOURCE_EXHAUSTED, in
/// a trailers-only reply's headers or in the trailers of a stream.
fn oversized_request_is_resource_exhausted(
    mut response: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    fix_oversized_status(response.headers_mut());
    response.map(|body| tonic::body::Body::new(OversizedStatus(body)))
}

fn fix_oversized_status(headers: &mut http::HeaderMap) {
    let oversized = headers.get("grpc-status").is_some_and(|status| status == "11")
        && headers
            .get("grpc-message")
            .is_some_and(|m| m.to_str().unwrap_or("").replace("%20", " ").contains("message length too large"));
    if oversized {
        headers.insert("grpc-status", http::HeaderValue::from_static("8"));
    }
}

/// A reply body whose trailers go through [`fix_oversized_status`].
struct OversizedStatus(tonic::body::Body);

impl http_body::Body for OversizedStatus {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.0).poll_frame(cx).map(|frame| {
            frame.map(|frame| {
                frame.map(|frame| match frame.into_trailers() {
                    Ok(mut trailers) => {
                        fix_oversized_status(&mut trailers);
                        http_body::Frame::trailers(trailers)
                    }
                    Err(frame) => frame,
                })
            })
        })
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.0.size_hint()
    }
}

/// Reads the named datasets of the configuration and checks every spec now, so a typo
/// stops the server at start rather than failing a trainer later.
fn load_datasets(path: &std::path::Path, max_record_bytes: u64) -> anyhow::Result<BTreeMap<String, pb::DatasetSpec>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("datasets file {}", path.display()))?;
    let datasets: BTreeMap<String, pb::DatasetSpec> =
        serde_json::from_str(&text).with_context(|| format!("datasets file {}", path.display()))?;
    for (name, spec) in &datasets {
        crate::spec::ReaderSpec::from_proto(spec.clone(), max_record_bytes)
            .map_err(|err| anyhow::anyhow!("datasets file {}: dataset {name}: {err}", path.display()))?;
    }
    tracing::info!(count = datasets.len(), "named datasets loaded");
    Ok(datasets)
}
