//! Replicas: one shared reader served by several readerd processes that share a
//! PostgreSQL state store, exactly once, surviving a replica's death. PostgreSQL is the
//! only coordinator: row locks (`FOR UPDATE SKIP LOCKED`), leases that expire by the
//! database's clock, and transactions. There is no leader, no election and no
//! membership protocol of readerd's own.
//!
//! - [`ledger`]: every statement on the ledger: replicas, splits, leases, sessions; and
//!   [`job_ledger`]: the jobs themselves (create, delete, snapshot, restore). Their SQL
//!   and the tables' migrations are `crate::state::ledger`'s.
//! - [`job_key`]: which ledger job a reading is: a shared reader's consumer group's, or
//!   its jobs' window's on a replica.
//! - [`job`]: a shared reader's job on this replica: the feed its pipeline leases files
//!   through (`pipeline::feed`) and the acknowledgements it commits; `job/window.rs`, the
//!   window its jobs share on this replica ([`WindowFeed`]), which leases each split, counts
//!   each record's examples and claims each record's fate for the jobs seated at it in the
//!   same transactions as for itself.
//! - [`replica`]: this replica's [`Cluster`] thread, which commits and renews for every
//!   job it serves.
//! - [`mix_feed`]: a mixture's job: its components' files numbered one after the other,
//!   each component's pipeline leasing only its own files' splits.
//! - [`selection_ledger`]: a selection's `skip` and `take`, counted per job and epoch.
//!
//! # The design
//!
//! **Jobs and splits.** A shared reader `(container, shared_name)` is a job in the
//! ledger per consumer group reading it ([`JobKey`]: `default` for the shared reader
//! itself), checked against its spec's fingerprint. Each epoch is cut into splits, one per file,
//! in the epoch's file order (from the seed, the same on every replica: the first replica
//! to reach an epoch writes its splits, the others find them); with the exact global
//! shuffle, one per range of the epoch's permutation (`pipeline::global::FedGlobal`). A
//! job that unbatches counts examples instead of records (`source::RecordId::example`). A split is the unit of
//! work, of lease and of takeover; its row holds its owner, the owner's lease expiry, the
//! records acknowledged so far (by their number in the file, as a `pipeline::record_set::RecordSet`) and
//! whether it is done.
//!
//! **Producing.** A replica runs the spec's pipeline (interleave, shuffle buffer,
//! batching, decoding) over one epoch at a time, taking its files from the ledger instead
//! of from a fixed list: when the interleave wants its next file, the replica leases the
//! epoch's first free split. One replica alone therefore leases every split in the
//! epoch's file order and produces exactly today's single-server sequence. With several,
//! each produces the records of the splits it holds in the spec's order, and the
//! global order is no longer one sequence (as with tf.data service's dynamic sharding):
//! what stays is that every record of every epoch is delivered exactly once, and each
//! replica's output is a pure function of the splits it leased.
//!
//! **Acknowledgements.** Consumers acknowledge elements to the replica that sent them;
//! the replica maps each element to its records' `(epoch, file, record number)` and
//! merges them into the splits' acknowledged sets, in batches: the [`Cluster`] thread
//! commits every job's new acknowledgements in one transaction every 100 ms. Each answer
//! to `Acknowledge` says which of the stream's elements are committed
//! (`committed_elements`); a consumer keeps the records of the others until they are, to
//! re-send them if the replica dies. A consumer about to stop or checkpoint asks for its
//! acknowledgements to be committed before the answer (`AcknowledgeRequest.commit`). A split is done when its owner has produced it to
//! its end and every record of it is acknowledged.
//!
//! **A replica dies.** It stops renewing its leases (heartbeats every third of the
//! lease time). Once a lease expired, the split may be taken over, but only after every
//! consumer session that was reading through the dead replica has re-sent the
//! acknowledgements of what it received there (the session is then `flushed`), or after a
//! grace period. Streams register their session (`ReadRequest.session_id`) with the
//! replica; a client re-sends through `AcknowledgeRequest.records` with `from_replica` and
//! `flushed` (readerctl's `read --addr A,B,C` does, through `readerd_client::open_stream`).
//! A client knows which acknowledgements to re-send: those a replica did not confirm
//! committed. Re-sent ones are committed before they are answered. The taker skips the split's acknowledged records and produces the rest:
//! what a consumer received and acknowledged (before or after the death) is not produced
//! again; what it never received is. A consumer that does not come back within the grace
//! period counts as dead with it, and its unacknowledged elements are delivered again, as
//! for any consumer that vanishes.
//!
//! **PostgreSQL goes away.** Statements wait for it (up to `--store-outage-limit`), and
//! no lease can be renewed meanwhile. Time nobody could reach the ledger does not count
//! against a lease: every replica's heartbeat and every lease of a next split first beats
//! the ledger's own clock (`Ledger::beat`, one row), and a gap in it moves the leases that
//! ran then on by its length (their grace periods with them); nothing is taken over for a
//! lease time after it, while the replicas come back, commit the acknowledgements they
//! held and renew. A replica that does not come back within a lease time of the ledger
//! counts as dead, as one that died.
//!
//! **A consumer leaves a live replica.** A consumer may leave a replica that is alive
//! (it found it silent: an unanswered ping or acknowledgement) and re-send through
//! another what it consumed there. So when a stream of a consumer session vanishes, the
//! replica parks its unacknowledged elements until the session is flushed for it (or the
//! grace period passed) and then delivers again only those whose records the ledger does
//! not hold acknowledged (`consumer::Delivery`, `JobFeed::watch_session`). And a split is
//! done when its owner has read it to the end and the ledger holds every record of it
//! acknowledged, through whichever replicas (`Ledger::commit`).
//!
//! **Checkpoints.** A checkpoint of a shared reader served by replicas is its job: every
//! planned split with its acknowledged records and done flag, read in one transaction
//! (`Ledger::snapshot_job`) after this replica committed what it holds. Resuming its
//! token on any replica restores the job (`Ledger::restore_job`: the job of that key is
//! replaced, no split leased), once per checkpoint (a restore id in the token: replicas
//! resuming the same token later join the job as it went on). So it resumes onto any
//! number of replicas and consumers, delivering exactly the records not acknowledged
//! when it was taken. It covers what was committed then: acknowledgements of consumers
//! still reading that wait for the next 100 ms commit are delivered again after a resume.
//!
//! **Mixtures.** A shared mixture is one job whose files are its components' files one
//! after the other; an epoch's splits are those of the components that read that epoch
//! (`mix_feed::mixture_order`), and each component's pipeline leases only splits of its
//! own files (`mix_feed::ComponentFeed`). Each replica mixes, by the weights (or the
//! choice), the splits it holds; a component with no free split drops out of its choice
//! until the replica looks again. Acknowledgements, takeovers and checkpoints are the
//! job's, as for any reader. A mixture that stops at its first exhausted component
//! (`stopOnEmptyDataset`) stops on each replica where that replica's choice falls on a
//! component with no free split and its own splits of it read, as `sample_from_datasets`
//! does on each tf.data service worker with dynamic sharding; no replica waits for
//! another's splits. The first to stop marks the job stopped (`Ledger::stop_job`, kept
//! by checkpoints taken after its end): readers that join it later read nothing, and one
//! with no stream when a report finds the job stopped ends there. A replica has ended
//! once everything it took is delivered and acknowledged, or no stream is left to deliver
//! through (`Ledger::replica_ended`), and the job is done when every replica reporting on
//! it has (`Ledger::stopped_job_finished`): an end of the sequence still means that no
//! replica sends anything more.
//!
//! **Stats.** With each renewal a replica reports, per job, its elements in flight and
//! its consumers (`readerd_job_replicas`); `GetReaderStats` on any replica lists every
//! replica of the job with those and the splits it holds (`Ledger::replica_reports`).
//! The status page reads a job's replicas and epochs from its view (`job_view.rs`), which
//! the status listener refreshes every 5 s: no status request asks the ledger.
//!
//! **Fencing.** A replica delivers a job's elements only while every lease it holds is
//! surely its own: until its last renewal that got through (or the feed's creation)
//! plus the lease time, on its own monotonic clock (`JobFeed::leases`; the stream's
//! `wait_for_leases`). Cut off from the ledger past that, it holds its elements until a
//! renewal gets through. A renewal renews exactly the splits the replica's live readers
//! hold (a dropped reader's go to others when they expire) and returns those still its
//! own; one missing was taken over (or its job deleted): the elements this replica holds
//! may then be produced elsewhere too, so its work on the job is void. It gives its other
//! leases up (`Ledger::release`), its streams end `UNAVAILABLE`, and the registry forgets
//! the reader, so the next stream reads the job on through a new one. Consumers leave a
//! replica that does not answer, or does not commit, their acknowledgements within 5 s
//! (`readerd_client::replicas`), re-sending through another replica what it did not
//! commit, within the lease time plus the grace period.

pub mod job;
pub mod job_key;
pub mod job_ledger;
pub mod job_view;
pub mod ledger;
pub mod mix_feed;
pub mod replica;
pub mod selection_ledger;

pub use crate::pipeline::record_set::RecordSet;
pub use crate::source::SplitRef;
pub use job::{Acked, EpochOrder, JobFeed, Leases, Usage, WindowFeed, WindowSeat};
pub use job_key::{DEFAULT_JOB, JobKey, Reading};
pub use ledger::{
    EpochProgress, EpochSelection, Job, JobSnapshot, Lease, LeaseTimes, Ledger, LedgerClock, LedgerError,
    ReplicaReport, SplitCommit, SplitKey, SplitSnapshot,
};
pub use replica::Cluster;
