//! What a single server's pipeline does, on replicas too: the exact global shuffle (the
//! ledger's splits are ranges of each epoch's permutation), selections and their
//! settling in the ledger. Real readerd processes on the real PostgreSQL
//! (`READERD_TEST_POSTGRES_URL`), a database per test, `readerctl` consumers.

use std::path::Path;

use readerd_tests::postgres::Database;
use readerd_tests::shared_reads::{
    lines_printed, read_shared, spawn_consumers, wait_for_consumers, wait_until_printed, write_lines,
};
use readerd_tests::{ServerProcess, jsonl, readerctl, write_spec};
use serde_json::{Value, json};

/// The global shuffle of `write_lines`' 8 files, two epochs, batches of 8.
fn global_spec() -> Value {
    json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 11, "shuffle": {"global": true}, "numEpochs": 2, "batchSize": 8}
    })
}

/// A replica with short leases, started with `args` besides its state store.
fn replica(db: &Database, data: &Path, args: &[&str]) -> (ServerProcess, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let url = db.url();
    let args: Vec<&str> = ["--state-url", url.as_str(), "--lease-time", "2s", "--failover-grace", "30s"]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    (ServerProcess::start_in(state.path(), &[data], &args), state)
}

/// Splits of the job's first epoch in the ledger.
fn splits_of_epoch_one(db: &Database) -> i64 {
    let mut ledger = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    ledger.query_one("SELECT count(*) FROM readerd_splits WHERE epoch = 1", &[]).unwrap().get(0)
}

/// Splits replica `addr` holds that are not done.
fn unfinished_splits_of(db: &Database, addr: &str) -> i64 {
    let mut ledger = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    let held = "SELECT count(*) FROM readerd_splits
                WHERE owner = (SELECT id FROM readerd_replicas WHERE address = $1) AND NOT done";
    ledger.query_one(held, &[&addr]).unwrap().get(0)
}

/// `spec` with a key-hash selection: 8 buckets of 10 (about 80% of the records).
fn with_key_buckets(mut spec: Value) -> Value {
    spec["pipeline"]["select"] = json!({"keyBuckets": {"buckets": 10, "keep": [0, 1, 2, 3, 4, 5, 6, 7]}});
    spec
}

/// `spec` (of the files of `write_lines(_, lines)`), read by a single server and by one
/// replica: the same sequence. Returns it.
fn assert_one_replica_reads_the_single_servers_sequence(db: &Database, spec: &Value, lines: usize) -> Vec<String> {
    let data = tempfile::tempdir().unwrap();
    write_lines(data.path(), lines);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, spec);
    let single = ServerProcess::start(&[data.path()]);
    let expected = read_shared(&single.addr, &spec_path);
    let (replica, _state) = replica(db, data.path(), &[]);
    let read = read_shared(&replica.addr, &spec_path);
    assert_eq!(read.len(), expected.len());
    assert!(read == expected, "the single server's sequence, split by split through the ledger");
    expected
}

/// `spec` (of the files of `write_lines(_, lines)`) read by 4 consumers from 3 replicas,
/// one of which is killed once `kill_at` lines were printed: every record the single
/// server gives, exactly as often (once per epoch).
fn assert_exactly_once_through_a_replica_kill(db: &Database, spec: &Value, lines: usize, kill_at: usize) {
    let data = tempfile::tempdir().unwrap();
    write_lines(data.path(), lines);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, spec);
    let mut expected = read_shared(&ServerProcess::start(&[data.path()]).addr, &spec_path);
    expected.sort();
    let mut all = read_through_a_replica_kill(db, data.path(), &spec_path, kill_at);
    all.sort();
    assert_eq!(all.len(), expected.len(), "{} records printed, {} expected", all.len(), expected.len());
    assert!(all == expected, "every record exactly once per epoch");
}

/// The spec at `spec_path` (of files in `data`) read to its end by 4 consumers from 3
/// replicas, one of which is killed holding splits once `kill_at` lines were printed:
/// every key the consumers printed.
fn read_through_a_replica_kill(db: &Database, data: &Path, spec_path: &str, kill_at: usize) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let mut replicas: Vec<_> = (0..3).map(|_| Some(replica(db, data, &[]))).collect();
    let addrs: Vec<String> = replicas.iter().map(|r| r.as_ref().unwrap().0.addr.clone()).collect();
    let outputs: Vec<std::path::PathBuf> = (0..4).map(|i| dir.path().join(format!("consumer-{i}.jsonl"))).collect();
    let consumers = spawn_consumers(&addrs.join(","), &["--spec", spec_path], &outputs);
    wait_until_printed(&outputs, kill_at);
    let (killed, _state) = replicas[1].take().unwrap();
    killed.kill();
    let before_kill = lines_printed(&outputs);
    let held = unfinished_splits_of(db, &addrs[1]);
    assert!(held > 0, "the killed replica held splits ({before_kill} lines printed)");
    println!("{before_kill} lines printed when replica 1 was killed");
    wait_for_consumers(consumers, &outputs, true)
}

