//! [`ResumingStream`]: a stream of a reader that outlives its connection. When the server
//! becomes unavailable or the connection drops, it reconnects (to the next of its
//! addresses, with bounded, jittered exponential backoff), reopens the stream from the
//! newest checkpoint it holds, and skips the elements the trainer already has, so the
//! trainer sees every element once.
//!
//! For a private reader this is exact: the stream resumes from a checkpoint (or, without
//! one, from the start, which is the same deterministic sequence) and elements are matched
//! by `seq`. A shared reader's stream reattaches to the reader by name, and its `seq`
//! numbers each connection's elements anew; the server redelivers what the lost stream
//! held unacknowledged, and a server that lost the reader altogether restores it from the
//! request's own resume token (the stream's checkpoints do not replace it).
//!
//! [`merge`] reads one stream from each of several servers (replicas) as one. What a
//! stream yields is an [`Event`]; [`received`] reads each message of a stream into what
//! its reader acts on ([`Received`]), for every reader of streams in this crate.

use std::time::Duration;

use futures::Stream;
use readerd_proto::v1 as pb;

use crate::client::{Client, ConnectOptions, ReadStream};
use crate::rng::SplitMix64;
use crate::status::{code_name, error_message, status_code, status_message};

/// HTTP/2 pings on a stream's connection this often, unless its `ConnectOptions` set
/// their own interval: a server that answers none for twice this long (stopped, frozen,
/// cut off) counts as lost, so a stream waits at most about three times this on a silent
/// server before it reconnects and resumes (a server that answers pings but has no
/// element ready yet is waited for).
pub const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// How long a server just connected to has to answer (a health check) before the
/// attempt counts as failed: one stopped, frozen or cut off has its connections accepted
/// by its kernel and answers nothing, and waiting for its pings to go unanswered would
/// take [`KEEP_ALIVE`] three times over for each attempt.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// How reconnection is tried.
#[derive(Clone, Debug)]
pub struct Reconnect {
    /// Attempts after a failure before giving up (0: never reconnect).
    pub attempts: u32,
    /// The first wait; each later one doubles, up to `max_delay`, each with jitter.
    pub initial_delay: Duration,
    pub max_delay: Duration,
}

impl Default for Reconnect {
    fn default() -> Self {
        Self { attempts: 10, initial_delay: Duration::from_millis(100), max_delay: Duration::from_secs(5) }
    }
}

impl Reconnect {
    /// No reconnection (`readerctl read`): the stream's first failure ends it, and a
    /// failed checkpoint leaves the stream as it was. Opening tries each address once, in
    /// turn, without waiting.
    pub fn never() -> Self {
        Self { attempts: 0, initial_delay: Duration::ZERO, max_delay: Duration::ZERO }
    }

    /// The wait before attempt `attempt` (from 0): exponential, capped, with "equal
    /// jitter" (half fixed, half random) so clients of one failed server spread out.
    pub fn delay(&self, attempt: u32, random: u64) -> Duration {
        let exponential = self.initial_delay.saturating_mul(1u32 << attempt.min(20)).min(self.max_delay);
        let half = exponential / 2;
        let jitter_nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX).max(1);
        half + Duration::from_nanos(random % jitter_nanos)
    }
}

/// Rounds over the addresses a stream's first open makes before it gives up (about 3 s).
const FIRST_OPEN_ROUNDS: u32 = 6;

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The server answered with an error that retrying cannot fix (or a checkpoint or
    /// acknowledgement failed).
    #[error("{}: {}", code_name(status_code(.0)), status_message(.0))]
    Status(tonic::Status),
    #[error("gave up after {attempts} reconnection attempts; last error: {last}")]
    GaveUp { attempts: u32, last: String },
}

impl StreamError {
    /// The gRPC code of the failure (`UNAVAILABLE` once reconnection gave up, and for a
    /// broken connection: [`status_code`]).
    pub fn code(&self) -> tonic::Code {
        match self {
            StreamError::Status(status) => status_code(status),
            StreamError::GaveUp { .. } => tonic::Code::Unavailable,
        }
    }
}

