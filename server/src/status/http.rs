//! The watch listener (`--metrics-listen`): `GET /metrics` (Prometheus' text format),
//! `GET /status.json` (`super::Status`), `GET /` (the status page, `page.html`, embedded
//! in the binary and fetching nothing from another host), and `POST /login` /
//! `POST /logout`, which start and end a session (its id in a cookie).
//!
//! With `--auth-tokens`, the page and the JSON need a token: `authorization: Bearer` or
//! the `readerd_session` cookie the login form sets (`HttpOnly`, `SameSite=Strict`; it
//! holds a session id, never the token, `super::sessions`; a token never goes in a URL).
//! Each shows only the containers its token may read. Logins and logouts from another
//! site's page are refused (`Sec-Fetch-Site`, else `Origin` against `Host`). `/metrics`
//! needs a token too (Prometheus' `authorization` scrape setting sends it as a bearer
//! header): the server-wide series to any valid token, the series of a container's readers
//! only to tokens that may read it, as `/status.json` decides ([`visible_to`]).
//!
//! Every answer says `X-Content-Type-Options: nosniff` and has a Content-Security-Policy:
//! the page's lets through its own inline script and style by their SHA-256 (nothing
//! else inline, nothing from another host), and asks only this listener.
//!
//! At most [`MOST_CONNECTIONS`] connections are open; past that a new one closes the one
//! that has waited longest for a request (one that sent nothing or half a request, or idle
//! between requests), so silent connections cannot keep scrapers out.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use readerd_common::sync::MutexUnpoisoned;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use super::history::{History, SAMPLE_EVERY};
use super::sessions::Sessions;
use super::{Status, watched};
use crate::auth::{Access, AccessPolicy, Caller};
use crate::checkpoint::Streams;
use crate::metrics::METRICS;
use crate::registry::ReaderRegistry;

const PAGE: &str = include_str!("page.html");
const COOKIE: &str = "readerd_session";
/// The cookie earlier versions set, which held the token itself: cleared at every login
/// and logout.
const OLD_TOKEN_COOKIE: &str = "readerd_token";
/// A login form's body is a token and its name.
const MOST_LOGIN_BYTES: usize = 4096;
/// Connections open at once (pages poll every 2 s, scrapers every few seconds). A new
/// one past it closes the connection waiting longest for a request; only when every one
/// is being answered is the new one closed instead.
const MOST_CONNECTIONS: usize = 64;
/// How long a connection may take to send a request's head (a new one, or the next on a
/// kept-alive connection).
const HEADER_READ_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// Token checks a client address may cause a second: logins, and `/status.json` or
/// `/metrics` requests that carry a bearer token, so that a token is not guessed online
/// by any door. A page polls every 2 s, Prometheus scrapes every 15 s or so.
const TOKEN_CHECKS_PER_SECOND: u32 = 5;
/// How long a connection may stay open (idle keep-alive included), and a login form's
/// body may take: slow or idle clients do not keep the listener's slots.
const CONNECTION_LIFETIME: std::time::Duration = std::time::Duration::from_secs(30);
const LOGIN_BODY_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// What the listener serves from.
pub struct Watch {
    pub registry: ReaderRegistry,
    pub streams: Arc<Streams>,
    pub policy: Arc<AccessPolicy>,
    pub history: History,
    /// Token checks, by client address.
    pub token_checks: crate::limits::RateLimiter,
    /// The page's logins.
    pub sessions: Sessions,
}

impl Watch {
    pub fn new(registry: ReaderRegistry, streams: Arc<Streams>, policy: Arc<AccessPolicy>) -> Self {
        let token_checks = crate::limits::RateLimiter::new(TOKEN_CHECKS_PER_SECOND);
        Self { registry, streams, policy, history: History::default(), token_checks, sessions: Sessions::default() }
    }
}