#[test]
fn one_replica_reads_the_single_servers_global_shuffle_sequence() {
    let Some(db) = Database::new() else { return };
    let expected = assert_one_replica_reads_the_single_servers_sequence(&db, &global_spec(), 300);
    assert_eq!(expected.len(), 2 * 8 * 300);
    // 2,400 records an epoch: splits of 64 records (the least), so 38 of them.
    assert_eq!(splits_of_epoch_one(&db), 38);
}

#[test]
fn three_replicas_deliver_a_global_shuffle_exactly_once_per_epoch_through_a_replica_kill() {
    let Some(db) = Database::new() else { return };
    // Killed mid-epoch one: a sixth of the 2,000 batches printed.
    assert_exactly_once_through_a_replica_kill(&db, &global_spec(), 1000, 330);
    // The permutation of 8,000 records is cut into 125 ranges of 64.
    assert_eq!(splits_of_epoch_one(&db), 125);
}

#[test]
fn one_replica_reads_the_single_servers_key_hash_selection() {
    let Some(db) = Database::new() else { return };
    let expected = assert_one_replica_reads_the_single_servers_sequence(&db, &with_key_buckets(global_spec()), 300);
    let share = expected.len() as f64 / (2.0 * 8.0 * 300.0);
    assert!((0.7..0.9).contains(&share), "the selection keeps {share} of the records");
}

#[test]
fn three_replicas_deliver_a_key_hash_selection_exactly_once_per_epoch_through_a_replica_kill() {
    let Some(db) = Database::new() else { return };
    // Files, not the global shuffle: the records the selection drops are settled in the
    // ledger, or their splits are never done and the job never ends.
    let mut spec = with_key_buckets(global_spec());
    spec["pipeline"]["shuffle"] = json!({"bufferSize": 32});
    spec["pipeline"]["cycleLength"] = json!(2);
    assert_exactly_once_through_a_replica_kill(&db, &spec, 1000, 270);
    let global = with_key_buckets(global_spec());
    let Some(db) = Database::new() else { return };
    assert_exactly_once_through_a_replica_kill(&db, &global, 1000, 270);
}

/// `spec` unbatched: each line decoded raw into its bytes, one example each, batched by
/// 16 again; examples of one record may go out in different elements (and the record
/// be acknowledged in part when a replica dies).
fn unbatched(mut spec: Value) -> Value {
    spec["decoder"] = json!({"raw": {"outType": "UINT8"}});
    spec["pipeline"]["unbatch"] = json!(true);
    spec["pipeline"]["batchSize"] = json!(16);
    spec
}

#[test]
fn one_replica_reads_the_single_servers_unbatched_sequence() {
    let Some(db) = Database::new() else { return };
    let expected = assert_one_replica_reads_the_single_servers_sequence(&db, &unbatched(global_spec()), 200);
    assert!(expected.iter().all(|key| key.ends_with(']')), "examples' keys");
}

#[test]
fn three_replicas_deliver_every_example_exactly_once_through_a_replica_kill() {
    let Some(db) = Database::new() else { return };
    // About 8 x 400 x 4.7 examples an epoch, 940 batches: killed a sixth into epoch one.
    let mut files = unbatched(global_spec());
    files["pipeline"]["shuffle"] = json!({"bufferSize": 32});
    files["pipeline"]["cycleLength"] = json!(2);
    assert_exactly_once_through_a_replica_kill(&db, &files, 400, 160);
    let Some(db) = Database::new() else { return };
    assert_exactly_once_through_a_replica_kill(&db, &unbatched(global_spec()), 400, 160);
}

/// `spec` skipping the first 500 records of each epoch and taking the next 5,000 (of
/// `write_lines(_, 1000)`'s 8,000).
fn skipping_and_taking(mut spec: Value) -> Value {
    spec["pipeline"]["select"] = json!({"skip": 500, "take": 5000});
    spec
}

/// Every key at most twice (once per epoch), and `per_epoch` of them per epoch in all.
fn assert_taken_once_per_epoch(all: &[String], per_epoch: usize) {
    let mut counts = std::collections::BTreeMap::new();
    for key in all {
        *counts.entry(key.as_str()).or_insert(0usize) += 1;
    }
    let thrice: Vec<_> = counts.iter().filter(|(_, n)| **n > 2).take(5).collect();
    assert!(thrice.is_empty(), "printed more often than once per epoch: {thrice:?}");
    assert_eq!(all.len(), 2 * per_epoch, "skip and take counted per job");
}

