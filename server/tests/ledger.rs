//! The split ledger against a real PostgreSQL (`READERD_TEST_POSTGRES_URL`; `.ci/run` sets
//! it), each test in a schema of its own: leases in file order, no split held by two
//! replicas, takeover only after the dead owner's consumers re-sent their
//! acknowledgements (or the grace period), acknowledgements merged from anyone. Leases
//! expire by a clock the tests move (`LedgerClock::manual`), shared by a test's replicas:
//! no test waits for one.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Schema;
use readerd_server::cluster::{
    EpochOrder, Job, JobFeed, JobKey, LeaseTimes, Ledger, LedgerClock, LedgerError, RecordSet, SplitCommit, SplitKey,
    SplitRef, WindowFeed,
};
use readerd_server::pipeline::feed::FileFeed;
use readerd_server::source::RecordId;

fn replica(schema: &Schema, id: &str, times: LeaseTimes) -> Ledger {
    replica_at(schema, id, times, &LedgerClock::default())
}

/// A replica whose statements go by `clock`.
fn replica_at(schema: &Schema, id: &str, times: LeaseTimes, clock: &LedgerClock) -> Ledger {
    Ledger::open_with_clock(&schema.url, Some(&schema.name), id, &format!("http://{id}"), times, clock.clone()).unwrap()
}

fn set(records: impl IntoIterator<Item = u64>) -> RecordSet {
    let mut set = RecordSet::new();
    records.into_iter().for_each(|r| set.insert(r));
    set
}

/// File `file`'s split in epoch `epoch`.
fn split(epoch: u64, file: u32) -> SplitRef {
    SplitRef { epoch, file }
}

/// File `file`'s split in epoch `epoch` of `job`.
fn key(job: Job, epoch: u64, file: u32) -> SplitKey {
    SplitKey { job: job.id, split: split(epoch, file) }
}

/// Splits of any file (a mixture's component leases its own files' only).
const EVERY_FILE: std::ops::Range<u32> = 0..u32::MAX;

/// Replicas `a` and `b` with lease times `times`, going by one manual clock (returned
/// first), and the job `team/train` made by `a`.
fn two_replicas_on_a_manual_clock(schema: &Schema, times: LeaseTimes) -> (LedgerClock, Ledger, Ledger, Job) {
    let clock = LedgerClock::manual();
    let a = replica_at(schema, "a", times, &clock);
    let b = replica_at(schema, "b", times, &clock);
    let job = job(&a);
    (clock, a, b, job)
}

/// Time passes on `clock` by `by` while the replicas of `alive` beat (renewing the splits
/// each holds) every quarter of `times`' lease time, as live replicas do: the ledger sees
/// no outage, only the silence of the replicas not in `alive`.
fn live_through(clock: &LedgerClock, times: LeaseTimes, by: Duration, alive: &[(&Ledger, &[SplitKey])]) {
    let step = times.ttl / 4;
    let mut passed = Duration::ZERO;
    while passed < by {
        let now = step.min(by - passed);
        clock.advance(now);
        passed += now;
        for (replica, held) in alive {
            replica.heartbeat(held).unwrap();
        }
    }
}

/// Shared reader `team/train`'s own ledger job (its consumer group `default`).
fn train() -> JobKey {
    JobKey::job("team", "train", "default")
}

fn job(ledger: &Ledger) -> Job {
    ledger.job(&train(), "fingerprint-1", &[]).unwrap()
}

#[test]
fn each_job_of_a_shared_reader_and_their_window_are_ledger_jobs_of_their_own() {
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let a = replica(&schema, "a", LeaseTimes::default());
    let b = replica(&schema, "b", LeaseTimes::default());
    let keys = [train(), JobKey::job("team", "train", "a"), JobKey::window("team", "train")];
    let jobs: Vec<Job> = keys.iter().map(|key| a.job(key, "fingerprint-1", &[]).unwrap()).collect();
    assert!(jobs[0].id != jobs[1].id && jobs[1].id != jobs[2].id && jobs[0].id != jobs[2].id, "{jobs:?}");
    // Another replica finds the same ones, and splits leased in one are not the other's.
    for (key, job) in keys.iter().zip(&jobs) {
        assert_eq!(b.job(key, "fingerprint-1", &[]).unwrap(), *job, "{key}");
    }
    for job in &jobs {
        a.plan_epoch(*job, 0, &[0, 1]).unwrap();
    }
    let lease = |ledger: &Ledger, job: Job| ledger.lease_next(job, 0, &[], EVERY_FILE).unwrap().map(|l| l.split.file);
    assert_eq!(lease(&a, jobs[0]), Some(0));
    assert_eq!(lease(&b, jobs[1]), Some(0), "file 0 of job a is free though job default holds its own");
    // A job of another container or shared reader is not theirs.
    assert!(a.job_id(&JobKey::job("team", "other", "a")).unwrap().is_none());
    assert!(a.job_id(&JobKey::job("other", "train", "a")).unwrap().is_none());
    // Job a alone goes; then every job of the shared reader.
    assert!(a.delete_job(&keys[1]).unwrap());
    assert_eq!(b.job_id(&keys[1]).unwrap(), None);
    assert_eq!(b.job_id(&keys[0]).unwrap(), Some(jobs[0].id));
    assert_eq!(a.delete_jobs_of("team", "train").unwrap(), 2);
    assert!(keys.iter().all(|key| b.job_id(key).unwrap().is_none()));
}