/// What a stream yields.
#[derive(Debug)]
pub enum Event {
    Element(pb::Element),
    /// After the last element of the last epoch; `after_seq` is -1 for an empty stream.
    EndOfSequence {
        after_seq: i64,
    },
}

/// What a message of a stream asks its reader to act on: an [`Event`], or a checkpoint
/// the server committed on its own (`checkpoint_every`, `checkpoint_interval_ms`, the
/// final one of a drain).
#[derive(Debug)]
pub enum Received {
    Element(pb::Element),
    Checkpoint { token: String, after_seq: i64 },
    EndOfSequence { after_seq: i64 },
}

impl From<Event> for Received {
    fn from(event: Event) -> Self {
        match event {
            Event::Element(element) => Received::Element(element),
            Event::EndOfSequence { after_seq } => Received::EndOfSequence { after_seq },
        }
    }
}

/// The one reading of a stream's message: what it asks its reader to act on, `None` for
/// the stream's first message (`Started`, which `Client::read_with` reads) and an empty one.
pub fn received(response: pb::ReadResponse) -> Option<Received> {
    match response.kind? {
        pb::read_response::Kind::Element(element) => Some(Received::Element(element)),
        pb::read_response::Kind::Checkpoint(pb::CheckpointResponse { token, after_seq }) => {
            Some(Received::Checkpoint { token, after_seq })
        }
        pb::read_response::Kind::EndOfSequence(pb::EndOfSequence { after_seq }) => {
            Some(Received::EndOfSequence { after_seq })
        }
        pb::read_response::Kind::Started(_) => None,
    }
}

/// The failure of a stream that closed before its end-of-sequence marker.
pub(crate) const NO_END_MARKER: &str = "the stream ended without an end-of-sequence marker";

/// Failures that a new connection may cure: the server went away (UNAVAILABLE, the final
/// checkpoint of a drain kept before it) or the connection broke. An UNKNOWN or CANCELLED
/// status the server sent is its answer, not retried.
fn retryable(status: &tonic::Status) -> bool {
    status_code(status) == tonic::Code::Unavailable
}

/// A reader's stream that reconnects and resumes; see the module documentation.
#[derive(Debug)]
pub struct ResumingStream {
    addrs: Vec<String>,
    /// The request that opened the stream; its resume token moves with each checkpoint.
    request: pb::ReadRequest,
    reconnect: Reconnect,
    /// Index into `addrs` of the server in use.
    current: usize,
    connection: Option<(Client, ReadStream)>,
    /// The `seq` of the last element handed to the trainer (-1: none yet).
    last_seq: i64,
    /// The last `seq` acknowledged on the current connection (below its first: none).
    acknowledged: i64,
    /// The newest checkpoint: token and the last element it covers.
    checkpoint: Option<(String, i64)>,
    finished: bool,
    /// Jitter of the reconnection delays.
    jitter: SplitMix64,
    options: ConnectOptions,
    /// Connections made again after a failure.
    reconnects: u64,
    /// The next element or end, read ahead by a checkpoint that reconnected.
    ahead: Option<Received>,
    /// The trainer's time, for the next acknowledgement of a shared reader's stream.
    time_to_report: Option<pb::ConsumerTime>,
}

impl ResumingStream {
    /// Opens `request` on the first reachable of `addrs`. Automatic checkpoints
    /// (`checkpoint_every`, `checkpoint_interval_ms` of the request) are kept as they
    /// arrive; a `resume_token` in the request is the first checkpoint.
    pub async fn open(addrs: &[&str], request: pb::ReadRequest, reconnect: Reconnect) -> Result<Self, StreamError> {
        Self::open_with(addrs, request, reconnect, ConnectOptions::default()).await
    }

