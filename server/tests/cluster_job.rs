//! Replicas' pipelines reading one job through the split ledger, against a real
//! PostgreSQL (`READERD_TEST_POSTGRES_URL`; `.ci/run` sets it), each test in a schema of
//! its own. Each replica here is a pipeline fed by its own `JobFeed` over its own ledger
//! connection, with its own committing and renewing thread; a replica dies by being
//! dropped mid-epoch without giving its leases up. The served path (streams, consumers,
//! clients) is tested end to end with real processes in `tests/`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Schema;
use readerd_server::cluster::{Cluster, JobKey, LeaseTimes, Ledger};
use readerd_server::format::FormatConfig;
use readerd_server::format::tfrecord::write_record;
use readerd_server::pipeline::shuffle::ShuffleConfig;
use readerd_server::pipeline::{Next, PipelineConfig, PipelineEnv, RecordPipeline};
use readerd_server::source::{DataFile, DataRoots, SourceConfig};

/// `counts[i]` records `<i>/<j>` in file `f<i>.rec`.
fn files(dir: &std::path::Path, counts: &[usize]) -> Arc<[DataFile]> {
    let roots = DataRoots::new(&[dir.to_path_buf()]).unwrap();
    let mut files = Vec::new();
    for (i, &n) in counts.iter().enumerate() {
        let mut bytes = Vec::new();
        for j in 0..n {
            write_record(&mut bytes, format!("{i}/{j}").as_bytes());
        }
        std::fs::write(dir.join(format!("f{i}.rec")), bytes).unwrap();
        files.extend(roots.resolve(&format!("f{i}.rec")).unwrap());
    }
    files.into()
}

fn source() -> Arc<SourceConfig> {
    Arc::new(SourceConfig { format: FormatConfig::TfRecord.into(), compression: None, max_record_bytes: 1 << 20 })
}

fn config() -> PipelineConfig {
    PipelineConfig {
        seed: 11,
        shuffle_files: true,
        cycle_length: 2,
        shuffle: Some(ShuffleConfig { capacity: 8, min_after_dequeue: 7 }),
        num_epochs: Some(2),
        ..PipelineConfig::default()
    }
}

/// How a replica behaves: acknowledges everything, or dies after `received` records,
/// having acknowledged (and committed) the first `acknowledged`.
#[derive(Clone, Copy)]
enum Fate {
    Lives,
    Dies { acknowledged: usize, received: usize },
}

/// What one replica produced: `(epoch, record)` acknowledged, and received but never
/// acknowledged.
#[derive(Default)]
struct Produced {
    acknowledged: Vec<(u64, String)>,
    unacknowledged: Vec<(u64, String)>,
}

fn run_replica(schema: &Schema, id: &str, files: &Arc<[DataFile]>, times: LeaseTimes, fate: Fate) -> Produced {
    let ledger = Ledger::open(&schema.url, Some(&schema.name), id, id, times).unwrap();
    let cluster = Cluster::start(ledger, times.ttl / 3);
    let n = files.len();
    let order = Box::new(move |epoch| RecordPipeline::epoch_order(n, &config(), epoch));
    let feed = cluster.job_feed(JobKey::job("team", "train", "default"), "fingerprint", &[], order).unwrap();
    let mut pipeline = RecordPipeline::new(files.clone(), source(), config(), PipelineEnv::default());
    pipeline.read_from(feed.clone());
    let mut produced = Produced::default();
    loop {
        match pipeline.next_step().unwrap() {
            Next::Item(record) => {
                let entry = (record.epoch, String::from_utf8(record.value.as_bytes().unwrap().to_vec()).unwrap());
                let received = produced.acknowledged.len() + produced.unacknowledged.len() + 1;
                match fate {
                    Fate::Dies { received: last, .. } if received > last => return produced,
                    Fate::Dies { acknowledged, .. } if received > acknowledged => {
                        produced.unacknowledged.push(entry);
                        if received == acknowledged + 1 {
                            cluster.tick(false);
                        }
                    }
                    _ => {
                        feed.acknowledge([&record.id()]);
                        produced.acknowledged.push(entry);
                    }
                }
            }
            Next::EndOfEpoch => {}
            Next::End => {
                cluster.tick(false);
                if feed.finished(2).unwrap() {
                    return produced;
                }
                std::thread::sleep(Duration::from_millis(50));
                pipeline.look_again();
            }
        }
    }
}

/// Every record of every epoch, in order of epoch then name.
fn every_record(counts: &[usize]) -> Vec<(u64, String)> {
    let mut all: Vec<(u64, String)> = (1..=2)
        .flat_map(|e| counts.iter().enumerate().flat_map(move |(i, &n)| (0..n).map(move |j| (e, format!("{i}/{j}")))))
        .collect();
    all.sort();
    all
}

#[test]
fn one_replica_reads_the_job_exactly_as_a_single_server_reads_the_spec() {
    let Some(schema) = Schema::new("readerd_cluster") else { return };
    let dir = tempfile::tempdir().unwrap();
    let files = files(dir.path(), &[5, 9, 3, 7, 6]);
    let mut single = RecordPipeline::new(files.clone(), source(), config(), PipelineEnv::default());
    let mut expected = Vec::new();
    loop {
        match single.next_step().unwrap() {
            Next::Item(record) => {
                expected.push((record.epoch, String::from_utf8(record.value.as_bytes().unwrap().to_vec()).unwrap()))
            }
            Next::EndOfEpoch => {}
            Next::End => break,
        }
    }
    let produced = run_replica(&schema, "only", &files, LeaseTimes::default(), Fate::Lives);
    assert_eq!(produced.acknowledged, expected);
}

#[test]
fn a_dead_replicas_splits_are_taken_over_and_every_record_of_every_epoch_is_acknowledged_once() {
    let Some(schema) = Schema::new("readerd_cluster") else { return };
    let dir = tempfile::tempdir().unwrap();
    let counts = [40, 25, 60, 33, 47, 52, 18, 41];
    let files = files(dir.path(), &counts);
    let times = LeaseTimes { ttl: Duration::from_millis(900), grace: Duration::from_secs(30) };
    // The first replica reads alone, acknowledges 30 records, receives 40 more and dies
    // holding its leases; the two others then read the job to its end, taking its splits
    // over once its leases expired.
    let dead = run_replica(&schema, "replica-0", &files, times, Fate::Dies { acknowledged: 30, received: 70 });
    let living: Vec<Produced> = std::thread::scope(|scope| {
        let replicas: Vec<_> = (1..3)
            .map(|i| {
                let (schema, files) = (&schema, &files);
                scope.spawn(move || run_replica(schema, &format!("replica-{i}"), files, times, Fate::Lives))
            })
            .collect();
        replicas.into_iter().map(|replica| replica.join().unwrap()).collect()
    });
    let produced: Vec<&Produced> = std::iter::once(&dead).chain(&living).collect();
    let mut acknowledged: Vec<(u64, String)> = produced.iter().flat_map(|p| p.acknowledged.clone()).collect();
    acknowledged.sort();
    assert_eq!(acknowledged.len(), every_record(&counts).len(), "no record acknowledged twice or lost");
    assert_eq!(acknowledged, every_record(&counts));
    assert_eq!((dead.acknowledged.len(), dead.unacknowledged.len()), (30, 40), "the dead replica's share");
    for record in &dead.unacknowledged {
        assert!(acknowledged.contains(record), "{record:?}, received unacknowledged, went to another replica");
    }
    let shares: Vec<usize> = living.iter().map(|p| p.acknowledged.len()).collect();
    println!("records acknowledged through the living replicas: {shares:?}");
}