/// The window a shared reader's jobs share on a replica leases each split, in the same
/// transaction, for every job seated at it that nobody ever held the split for: that job
/// holds it then (this replica renews it, no other replica leases it), and a job whose
/// split another replica holds is left out. A job seated later takes the splits the
/// window leased so far in one statement, those another replica holds for it left out.
#[test]
fn a_window_leases_each_split_for_the_jobs_seated_at_it_that_nobody_held_it_for() {
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let a = replica(&schema, "a", LeaseTimes::default());
    let b = replica(&schema, "b", LeaseTimes::default());
    let window = a.job(&JobKey::window("team", "train"), "fingerprint-1", &[]).unwrap();
    let [job_a, job_b, job_c] =
        ["a", "b", "c"].map(|job| a.job(&JobKey::job("team", "train", job), "fingerprint-1", &[]).unwrap());
    for job in [window, job_a, job_b, job_c] {
        a.plan_epoch(job, 1, &[0, 1, 2]).unwrap();
    }
    // Replica b's consumer of job b reads it alone there: b holds its file 0.
    assert_eq!(b.lease_next(job_b, 1, &[], EVERY_FILE).unwrap().map(|lease| lease.split), Some(split(1, 0)));
    let lease_for_seated = |seated: &[Job]| {
        let (lease, for_seated) = a.lease_next_for_seated(window, 1, &[], EVERY_FILE, seated).unwrap().unwrap();
        assert!(for_seated.iter().all(|(_, acked)| acked.is_empty()), "{for_seated:?}");
        (lease.split, for_seated.into_iter().map(|(key, _)| key).collect::<Vec<_>>())
    };
    assert_eq!(lease_for_seated(&[job_a, job_b]), (split(1, 0), vec![key(job_a, 1, 0)]), "job b's file 0 is b's");
    assert_eq!(lease_for_seated(&[job_a]), (split(1, 1), vec![key(job_a, 1, 1)]));
    // Job a's splits are a's: renewed with its leases, leased by no other replica.
    let held_for_a = [key(job_a, 1, 0), key(job_a, 1, 1)];
    assert_eq!(a.heartbeat(&held_for_a).unwrap(), held_for_a);
    assert_eq!(b.lease_next(job_a, 1, &[], EVERY_FILE).unwrap().map(|lease| lease.split), Some(split(1, 2)));
    // Seated later: job c takes both of the window's splits, job b only the one b does not hold.
    let untouched = |job: Job| {
        let leased = a.lease_untouched(&[key(job, 1, 0), key(job, 1, 1)]).unwrap();
        let mut keys: Vec<SplitKey> = leased.into_iter().map(|(key, _)| key).collect();
        keys.sort_by_key(|key| key.split);
        keys
    };
    assert_eq!(untouched(job_c), [key(job_c, 1, 0), key(job_c, 1, 1)]);
    assert_eq!(untouched(job_b), [key(job_b, 1, 1)]);
    assert_eq!(untouched(job_c), Vec::<SplitKey>::new(), "a split leased once is never untouched again");
}

/// A job seated at its window on a replica holds each split the window leases for it.
/// Leaving the window, it reads again first each split it held through it, leaving out the
/// records the window handed it, then leases on its own; a seat dropped (its reader gone)
/// is leased for no more.
#[test]
fn a_job_leaving_its_window_reads_again_what_it_held_through_it_less_what_the_window_handed_it() {
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let a = Arc::new(replica(&schema, "a", LeaseTimes::default()));
    let feed = |key: JobKey| {
        let job = a.job(&key, "fingerprint-1", &[]).unwrap();
        let order: EpochOrder = Box::new(|_| vec![0, 1, 2]);
        Arc::new(JobFeed::new(a.clone(), key, job, order))
    };
    let window = Arc::new(WindowFeed::new(feed(JobKey::window("team", "train"))));
    let (job_a, job_b) = (feed(JobKey::job("team", "train", "a")), feed(JobKey::job("team", "train", "b")));
    let seat_a = window.seat(job_a.clone()).expect("job a seated at a window that leased nothing yet");
    let seat_b = window.seat(job_b.clone()).expect("job b seated");
    let leased = |feed: &dyn FileFeed| feed.next_file(1).unwrap().map(|fed| (fed.split, fed.leave_out));
    assert_eq!(leased(window.as_ref()), Some((0, set([]))));
    let record = |number| RecordId { epoch: 1, file: 0, number };
    seat_a.handed([record(0), record(1), record(2)].iter());
    // Job b's reader is gone: file 1 is leased for job a alone.
    drop(seat_b);
    assert_eq!(leased(window.as_ref()), Some((1, set([]))));
    assert!(seat_a.is_seated());
    seat_a.leave();
    assert!(!seat_a.is_seated());
    assert_eq!(leased(job_a.as_ref()), Some((0, set([0, 1, 2]))), "file 0 again, less what job a was handed");
    assert_eq!(leased(job_a.as_ref()), Some((1, set([]))), "file 1 again, whole");
    assert_eq!(leased(job_a.as_ref()), Some((2, set([]))), "then its own lease");
    assert_eq!(leased(job_a.as_ref()), None);
    // Job b holds file 0 from the window (until its lease goes) but not file 1.
    assert_eq!(leased(job_b.as_ref()), Some((1, set([]))));
    // The window leases for nobody now: file 2 is job b's to lease, and the window's own.
    assert_eq!(leased(window.as_ref()), Some((2, set([]))));
    assert_eq!(leased(job_b.as_ref()), Some((2, set([]))));
}

