//! `skip` and `take` on replicas: each record's fate claimed from the job's ledger, with
//! no lock of the reader held.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock, Weak};

use super::*;
use crate::pipeline::PipelineEnv;
use crate::reader::{Reader, ReaderSettings};
use crate::source::DataRoots;

/// One replica's ledger job: each epoch's first `skip` records claimed are skipped, the
/// next `take` taken, the rest dropped, in the order claimed. It notes, at each claim,
/// whether its reader's lock was free.
#[derive(Default)]
struct CountingLedger {
    reader: OnceLock<Weak<Reader>>,
    claimed_by_epoch: Mutex<BTreeMap<u64, u64>>,
    lock_free_at_claims: Mutex<Vec<bool>>,
    claim_sizes: Mutex<Vec<usize>>,
    /// Its claims panic (a bug).
    panics: std::sync::atomic::AtomicBool,
}

impl RecordLedger for CountingLedger {
    fn record_unbatched(&self, _: &RecordId, _: u64) -> Vec<u64> {
        Vec::new()
    }

    fn record_settled(&self, _: &RecordId) {}

    fn claim_selected(&self, limits: SelectionLimits, records: &[RecordId]) -> Result<Vec<Fate>, SourceError> {
        assert!(!self.panics.load(std::sync::atomic::Ordering::Relaxed), "a claim panics");
        let reader = self.reader.get().and_then(Weak::upgrade).expect("the reader");
        self.lock_free_at_claims.lock().unwrap().push(reader.state.try_lock().is_ok());
        self.claim_sizes.lock().unwrap().push(records.len());
        let mut claimed = self.claimed_by_epoch.lock().unwrap();
        let fates = records.iter().map(|record| {
            let n = claimed.entry(record.epoch).or_default();
            *n += 1;
            match *n {
                n if n <= limits.skip => Fate::Skipped,
                n if limits.take.is_some_and(|take| n > limits.skip + take) => Fate::Dropped,
                _ => Fate::Taken,
            }
        });
        Ok(fates.collect())
    }
}

/// A reader of `files` text files of `lines` lines each (in a folder it returns), with
/// `pipeline`, its records answering to a [`CountingLedger`] as on a replica.
fn reader_claiming_from(
    files: usize,
    lines: usize,
    pipeline: serde_json::Value,
) -> (tempfile::TempDir, Arc<Reader>, Arc<CountingLedger>) {
    let dir = tempfile::tempdir().unwrap();
    for f in 0..files {
        let text: String = (0..lines).map(|l| format!("{f}-{l}\n")).collect();
        std::fs::write(dir.path().join(format!("part-{f}.txt")), text).unwrap();
    }
    let spec = serde_json::json!({"source": {"files": ["part-*.txt"], "format": "TEXT_LINE"}, "pipeline": pipeline});
    let spec = ReaderSpec::from_proto(serde_json::from_value(spec).unwrap(), 1 << 20).unwrap();
    let roots = DataRoots::new(&[dir.path().to_path_buf()]).unwrap();
    let settings = ReaderSettings::new(1, PipelineEnv::default()).unwrap();
    let reader = Arc::new(Reader::open("claims".into(), spec, &roots, &settings).unwrap());
    let ledger = Arc::new(CountingLedger::default());
    ledger.reader.set(Arc::downgrade(&reader)).unwrap();
    reader.lock().ledger = Some(InLedger::new(ledger.clone(), 0));
    (dir, reader, ledger)
}

#[test]
fn a_reader_claims_its_records_fates_with_its_lock_free_and_takes_what_each_epoch_takes() {
    let pipeline = serde_json::json!({"seed": 3, "shuffleFiles": true, "numEpochs": 2, "batchSize": 4,
                                      "select": {"skip": 30, "take": 150}});
    let (_dir, reader, ledger) = reader_claiming_from(3, 100, pipeline);
    let mut lines = 0;
    loop {
        let chunk = reader.next_chunk(8, 1 << 20);
        assert!(chunk.error.is_none(), "{:?}", chunk.error);
        lines += chunk.elements.iter().map(|element| element.keys.len()).sum::<usize>();
        if chunk.end_of_sequence {
            break;
        }
    }
    assert_eq!(lines, 2 * 150, "each epoch takes 150 of its 300 lines, after skipping 30");
    let claims = ledger.lock_free_at_claims.lock().unwrap();
    assert!(claims.len() >= 2, "{claims:?}");
    assert!(claims.iter().all(|free| *free), "a claim was made under the reader's lock: {claims:?}");
}