    /// `open`, connecting with TLS and a token as `options` say, pinging as
    /// `options.keep_alive` says ([`KEEP_ALIVE`] when it says nothing). An address that
    /// does not parse is `INVALID_ARGUMENT` at once, never retried.
    pub async fn open_with(
        addrs: &[&str],
        request: pb::ReadRequest,
        reconnect: Reconnect,
        options: ConnectOptions,
    ) -> Result<Self, StreamError> {
        assert!(!addrs.is_empty(), "ResumingStream::open needs at least one address");
        let mut options = options;
        options.keep_alive.get_or_insert(KEEP_ALIVE);
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let mut stream = Self {
            addrs: addrs.iter().map(|addr| (*addr).to_owned()).collect(),
            checkpoint: None,
            request,
            reconnect,
            current: 0,
            connection: None,
            last_seq: -1,
            acknowledged: -1,
            time_to_report: None,
            finished: false,
            jitter: SplitMix64 { state: seed as u64 },
            options,
            reconnects: 0,
            ahead: None,
        };
        stream.reopen(None).await?;
        if let Some((_, read)) = &stream.connection {
            stream.last_seq = read.first_seq - 1;
        }
        if !stream.request.resume_token.is_empty() {
            stream.checkpoint = Some((stream.request.resume_token.clone(), stream.last_seq));
        }
        Ok(stream)
    }

    /// The `seq` of the last element returned (-1 before the first).
    pub fn last_seq(&self) -> i64 {
        self.last_seq
    }

    /// How many times the stream connected again after a failure.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// Whether the stream reads a shared reader (by name) rather than a private one.
    pub fn is_shared(&self) -> bool {
        self.request.reader.as_ref().is_some_and(|reader| !reader.shared_name.is_empty())
    }

    /// The id of the open stream on its server (empty while reconnecting).
    pub fn stream_id(&self) -> &str {
        self.connection.as_ref().map_or("", |(_, read)| read.stream_id.as_str())
    }

    /// The newest checkpoint token and the last element it covers.
    pub fn last_checkpoint(&self) -> Option<(&str, i64)> {
        self.checkpoint.as_ref().map(|(token, after)| (token.as_str(), *after))
    }

    /// The next element, or the end of the data; `None` after the end was returned.
    pub async fn next(&mut self) -> Result<Option<Event>, StreamError> {
        loop {
            return Ok(match self.next_received().await? {
                Some(Received::Element(element)) => Some(Event::Element(element)),
                Some(Received::EndOfSequence { after_seq }) => Some(Event::EndOfSequence { after_seq }),
                Some(Received::Checkpoint { .. }) => continue, // kept: `last_checkpoint`
                None => None,
            });
        }
    }

    /// [`next`](Self::next), with the checkpoints the server sends on its own as they
    /// arrive (kept as the newest checkpoint too).
    pub async fn next_received(&mut self) -> Result<Option<Received>, StreamError> {
        if self.finished {
            return Ok(None);
        }
        let received = match self.ahead.take() {
            Some(received) => received,
            None => self.receive().await?,
        };
        match &received {
            Received::Element(element) => self.last_seq = element.seq,
            Received::EndOfSequence { .. } => self.finished = true,
            Received::Checkpoint { .. } => {}
        }
        Ok(Some(received))
    }

    /// The next element the trainer does not have yet, checkpoint or end, reconnecting as
    /// needed.
    async fn receive(&mut self) -> Result<Received, StreamError> {
        loop {
            let failure = match self.connection.as_mut() {
                None => tonic::Status::unavailable("not connected"),
                Some((_, read)) => match read.message().await {
                    Ok(Some(response)) => match received(response) {
                        // Replayed after a resume: the trainer has it.
                        Some(Received::Element(element)) if element.seq <= self.last_seq => continue,
                        Some(Received::Checkpoint { token, after_seq }) => {
                            self.keep_checkpoint(token.clone(), after_seq);
                            return Ok(Received::Checkpoint { token, after_seq });
                        }
                        Some(received) => return Ok(received),
                        None => continue,
                    },
                    Ok(None) => tonic::Status::unavailable(NO_END_MARKER),
                    Err(status) if retryable(&status) => status,
                    Err(status) => return Err(StreamError::Status(status)),
                },
            };
            self.reopen(Some(failure)).await?;
        }
    }

