//! Who a shared reader answers to for what it hands out: its [`Coordinator`]. On one
//! server that is the server itself ([`Local`]): every record it reads is its own, an
//! acknowledgement is final when it is made, a checkpoint replays the reader's own
//! state, and its sequence ends where its pipeline does. On replicas it is the split
//! ledger (`crate::reader::LedgerCoordinator`, in `reader/ledger_coordinator.rs`): the
//! reader reads the splits this replica leases, elements name their records,
//! acknowledgements are committed to the ledger, elements go out only behind the lease
//! fence, and the sequence ends when the whole job is done.
//!
//! Everything outside the reader asks the coordinator (`Reader::coordinator`), never
//! whether there is a ledger: the stream's fence and end, acknowledgements and their
//! commits, consumer sessions, the job's figures for stats and the status page.
//!
//! # A new coordinator
//!
//! Implement [`Coordinator`]: every method has the single server's answer as its default,
//! so a coordinator overrides what it owns (leases, commits, sessions, the end). The
//! reader is handed to it before any stream reads, as `LedgerCoordinator::join` does: it
//! becomes what `Reader::coordinator` returns, and the reader's consumer books answer to
//! it (`consumer::Delivery::answer_to`). Whether elements name their records
//! (`names_records`) and whether a checkpoint replays the reader (`checkpoints_by_replay`)
//! are the two questions the reader itself still asks.
//!
//! Two more seams are the ledger's alone, implemented over the cluster's feeds (in
//! `reader/ledger_coordinator.rs`): [`RecordLedger`], what a reader's records owe their
//! ledger job as they are taken (counts of an unbatched record's examples, a selection's
//! claims), by a job's feed and by a window's (which answers for the jobs seated at it
//! too); and [`WindowLeases`] / [`SeatInLeases`], how the window its jobs share on a
//! replica leases each split for the jobs seated at it. The reader and its job window
//! know these traits, never the ledger.

use std::sync::Arc;
use std::time::Duration;

pub use crate::cluster::job_view::JobView;
pub use crate::cluster::selection_ledger::{Fate, SelectionLimits};
pub use crate::cluster::{Acked, DEFAULT_JOB, EpochSelection, ReplicaReport};
use crate::error::Result;
use crate::source::{RecordId, SourceError, SplitRef};

/// Whether a server may hand out what it holds now (`Coordinator::fence`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fence {
    /// What it holds is surely its own to deliver.
    Open,
    /// It cannot tell yet (the ledger did not confirm its leases for a lease time):
    /// deliver nothing until it can.
    Closed,
    /// What it holds may be delivered elsewhere too: its streams end with this reason.
    Void(String),
}

/// What a shared reader answers to. The defaults are a single server's ([`Local`]).
pub trait Coordinator: std::any::Any + Send + Sync + std::fmt::Debug {
    /// This server's name among the replicas of the job ("" on a single server).
    fn replica_id(&self) -> &str {
        ""
    }

    /// `UNIMPLEMENTED` for `verb` (a verb that sets or reads the reader's position by
    /// hand) when the reader's position is not its own but the coordinator's.
    fn refuse(&self, _verb: &str, _reader: &str) -> Result<()> {
        Ok(())
    }

    /// Whether each element names its records (`Element::records`): acknowledging it
    /// accounts for all of them.
    fn names_records(&self) -> bool {
        false
    }

    /// Whether a checkpoint replays the reader's own state (the reader keeps snapshots
    /// for it); otherwise the coordinator checkpoints the job.
    fn checkpoints_by_replay(&self) -> bool {
        true
    }

    /// Records taken and never handed out (a dropped remainder, a batch whose records
    /// were all skipped): accounted for as if acknowledged.
    fn settle(&self, _records: &[RecordId]) {}

    /// How often a mixture takes back the components it found with nothing left, while
    /// it goes on (`None`: never; what one server's component ran out of stays out).
    fn look_again_every(&self) -> Option<Duration> {
        None
    }

    /// Before the reader takes its next chunk, with none of its locks held (blocking): the
    /// work it would otherwise wait for under its lock (on replicas, leasing its next
    /// split).
    fn prepare_next_chunk(&self) {}

    /// At the end of the reader's sequence here (blocking): whether nothing more comes
    /// from anywhere. When not, the reader is set to look for more work at its next chunk.
    fn at_end(&self) -> Result<bool> {
        Ok(true)
    }

    /// Whether the reader may hand out the elements it holds now.
    fn fence(&self) -> Fence {
        Fence::Open
    }

    /// Records a consumer acknowledged: the ticket that [`Coordinator::committed_ticket`]
    /// reaches once they are committed.
    fn acknowledge(&self, _records: &mut dyn Iterator<Item = &RecordId>) -> u64 {
        0
    }

    /// Tickets below this are committed.
    fn committed_ticket(&self) -> u64 {
        u64::MAX
    }

    /// Commits every acknowledgement made so far (blocking).
    fn commit(&self) -> Result<()> {
        Ok(())
    }

