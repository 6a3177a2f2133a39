//! Replicas: readerd processes sharing a PostgreSQL state store (the real one on
//! 127.0.0.1:5432, `READERD_TEST_POSTGRES_URL`; each test in a database of its own) serve
//! one shared reader through the split ledger, each `readerctl` consumer reading through
//! one replica.

use std::path::Path;

use readerd_tests::{ServerProcess, jsonl, readerctl, write_file, write_spec};
use serde_json::{Value, json};

/// A database of its own, dropped at the end.
struct Database {
    admin: String,
    name: String,
}

impl Database {
    fn new() -> Option<Database> {
        let Ok(admin) = std::env::var("READERD_TEST_POSTGRES_URL") else {
            eprintln!("READERD_TEST_POSTGRES_URL is not set: replicas are not tested here (.ci/run sets it)");
            return None;
        };
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let name = format!("readerd_replicas_{}_{nanos}", std::process::id());
        let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
        client.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        Some(Database { admin, name })
    }

    /// The database's URL: the admin URL with its database replaced.
    fn url(&self) -> String {
        let (base, _) = self.admin.rsplit_once('/').unwrap();
        format!("{base}/{}", self.name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

/// 8 text files of 150 lines (keys `part-<f>.txt:<line>`).
fn write_data(root: &Path) {
    for f in 0..8 {
        let text: String = (0..150).map(|l| format!("{f}-{l}\n")).collect();
        write_file(root, &format!("part-{f}.txt"), text.as_bytes());
    }
}

fn spec() -> Value {
    json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 3, "shuffleFiles": true, "cycleLength": 2, "shuffle": {"bufferSize": 32},
                     "numEpochs": 2, "batchSize": 8}
    })
}

fn replica(db: &Database, data: &Path) -> (ServerProcess, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let url = db.url();
    let args = ["--state-url", url.as_str(), "--lease-time", "2s", "--failover-grace", "3s"];
    (ServerProcess::start_in(state.path(), &[data], &args), state)
}

/// What a `readerctl read` of the shared reader printed: its elements' record keys, in
/// order.
fn read_shared(addr: &str, spec_path: &str) -> Vec<String> {
    let args = ["read", "--spec", spec_path, "--container", "team", "--shared-name", "train", "--output", "jsonl"];
    let output = readerctl(addr, &args);
    let lines = jsonl(&output.stdout);
    assert!(output.status.success(), "readerctl failed: {lines:?}\n{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(lines.last().unwrap()["end_of_sequence"], true, "{:?}", lines.last());
    lines
        .iter()
        .filter_map(|line| line["keys"].as_array())
        .flatten()
        .map(|key| key.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn one_replica_and_one_consumer_read_exactly_what_a_single_server_reads() {
    let Some(db) = Database::new() else { return };
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &spec());
    let single = ServerProcess::start(&[data.path()]);
    let expected = read_shared(&single.addr, &spec_path);
    assert_eq!(expected.len(), 2 * 8 * 150);
    let (replica, _state) = replica(&db, data.path());
    assert_eq!(read_shared(&replica.addr, &spec_path), expected, "the same sequence through the split ledger");

    // What replicas do not serve yet is refused, not done wrong.
    let checkpoint = readerctl(&replica.addr, &["checkpoint", "--container", "team", "--shared-name", "train"]);
    let said = String::from_utf8_lossy(&checkpoint.stderr);
    assert!(!checkpoint.status.success() && said.contains("not built yet"), "{said}");
    let mut global = spec();
    global["pipeline"]["shuffle"] = json!({"global": true});
    let other = tempfile::tempdir().unwrap();
    let global_path = write_spec(&other, &global);
    let args = ["read", "--spec", &global_path, "--container", "team", "--shared-name", "global", "--output", "jsonl"];
    let lines = jsonl(&readerctl(&replica.addr, &args).stdout);
    assert_eq!(lines.last().unwrap()["error"]["code"], "INVALID_ARGUMENT", "{lines:?}");
}

#[test]
fn three_replicas_and_four_consumers_deliver_every_record_once_per_epoch() {
    let Some(db) = Database::new() else { return };
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &spec());
    let replicas: Vec<_> = (0..3).map(|_| replica(&db, data.path())).collect();
    let addrs: Vec<String> = replicas.iter().map(|(replica, _)| replica.addr.clone()).collect();
    let read: Vec<Vec<String>> = std::thread::scope(|scope| {
        let consumers: Vec<_> = (0..4)
            .map(|i| {
                let (addr, spec_path) = (&addrs[i % 3], &spec_path);
                scope.spawn(move || read_shared(addr, spec_path))
            })
            .collect();
        consumers.into_iter().map(|consumer| consumer.join().unwrap()).collect()
    });
    let mut all: Vec<&String> = read.iter().flatten().collect();
    all.sort();
    let mut expected: Vec<String> = (0..8).flat_map(|f| (1..=150).map(move |l| format!("part-{f}.txt:{l}"))).collect();
    expected.extend(expected.clone());
    expected.sort();
    assert_eq!(all.len(), expected.len(), "every record exactly twice over the two epochs");
    assert_eq!(all, expected.iter().collect::<Vec<_>>());
    // How the work spread depends on timing (a replica leases a file when it wants one):
    // shown, not asserted.
    let served: Vec<usize> = read.iter().map(Vec::len).collect();
    println!("records printed per consumer: {served:?}");

    // The job is done: a new read of that name ends at once, until it is deleted (on any
    // replica); then it starts afresh.
    assert!(read_shared(&addrs[1], &spec_path).is_empty());
    let delete = readerctl(&addrs[2], &["delete", "--container", "team", "--shared-name", "train"]);
    assert!(delete.status.success(), "{}", String::from_utf8_lossy(&delete.stderr));
    let again = read_shared(&addrs[0], &spec_path);
    assert_eq!(again.len(), expected.len(), "a fresh job after the delete");
}