/// Serves the watch listener until the process ends, and samples the history every
/// [`SAMPLE_EVERY`].
pub async fn serve(listener: TcpListener, watch: Arc<Watch>) {
    tokio::spawn(sample_history(watch.clone()));
    let connections = Arc::new(Connections::default());
    loop {
        let Ok((socket, peer)) = listener.accept().await else { continue };
        let Some(slot) = connections.open() else {
            tracing::debug!("watch listener: every connection is being answered, a new one closed");
            continue;
        };
        let watch = watch.clone();
        let connections = connections.clone();
        tokio::spawn(async move {
            let _open = OpenSlot(&connections, slot.id);
            let answering = slot.clone();
            let service = hyper::service::service_fn(move |request| {
                let busy = answering.clone().answer();
                let watch = watch.clone();
                async move {
                    let Some(busy) = busy else {
                        // Closed for a newer connection as this request came: it goes too.
                        return Ok(plain(StatusCode::SERVICE_UNAVAILABLE, "too many connections\n").map(Answered::of));
                    };
                    let answer = answer(watch, peer.ip(), request).await?;
                    Ok::<_, Infallible>(answer.map(|body| Answered { body, _busy: Some(busy) }))
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIME)
                .serve_connection(TokioIo::new(socket), service);
            tokio::select! {
                served = tokio::time::timeout(CONNECTION_LIFETIME, connection) => match served {
                    Ok(Err(err)) => tracing::debug!(error = %err, "watch listener: connection ended"),
                    Err(_) => tracing::debug!("watch listener: a connection open past its lifetime closed"),
                    Ok(Ok(())) => {}
                },
                () = slot.evicted.notified() => {
                    tracing::debug!("watch listener: a connection waiting for a request closed for a new one");
                }
            }
        });
    }
}

/// The listener's open connections, by id.
#[derive(Default)]
struct Connections {
    open: Mutex<HashMap<u64, Arc<Slot>>>,
    next_id: AtomicU64,
}

/// One open connection: whether a request of it is being answered, and since when it
/// waits for one otherwise.
struct Slot {
    id: u64,
    state: Mutex<SlotState>,
    /// Told when the connection is closed for a newer one.
    evicted: Notify,
}

#[derive(Clone, Copy)]
enum SlotState {
    /// Waiting for a request (its head maybe half sent) since then.
    Waiting(Instant),
    /// A request is being answered (until its answer's body is written).
    Answering,
    Evicted,
}

impl Connections {
    /// A slot for a new connection; at [`MOST_CONNECTIONS`], the connection waiting
    /// longest for a request is closed for it. None: every connection is being answered.
    fn open(&self) -> Option<Arc<Slot>> {
        let mut open = self.open.lock_unpoisoned();
        while open.len() >= MOST_CONNECTIONS {
            let waiting = |slot: &Arc<Slot>| match *slot.state.lock_unpoisoned() {
                SlotState::Waiting(since) => Some(since),
                _ => None,
            };
            let (_, oldest) = open.iter().filter_map(|(id, slot)| Some((waiting(slot)?, *id))).min()?;
            let slot = open.remove(&oldest).expect("listed");
            // It may have started answering a request since: then it stays.
            if !slot.evict() {
                open.insert(oldest, slot);
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Mutex::new(SlotState::Waiting(Instant::now()));
        let slot = Arc::new(Slot { id, state, evicted: Notify::new() });
        open.insert(id, slot.clone());
        Some(slot)
    }
}

impl Slot {
    /// Closes a connection waiting for a request; false if it is answering one.
    fn evict(&self) -> bool {
        let mut state = self.state.lock_unpoisoned();
        if !matches!(*state, SlotState::Waiting(_)) {
            return false;
        }
        *state = SlotState::Evicted;
        // Kept for the connection's task if it is not waiting on it yet.
        self.evicted.notify_one();
        true
    }

    /// Marks the connection busy answering a request, until the guard is dropped; None if
    /// it was just closed for a newer one.
    fn answer(self: Arc<Self>) -> Option<Busy> {
        let mut state = self.state.lock_unpoisoned();
        match *state {
            SlotState::Evicted => None,
            _ => {
                *state = SlotState::Answering;
                drop(state);
                Some(Busy(self))
            }
        }
    }
}

/// A connection's request being answered: waiting again once dropped (with the answer's
/// body, once hyper has written it).
struct Busy(Arc<Slot>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0.state.lock_unpoisoned();
        if matches!(*state, SlotState::Answering) {
            *state = SlotState::Waiting(Instant::now());
        }
    }
}

/// Removes its connection from the open ones when the connection's task ends.
struct OpenSlot<'a>(&'a Connections, u64);

impl Drop for OpenSlot<'_> {
    fn drop(&mut self) {
        self.0.open.lock_unpoisoned().remove(&self.1);
    }
}

/// An answer's body, holding its connection busy until written.
struct Answered {
    body: Full<Bytes>,
    _busy: Option<Busy>,
}

impl Answered {
    fn of(body: Full<Bytes>) -> Self {
        Self { body, _busy: None }
    }
}

impl http_body::Body for Answered {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Every [`SAMPLE_EVERY`], a point of every reader's history, and each cluster job's view
/// of the ledger refreshed (blocking: one ledger query of each job's replicas and one of
/// its epochs).
async fn sample_history(watch: Arc<Watch>) {
    let mut ticks = tokio::time::interval(SAMPLE_EVERY);
    loop {
        ticks.tick().await;
        let watch = watch.clone();
        let sampled = tokio::task::spawn_blocking(move || {
            let readers = watched(&watch.registry, &watch.streams, &|_| true);
            for watched in &readers {
                if let Err(err) = watched.reader.coordinator().refresh_view() {
                    tracing::debug!(error = %err, "the status keeps the job's last view of the ledger");
                }
            }
            let input_bound = readers.iter().map(|watched| {
                let status = watched.reader.input_bound();
                (watched.reader.clone(), status)
            });
            watch.history.sample(&input_bound.collect::<Vec<_>>());
        });
        let _ = sampled.await;
    }
}

type Answer = Response<Full<Bytes>>;

async fn answer(watch: Arc<Watch>, peer: std::net::IpAddr, request: Request<Incoming>) -> Result<Answer, Infallible> {
    let path = request.uri().path().to_owned();
    Ok(match (request.method(), path.as_str()) {
        (&Method::POST, "/login") | (&Method::POST, "/logout") if !same_site(&request) => {
            plain(StatusCode::FORBIDDEN, "a login or logout from another site's page is refused\n")
        }
        (&Method::GET, "/status.json") | (&Method::GET, "/metrics") | (&Method::POST, "/login")
            if checks_a_token(&request) && watch.token_checks.admit(&peer.to_string()).is_err() =>
        {
            plain(StatusCode::TOO_MANY_REQUESTS, "too many token checks from this address; retry in a second\n")
        }
        (&Method::GET, "/status.json") => match caller(&watch, &request) {
            Ok(caller) => status_json(watch, caller, history_since(&request)).await,
            Err(message) => unauthorized(&message),
        },
        (&Method::GET, "/metrics") => match caller(&watch, &request) {
            Ok(caller) => metrics(watch, caller).await,
            Err(message) => unauthorized(&message),
        },
        // The page holds no data: it asks /status.json, and shows the login form when
        // that needs a token.
        (&Method::GET, "/") => {
            let mut page = body(StatusCode::OK, "text/html; charset=utf-8", PAGE.to_owned());
            let policy = header::HeaderValue::from_str(&PAGE_POLICY).expect("a header value");
            page.headers_mut().insert(header::CONTENT_SECURITY_POLICY, policy);
            page
        }
        (&Method::POST, "/login") => login(&watch, request).await,
        (&Method::POST, "/logout") => {
            if let Some(id) = session_cookie(&request) {
                watch.sessions.end(&id);
            }
            let mut answer = redirect_home();
            clear_cookies(&mut answer, &[COOKIE, OLD_TOKEN_COOKIE]);
            answer
        }
        _ => plain(StatusCode::NOT_FOUND, "this listener serves /, /status.json and /metrics\n"),
    })
}

/// Whether answering `request` checks a token: a login, or a status or metrics request
/// with a bearer header. A session cookie is not a token: its 256 random bits are not
/// guessed.
fn checks_a_token(request: &Request<Incoming>) -> bool {
    let path = request.uri().path();
    (request.method() == Method::POST && path == "/login")
        || ((path == "/status.json" || path == "/metrics") && request.headers().contains_key(header::AUTHORIZATION))
}

/// Whether `request` comes from this listener's own page (or from no page: a script), as
/// the browser tells: `Sec-Fetch-Site`, else `Origin` naming the `Host` it was sent to.
/// Neither header: not a browser's cross-site form (browsers send `Origin` on every POST).
fn same_site(request: &Request<Incoming>) -> bool {
    let header = |name| request.headers().get(name).and_then(|value| value.to_str().ok());
    if let Some(site) = header(header::HeaderName::from_static("sec-fetch-site")) {
        return site == "same-origin" || site == "none";
    }
    let Some(origin) = header(header::ORIGIN) else { return true };
    let host = header(header::HOST).unwrap_or_default();
    !host.is_empty() && origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) == Some(host)
}

/// This listener's cookie in `request`, a session id, if it has one.
fn session_cookie(request: &Request<Incoming>) -> Option<String> {
    let cookies = request.headers().get_all(header::COOKIE).iter().filter_map(|value| value.to_str().ok());
    let mut pairs = cookies.flat_map(|line| line.split(';')).filter_map(|pair| pair.trim().split_once('='));
    pairs.find(|(name, _)| *name == COOKIE).map(|(_, token)| token.to_owned())
}

/// The caller of `request`: by its bearer token, else its session's, else none (served
/// only with `--allow-unauthenticated`). A session this server does not know (ended, or
/// another server's on the same host: cookies ignore ports) counts as none.
fn caller(watch: &Watch, request: &Request<Incoming>) -> Result<Caller, String> {
    let policy = &watch.policy;
    if let Some(bearer) = request.headers().get(header::AUTHORIZATION) {
        // A header that is not text is no token (not a request without one).
        return policy.authenticate(Some(bearer.to_str().unwrap_or(""))).map_err(|err| format!("{err}\n"));
    }
    let token = session_cookie(request).and_then(|id| watch.sessions.token(&id));
    match token.map(|token| policy.authenticate(Some(&format!("Bearer {token}")))) {
        Some(Ok(caller)) => Ok(caller),
        _ => policy.authenticate(None).map_err(|err| format!("{err}\n")),
    }
}

/// `/status.json?since=T`: only history points after `T` (seconds since the Unix epoch,
/// as the points' `time`), for a page that has the older ones.
fn history_since(request: &Request<Incoming>) -> Option<u64> {
    let query = request.uri().query()?;
    form_value(query.as_bytes(), "since")?.parse().ok()
}

/// The containers `caller` may see on this listener: those it may read. `/status.json` and
/// `/metrics` both show only these.
fn visible_to(caller: &Caller) -> impl Fn(&str) -> bool + '_ {
    move |container| caller.check(container, Access::Read).is_ok()
}

