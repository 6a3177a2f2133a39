//! One conformance suite for every state store, run against a real SQLite file and the
//! real PostgreSQL (`READERD_TEST_POSTGRES_URL`; `.ci/run` sets it, so CI never skips).

use readerd_server::state::postgres::PostgresStore;
use readerd_server::state::sqlite::SqliteStore;
use readerd_server::state::{StateStore, StoredCheckpoint};

fn checkpoint(reader: &str, state: &[u8]) -> StoredCheckpoint {
    StoredCheckpoint {
        container: "jobs".into(),
        reader: reader.into(),
        fingerprint: "f00d".into(),
        state: state.to_vec(),
        created_unix_ms: 1_700_000_000_000,
    }
}

/// What every store must do.
fn conformance(store: &dyn StateStore) {
    let a1 = store.put_checkpoint(&checkpoint("a", b"first")).unwrap();
    let a2 = store.put_checkpoint(&checkpoint("a", &[0, 255, 7])).unwrap();
    let b1 = store.put_checkpoint(&checkpoint("b", b"other")).unwrap();
    assert!(a1 < a2 && a2 < b1, "ids only grow");
    assert_eq!(store.get_checkpoint(a2).unwrap(), Some(checkpoint("a", &[0, 255, 7])));
    assert_eq!(store.get_checkpoint(b1 + 1000).unwrap(), None);

    assert_eq!(store.prune("jobs", "a", 1).unwrap(), 1, "keeps the newest");
    assert_eq!(store.get_checkpoint(a1).unwrap(), None);
    assert!(store.get_checkpoint(a2).unwrap().is_some());
    assert!(store.get_checkpoint(b1).unwrap().is_some(), "other readers untouched");

    let secret = store.secret("token", &|| vec![1; 32]).unwrap();
    assert_eq!(secret, vec![1; 32]);
    assert_eq!(store.secret("token", &|| vec![2; 32]).unwrap(), secret, "created once");

    assert_eq!(store.get_index("f1").unwrap(), None);
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    store.put_index("f1", &big).unwrap();
    store.put_index("f2", b"other").unwrap();
    assert_eq!(store.get_index("f1").unwrap().as_deref(), Some(&big[..]), "a multi-megabyte index, whole");
    store.put_index("f1", b"rebuilt").unwrap();
    assert_eq!(store.get_index("f1").unwrap().as_deref(), Some(&b"rebuilt"[..]), "replaced");
    assert_eq!(store.get_index("f2").unwrap().as_deref(), Some(&b"other"[..]));
}

#[test]
fn sqlite_store_conforms_and_keeps_commits_across_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state/readerd.db");
    let id = {
        let store = SqliteStore::open(&path).unwrap();
        conformance(&store);
        store.put_checkpoint(&checkpoint("kept", b"after restart")).unwrap()
    };
    let reopened = SqliteStore::open(&path).unwrap();
    assert_eq!(reopened.get_checkpoint(id).unwrap(), Some(checkpoint("kept", b"after restart")));
}

#[test]
fn postgres_store_conforms_and_keeps_commits_across_connections() {
    let Ok(url) = std::env::var("READERD_TEST_POSTGRES_URL") else {
        eprintln!("READERD_TEST_POSTGRES_URL is not set: the PostgreSQL store is not tested here (.ci/run sets it)");
        return;
    };
    let schema = format!(
        "readerd_test_{}_{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    );
    let id = {
        let store = PostgresStore::open(&url, Some(&schema)).unwrap();
        conformance(&store);
        store.put_checkpoint(&checkpoint("kept", b"after restart")).unwrap()
    };
    // A second replica: migrations are already applied, the commit is there.
    let replica = PostgresStore::open(&url, Some(&schema)).unwrap();
    assert_eq!(replica.get_checkpoint(id).unwrap(), Some(checkpoint("kept", b"after restart")));
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")).unwrap();
}

#[test]
fn postgres_store_connects_again_after_its_session_is_ended() {
    let Ok(url) = std::env::var("READERD_TEST_POSTGRES_URL") else {
        eprintln!("READERD_TEST_POSTGRES_URL is not set: the PostgreSQL store is not tested here (.ci/run sets it)");
        return;
    };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let (schema, name) = (format!("readerd_reconnect_{}_{nanos}", std::process::id()), format!("reconnect-{nanos}"));
    let store = PostgresStore::open(&format!("{url}?application_name={name}"), Some(&schema)).unwrap();
    let before = store.put_checkpoint(&checkpoint("kept", b"before")).unwrap();
    // What a PostgreSQL restart does to every session (and `pg_ctl stop -m fast`).
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let ended: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) AS t",
            &[&name],
        )
        .unwrap()
        .get(0);
    assert_eq!(ended, 1, "the store's session was ended");
    assert_eq!(store.get_checkpoint(before).unwrap(), Some(checkpoint("kept", b"before")), "connected again");
    let after = store.put_checkpoint(&checkpoint("kept", b"after")).unwrap();
    assert!(after > before);
    admin.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")).unwrap();
}