/// A ledger written before ledger jobs were keyed by job (schema version 10): a job's
/// reading on replicas was a job named `NAME (job J)`, and their window's `NAME (window)`.
/// Migrated, each row is its parts, keeping its id (and so its splits).
#[test]
fn a_ledger_of_jobs_named_after_their_job_is_migrated_to_job_keys() {
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let mut admin = postgres::Client::connect(&schema.url, postgres::NoTls).unwrap();
    let version_10 = readerd_server::state::postgres::MIGRATIONS[..10].join(";");
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA \"{0}\"; SET search_path TO \"{0}\";
             CREATE TABLE readerd_schema (version INT NOT NULL); INSERT INTO readerd_schema VALUES (10); {version_10}",
            schema.name
        ))
        .unwrap();
    let old_names = ["train", "train (job a)", "train (window)", "r (job a) (job b)", "w (job x"];
    let mut ids = Vec::new();
    for name in old_names {
        let row = admin
            .query_one(
                "INSERT INTO readerd_jobs (container, shared_name, fingerprint, spec) VALUES ('team', $1, 'f', '') \
                 RETURNING id",
                &[&name],
            )
            .unwrap();
        ids.push(row.get::<_, i64>(0));
    }
    admin.execute("INSERT INTO readerd_splits (job, epoch, position, file) VALUES ($1, 0, 0, 0)", &[&ids[1]]).unwrap();
    let ledger = replica(&schema, "a", LeaseTimes::default());
    let keys = [
        train(),
        JobKey::job("team", "train", "a"),
        JobKey::window("team", "train"),
        JobKey::job("team", "r (job a)", "b"),
        JobKey::job("team", "w (job x", "default"),
    ];
    for (key, id) in keys.iter().zip(&ids) {
        assert_eq!(ledger.job_id(key).unwrap(), Some(*id), "{key}");
    }
    let splits: i64 = admin.query_one("SELECT count(*) FROM readerd_splits WHERE job = $1", &[&ids[1]]).unwrap().get(0);
    assert_eq!(splits, 1, "job a kept its split");
    // A new job of the same shared reader is a row of its own.
    let b = ledger.job(&JobKey::job("team", "train", "b"), "f", &[]).unwrap();
    assert!(!ids.contains(&b.id));
}

#[test]
fn one_replica_leases_every_split_in_the_epochs_file_order() {
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let a = replica(&schema, "a", LeaseTimes::default());
    let b = replica(&schema, "b", LeaseTimes::default());
    let job = job(&a);
    assert_eq!(b.job(&train(), "fingerprint-1", &[]).unwrap(), job, "one job for every replica");
    assert!(matches!(b.job(&train(), "fingerprint-2", b"other"), Err(LedgerError::OtherSpec(_))));
    let order = [3, 0, 2, 1];
    a.plan_epoch(job, 1, &order).unwrap();
    b.plan_epoch(job, 1, &order).unwrap();
    let mut files = Vec::new();
    while let Some(lease) = a.lease_next(job, 1, &[], EVERY_FILE).unwrap() {
        assert!(!lease.taken_over && lease.acked.is_empty());
        files.push(lease.split.file as usize);
    }
    assert_eq!(files, order, "planned once, leased in order");
    let progress = a.epoch_progress(job, 1).unwrap();
    assert_eq!((progress.splits, progress.never_leased, progress.done), (4, 0, 0));
    assert_eq!(b.lease_next(job, 1, &[], EVERY_FILE).unwrap(), None, "every split is held");
    // Splits are named by their files, whatever their positions.
    let held: Vec<SplitKey> = order.iter().map(|&file| key(job, 1, file as u32)).collect();
    let mut renewed = a.heartbeat(&held).unwrap();
    renewed.sort_by_key(|key| order.iter().position(|&file| file as u32 == key.split.file));
    assert_eq!(renewed, held, "the renewal returns the splits still held");
    assert!(b.heartbeat(&held).unwrap().is_empty(), "none of them is B's");
}