    /// Records a consumer re-sent (they were acknowledged to a replica that died), and
    /// whether its session has re-sent all it had from replica `from`: committed before
    /// the call returns (blocking).
    fn commit_resent(&self, _records: &[RecordId], _flushed_from: Option<(&str, &str)>) -> Result<()> {
        Ok(())
    }

    /// How long the coordinator has been out of reach, when it is.
    fn unreachable_for(&self) -> Option<Duration> {
        None
    }

    /// A consumer session reads through this server (blocking): whether sessions are
    /// tracked (a session's elements left behind wait for it, `watch_session`).
    fn attach_session(&self, _session: &str) -> Result<bool> {
        Ok(false)
    }

    /// A stream of `session` vanished holding elements of `splits`: they wait until the
    /// coordinator knows which of them the session consumed ([`Self::session_acked`]).
    fn watch_session(&self, _session: &str, _splits: &mut dyn Iterator<Item = SplitRef>) {}

    /// What `session` consumed of the splits watched for it, once known.
    fn session_acked(&self, _session: &str) -> Option<Arc<Acked>> {
        None
    }

    /// Whether the reader's work was given up (its next stream needs a new reader).
    fn is_void(&self) -> bool {
        false
    }

    /// Whether the job it coordinates is no longer the coordinator's (deleted, or replaced
    /// by a restore, through another server): the reader is then stale. Never on a single
    /// server; blocking on replicas (it asks the ledger).
    fn deleted_elsewhere(&self) -> Result<bool> {
        Ok(false)
    }

    /// The servers serving the reader, as last seen (1 on a single server). Asks nothing.
    fn servers_serving(&self) -> u64 {
        1
    }

    /// The job as the coordinator last showed it (`None` on a single server).
    fn view(&self) -> Option<Arc<JobView>> {
        None
    }

    /// Asks the coordinator for the job's view again (blocking).
    fn refresh_view(&self) -> Result<()> {
        Ok(())
    }

    /// Every server's report on the job and each epoch's selection counts (blocking;
    /// `None` on a single server).
    fn job_reports(&self) -> Result<Option<(Vec<ReplicaReport>, Vec<EpochSelection>)>> {
        Ok(None)
    }
}

/// A single server: it answers to itself (every method's default).
#[derive(Debug)]
pub struct Local;

impl Coordinator for Local {}

/// The single server's coordinator, shared.
pub static LOCAL: Local = Local;

/// On replicas, what a reader's records owe the ledger job they answer to, as the reader
/// takes them (`reader/records.rs`): its job's own (`crate::cluster::JobFeed`) or, for the
/// reader of the window a shared reader's jobs share, the window's, which records the same
/// for every job seated at it (`crate::cluster::WindowFeed`).
pub trait RecordLedger: Send + Sync {
    /// Of a spec that unbatches: `record` was split into `examples` examples (0: the
    /// selection dropped it, or it failed to unbatch with `onError: SKIP`). Returns the
    /// ledger numbers of those acknowledged already when its split was leased (to leave
    /// out).
    fn record_unbatched(&self, record: &RecordId, examples: u64) -> Vec<u64>;

    /// Of a spec that unbatches and skips or takes: `record`, left out by the selection or
    /// giving no example, is settled under its tombstone.
    fn record_settled(&self, record: &RecordId);

    /// The fates of `records` (kept by the spec's filters, in the order read) under its
    /// `skip` and `take`, counted across replicas (blocking: one ledger transaction).
    fn claim_selected(&self, limits: SelectionLimits, records: &[RecordId]) -> Result<Vec<Fate>, SourceError>;
}

/// On replicas, the window a shared reader's jobs share on this replica, as the window
/// sees its ledger: its reader leases each split for the jobs seated at it too
/// (`crate::cluster::job::window`).
pub trait WindowLeases: Send + Sync {
    /// Seats the job whose reader answers to `job` in the window's leases (blocking: asks
    /// the ledger). `None`: it cannot be (or `job` is not a coordinator of this window's
    /// kind), and reads alone.
    fn seat(self: Arc<Self>, job: &dyn Coordinator) -> Option<Box<dyn SeatInLeases>>;

    /// The window moved past its first element: no job is seated from now on.
    fn close_to_joining(&self);
}

/// A job's seat in the leases of the window it shares on replicas ([`WindowLeases`]).
/// Dropped, the window leases for the job no more, without waiting for a lease in flight.
pub trait SeatInLeases: Send + Sync {
    /// Whether the window still leases for the job. Once false, the job takes no chunk
    /// the window makes from then on (it may hold records of a split the job does not
    /// hold).
    fn is_seated(&self) -> bool;

    /// The window handed `records` to the job: not read again should it leave.
    fn handed(&self, records: &mut dyn Iterator<Item = &RecordId>);

    /// The job leaves the window for good and reads alone (waiting for a lease in flight
    /// for it): each split it held through the window is offered to its pipeline again,
    /// leaving out the records the window handed to it.
    fn leave(&self);
}