async fn status_json(watch: Arc<Watch>, caller: Caller, since: Option<u64>) -> Answer {
    let gathered = tokio::task::spawn_blocking(move || {
        let readers = watched(&watch.registry, &watch.streams, &visible_to(&caller));
        Status::gather(&readers, &watch.history, since)
    })
    .await;
    match gathered.map(|status| serde_json::to_string(&status)) {
        Ok(Ok(json)) => body(StatusCode::OK, "application/json", json),
        _ => plain(StatusCode::INTERNAL_SERVER_ERROR, "the status could not be gathered\n"),
    }
}

/// `/metrics`: the server-wide series, and those of the readers of the containers the
/// caller may see.
async fn metrics(watch: Arc<Watch>, caller: Caller) -> Answer {
    match tokio::task::spawn_blocking(move || METRICS.render(&watch.registry, &visible_to(&caller))).await {
        Ok(text) => body(StatusCode::OK, "text/plain; version=0.0.4", text),
        Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "metrics failed\n"),
    }
}

/// `POST /login` with a form's `token`: a token the server knows starts a session, whose
/// id is set as the cookie.
async fn login(watch: &Watch, request: Request<Incoming>) -> Answer {
    let form = tokio::time::timeout(LOGIN_BODY_TIME, Limited::new(request.into_body(), MOST_LOGIN_BYTES).collect());
    let form = match form.await {
        Ok(Ok(form)) => form,
        Ok(Err(_)) => return plain(StatusCode::PAYLOAD_TOO_LARGE, "a login form holds a token only\n"),
        Err(_) => return plain(StatusCode::REQUEST_TIMEOUT, "a login form is sent within 5 s\n"),
    };
    let form = form.to_bytes();
    let token = form_value(&form, "token").unwrap_or_default();
    let usable = !token.is_empty()
        && token.bytes().all(|byte| byte.is_ascii_graphic() && byte != b';')
        && watch.policy.authenticate(Some(&format!("Bearer {token}"))).is_ok();
    if !usable {
        return plain(StatusCode::UNAUTHORIZED, "this server knows no such token\n");
    }
    let Ok(id) = watch.sessions.start(token) else {
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "no randomness for a session id\n");
    };
    let mut answer = redirect_home();
    clear_cookies(&mut answer, &[OLD_TOKEN_COOKIE]);
    let lifetime = super::sessions::SESSION_LIFETIME.as_secs();
    let cookie = format!("{COOKIE}={id}; Path=/; Max-Age={lifetime}; HttpOnly; SameSite=Strict");
    answer.headers_mut().append(header::SET_COOKIE, cookie.parse().expect("hex digits"));
    answer
}