#[test]
fn a_component_of_a_mixture_leases_only_its_own_files_splits_and_earlier_epochs_first() {
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let a = replica(&schema, "a", LeaseTimes::default());
    let job = job(&a);
    // Component 0 has files 0 and 1, component 1 files 2 to 4, as a mixture's job
    // numbers them; component 1's epoch 1 is planned after component 0's.
    a.plan_epoch(job, 1, &[1, 0, 4, 2, 3]).unwrap();
    a.plan_epoch(job, 2, &[0, 1, 3, 4, 2]).unwrap();
    let lease = |files: std::ops::Range<u32>| {
        a.lease_next(job, 2, &[], files).unwrap().map(|lease| (lease.split.epoch, lease.split.file))
    };
    assert_eq!(lease(2..5), Some((1, 4)), "component 1's first split, not component 0's");
    assert_eq!(lease(2..5), Some((1, 2)));
    assert_eq!(lease(0..2), Some((1, 1)));
    assert_eq!(lease(2..5), Some((1, 3)));
    assert_eq!(lease(2..5), Some((2, 3)), "epoch 1's done with: epoch 2's");
    assert_eq!(lease(0..2), Some((1, 0)));
    assert_eq!(lease(0..2), Some((2, 0)));
    assert_eq!(lease(0..2), Some((2, 1)));
    assert_eq!(lease(0..2), None, "component 0 has nothing left; component 1 has");
    assert_eq!(lease(2..5), Some((2, 4)));
}

#[test]
fn replicas_leasing_at_once_never_hold_the_same_split() {
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let first = replica(&schema, "r0", LeaseTimes::default());
    let job = job(&first);
    first.plan_epoch(job, 1, &(0..200).collect::<Vec<_>>()).unwrap();
    let leased: Vec<Vec<u32>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|i| {
                let schema = &schema;
                scope.spawn(move || {
                    let ledger = replica(schema, &format!("w{i}"), LeaseTimes::default());
                    let mut mine = Vec::new();
                    while let Some(lease) = ledger.lease_next(job, 1, &[], EVERY_FILE).unwrap() {
                        mine.push(lease.position);
                    }
                    mine
                })
            })
            .collect();
        workers.into_iter().map(|worker| worker.join().unwrap()).collect()
    });
    let mut all: Vec<u32> = leased.iter().flatten().copied().collect();
    all.sort();
    assert_eq!(all, (0..200).collect::<Vec<u32>>(), "each split leased exactly once");
    assert!(leased.iter().filter(|mine| !mine.is_empty()).count() >= 2, "{leased:?}");
}

#[test]
fn a_dead_replicas_split_waits_for_its_consumers_then_goes_on_from_what_was_acknowledged() {
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let times = LeaseTimes { ttl: Duration::from_millis(600), grace: Duration::from_secs(60) };
    let (clock, a, b, job) = two_replicas_on_a_manual_clock(&schema, times);
    a.plan_epoch(job, 1, &[7]).unwrap();
    let lease = a.lease_next(job, 1, &[], EVERY_FILE).unwrap().unwrap();
    a.attach_session(job, "consumer-1").unwrap();
    a.commit(job, &[SplitCommit { split: split(1, 7), acked: set([0, 1, 2]), records: None }]).unwrap();
    // A dies: no more heartbeats. Its lease expires, but consumer-1 may still hold
    // records it received from A and acknowledged there without A committing them.
    live_through(&clock, times, Duration::from_millis(900), &[(&b, &[])]);
    assert_eq!(b.lease_next(job, 1, &[], EVERY_FILE).unwrap(), None, "consumer-1 has not re-sent its acknowledgements");
    // consumer-1 moves to B and re-sends them (B commits them, anyone's count)...
    b.attach_session(job, "consumer-1").unwrap();
    let done = b.commit(job, &[SplitCommit { split: split(1, 7), acked: set([3, 5]), records: Some(7) }]).unwrap();
    assert!(done.is_empty(), "not B's: not done by B's word");
    b.session_flushed(job, "consumer-1", "a").unwrap();
    // ...and B takes the split over, skipping what was acknowledged.
    let taken = b.lease_next(job, 1, &[], EVERY_FILE).unwrap().expect("taken over once flushed");
    assert_eq!((taken.split, taken.position, taken.taken_over), (lease.split, 0, true));
    assert_eq!(taken.acked, set([0, 1, 2, 3, 5]));
    assert_eq!(a.epoch_progress(job, 1).unwrap().done, 0, "only the owner says a split is done");
    assert!(a.heartbeat(&[key(job, 1, 7)]).unwrap().is_empty(), "A, back, learns the split is no longer its own");
    assert_eq!(b.heartbeat(&[key(job, 1, 7)]).unwrap(), [key(job, 1, 7)]);
    let done = b.commit(job, &[SplitCommit { split: split(1, 7), acked: set([4]), records: Some(7) }]).unwrap();
    assert!(done.is_empty(), "record 6 is not acknowledged yet");
    // Record 6 comes through A (a consumer of B's that left it re-sends it there): B,
    // committing the split's count again, finds it done.
    a.commit(job, &[SplitCommit { split: split(1, 7), acked: set([6]), records: None }]).unwrap();
    let done = b.commit(job, &[SplitCommit { split: split(1, 7), acked: set([]), records: Some(7) }]).unwrap();
    assert_eq!(done, [split(1, 7)]);
    assert_eq!(b.epoch_progress(job, 1).unwrap().done, 1);
    assert_eq!(b.lease_next(job, 1, &[], EVERY_FILE).unwrap(), None, "a done split is never leased again");
}