    /// Commits a checkpoint after the last element returned and returns its token. When
    /// the server is gone, or no longer knows a private stream, it reconnects first
    /// (unless it may not: then the failure is returned), and reads ahead to the first
    /// element the trainer does not have (kept for `next`): the new stream has then sent
    /// everything the checkpoint covers.
    pub async fn checkpoint(&mut self) -> Result<String, StreamError> {
        let after_seq = self.last_seq;
        loop {
            let failure = match self.connection.as_mut() {
                None => tonic::Status::unavailable("not connected"),
                Some((client, read)) => match client.checkpoint(&read.stream_id, after_seq).await {
                    Ok(token) => {
                        self.keep_checkpoint(token.clone(), after_seq);
                        return Ok(token);
                    }
                    Err(status) if self.reconnect.attempts > 0 && self.lost_for_checkpoints(&status) => status,
                    Err(status) => return Err(StreamError::Status(status)),
                },
            };
            self.ahead = None;
            self.reopen(Some(failure)).await?;
            self.ahead = loop {
                match self.receive().await? {
                    Received::Checkpoint { .. } => continue, // a replayed one, kept
                    received => break Some(received),
                }
            };
        }
    }

    /// Whether a checkpoint that failed with `status` needs the stream opened again: the
    /// server went away, or (a private stream) it no longer knows the stream, as a server
    /// restarted on the same address does not, nor one whose trainer was silent for long
    /// after its last element (NOT_FOUND). A private stream reopens exactly from its newest
    /// checkpoint; a shared one's NOT_FOUND is its answer.
    fn lost_for_checkpoints(&self, status: &tonic::Status) -> bool {
        retryable(status) || (!self.is_shared() && status_code(status) == tonic::Code::NotFound)
    }

    /// Tells the server the trainer holds every element up to the last one returned
    /// (shared readers redeliver unacknowledged elements of a lost stream).
    pub async fn acknowledge(&mut self) -> Result<(), StreamError> {
        self.acknowledge_with(false).await
    }

    /// Acknowledges every element received and has the server commit the stream's
    /// acknowledgements before it answers (on a replica, to the split ledger): call it
    /// before a consumer of a shared reader stops, so that a checkpoint taken next, through
    /// any replica, covers what it consumed.
    pub async fn close(&mut self) -> Result<(), StreamError> {
        self.acknowledge_with(true).await
    }

    /// Acknowledges up to the last element returned, committed before the answer when
    /// `commit`. Without `commit`, what this connection acknowledged already is not sent again.
    pub async fn acknowledge_with(&mut self, commit: bool) -> Result<(), StreamError> {
        let up_to = self.last_seq;
        let Some((client, read)) = self.connection.as_mut() else { return Ok(()) };
        let nothing_new = up_to < read.first_seq || (!commit && up_to <= self.acknowledged);
        if nothing_new && self.time_to_report.is_none() {
            return Ok(());
        }
        // A report alone acknowledges nothing new.
        let up_to = if nothing_new { -1 } else { up_to };
        let time = self.time_to_report.take();
        client.acknowledge_reporting(&read.stream_id, up_to, commit, time).await.map_err(StreamError::Status)?;
        self.acknowledged = self.acknowledged.max(up_to);
        Ok(())
    }

    /// Reports the trainer's time (`crate::consumer_clock`): with the next
    /// acknowledgement of a shared reader's stream; a private one's at once, on its own
    /// and in the background (the trainer waits for no answer; one lost is no loss).
    pub fn report_time(&mut self, time: pb::ConsumerTime) {
        if self.is_shared() {
            self.time_to_report = Some(time);
            return;
        }
        if let Some((client, read)) = self.connection.as_ref() {
            client.report_time_in_background(read.stream_id.clone(), time);
        }
    }

    /// Where a report of the trainer's time can go while this stream waits for its next
    /// element: its connection and stream, if it has them.
    pub fn time_reporter(&self) -> Option<(&Client, &str)> {
        self.connection.as_ref().map(|(client, read)| (client, read.stream_id.as_str()))
    }