/// The job's selection counts `(scope, epoch, skipped, taken)`, as the ledger holds them.
fn selection_counts(db: &Database) -> Vec<(i32, i64, i64, i64)> {
    let mut ledger = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    let counts = "SELECT scope, epoch, skipped, taken FROM readerd_selections ORDER BY scope, epoch";
    ledger.query(counts, &[]).unwrap().iter().map(|row| (row.get(0), row.get(1), row.get(2), row.get(3))).collect()
}

#[test]
fn one_replica_reads_the_single_servers_skip_and_take() {
    let Some(db) = Database::new() else { return };
    let mut spec = skipping_and_taking(global_spec());
    spec["pipeline"]["select"] = json!({"skip": 100, "take": 1000});
    let expected = assert_one_replica_reads_the_single_servers_sequence(&db, &spec, 300);
    assert_eq!(expected.len(), 2 * 1000);
    assert_eq!(selection_counts(&db), [(0, 1, 100, 1000), (0, 2, 100, 1000)]);
}

#[test]
fn three_replicas_skip_and_take_per_job_through_a_replica_kill() {
    let Some(db) = Database::new() else { return };
    let data = tempfile::tempdir().unwrap();
    write_lines(data.path(), 1000);
    let dir = tempfile::tempdir().unwrap();
    let mut spec = skipping_and_taking(global_spec());
    spec["pipeline"]["shuffle"] = json!({"bufferSize": 32});
    spec["pipeline"]["cycleLength"] = json!(2);
    let spec_path = write_spec(&dir, &spec);
    // 625 batches an epoch: killed a third into the first.
    let all = read_through_a_replica_kill(&db, data.path(), &spec_path, 200);
    // Not 3 x 5,000 (each replica taking its own), nor fewer (places granted to the killed
    // replica's records lost with it).
    assert_taken_once_per_epoch(&all, 5000);
    assert_eq!(selection_counts(&db), [(0, 1, 500, 5000), (0, 2, 500, 5000)]);
}

#[test]
fn a_checkpoint_keeps_the_jobs_skip_and_take_counts() {
    let Some(db) = Database::new() else { return };
    let data = tempfile::tempdir().unwrap();
    write_lines(data.path(), 1000);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &skipping_and_taking(global_spec()));
    let (first, _state) = replica(&db, data.path(), &[]);
    // 100 batches consumed and acknowledged, then the job checkpointed.
    let before = [dir.path().join("before.jsonl")];
    let consumer = spawn_consumers(&first.addr, &["--spec", &spec_path, "--max-batches", "100"], &before);
    let mut all = wait_for_consumers(consumer, &before, false);
    assert_eq!(all.len(), 800);
    let checkpoint = readerctl(&first.addr, &["checkpoint", "--container", "team", "--shared-name", "train"]);
    assert!(checkpoint.status.success(), "{}", String::from_utf8_lossy(&checkpoint.stderr));
    let token = jsonl(&checkpoint.stdout)[0]["checkpoint"].as_str().unwrap().to_owned();
    first.kill();
    // On a new replica, the job resumes from the token: epoch one goes on from 800 of its
    // 5,000 taken, not from none.
    let (second, _state) = replica(&db, data.path(), &[]);
    let after = [dir.path().join("after.jsonl")];
    let consumer = spawn_consumers(&second.addr, &["--resume", &token], &after);
    all.extend(wait_for_consumers(consumer, &after, true));
    assert_taken_once_per_epoch(&all, 5000);
    // `readerctl stats` shows the job's counts, over every replica.
    let stats = readerctl(&second.addr, &["stats", "--container", "team", "--shared-name", "train"]);
    let stats = String::from_utf8_lossy(&stats.stdout);
    for epoch in [1, 2] {
        assert!(stats.contains(&format!("selection epoch {epoch}: skipped 500 taken 5000\n")), "{stats}");
    }
}

/// Unbatched examples (`part-F.txt:L[i]`) of records taken whole: each record's examples
/// are all of its line's bytes, each as often as the others (once per epoch it was taken
/// in), and `per_epoch` records were taken in each of the 2 epochs.
fn assert_whole_records_taken(all: &[String], per_epoch: usize) {
    let mut records: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for key in all {
        let (record, i) = key.strip_suffix(']').and_then(|key| key.split_once('[')).expect("an example's key");
        let counts = records.entry(record).or_default();
        let i: usize = i.parse().unwrap();
        if counts.len() <= i {
            counts.resize(i + 1, 0);
        }
        counts[i] += 1;
    }
    let mut taken = 0;
    for (record, counts) in &records {
        // `part-F.txt:L` holds line L - 1 of file F, "F-(L-1)".
        let (file, line) = record.strip_prefix("part-").and_then(|r| r.split_once(".txt:")).unwrap();
        let bytes = format!("{file}-{}", line.parse::<usize>().unwrap() - 1).len();
        assert_eq!(counts.len(), bytes, "every example of {record} delivered: {counts:?}");
        assert!(counts.iter().all(|n| *n == counts[0] && (1..=2).contains(n)), "{record}'s examples: {counts:?}");
        taken += counts[0];
    }
    assert_eq!(taken, 2 * per_epoch, "records taken, counted per job and epoch");
}