#[test]
fn without_its_consumers_a_dead_replicas_split_is_taken_over_after_the_grace_period() {
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let times = LeaseTimes { ttl: Duration::from_millis(300), grace: Duration::from_millis(2000) };
    let (clock, a, b, job) = two_replicas_on_a_manual_clock(&schema, times);
    a.plan_epoch(job, 1, &[0, 1]).unwrap();
    a.lease_next(job, 1, &[], EVERY_FILE).unwrap().unwrap();
    a.attach_session(job, "consumer-gone").unwrap();
    assert_eq!(
        b.lease_next(job, 1, &[], EVERY_FILE).unwrap().map(|lease| lease.position),
        Some(1),
        "the free split first"
    );
    let b_holds = [key(job, 1, 1)];
    live_through(&clock, times, Duration::from_millis(500), &[(&b, &b_holds)]);
    assert_eq!(b.lease_next(job, 1, &[], EVERY_FILE).unwrap(), None, "expired, but within the grace period");
    live_through(&clock, times, Duration::from_millis(2000), &[(&b, &b_holds)]);
    let taken = b.lease_next(job, 1, &[], EVERY_FILE).unwrap().expect("taken over after the grace period");
    assert!(taken.taken_over && taken.position == 0);
    b.heartbeat(&[]).unwrap();
    let live: Vec<String> = b.live_replicas().unwrap().into_iter().map(|(id, _)| id).collect();
    assert_eq!(live, ["b"], "A's heartbeat is older than a lease");
    // A clean shutdown gives leases up at once (no session holds anything here).
    b.release_all().unwrap();
    let c = replica_at(&schema, "c", times, &clock);
    assert_eq!(c.lease_next(job, 1, &[], EVERY_FILE).unwrap().map(|lease| lease.position), Some(0));
}

#[test]
fn only_the_splits_a_reader_holds_are_renewed_and_a_given_up_one_goes_at_once() {
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let times = LeaseTimes { ttl: Duration::from_millis(300), grace: Duration::from_secs(60) };
    let (clock, a, b, job) = two_replicas_on_a_manual_clock(&schema, times);
    a.plan_epoch(job, 1, &[0, 1, 2]).unwrap();
    a.lease_next(job, 1, &[], EVERY_FILE).unwrap().unwrap();
    a.lease_next(job, 1, &[], EVERY_FILE).unwrap().unwrap();
    // A's reader holds split 0 only (the reader of split 1 was dropped): split 1 is not
    // renewed, and B takes it once its lease expired.
    for _ in 0..5 {
        assert_eq!(a.heartbeat(&[key(job, 1, 0)]).unwrap(), [key(job, 1, 0)]);
        clock.advance(Duration::from_millis(100));
    }
    // Split 1 is not leased again to A while A says it still reads it.
    let again = a.lease_next(job, 1, &[split(1, 0), split(1, 1)], EVERY_FILE).unwrap().map(|lease| lease.position);
    assert_eq!(again, Some(2), "the free split, not A's own expired one");
    assert_eq!(
        b.lease_next(job, 1, &[], EVERY_FILE).unwrap().map(|lease| (lease.position, lease.taken_over)),
        Some((1, true))
    );
    assert_eq!(b.lease_next(job, 1, &[], EVERY_FILE).unwrap(), None, "split 0 is renewed, split 2 is A's");
    // A gives split 0 up (it lost another): B takes it at once.
    a.release(&[key(job, 1, 0)]).unwrap();
    assert_eq!(b.lease_next(job, 1, &[], EVERY_FILE).unwrap().map(|lease| lease.position), Some(0));
    assert!(a.heartbeat(&[key(job, 1, 0)]).unwrap().is_empty(), "not A's any more");
}