/// Sets each of `names` to expire at once.
fn clear_cookies(answer: &mut Answer, names: &[&str]) {
    for name in names {
        let clear = format!("{name}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
        answer.headers_mut().append(header::SET_COOKIE, clear.parse().expect("a header value"));
    }
}

/// Field `name` of an `application/x-www-form-urlencoded` body, decoded.
fn form_value(form: &[u8], name: &str) -> Option<String> {
    url::form_urlencoded::parse(form).find(|(key, _)| key == name).map(|(_, value)| value.into_owned())
}

fn redirect_home() -> Answer {
    let mut answer = plain(StatusCode::SEE_OTHER, "");
    answer.headers_mut().insert(header::LOCATION, "/".parse().expect("a header value"));
    answer
}

/// 401, naming the scheme to use (RFC 7235): a scraper's or script's missing or wrong
/// token. (Browsers ask nothing for `Bearer`: the page shows its login form.)
fn unauthorized(message: &str) -> Answer {
    let mut answer = plain(StatusCode::UNAUTHORIZED, message);
    let challenge = header::HeaderValue::from_static("Bearer realm=\"readerd\"");
    answer.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
    answer
}

/// The policy of every answer but the page: nothing of it runs or is shown as a page.
const DATA_POLICY: &str = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The page's policy: its one inline script and one inline style by their SHA-256 (no
/// other inline code, no `style` attributes: the script sets styles through the DOM),
/// requests to this listener only, the login form posted here only, never in a frame.
static PAGE_POLICY: LazyLock<String> = LazyLock::new(|| {
    let script = inline_hash(PAGE, "script");
    let style = inline_hash(PAGE, "style");
    format!(
        "default-src 'none'; script-src {script}; style-src {style}; connect-src 'self'; img-src 'self'; \
         form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )
});

/// `'sha256-…'` of the text inside `page`'s `<tag>` element, as CSP hashes it.
fn inline_hash(page: &str, tag: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let open = format!("<{tag}>");
    let start = page.find(&open).map(|at| at + open.len()).expect("the page has the element");
    let end = start + page[start..].find(&format!("</{tag}>")).expect("the element ends");
    let digest = sha2::Sha256::digest(&page.as_bytes()[start..end]);
    format!("'sha256-{}'", base64::engine::general_purpose::STANDARD.encode(digest))
}

fn plain(status: StatusCode, text: &str) -> Answer {
    body(status, "text/plain; charset=utf-8", text.to_owned())
}

fn body(status: StatusCode, content_type: &str, text: String) -> Answer {
    let mut answer = Response::new(Full::new(Bytes::from(text)));
    *answer.status_mut() = status;
    answer.headers_mut().insert(header::CONTENT_TYPE, content_type.parse().expect("a header value"));
    answer.headers_mut().insert(header::CACHE_CONTROL, "no-store".parse().expect("a header value"));
    answer.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff"));
    answer.headers_mut().insert(header::CONTENT_SECURITY_POLICY, header::HeaderValue::from_static(DATA_POLICY));
    answer
}

#[cfg(test)]
mod tests {
    use super::{PAGE, PAGE_POLICY, form_value};

    #[test]
    fn the_page_policy_lets_through_its_one_script_and_one_style() {
        // One element of each: the policy hashes the first only.
        assert_eq!(PAGE.matches("<script").count(), 1);
        assert_eq!(PAGE.matches("<style").count(), 1);
        // No inline handlers or style attributes, which hashes do not allow.
        for attribute in [" style=", " onclick=", " onload=", " onsubmit=", "javascript:"] {
            assert!(!PAGE.contains(attribute), "{attribute}");
        }
        assert!(!PAGE.contains("setAttribute(\"style\""));
        assert_eq!(PAGE_POLICY.matches("'sha256-").count(), 2, "{}", *PAGE_POLICY);
        assert!(!PAGE_POLICY.contains("unsafe"), "{}", *PAGE_POLICY);
    }

    #[test]
    fn a_forms_fields_decode() {
        assert_eq!(form_value(b"token=abc%2Bdef+g&x=1", "token").as_deref(), Some("abc+def g"));
        assert_eq!(form_value(b"x=1", "token"), None);
        // As browsers and the WHATWG form rules decode it: a malformed escape stays as it
        // is (then it is a token no server knows).
        assert_eq!(form_value(b"token=%zz", "token").as_deref(), Some("%zz"));
    }
}