#[test]
fn one_replica_reads_the_single_servers_unbatched_skip_and_take() {
    let Some(db) = Database::new() else { return };
    let mut spec = unbatched(global_spec());
    spec["pipeline"]["select"] = json!({"skip": 100, "take": 1000});
    let expected = assert_one_replica_reads_the_single_servers_sequence(&db, &spec, 300);
    assert_whole_records_taken(&expected, 1000);
    assert_eq!(selection_counts(&db), [(0, 1, 100, 1000), (0, 2, 100, 1000)]);
}

#[test]
fn three_replicas_skip_and_take_unbatched_records_per_job_through_a_replica_kill() {
    let Some(db) = Database::new() else { return };
    let data = tempfile::tempdir().unwrap();
    write_lines(data.path(), 1000);
    let dir = tempfile::tempdir().unwrap();
    let mut spec = skipping_and_taking(unbatched(global_spec()));
    spec["pipeline"]["shuffle"] = json!({"bufferSize": 32});
    spec["pipeline"]["cycleLength"] = json!(2);
    let spec_path = write_spec(&dir, &spec);
    // About 5,000 x 5 examples an epoch in batches of 16, 1,500 batches: killed a third of
    // the way into the first. Records delivered in part when it died are neither lost nor
    // taken twice, and their places are not given back.
    let all = read_through_a_replica_kill(&db, data.path(), &spec_path, 500);
    assert_whole_records_taken(&all, 5000);
    assert_eq!(selection_counts(&db), [(0, 1, 500, 5000), (0, 2, 500, 5000)]);
}

/// A mixture of `write_lines`' first four files and its last four, the first component
/// taking 300 records of each of its 2 epochs (after skipping 20), batched by 8.
fn mixture_with_take() -> Value {
    json!({
        "mix": {
            "datasets": [
                {"source": {"files": ["part-[0-3].txt"], "format": "TEXT_LINE"},
                 "pipeline": {"seed": 1, "shuffleFiles": true, "cycleLength": 2, "numEpochs": 2,
                              "select": {"skip": 20, "take": 300}}},
                {"source": {"files": ["part-[4-7].txt"], "format": "TEXT_LINE"},
                 "pipeline": {"cycleLength": 2, "numEpochs": 1}}
            ],
            "weights": [0.5, 0.5]
        },
        "pipeline": {"seed": 9, "batchSize": 8}
    })
}

#[test]
fn one_replica_reads_the_single_servers_mixture_with_a_components_take() {
    let Some(db) = Database::new() else { return };
    let expected = assert_one_replica_reads_the_single_servers_sequence(&db, &mixture_with_take(), 200);
    // Component 0: 300 records of each of its 2 epochs; component 1: its 800 once.
    assert_eq!(expected.len(), 2 * 300 + 800);
    // Counted in component 0's scope (1), not the reader's (0).
    assert_eq!(selection_counts(&db), [(1, 1, 20, 300), (1, 2, 20, 300)]);
}

#[test]
fn three_replicas_count_a_components_take_per_job_through_a_replica_kill() {
    let Some(db) = Database::new() else { return };
    let data = tempfile::tempdir().unwrap();
    write_lines(data.path(), 200);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &mixture_with_take());
    // 175 batches in all: killed a third of the way.
    let all = read_through_a_replica_kill(&db, data.path(), &spec_path, 60);
    // A mixture's keys name the component: `0/part-0.txt:5`.
    let (first, second): (Vec<&String>, Vec<&String>) = all.iter().partition(|key| key.starts_with("0/"));
    // The second component's 800 records once each; the first's 300 an epoch, none twice
    // in an epoch (so none three times).
    let mut second: Vec<&String> = second;
    second.sort();
    second.dedup();
    assert_eq!(second.len(), 800);
    assert_eq!(all.len() - first.len(), 800, "the second component's records once each");
    let first: Vec<String> = first.into_iter().cloned().collect();
    assert_taken_once_per_epoch(&first, 300);
    assert_eq!(selection_counts(&db), [(1, 1, 20, 300), (1, 2, 20, 300)]);
}

#[test]
fn an_empty_epoch_of_a_global_shuffle_ends_on_a_replica_as_on_a_single_server() {
    let Some(db) = Database::new() else { return };
    // 8 empty files: each epoch's permutation is empty, and still has a split to be done.
    let expected = assert_one_replica_reads_the_single_servers_sequence(&db, &global_spec(), 0);
    assert!(expected.is_empty());
    assert_eq!(splits_of_epoch_one(&db), 1);
}