    fn keep_checkpoint(&mut self, token: String, after_seq: i64) {
        if self.checkpoint.as_ref().is_none_or(|(_, newest)| after_seq >= *newest) {
            if !self.is_shared() {
                self.request.resume_token = token.clone();
            }
            self.checkpoint = Some((token, after_seq));
        }
    }

    /// Connects again and reopens the stream from the newest checkpoint. With no
    /// `failure` (the first open, which tries every address at least once), a failure
    /// that retrying cannot fix is returned at once.
    async fn reopen(&mut self, failure: Option<tonic::Status>) -> Result<(), StreamError> {
        self.connection = None;
        let first_open = failure.is_none();
        let mut last = failure.map(|status| status_message(&status));
        // The first open gives a server that is starting a few seconds (about 3 s of
        // backoff), not a reconnection's whole patience: nothing listening at a wrong
        // address or port is said soon, and names it.
        let addrs = u32::try_from(self.addrs.len()).unwrap_or(u32::MAX);
        let attempts = match first_open {
            true => (self.reconnect.attempts + 1).min(FIRST_OPEN_ROUNDS.saturating_mul(addrs)).max(addrs),
            false => self.reconnect.attempts,
        };
        let mut reached = false;
        // When the attempt before started: the wait before the next runs from there (one
        // that waited for a silent server to answer has waited already).
        let mut attempt_started: Option<std::time::Instant> = None;
        for attempt in 0..attempts {
            if !(first_open && attempt == 0) {
                self.current = (self.current + 1) % self.addrs.len();
                let wait = self.reconnect.delay(attempt, self.jitter.next_u64());
                let waited = attempt_started.map_or(Duration::ZERO, |started| started.elapsed());
                tracing::debug!(?wait, addr = %self.addrs[self.current], "reconnecting");
                tokio::time::sleep(wait.saturating_sub(waited)).await;
            }
            attempt_started = Some(std::time::Instant::now());
            let addr = &self.addrs[self.current];
            let mut client = match Client::connect_with(addr, &self.options).await {
                Ok(client) => {
                    reached = true;
                    client
                }
                Err(err) if err.is_unreachable() => {
                    last = Some(error_message(&err));
                    continue;
                }
                // A bad address or TLS setting: no retry changes it.
                Err(err) => return Err(StreamError::Status(err.to_status())),
            };
            // A reconnection must find a server that answers (the one that went silent may
            // still accept connections); the first open waits for the stream as it comes.
            let opened = match first_open {
                true => client.read_with(self.request.clone()).await,
                false => client.read_answered(self.request.clone(), ANSWER_WITHIN).await,
            };
            match opened {
                Ok(read) => {
                    if !first_open {
                        self.reconnects += 1;
                        if self.is_shared() {
                            // A new connection to a shared reader numbers its elements anew.
                            self.last_seq = read.first_seq - 1;
                        }
                    }
                    self.acknowledged = read.first_seq - 1;
                    self.connection = Some((client, read));
                    return Ok(());
                }
                Err(status) if retryable(&status) => last = Some(status_message(&status)),
                Err(status) => return Err(StreamError::Status(status)),
            }
        }
        if first_open && !reached {
            let last = last.unwrap_or_default();
            return Err(StreamError::GaveUp {
                attempts,
                last: format!(
                    "{last} (is readerd running there? check the address and port: {})",
                    self.addrs.join(", ")
                ),
            });
        }
        Err(StreamError::GaveUp { attempts, last: last.unwrap_or_default() })
    }
}

/// One stream per server, read as one: yields `(index of the stream, event)` in the order
/// events arrive, until every stream has ended or one fails.
pub fn merge(streams: Vec<ResumingStream>) -> impl Stream<Item = Result<(usize, Event), StreamError>> {
    let each = streams.into_iter().enumerate().map(|(index, stream)| {
        // `None` once the stream failed: its error is its last item.
        Box::pin(futures::stream::unfold(Some(stream), move |stream| async move {
            let mut stream = stream?;
            match stream.next().await {
                Ok(Some(event)) => Some((Ok((index, event)), Some(stream))),
                Ok(None) => None,
                Err(err) => Some((Err(err), None)),
            }
        }))
    });
    futures::stream::select_all(each)
}
