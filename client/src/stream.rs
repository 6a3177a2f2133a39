//! [`open_stream`]: a reader's stream for `readerctl read` and the Python client alike,
//! one [`ReaderStream`] whether it reads from one server or from replicas.
//!
//! - A private reader, or a shared one on one address, is a [`ResumingStream`] on the
//!   first of the addresses that answers (reconnecting as its [`Reconnect`] says).
//! - A shared reader on several addresses (replicas of a cluster) is a [`ReplicaSession`]
//!   reading from all of them at once, surviving a replica's death.
//!
//! Either way, asking a shared reader's stream for the next element acknowledges every
//! element returned before it (as a trainer's `for batch in reader` loop means), and the
//! stream measures where the trainer's time goes around `next()` (`ConsumerClock`),
//! reporting it to the servers about once a second.

use readerd_proto::v1 as pb;

use crate::client::{Client, ConnectOptions};
use crate::consumer_clock::{ConsumerClock, REPORT_EVERY};
use crate::replicas::ReplicaSession;
use crate::resume::{Event, Received, Reconnect, ResumingStream, StreamError};

/// A reader's stream on one server or on replicas; see the module documentation.
pub struct ReaderStream {
    on: On,
    clock: ConsumerClock,
    /// Where the trainer's time is reported while `next()` waits: a connection and the
    /// stream on it (taken again when the stream changes).
    reporter: Option<(Client, String)>,
}

/// What a [`ReaderStream`] reads from.
enum On {
    One(Box<ResumingStream>),
    Replicas(Box<ReplicaSession>),
}

impl On {
    /// A connection and stream to report the trainer's time on while `next()` waits.
    fn time_reporter(&self) -> Option<(&Client, &str)> {
        match self {
            On::One(stream) => stream.time_reporter(),
            On::Replicas(session) => session.time_reporter(),
        }
    }
}

/// Awaits `next`; while it is not ready, reports the trainer's time every
/// [`REPORT_EVERY`] through `reporter` (in the background), its wait so far included: a
/// trainer stuck in `next()` shows as waiting while it is, not only once it got its
/// element. An element ready at once costs no timer.
async fn reporting_while_waiting<T>(
    next: impl Future<Output = T>,
    clock: &mut ConsumerClock,
    reporter: Option<&(Client, String)>,
) -> T {
    let mut next = std::pin::pin!(next);
    if let Some(done) = futures::FutureExt::now_or_never(next.as_mut()) {
        return done;
    }
    let Some((client, stream_id)) = reporter else { return next.await };
    let mut every = tokio::time::interval_at(tokio::time::Instant::now() + REPORT_EVERY, REPORT_EVERY);
    loop {
        tokio::select! {
            biased;
            done = next.as_mut() => return done,
            _ = every.tick() => {
                if let Some(time) = clock.report_while_waiting() {
                    client.report_time_in_background(stream_id.clone(), time);
                }
            }
        }
    }
}

/// Opens `request` on `addrs`: a shared reader (`reader.shared_name` set) on several
/// addresses on every one of them at once, anything else on the first that answers.
/// A bad address, or none, is `INVALID_ARGUMENT` at once.
pub async fn open_stream(
    addrs: &[&str],
    request: pb::ReadRequest,
    reconnect: Reconnect,
    options: ConnectOptions,
) -> Result<ReaderStream, StreamError> {
    if addrs.is_empty() {
        return Err(StreamError::Status(tonic::Status::invalid_argument("no server address")));
    }
    let shared = request.reader.as_ref().is_some_and(|reader| !reader.shared_name.is_empty());
    if shared && addrs.len() > 1 {
        // `ReplicaSession::open` starts its streams on the runtime it is called on.
        let session = ReplicaSession::open(addrs, request, options);
        return Ok(ReaderStream {
            on: On::Replicas(Box::new(session)),
            clock: ConsumerClock::default(),
            reporter: None,
        });
    }
    let stream = ResumingStream::open_with(addrs, request, reconnect, options).await?;
    Ok(ReaderStream { on: On::One(Box::new(stream)), clock: ConsumerClock::default(), reporter: None })
}

impl ReaderStream {
    /// The next element, or the end of the data; `None` after the end was returned.
    pub async fn next(&mut self) -> Result<Option<Event>, StreamError> {
        self.before_next().await?;
        self.take_reporter();
        let reporter = self.reporter.as_ref();
        let next = match &mut self.on {
            On::One(stream) => reporting_while_waiting(stream.next(), &mut self.clock, reporter).await,
            On::Replicas(session) => reporting_while_waiting(session.next(), &mut self.clock, reporter).await,
        };
        self.clock.next_returned(matches!(next, Ok(Some(Event::Element(_)))));
        next
    }

    /// [`next`](Self::next), with the checkpoints a server sends on its own as they arrive
    /// (a drain's final one: what `readerctl read` prints).
    pub async fn next_received(&mut self) -> Result<Option<Received>, StreamError> {
        self.before_next().await?;
        self.take_reporter();
        let reporter = self.reporter.as_ref();
        let next = match &mut self.on {
            On::One(stream) => reporting_while_waiting(stream.next_received(), &mut self.clock, reporter).await,
            On::Replicas(session) => {
                let next = reporting_while_waiting(session.next(), &mut self.clock, reporter).await;
                Ok(next?.map(Received::from))
            }
        };
        // A checkpoint is no element: the trainer goes on waiting, and the next call
        // counts from its return.
        self.clock.next_returned(matches!(next, Ok(Some(Received::Element(_)))));
        next
    }