#[test]
fn a_stopped_job_is_over_once_every_replica_serving_it_ended_and_stays_stopped_when_restored() {
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let short = LeaseTimes { ttl: Duration::from_millis(500), grace: Duration::ZERO };
    let clock = LedgerClock::manual();
    let a = replica_at(&schema, "a", LeaseTimes::default(), &clock);
    let b = replica_at(&schema, "b", short, &clock);
    let job = job(&a);
    assert!(!a.join_stoppable(job).unwrap(), "a new job is not stopped");
    assert!(!b.report(job, 3, 1).unwrap());
    let running = a.snapshot_job(&train()).unwrap().unwrap();
    assert!(!a.stopped_job_finished(job).unwrap(), "not stopped");
    a.stop_job(job).unwrap();
    assert!(b.report(job, 3, 1).unwrap(), "a report says it is stopped");

    // Over once every replica that serves it (reported on it) ended.
    assert!(!b.stopped_job_finished(job).unwrap(), "neither ended");
    a.replica_ended(job).unwrap();
    assert!(!a.stopped_job_finished(job).unwrap(), "B did not end");
    let stopping = a.snapshot_job(&train()).unwrap().unwrap();
    assert!(!stopping.stopped, "a checkpoint before its end would lose what B still delivers: not stopped");
    b.replica_ended(job).unwrap();
    b.report(job, 0, 0).unwrap();
    assert!(a.stopped_job_finished(job).unwrap(), "both ended (a later report keeps it)");
    let stopped = a.snapshot_job(&train()).unwrap().unwrap();
    assert!(stopped.stopped && !running.stopped);

    // A replica that joins now finds it stopped, and serves it until it ends; one that
    // stops reporting (it died, or dropped its reader) counts no more after a lease time.
    let c = replica_at(&schema, "c", short, &clock);
    assert!(c.join_stoppable(job).unwrap(), "joins a stopped job");
    assert!(!a.stopped_job_finished(job).unwrap(), "C did not end");
    clock.advance(Duration::from_millis(600));
    assert!(c.stopped_job_finished(job).unwrap(), "C's report is older than a lease time");

    let restored = b.restore_job(&train(), "restore-1", &running).unwrap();
    assert!(!a.join_stoppable(restored).unwrap(), "restored from before the stop: running again");
    let restored = b.restore_job(&train(), "restore-2", &stopped).unwrap();
    assert!(a.join_stoppable(restored).unwrap(), "restored from after the end: stopped");
    assert!(a.delete_job(&train()).unwrap());
    assert!(matches!(a.stopped_job_finished(restored), Err(LedgerError::Deleted(_))));
    assert!(matches!(a.join_stoppable(restored), Err(LedgerError::Deleted(_))));
    assert!(matches!(a.replica_ended(restored), Err(LedgerError::Deleted(_))));
}

#[test]
fn a_replica_just_connected_takes_over_a_given_up_split_at_once_and_an_expired_lease_only_a_lease_time_later() {
    // After a PostgreSQL outage every lease has expired, and the replicas that are alive
    // renew theirs within a lease time of reconnecting: one that reconnects first must not
    // take their splits meanwhile (their consumers would get the records twice).
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let times = LeaseTimes { ttl: Duration::from_millis(400), grace: Duration::ZERO };
    let clock = LedgerClock::manual();
    let a = replica_at(&schema, "a", times, &clock);
    let job = job(&a);
    a.plan_epoch(job, 1, &[0, 1]).unwrap();
    a.lease_next(job, 1, &[], EVERY_FILE).unwrap().unwrap();
    a.lease_next(job, 1, &[], EVERY_FILE).unwrap().unwrap();
    a.release(&[key(job, 1, 1)]).unwrap();
    clock.advance(Duration::from_millis(500));
    let c = replica_at(&schema, "c", times, &clock);
    let given_up = c.lease_next(job, 1, &[], EVERY_FILE).unwrap().map(|lease| lease.position);
    assert_eq!(given_up, Some(1), "a split given up goes at once");
    assert_eq!(
        c.lease_next(job, 1, &[split(1, 1)], EVERY_FILE).unwrap(),
        None,
        "an expired lease, within a lease time"
    );
    live_through(&clock, times, Duration::from_millis(450), &[(&c, &[key(job, 1, 1)])]);
    let expired = c.lease_next(job, 1, &[split(1, 1)], EVERY_FILE).unwrap().expect("taken over a lease time later");
    assert!(expired.taken_over && expired.position == 0);
}