/// Two streams of one reader at once: a claim made ahead by one may be handed out by the
/// other, which waits for it; each epoch still takes exactly its 150 lines, none twice.
#[test]
fn streams_reading_at_once_take_each_record_once_when_claims_are_made_ahead() {
    let pipeline = serde_json::json!({"seed": 5, "shuffleFiles": true, "numEpochs": 3, "batchSize": 3,
                                      "select": {"skip": 100, "take": 1500}});
    let (_dir, reader, ledger) = reader_claiming_from(4, 500, pipeline);
    let read = || {
        let mut keys = Vec::new();
        loop {
            let chunk = reader.next_chunk(5, 1 << 20);
            assert!(chunk.error.is_none(), "{:?}", chunk.error);
            for element in &chunk.elements {
                keys.extend(element.keys.to_strings());
            }
            if chunk.end_of_sequence {
                return keys;
            }
        }
    };
    let (mut a, b) = std::thread::scope(|scope| {
        let other = scope.spawn(read);
        (read(), other.join().unwrap())
    });
    assert!(!a.is_empty() && !b.is_empty(), "both streams read: {} and {}", a.len(), b.len());
    a.extend(b);
    assert_eq!(a.len(), 3 * 1500, "each epoch takes 1,500 of its 2,000 lines, after skipping 100");
    let mut counts = BTreeMap::new();
    for key in &a {
        *counts.entry(key.as_str()).or_insert(0) += 1;
    }
    assert!(counts.values().all(|&n| n <= 3), "a line more than once an epoch");
    // A stream whose chunk needs more than what was claimed ahead (the other stream took
    // it) claims the rest under the lock.
    let claims = ledger.lock_free_at_claims.lock().unwrap();
    eprintln!("{} claims, {} with the reader's lock free", claims.len(), claims.iter().filter(|free| **free).count());
}

/// Records pulled ahead for a claim stay within what the chunk may take by its byte
/// budget (the batch in which 80 bytes of 3- and 4-byte lines are reached, whole: under
/// 30 lines, not 8 batches of 4 nor a group of 64), and cover it: no claim is made under
/// the lock.
#[test]
fn a_claim_made_ahead_pulls_what_the_chunks_byte_budget_takes() {
    let pipeline = serde_json::json!({"seed": 3, "numEpochs": 1, "batchSize": 4, "select": {"take": 100}});
    let (_dir, reader, ledger) = reader_claiming_from(2, 100, pipeline);
    let mut lines = 0;
    loop {
        let chunk = reader.next_chunk(8, 80);
        assert!(chunk.error.is_none(), "{:?}", chunk.error);
        lines += chunk.elements.iter().map(|element| element.keys.len()).sum::<usize>();
        if chunk.end_of_sequence {
            break;
        }
    }
    assert_eq!(lines, 100);
    let (sizes, free) = (ledger.claim_sizes.lock().unwrap(), ledger.lock_free_at_claims.lock().unwrap());
    assert!(sizes.iter().all(|&n| n < 30), "{sizes:?}");
    assert!(free.iter().all(|free| *free), "{free:?}");
}

/// A claim made ahead that panics fails the reader (`INTERNAL`, naming it) for every
/// stream, as any failure of its own: none waits for its records for ever.
#[test]
fn a_claim_made_ahead_that_panics_fails_the_reader() {
    let pipeline = serde_json::json!({"numEpochs": 1, "batchSize": 4, "select": {"take": 10}});
    let (_dir, reader, ledger) = reader_claiming_from(1, 20, pipeline);
    ledger.panics.store(true, std::sync::atomic::Ordering::Relaxed);
    for _ in 0..2 {
        let chunk = reader.next_chunk(8, 1 << 20);
        let err = chunk.error.expect("the reader failed");
        assert!(err.to_string().contains("panicked: a claim panics"), "{err}");
    }
}