    /// The connection the stream reads on now, for other calls to the same server (a
    /// clone shares it); `None` while it has none.
    pub fn connection(&self) -> Option<Client> {
        self.on.time_reporter().map(|(client, _)| client.clone())
    }

    /// Keeps where the trainer's time goes while `next()` waits: the stream's connection
    /// and id, cloned only when they change (a reconnect, another replica).
    fn take_reporter(&mut self) {
        let Some((client, id)) = self.on.time_reporter() else {
            self.reporter = None;
            return;
        };
        if self.reporter.as_ref().is_none_or(|(_, kept)| kept != id) {
            self.reporter = Some((client.clone(), id.to_owned()));
        }
    }

    /// The element `next()` returned reached the trainer only now (a binding converted
    /// it): that time counts as waiting, not as the trainer's step.
    pub fn handed_out(&mut self) {
        self.clock.handed_out();
    }

    /// At each `next()`: the trainer's step ends; its time is reported when due; a shared
    /// reader's stream on one server acknowledges what it returned before it reads on (a
    /// session on replicas does so itself).
    async fn before_next(&mut self) -> Result<(), StreamError> {
        self.clock.next_called();
        if let Some(time) = self.clock.report_due() {
            match &mut self.on {
                On::One(stream) => stream.report_time(time),
                On::Replicas(session) => session.report_time(time),
            }
        }
        match &mut self.on {
            On::One(stream) if stream.is_shared() => acknowledge_one(stream, false).await,
            _ => Ok(()),
        }
    }

    /// Acknowledges every element returned so far; with `commit`, the servers commit the
    /// acknowledgements before they answer (on replicas, to the split ledger): a consumer
    /// of a shared reader asks for it before it stops, so that a checkpoint taken next,
    /// through any replica, covers what it consumed.
    ///
    /// On one server, without `commit`, a connection that is gone (UNAVAILABLE) or a
    /// stream that ended there (NOT_FOUND) is no failure: the server redelivers what was
    /// not acknowledged, and the stream still ends with its own error or end.
    pub async fn acknowledge_with(&mut self, commit: bool) -> Result<(), StreamError> {
        let started = std::time::Instant::now();
        let acknowledged = match &mut self.on {
            // A private reader's elements are nobody else's: there is nothing to settle.
            On::One(stream) if !stream.is_shared() && !commit => Ok(()),
            On::One(stream) => acknowledge_one(stream, commit).await,
            On::Replicas(session) => session.acknowledge_with(commit).await,
        };
        // Time on the data service, not the trainer's own step.
        self.clock.waited_in_call(started.elapsed());
        acknowledged
    }

    /// Commits a checkpoint covering every element returned and returns its token; on
    /// replicas, the whole job's (resumable on any number of replicas and consumers).
    pub async fn checkpoint(&mut self) -> Result<String, StreamError> {
        let started = std::time::Instant::now();
        let token = match &mut self.on {
            On::One(stream) => stream.checkpoint().await,
            On::Replicas(session) => session.checkpoint().await,
        };
        // Time on the data service, not the trainer's own step.
        self.clock.waited_in_call(started.elapsed());
        token
    }

    /// The newest checkpoint (automatic or asked for) and the last element it covers.
    pub fn last_checkpoint(&self) -> Option<(&str, i64)> {
        match &self.on {
            On::One(stream) => stream.last_checkpoint(),
            On::Replicas(session) => session.last_checkpoint(),
        }
    }

    /// The `seq` of the last element returned (-1 before the first; a resumed token's
    /// `after_seq` on one server until the first).
    pub fn last_seq(&self) -> i64 {
        match &self.on {
            On::One(stream) => stream.last_seq(),
            On::Replicas(session) => session.last_seq(),
        }
    }

    /// Whether the stream reads a shared reader (by name) rather than a private one.
    pub fn is_shared(&self) -> bool {
        match &self.on {
            On::One(stream) => stream.is_shared(),
            On::Replicas(_) => true,
        }
    }

    /// The stream's id on its server (empty while reconnecting); on replicas, the
    /// session's own id.
    pub fn stream_id(&self) -> &str {
        match &self.on {
            On::One(stream) => stream.stream_id(),
            On::Replicas(session) => session.session_id(),
        }
    }

    /// How many times the stream connected again after a failure (replicas: 0).
    pub fn reconnects(&self) -> u64 {
        match &self.on {
            On::One(stream) => stream.reconnects(),
            On::Replicas(_) => 0,
        }
    }
}

/// [`ReaderStream::acknowledge_with`] on one server.
async fn acknowledge_one(stream: &mut ResumingStream, commit: bool) -> Result<(), StreamError> {
    match stream.acknowledge_with(commit).await {
        Err(err) if !commit && matches!(err.code(), tonic::Code::Unavailable | tonic::Code::NotFound) => Ok(()),
        acknowledged => acknowledged,
    }
}