#[test]
fn skip_and_take_count_per_job_and_a_takeover_gives_back_the_places_never_acknowledged() {
    use readerd_server::cluster::selection_ledger::{Fate, SelectionLimits};
    use readerd_server::source::RecordId;
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let times = LeaseTimes { ttl: Duration::from_millis(300), grace: Duration::from_millis(0) };
    let (clock, a, b, job) = two_replicas_on_a_manual_clock(&schema, times);
    a.plan_epoch(job, 1, &[0, 1]).unwrap();
    a.lease_next(job, 1, &[], EVERY_FILE).unwrap().unwrap();
    b.lease_next(job, 1, &[], EVERY_FILE).unwrap().unwrap();
    let records = |file: u32, numbers: std::ops::Range<u64>| -> Vec<RecordId> {
        numbers.map(|number| RecordId { epoch: 1, file, number }).collect()
    };
    let limits = SelectionLimits { skip: 3, take: Some(4), scope: 0 };
    // A claims first: the job's first 3 are skipped, the next 2 taken.
    let fates = a.claim_selected(job, limits, &records(0, 0..5)).unwrap();
    assert_eq!(fates, [Fate::Skipped, Fate::Skipped, Fate::Skipped, Fate::Taken, Fate::Taken]);
    // The same claim again (a retry whose first answer an outage lost) counts nothing more:
    // the taken stay taken, the skipped are not delivered.
    let again = a.claim_selected(job, limits, &records(0, 0..5)).unwrap();
    assert_eq!(again, [Fate::Dropped, Fate::Dropped, Fate::Dropped, Fate::Taken, Fate::Taken]);
    // B's records come after A's, in the same counts: 2 places left, then dropped.
    let fates = b.claim_selected(job, limits, &records(1, 0..3)).unwrap();
    assert_eq!(fates, [Fate::Taken, Fate::Taken, Fate::Dropped]);
    // Skipped and dropped records are settled in their splits at once.
    let acked = a.acked_sets(job, &[split(1, 0), split(1, 1)]).unwrap();
    assert_eq!(acked, [(split(1, 0), set(0..3)), (split(1, 1), set([2]))]);
    // A consumer acknowledged A's record 3, not 4; then A dies and B takes its split over:
    // the place of record 4 goes back, so B, reading it again, takes it.
    let commit = SplitCommit { split: split(1, 0), acked: set([3]), records: None };
    a.commit(job, &[commit]).unwrap();
    // B renews steadily (every 100 ms) while A's lease expires.
    for _ in 0..8 {
        clock.advance(Duration::from_millis(100));
        b.heartbeat(&[key(job, 1, 1)]).unwrap();
    }
    let lease = b.lease_next(job, 1, &[split(1, 1)], EVERY_FILE).unwrap().expect("A's split, taken over");
    assert!(lease.taken_over && lease.split == split(1, 0));
    assert_eq!(lease.acked, set(0..4));
    let fates = b.claim_selected(job, limits, &records(0, 4..6)).unwrap();
    assert_eq!(fates, [Fate::Taken, Fate::Dropped], "one place came back, for record 4");
    // Another epoch, and another scope (a mixture's component), count apart.
    let component = SelectionLimits { scope: 1, ..limits };
    let fates = b.claim_selected(job, component, &records(1, 3..4)).unwrap();
    assert_eq!(fates, [Fate::Skipped]);
}

#[test]
fn a_job_that_unbatches_settles_tombstones_and_a_record_delivered_in_part_keeps_its_place() {
    use readerd_server::cluster::EpochSelection;
    use readerd_server::cluster::selection_ledger::{Fate, LedgerNames, SelectionLimits};
    use readerd_server::source::RecordId;
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let times = LeaseTimes { ttl: Duration::from_millis(300), grace: Duration::from_millis(0) };
    let clock = LedgerClock::manual();
    let (a, b) = (replica_at(&schema, "a", times, &clock), replica_at(&schema, "b", times, &clock));
    let pipeline = readerd_proto::v1::Pipeline { unbatch: true, ..Default::default() };
    let spec = readerd_proto::v1::DatasetSpec { pipeline: Some(pipeline), ..Default::default() };
    let job = a.job(&train(), "fingerprint-u", &prost::Message::encode_to_vec(&spec)).unwrap();
    assert_eq!(job.names, LedgerNames::Examples, "named from the job's spec");
    a.plan_epoch(job, 1, &[0, 1]).unwrap();
    a.lease_next(job, 1, &[], EVERY_FILE).unwrap().unwrap();
    b.lease_next(job, 1, &[], EVERY_FILE).unwrap().unwrap();
    let records = |numbers: std::ops::Range<u64>| -> Vec<RecordId> {
        numbers.map(|number| RecordId { epoch: 1, file: 0, number }).collect()
    };
    // Example i of record r is named r << 20 | i; a record as a whole, r << 20 | 0xFFFFF.
    let example = |record: u64, i: u64| record << 20 | i;
    let tombstone = |record: u64| record << 20 | 0xF_FFFF;
    let limits = SelectionLimits { skip: 1, take: Some(3), scope: 0 };
    let fates = a.claim_selected(job, limits, &records(0..4)).unwrap();
    assert_eq!(fates, [Fate::Skipped, Fate::Taken, Fate::Taken, Fate::Taken]);
    // The skipped record is settled under its tombstone: one example of its split.
    assert_eq!(a.acked_sets(job, &[split(1, 0)]).unwrap(), [(split(1, 0), set([tombstone(0)]))]);
    // Record 1 delivered in part, record 2 not at all, record 3 whole; then A dies.
    let delivered = set([example(1, 1), example(3, 0), example(3, 1)]);
    a.commit(job, &[SplitCommit { split: split(1, 0), acked: delivered, records: None }]).unwrap();
    for _ in 0..8 {
        clock.advance(Duration::from_millis(100));
        b.heartbeat(&[key(job, 1, 1)]).unwrap();
    }
    let lease = b.lease_next(job, 1, &[split(1, 1)], EVERY_FILE).unwrap().expect("A's split, taken over");
    assert!(lease.taken_over && lease.split == split(1, 0));
    // B reads the split again and claims every record: the skipped one stays settled, the
    // ones delivered (in part or whole) stay taken without counting again, record 2's
    // place came back and it takes it, and the take is full for record 4.
    let fates = b.claim_selected(job, limits, &records(0..5)).unwrap();
    assert_eq!(fates, [Fate::Dropped, Fate::Taken, Fate::Taken, Fate::Taken, Fate::Dropped]);
    // A checkpoint now counts record 2's place as outstanding (none of its examples
    // acknowledged): given back, so a restore reads and takes it again. Record 1's is not.
    let snapshot = b.snapshot_job(&train()).unwrap().unwrap();
    assert_eq!(snapshot.selections, [EpochSelection { scope: 0, epoch: 1, skipped: 1, taken: 2 }]);
    // Record 2, taken again, gives no example: settled under its tombstone, it keeps its
    // place (a restore would otherwise read it as dropped and take one record more).
    let settled = set([tombstone(2)]);
    b.commit(job, &[SplitCommit { split: split(1, 0), acked: settled, records: None }]).unwrap();
    let snapshot = b.snapshot_job(&train()).unwrap().unwrap();
    assert_eq!(snapshot.selections, [EpochSelection { scope: 0, epoch: 1, skipped: 1, taken: 3 }]);
}

#[test]
fn an_outage_of_the_whole_ledger_counts_against_no_lease_and_its_grace() {
    // PostgreSQL is down for longer than a lease time and the grace period together: no
    // replica could renew, nor commit what its consumers acknowledged meanwhile. The first
    // replica back (here asking for a next split before its own heartbeat) must not take
    // the others' splits over: they are alive, and come back within a lease time.
    let Some(schema) = Schema::new("readerd_ledger") else { return };
    let times = LeaseTimes { ttl: Duration::from_millis(400), grace: Duration::from_millis(1000) };
    let (clock, a, b, job) = two_replicas_on_a_manual_clock(&schema, times);
    a.plan_epoch(job, 1, &[0, 1, 2]).unwrap();
    a.lease_next(job, 1, &[], EVERY_FILE).unwrap().unwrap();
    a.attach_session(job, "consumer-of-a").unwrap();
    b.lease_next(job, 1, &[], EVERY_FILE).unwrap().unwrap();
    let (a_holds, b_holds) = ([key(job, 1, 0)], [key(job, 1, 1)]);
    live_through(&clock, times, Duration::from_millis(600), &[(&a, &a_holds), (&b, &b_holds)]);

    clock.advance(Duration::from_secs(5));
    let after =
        b.lease_next(job, 1, &[split(1, 1)], EVERY_FILE).unwrap().map(|lease| (lease.position, lease.taken_over));
    assert_eq!(
        after,
        Some((2, false)),
        "the free split, not A's, whose lease ran only while nobody reached the ledger"
    );
    assert_eq!(b.lease_next(job, 1, &[split(1, 1), split(1, 2)], EVERY_FILE).unwrap(), None);
    assert_eq!(b.heartbeat(&[key(job, 1, 1), key(job, 1, 2)]).unwrap().len(), 2);
    // A comes back within a lease time of the ledger: its split is still its own.
    clock.advance(Duration::from_millis(300));
    assert_eq!(a.heartbeat(&a_holds).unwrap(), a_holds, "A's lease outlived the outage");
    let both = [key(job, 1, 1), key(job, 1, 2)];
    live_through(&clock, times, Duration::from_millis(2000), &[(&a, &a_holds), (&b, &both)]);
    assert_eq!(b.lease_next(job, 1, &[split(1, 1), split(1, 2)], EVERY_FILE).unwrap(), None, "A renews");

    // A dies for good: its split goes to B after a lease time and the grace period.
    live_through(&clock, times, Duration::from_millis(1200), &[(&b, &both)]);
    assert_eq!(b.lease_next(job, 1, &[split(1, 1), split(1, 2)], EVERY_FILE).unwrap(), None, "within the grace");
    live_through(&clock, times, Duration::from_millis(400), &[(&b, &both)]);
    let taken = b.lease_next(job, 1, &[split(1, 1), split(1, 2)], EVERY_FILE).unwrap().expect("A's, after the grace");
    assert_eq!((taken.position, taken.taken_over), (0, true));
}
