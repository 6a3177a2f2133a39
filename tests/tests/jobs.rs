//! Jobs on one shared reader (DESIGN.md, "Jobs on one shared reader"): every job, the
//! job `default` (the shared reader itself) among them, gets every element exactly once
//! per epoch, in the reader's order, while the server decodes each element once for all
//! of them; a job that falls behind the shared window reads on
//! its own and is counted; each job's token resumes that job, also after `kill -9`.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use readerd_client::v1 as pb;
use readerd_tests::{ServerProcess, binary, jsonl, write_spec, write_tfrecord};
use serde_json::{Value, json};

const FILES: usize = 4;
const RECORDS_PER_FILE: usize = 500;
const EPOCHS: usize = 2;
const PER_EPOCH: usize = FILES * RECORDS_PER_FILE;

/// Four files of 500 records of about 100 bytes, and a spec reading them twice with its
/// files shuffled (no decoder: each element is one record).
fn dataset() -> (tempfile::TempDir, String) {
    let data = tempfile::tempdir().unwrap();
    for file in 0..FILES {
        let records: Vec<Vec<u8>> =
            (0..RECORDS_PER_FILE).map(|n| format!("record {file}-{n} {}", "x".repeat(90)).into_bytes()).collect();
        write_tfrecord(&data.path().join(format!("part-{file}.tfrecord")), &records);
    }
    let spec = json!({
        "source": {"files": ["part-*.tfrecord"], "format": "TFRECORD"},
        "pipeline": {"numEpochs": EPOCHS, "shuffleFiles": true, "seed": 11}
    });
    let spec = write_spec(&data, &spec);
    (data, spec)
}

/// `readerctl read` of job `job` of shared reader `shared` in the background, its
/// JSONL output kept.
fn read_job(addr: &str, spec: &str, job: &str, args: &[&str]) -> Child {
    read_job_command(addr, spec, job, args).stdout(Stdio::piped()).spawn().expect("run readerctl")
}

fn read_job_command(addr: &str, spec: &str, job: &str, args: &[&str]) -> Command {
    let mut command = Command::new(binary("readerctl"));
    command
        .args(["--addr", addr, "-q", "read", "--spec", spec, "--shared-name", "sweep", "--job", job])
        .args(["--output", "jsonl"])
        .args(args)
        .stderr(Stdio::inherit());
    command
}

/// The keys of the elements printed, in order.
fn keys(lines: &[Value]) -> Vec<String> {
    lines.iter().filter_map(|line| line["keys"].as_array()).map(|keys| keys[0].as_str().unwrap().to_owned()).collect()
}

/// The lines a private stream of `spec` prints: the reader's order, which every job must get.
fn private_lines(addr: &str, spec: &str) -> Vec<Value> {
    let output = Command::new(binary("readerctl"))
        .args(["--addr", addr, "-q", "read", "--spec", spec, "--output", "jsonl"])
        .output()
        .unwrap();
    assert!(output.status.success());
    jsonl(&output.stdout)
}

/// The keys a private stream of `spec` reads.
fn private_order(addr: &str, spec: &str) -> Vec<String> {
    keys(&private_lines(addr, spec))
}

fn assert_every_record_once_per_epoch(job: &str, keys: &[String]) {
    assert_eq!(keys.len(), EPOCHS * PER_EPOCH, "job {job}: elements");
    for (epoch, keys) in keys.chunks(PER_EPOCH).enumerate() {
        let mut seen = HashMap::new();
        for key in keys {
            *seen.entry(key).or_insert(0) += 1;
        }
        assert_eq!(seen.len(), PER_EPOCH, "job {job}, epoch {epoch}: every record");
        assert!(seen.values().all(|&n| n == 1), "job {job}, epoch {epoch}: each record once");
    }
}

async fn stats(server: &ServerProcess) -> pb::ReaderStats {
    try_stats(server).await.unwrap()
}

/// The stats of the shared reader `sweep` (NOT_FOUND before its first stream).
async fn try_stats(server: &ServerProcess) -> Result<pb::ReaderStats, tonic::Status> {
    let mut client = server.client().await;
    let reader = Some(pb::ReaderRef { container: String::new(), shared_name: "sweep".into() });
    Ok(client.service().get_reader_stats(pb::GetReaderStatsRequest { reader }).await?.into_inner())
}

#[tokio::test]
async fn four_jobs_each_get_every_element_decoded_once_and_a_slow_one_falls_back_without_skipping() {
    let (data, spec) = dataset();
    // A window of about 750 elements: the slow job falls behind it.
    let metrics_addr = readerd_tests::free_address();
    let args = ["--job-window-bytes", "100000", "--metrics-listen", &metrics_addr];
    let server = ServerProcess::start_with(&[data.path()], &args);
    let addr = server.addr.clone();
    let reference = private_order(&addr, &spec);
    assert_every_record_once_per_epoch("private", &reference);

    let fast: Vec<(&str, Child)> =
        ["default", "b", "c"].into_iter().map(|job| (job, read_job(&addr, &spec, job, &[]))).collect();
    // The slow job comes once the others are 1500 elements in (its HTTP/2 window would
    // otherwise let the server send it everything at their pace), and steps 1 ms.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while try_stats(&server).await.map_or(0, |s| s.jobs.iter().filter(|job| job.position >= 1500).count()) < 3 {
        assert!(std::time::Instant::now() < deadline, "the fast jobs did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let slow = read_job(&addr, &spec, "slow", &["--step-ms", "1"]);
    for (job, child) in fast.into_iter().chain([("slow", slow)]) {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "job {job}: {}", String::from_utf8_lossy(&output.stdout));
        let keys = keys(&jsonl(&output.stdout));
        assert_every_record_once_per_epoch(job, &keys);
        assert!(keys == reference, "job {job} got the elements in another order than the reader's");
    }

    let stats = stats(&server).await;
    eprintln!("decoded {} for 4 jobs; {:?}", stats.elements_decoded, stats.jobs);
    let jobs: HashMap<&str, &pb::JobStats> = stats.jobs.iter().map(|job| (job.name.as_str(), job)).collect();
    assert_eq!(jobs.len(), 4, "{stats:?}");
    let all = (EPOCHS * PER_EPOCH) as i64;
    for job in jobs.values() {
        assert_eq!(job.position, all, "{job:?}");
        assert_eq!(
            job.elements_shared + job.elements_decoded,
            all,
            "every element from the window or its own: {job:?}"
        );
    }
    // Decoded once for the jobs that kept up, again only for what the slow one read alone.
    assert!(jobs["slow"].detachments >= 1, "the slow job fell behind the window: {stats:?}");
    assert!(stats.elements_decoded < 3 * all, "decoded {} for 4 jobs of {all}: {stats:?}", stats.elements_decoded);
    let shared: i64 = jobs.values().map(|job| job.elements_shared).sum();
    assert!(shared > 2 * all, "the jobs took {shared} elements from the window: {stats:?}");
    let metrics = readerd_tests::scrape_metrics(&metrics_addr);
    let counter = |name: &str| -> i64 {
        let line = metrics.lines().find(|line| line.starts_with(name)).unwrap_or_else(|| panic!("{name}: {metrics}"));
        line.split_whitespace().last().unwrap().parse().unwrap()
    };
    assert!(counter("readerd_job_detachments_total ") >= jobs["slow"].detachments, "{metrics}");
    assert_eq!(counter("readerd_job_window_shared_elements_total "), shared, "{metrics}");
    // The status page's data shows each job and the slow one's fallbacks.
    let (code, body) = readerd_tests::http_get(&metrics_addr, "/status.json", &[]);
    assert_eq!(code, 200, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    let readers = status["readers"].as_array().unwrap();
    let slow = readers.iter().find(|reader| reader["job"] == "slow").unwrap_or_else(|| panic!("{status}"));
    assert_eq!(slow["sharedName"], "sweep");
    assert_eq!(slow["window"]["detachments"].as_i64(), Some(jobs["slow"].detachments), "{slow}");
    assert_eq!(readers.iter().filter(|reader| reader["window"].is_object()).count(), 4, "{status}");
}

/// The last checkpoint a read printed: its token and the seq it covers, with the keys
/// printed up to it.
fn last_checkpoint(lines: &[Value]) -> Option<(String, i64, Vec<String>)> {
    let at = lines.iter().rposition(|line| line.get("checkpoint").is_some())?;
    let after_seq = lines[at]["after_seq"].as_i64().unwrap();
    let printed: Vec<String> = keys(&lines[..at]).into_iter().take((after_seq + 1) as usize).collect();
    assert_eq!(printed.len() as i64, after_seq + 1, "every element up to the checkpoint was printed");
    Some((lines[at]["checkpoint"].as_str().unwrap().to_owned(), after_seq, printed))
}

#[tokio::test]
async fn each_job_resumes_exactly_from_its_own_token_after_kill_9() {
    let (data, spec) = dataset();
    let state = tempfile::tempdir().unwrap();
    let server = ServerProcess::start_in(state.path(), &[data.path()], &["--job-window-bytes", "20000"]);
    let addr = server.addr.clone();
    let reference = private_order(&addr, &spec);

    // Three jobs at different speeds, checkpointing every 100 elements, cut by kill -9
    // once the slowest printed 300 elements (each prints to a file, watched here).
    let out = tempfile::tempdir().unwrap();
    let steps = [("default", "1"), ("b", "2"), ("c", "4")];
    let readers: Vec<(&str, Child)> = steps
        .iter()
        .map(|(job, step)| {
            let file = std::fs::File::create(out.path().join(job)).unwrap();
            let args = ["--step-ms", step, "--checkpoint-every", "100"];
            let mut command = read_job_command(&addr, &spec, job, &args);
            (*job, command.stdout(file).spawn().unwrap())
        })
        .collect();
    let printed = |job: &str| std::fs::read_to_string(out.path().join(job)).unwrap_or_default().lines().count();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while printed("c") < 300 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    server.kill();
    let cut: Vec<(&str, Vec<Value>)> = readers
        .into_iter()
        .map(|(job, mut child)| {
            child.wait().unwrap();
            (job, jsonl(std::fs::read(out.path().join(job)).unwrap().as_slice()))
        })
        .collect();

    let server = ServerProcess::start_in(state.path(), &[data.path()], &["--job-window-bytes", "20000"]);
    let addr = server.addr.clone();
    let mut resumed = Vec::new();
    for (job, lines) in &cut {
        let checkpoints = lines.iter().filter(|line| line.get("checkpoint").is_some()).count();
        eprintln!("job {job}: {} lines, {checkpoints} checkpoints, last {:?}", lines.len(), lines.last());
        let (args, printed) = match last_checkpoint(lines) {
            Some((token, _, printed)) => (vec!["--resume".to_owned(), token], printed),
            None => (Vec::new(), Vec::new()),
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        resumed.push((*job, printed, read_job(&addr, &spec, job, &args)));
    }
    let mut tokens = Vec::new();
    for (job, printed, child) in resumed {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "job {job}: {}", String::from_utf8_lossy(&output.stdout));
        eprintln!("job {job}: {} elements printed up to its last checkpoint before the kill", printed.len());
        let mut all = printed.clone();
        all.extend(keys(&jsonl(&output.stdout)));
        assert!(all == reference, "job {job}: {} printed before the kill, {} in all", printed.len(), all.len());
        tokens.extend(last_checkpoint(&cut.iter().find(|(j, _)| *j == job).unwrap().1).map(|(t, ..)| (job, t)));
    }

    // A job's token resumes that job only.
    let (job, token) = tokens.first().expect("a job checkpointed before the kill");
    let other = if *job == "b" { "c" } else { "b" };
    let output = read_job(&addr, &spec, other, &["--resume", token]).wait_with_output().unwrap();
    let lines = jsonl(&output.stdout);
    let error = &lines.last().unwrap()["error"];
    assert_eq!(error["code"], "FAILED_PRECONDITION", "{lines:?}");
    assert!(error["message"].as_str().unwrap().contains(&format!("resumes job \"{job}\"")), "{error}");
}

/// On replicas each job is a shared reader of its own in the split ledger, and the jobs
/// take their elements from one window per replica, decoded once for all of them: two
/// replicas, three jobs of one consumer each reading through both, one replica killed
/// mid-epoch. Each job gets every record once per epoch; the surviving replica decoded
/// far fewer elements than three jobs' worth.
#[test]
fn on_replicas_each_job_gets_every_record_once_per_epoch_across_a_replica_kill() {
    let (data, dir, spec) = lines_in_batches();
    assert_every_job_took_from_the_window(three_jobs_through_a_replica_kill(
        data,
        dir,
        spec,
        readerd_tests::shared_reads::assert_every_key_twice,
    ));
}

/// As `on_replicas_each_job_gets_every_record_once_per_epoch_across_a_replica_kill`, each
/// line unbatched (decoded raw, its bytes its examples, batched by 32 again): the window
/// counts each record's examples in every seated job's ledger job, and a record's examples
/// may go out in two chunks (and be acknowledged in part when the replica dies).
#[test]
fn on_replicas_jobs_of_an_unbatched_spec_share_a_window_and_get_every_example_once_across_a_replica_kill() {
    let (data, dir, _) = lines_in_batches();
    let spec = json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "decoder": {"raw": {"outType": "UINT8"}},
        "pipeline": {"seed": 3, "shuffleFiles": true, "numEpochs": 2, "unbatch": true, "batchSize": 32}
    });
    let spec = write_spec(&dir, &spec);
    assert_every_job_took_from_the_window(three_jobs_through_a_replica_kill(
        data,
        dir,
        spec,
        readerd_tests::shared_reads::assert_every_example_twice,
    ));
}

/// As `on_replicas_each_job_gets_every_record_once_per_epoch_across_a_replica_kill`,
/// skipping the first 500 records of each epoch and taking the next 2,000 (of 4,000): the
/// window claims each record's fate for the jobs seated at it in the same transaction as
/// for itself, so each job takes exactly 2,000 an epoch.
#[test]
fn on_replicas_jobs_skipping_and_taking_share_a_window_and_take_exactly_per_epoch_across_a_replica_kill() {
    let (data, dir, _) = lines_in_batches();
    let spec = json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 3, "shuffleFiles": true, "numEpochs": 2, "batchSize": 8,
                     "select": {"skip": 500, "take": 2000}}
    });
    let spec = write_spec(&dir, &spec);
    fn took_2000_an_epoch(keys: &[String], lines: usize) {
        readerd_tests::shared_reads::assert_taken_in_each_of_two_epochs(keys, 2000, lines);
    }
    let Some((decoded, shared, detachments)) = three_jobs_through_a_replica_kill(data, dir, spec, took_2000_an_epoch)
    else {
        return;
    };
    // A job seated after the window claimed fates gets the window's only where its own
    // claims of the window's records counted alike (the window's job counts other
    // replicas' claims between them): a job that comes late there reads alone. At least
    // a job's worth came from the window.
    assert!(shared >= decoded, "replica 0's jobs took {shared} elements of {decoded} decoded");
    assert!(detachments >= 3, "{detachments} detachments");
}

/// As `on_replicas_each_job_gets_every_record_once_per_epoch_across_a_replica_kill`, a
/// mixture of two components (four files each, two epochs each): the window's
/// components lease their splits for the seated jobs too, and a job that leaves the
/// window reads again each split it held through it in the component that reads it.
#[test]
fn on_replicas_jobs_of_a_mixture_share_a_window_and_get_every_record_once_across_a_replica_kill() {
    use readerd_tests::shared_reads::{assert_every_key_twice_in_its_component, mixture_of_two_halves};
    let (data, dir, _) = lines_in_batches();
    let spec = write_spec(&dir, &mixture_of_two_halves(8));
    assert_every_job_took_from_the_window(three_jobs_through_a_replica_kill(
        data,
        dir,
        spec,
        assert_every_key_twice_in_its_component,
    ));
}

/// As `on_replicas_each_job_gets_every_record_once_per_epoch_across_a_replica_kill`, with
/// the exact global shuffle: its splits are ranges of the epoch's permutation, and the
/// jobs share a window of them as of files.
#[test]
fn on_replicas_jobs_of_a_global_shuffle_share_a_window_and_get_every_record_once_across_a_replica_kill() {
    let (data, dir, _) = lines_in_batches();
    let spec = json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 3, "shuffle": {"global": true}, "numEpochs": 2, "batchSize": 8}
    });
    let spec = write_spec(&dir, &spec);
    assert_every_job_took_from_the_window(three_jobs_through_a_replica_kill(
        data,
        dir,
        spec,
        readerd_tests::shared_reads::assert_every_key_twice,
    ));
}

/// Three jobs of one consumer each, reading `spec` (`lines_in_batches`' records, twice)
/// through two replicas, one killed mid-epoch: each job gets every record once per epoch
/// (`assert_every_key`, given a job's sorted keys and the lines a file). Returns the
/// survivor's window counters (elements decoded, elements jobs took, fallbacks); `None`
/// without PostgreSQL.
fn three_jobs_through_a_replica_kill(
    data: tempfile::TempDir,
    dir: tempfile::TempDir,
    spec: String,
    assert_every_key: fn(&[String], usize),
) -> Option<(u64, u64, u64)> {
    use readerd_tests::shared_reads::{spawn_consumers, wait_for_consumers, wait_until_printed};
    let db = readerd_tests::postgres::Database::new()?;
    let url = db.url();
    let (mut replicas, metrics_addrs) = two_replicas(&url, data.path(), &[]);
    let addrs: Vec<String> = replicas.iter().map(|r| r.as_ref().unwrap().addr.clone()).collect();
    let all_addrs = addrs.join(",");
    let jobs = ["a", "b", "c"];
    let outputs: Vec<std::path::PathBuf> = jobs.iter().map(|job| dir.path().join(format!("{job}.jsonl"))).collect();
    let consumers: Vec<Child> = jobs
        .iter()
        .zip(&outputs)
        .flat_map(|(job, output)| {
            spawn_consumers(&all_addrs, &["--spec", &spec, "--job", job], std::slice::from_ref(output))
        })
        .collect();
    // A sixth of the 3 x 1,000 batches printed: replica 1 is killed.
    wait_until_printed(&outputs, 500);
    replicas[1].take().unwrap().kill();
    for (consumer, output) in consumers.into_iter().zip(&outputs) {
        let mut keys = wait_for_consumers(vec![consumer], std::slice::from_ref(output), true);
        keys.sort();
        assert_every_key(&keys, 500);
    }
    // Each job is its own in the ledger, keyed by its name, and so is their window's
    // reading (job '').
    let mut ledger = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let keys: Vec<(String, String)> = ledger
        .query("SELECT shared_name, job FROM readerd_jobs ORDER BY 1, 2", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let keys: Vec<(&str, &str)> = keys.iter().map(|(name, job)| (name.as_str(), job.as_str())).collect();
    assert_eq!(keys, [("train", ""), ("train", "a"), ("train", "b"), ("train", "c")]);
    let counters = window_counters(&metrics_addrs[0]);
    eprintln!("replica 0: window decoded {}, jobs took {} from it", counters.0, counters.1);
    Some(counters)
}

/// 3 jobs x 2 epochs in all: the survivor of `three_jobs_through_a_replica_kill` (its
/// window `counters`) decoded well under 3 jobs' worth of what it served, and each job
/// took elements from its window there.
fn assert_every_job_took_from_the_window(counters: Option<(u64, u64, u64)>) {
    let Some((decoded, shared, detachments)) = counters else { return };
    assert!(shared > 2 * decoded, "replica 0's jobs took {shared} elements of {decoded} decoded");
    // At the window's end each job read alone there: the splits replica 1 held for it.
    assert!(detachments >= 3, "{detachments} detachments");
}

/// A sweep after a finished one on the same shared name shares again: once the replicas
/// released the first sweep's idle readers and windows, the window's ledger job, read to
/// its end, starts again for the second.
#[test]
fn on_replicas_a_second_sweep_shares_a_window_again() {
    use readerd_tests::shared_reads::{assert_every_key_twice, spawn_consumers, wait_for_consumers};
    let Some(db) = readerd_tests::postgres::Database::new() else { return };
    let (data, dir, spec) = lines_in_batches();
    let (replicas, metrics_addrs) = two_replicas(&db.url(), data.path(), &["--idle-reader-timeout", "1s"]);
    let all_addrs = replicas.iter().map(|r| r.as_ref().unwrap().addr.clone()).collect::<Vec<_>>().join(",");
    let sweep = |jobs: [&str; 2]| {
        let outputs: Vec<std::path::PathBuf> = jobs.iter().map(|job| dir.path().join(format!("{job}.jsonl"))).collect();
        let consumers: Vec<(Child, &std::path::PathBuf)> = (jobs.iter().zip(&outputs))
            .map(|(job, output)| {
                let args = ["--spec", spec.as_str(), "--job", job];
                (spawn_consumers(&all_addrs, &args, std::slice::from_ref(output)).remove(0), output)
            })
            .collect();
        for (consumer, output) in consumers {
            let mut keys = wait_for_consumers(vec![consumer], std::slice::from_ref(output), true);
            keys.sort();
            assert_every_key_twice(&keys, 500);
        }
        windows_decoded_and_shared(&metrics_addrs)
    };
    let (decoded, shared) = sweep(["a", "b"]);
    assert!(shared > decoded, "the first sweep's jobs took {shared} elements of {decoded} decoded");
    // Idle readers (and so the windows) are released after 1 s; the window's ledger job
    // restarts once no replica reported on it for two lease times (4 s).
    std::thread::sleep(Duration::from_secs(8));
    let (decoded_after, shared_after) = sweep(["c", "d"]);
    let (decoded, shared) = (decoded_after - decoded, shared_after - shared);
    eprintln!("second sweep: decoded {decoded}, shared {shared}");
    assert!(decoded > 0 && shared > decoded, "the second sweep's jobs took {shared} elements of {decoded} decoded");
}

/// Jobs are a key of the split ledger and of the registry, not a naming convention: on
/// replicas a shared reader a caller names `train (job a)` is not job a of `train` (their
/// ledger rows were one when jobs were named so). Each reads every record once per epoch.
#[test]
fn on_replicas_a_shared_reader_named_like_a_job_is_a_reader_of_its_own() {
    use readerd_tests::shared_reads::{assert_every_key_twice, wait_for_consumers};
    let Some(db) = readerd_tests::postgres::Database::new() else { return };
    let (data, dir, spec) = lines_in_batches();
    let (replicas, _) = two_replicas(&db.url(), data.path(), &[]);
    let addrs = replicas.iter().map(|r| r.as_ref().unwrap().addr.clone()).collect::<Vec<_>>().join(",");
    let consume = |shared_name: &str, job: &str, output: &std::path::Path| {
        Command::new(binary("readerctl"))
            .args(["--addr", &addrs, "--quiet", "read", "--spec", &spec, "--container", "team"])
            .args(["--shared-name", shared_name, "--job", job, "--output", "jsonl"])
            .stdout(std::fs::File::create(output).unwrap())
            .stderr(std::fs::File::create(output.with_extension("err")).unwrap())
            .spawn()
            .unwrap()
    };
    let outputs = [dir.path().join("job-a.jsonl"), dir.path().join("named.jsonl")];
    let consumers = [consume("train", "a", &outputs[0]), consume("train (job a)", "default", &outputs[1])];
    for (consumer, output) in consumers.into_iter().zip(&outputs) {
        let mut keys = wait_for_consumers(vec![consumer], std::slice::from_ref(output), true);
        keys.sort();
        assert_every_key_twice(&keys, 500);
    }
    let mut ledger = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    let rows = ledger.query("SELECT shared_name, job FROM readerd_jobs ORDER BY 1, 2", &[]).unwrap();
    let keys: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let keys: Vec<(&str, &str)> = keys.iter().map(|(name, job)| (name.as_str(), job.as_str())).collect();
    assert_eq!(keys, [("train", ""), ("train", "a"), ("train (job a)", "default")]);
}

/// 8 files of 500 lines (`shared_reads::write_lines`), a directory for outputs, and a spec
/// reading them twice in batches of 8.
fn lines_in_batches() -> (tempfile::TempDir, tempfile::TempDir, String) {
    let data = tempfile::tempdir().unwrap();
    readerd_tests::shared_reads::write_lines(data.path(), 500);
    let dir = tempfile::tempdir().unwrap();
    let spec = json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 3, "shuffleFiles": true, "numEpochs": 2, "batchSize": 8}
    });
    let spec = write_spec(&dir, &spec);
    (data, dir, spec)
}

/// Two replicas on the ledger at `url` serving `data` (each with a metrics listener, its
/// address second), with `extra` arguments.
fn two_replicas(url: &str, data: &std::path::Path, extra: &[&str]) -> (Vec<Option<ServerProcess>>, Vec<String>) {
    let metrics_addrs = vec![readerd_tests::free_address(), readerd_tests::free_address()];
    let replicas = (metrics_addrs.iter())
        .map(|metrics| {
            let mut args = vec!["--state-url", url, "--lease-time", "2s", "--failover-grace", "30s"];
            args.extend(["--metrics-listen", metrics]);
            args.extend(extra);
            Some(ServerProcess::start_with(&[data], &args))
        })
        .collect();
    (replicas, metrics_addrs)
}

/// A replica's window counters (`/metrics` at `metrics_addr`): elements decoded, elements
/// jobs took, and fallbacks.
fn window_counters(metrics_addr: &str) -> (u64, u64, u64) {
    let metrics = readerd_tests::scrape_metrics(metrics_addr);
    let counter = |name: &str| -> u64 {
        let line = metrics.lines().find(|line| line.starts_with(name)).unwrap_or_else(|| panic!("{name}: {metrics}"));
        line.split_whitespace().last().unwrap().parse().unwrap()
    };
    (
        counter("readerd_job_window_decoded_elements_total "),
        counter("readerd_job_window_shared_elements_total "),
        counter("readerd_job_detachments_total "),
    )
}

/// On replicas, jobs that fall behind their window or come after it moved on read alone
/// through their own ledger jobs, with no loss and no repeat: a slow job and a late one
/// beside two fast ones (the job default among them), through two replicas with small
/// windows.
#[test]
fn on_replicas_a_slow_job_and_a_late_one_read_alone_and_every_job_gets_every_record_once_per_epoch() {
    // A job shares a window on replicas only if its stream first asks while the window
    // still holds its first element; with windows this small, the others' streams can
    // fill one past it first (a scheduling matter, not the job's). The slow job falls
    // behind a fast one only where the fast one shared the window all along: the run is
    // made again (at most twice) when neither fast job did. Every run checks every job
    // gets every record once per epoch.
    for attempt in 1..=3 {
        let Some((stats, (decoded, shared))) = slow_and_late_jobs_through_two_replicas() else { return };
        let figure = |job: &str, name: &str| -> u64 {
            let prefix = format!("job {job}:");
            let lines = stats.iter().flat_map(|text| text.lines()).filter(|line| line.starts_with(&prefix));
            let value = |line: &str| -> u64 {
                let rest = line.split_once(&format!(" {name} ")).unwrap_or_else(|| panic!("{name} in {line}")).1;
                rest.split_whitespace().next().unwrap().parse().unwrap()
            };
            lines.map(value).sum()
        };
        // A fast job that took every element from its windows (it reads alone only at
        // their end, so nothing).
        let shared_all = |job: &str| figure(job, "shared") > 0 && figure(job, "alone") == 0;
        if !shared_all("b") && !shared_all("default") && attempt < 3 {
            eprintln!("run {attempt}: no fast job shared its windows from their first element; again");
            continue;
        }
        assert!(shared > decoded, "the jobs took {shared} elements of the {decoded} their windows decoded");
        // The slow one took elements from its windows and fell behind (read alone) where
        // a fast one shared them all; the late one took nothing from windows that had
        // moved on.
        assert!(figure("slow", "shared") > 0 && figure("slow", "alone") > 0, "{stats:?}");
        assert_eq!(figure("late", "shared"), 0, "{stats:?}");
        assert!(figure("late", "alone") > 0, "{stats:?}");
        return;
    }
}

/// A run of [`on_replicas_a_slow_job_and_a_late_one_read_alone_and_every_job_gets_every_record_once_per_epoch`]
/// on two new replicas: jobs `default`, `b` and `slow` (a 10 ms step) read together, then
/// `late` once they are done, each every record once per epoch (asserted); `readerctl
/// stats` of each replica after, and the elements the windows decoded and the jobs took
/// from them. `None` without PostgreSQL.
fn slow_and_late_jobs_through_two_replicas() -> Option<(Vec<String>, (u64, u64))> {
    use readerd_tests::shared_reads::{assert_every_key_twice, spawn_consumers, wait_for_consumers};
    let db = readerd_tests::postgres::Database::new()?;
    let (data, dir, spec) = lines_in_batches();
    let (replicas, metrics_addrs) = two_replicas(&db.url(), data.path(), &["--job-window-bytes", "10000"]);
    let addrs: Vec<String> = replicas.iter().map(|r| r.as_ref().unwrap().addr.clone()).collect();
    let all_addrs = addrs.join(",");
    let output = |job: &str| dir.path().join(format!("{job}.jsonl"));
    let spawn = |job: &str, extra: &[&str]| {
        let mut args = vec!["--spec", spec.as_str(), "--job", job];
        args.extend(extra);
        spawn_consumers(&all_addrs, &args, &[output(job)]).remove(0)
    };
    // The three jobs' consumers connect while both replicas are paused, so that each
    // replica takes their reads together: on a loaded machine three processes may start
    // further apart than a small window takes to move past its first element.
    let paused: Vec<&ServerProcess> = replicas.iter().map(|replica| replica.as_ref().unwrap()).collect();
    paused.iter().for_each(|replica| replica.signal("STOP"));
    let mut consumers =
        vec![("default", spawn("default", &[])), ("b", spawn("b", &[])), ("slow", spawn("slow", &["--step-ms", "10"]))];
    wait_until_connected(&addrs, consumers.len());
    // Their requests written after their connections.
    std::thread::sleep(Duration::from_millis(300));
    paused.iter().for_each(|replica| replica.signal("CONT"));
    for (job, consumer) in consumers.drain(..) {
        let mut keys = wait_for_consumers(vec![consumer], &[output(job)], true);
        keys.sort();
        assert_every_key_twice(&keys, 500);
    }
    // The late job comes once the others are done.
    let mut keys = wait_for_consumers(vec![spawn("late", &[])], &[output("late")], true);
    keys.sort();
    assert_every_key_twice(&keys, 500);
    let window_figures = windows_decoded_and_shared(&metrics_addrs);
    // `readerctl stats` shows each job on each replica.
    let stats: Vec<String> = (addrs.iter())
        .map(|addr| {
            let output = readerd_tests::readerctl(addr, &["stats", "--container", "team", "--shared-name", "train"]);
            String::from_utf8_lossy(&output.stdout).into_owned()
        })
        .collect();
    eprintln!("{stats:#?}");
    Some((stats, window_figures))
}

/// Waits until each server at `addrs` (`http://127.0.0.1:PORT`) has `clients` connections
/// open to it (established in the kernel, whether the server accepted them or not).
fn wait_until_connected(addrs: &[String], clients: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for addr in addrs {
        let port = addr.rsplit(':').next().unwrap().parse::<u16>().unwrap();
        // `/proc/net/tcp`: `sl local_address rem_address st ...`, addresses as
        // `HEXIP:HEXPORT`, state 01 for established.
        let local = format!(":{port:04X}");
        loop {
            let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
            let open = (table.lines().skip(1))
                .map(|line| line.split_whitespace().collect::<Vec<_>>())
                .filter(|fields| fields.len() > 3 && fields[1].ends_with(&local) && fields[3] == "01")
                .count();
            if open >= clients {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{open} of {clients} consumers connected to {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Elements the windows of the replicas whose metrics listen at `metrics_addrs` decoded,
/// and elements jobs took from them, in all.
fn windows_decoded_and_shared(metrics_addrs: &[String]) -> (u64, u64) {
    let counters: Vec<(u64, u64, u64)> = metrics_addrs.iter().map(|addr| window_counters(addr)).collect();
    eprintln!("(decoded, shared, detachments) per replica: {counters:?}");
    counters.iter().fold((0, 0), |(d, s), c| (d + c.0, s + c.1))
}

/// A job of two consumers that comes after another job read everything: it reads alone
/// (its streams one chunk at a time), reaches the window's kept tail and takes from it;
/// between them its consumers get every record once per epoch.
#[tokio::test]
async fn a_late_job_of_two_consumers_reads_alone_then_from_the_window_without_loss_or_repeats() {
    let (data, spec) = dataset();
    let server = ServerProcess::start_with(&[data.path()], &["--job-window-bytes", "100000"]);
    let addr = server.addr.clone();
    let first = read_job(&addr, &spec, "first", &[]).wait_with_output().unwrap();
    assert_every_record_once_per_epoch("first", &keys(&jsonl(&first.stdout)));
    // Each prints to a file: a consumer's stream ends once the other acknowledged all it
    // was sent, so neither may wait for its output to be read.
    let out = tempfile::tempdir().unwrap();
    let pair: Vec<(std::path::PathBuf, Child)> = (0..2)
        .map(|i| {
            let path = out.path().join(format!("pair-{i}"));
            let command = &mut read_job_command(&addr, &spec, "pair", &["--step-ms", "1"]);
            (path.clone(), command.stdout(std::fs::File::create(&path).unwrap()).spawn().unwrap())
        })
        .collect();
    let mut all = Vec::new();
    for (path, mut child) in pair {
        let status = child.wait().unwrap();
        let printed = std::fs::read(&path).unwrap();
        assert!(status.success(), "{}", String::from_utf8_lossy(&printed));
        all.extend(keys(&jsonl(&printed)));
    }
    assert_eq!(all.len(), EPOCHS * PER_EPOCH, "the pair's elements");
    let mut counts: HashMap<&String, usize> = HashMap::new();
    for key in &all {
        *counts.entry(key).or_default() += 1;
    }
    assert_eq!(counts.len(), PER_EPOCH);
    assert!(counts.values().all(|&n| n == EPOCHS), "each record once per epoch between the two consumers");
    let stats = stats(&server).await;
    let pair = stats.jobs.iter().find(|job| job.name == "pair").unwrap();
    eprintln!("{pair:?}");
    assert!(pair.detachments >= 1 && pair.elements_decoded > 0, "it read alone first: {pair:?}");
    assert!(pair.reattachments >= 1 && pair.elements_shared > 0, "then from the window: {pair:?}");
}

/// Records taken raw from the shared reader (`ReadUpTo`) are not its elements any more:
/// the job `default` then reads its own sequence, never the window's from the start.
#[tokio::test]
async fn after_read_up_to_the_default_job_goes_on_from_its_own_records() {
    let (data, spec) = dataset();
    let server = ServerProcess::start_with(&[data.path()], &[]);
    let addr = server.addr.clone();
    let reference = private_order(&addr, &spec);
    let mut client = server.client().await;
    let reader = Some(pb::ReaderRef { container: String::new(), shared_name: "sweep".into() });
    let spec_pb = readerd_client::parse_spec(&std::fs::read_to_string(&spec).unwrap()).unwrap();
    let create =
        pb::LookupOrCreateReaderRequest { reader: reader.clone(), spec: Some(spec_pb), dataset: String::new() };
    client.service().lookup_or_create_reader(create).await.unwrap();
    let raw = pb::ReadUpToRequest { reader, max_records: 3 };
    let raw = client.service().read_up_to(raw).await.unwrap().into_inner();
    assert_eq!(raw.keys, reference[..3], "ReadUpTo takes the first records");
    // Another job reads everything through the window, then the job default reads.
    let other = read_job(&addr, &spec, "other", &[]).wait_with_output().unwrap();
    assert!(keys(&jsonl(&other.stdout)) == reference);
    let default = read_job(&addr, &spec, "default", &[]).wait_with_output().unwrap();
    assert!(keys(&jsonl(&default.stdout)) == reference[3..], "the default job's own sequence, after the raw records");
}

/// A consumer of a job goes away mid-epoch (SIGKILL): what it was sent and had not
/// acknowledged goes to the job's other consumer; nothing is lost, and at most the one
/// element it printed but had not acknowledged yet is printed twice.
#[tokio::test]
async fn a_job_consumer_killed_mid_epoch_hands_its_unacknowledged_elements_to_the_other() {
    let (data, spec) = dataset();
    let server = ServerProcess::start_with(&[data.path()], &["--job-window-bytes", "100000"]);
    let addr = server.addr.clone();
    let out = tempfile::tempdir().unwrap();
    let mut pair: Vec<(std::path::PathBuf, Child)> = (0..2)
        .map(|i| {
            let path = out.path().join(format!("consumer-{i}"));
            let command = &mut read_job_command(&addr, &spec, "pair", &["--step-ms", "1"]);
            (path.clone(), command.stdout(std::fs::File::create(&path).unwrap()).spawn().unwrap())
        })
        .collect();
    let lines = |path: &std::path::Path| std::fs::read_to_string(path).unwrap_or_default().lines().count();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while lines(&pair[0].0) < 300 {
        assert!(std::time::Instant::now() < deadline, "the consumer printed too little");
        std::thread::sleep(Duration::from_millis(20));
    }
    pair[0].1.kill().unwrap();
    pair[0].1.wait().unwrap();
    let (survivor, mut child) = pair.pop().unwrap();
    assert!(child.wait().unwrap().success(), "the other consumer ends at the end of the data");
    let mut all = keys(&jsonl(&std::fs::read(&pair[0].0).unwrap()));
    let killed = all.len();
    all.extend(keys(&jsonl(&std::fs::read(&survivor).unwrap())));
    let mut counts: HashMap<&String, usize> = HashMap::new();
    for key in &all {
        *counts.entry(key).or_default() += 1;
    }
    assert_eq!(counts.len(), PER_EPOCH, "every record ({killed} printed by the killed consumer)");
    assert!(counts.values().all(|&n| n >= EPOCHS), "none lost");
    assert!(all.len() <= EPOCHS * PER_EPOCH + 1, "{} printed: at most the killed one's last twice", all.len());
}

/// The keys of every example printed, in order (an unbatched batch names each of its
/// examples, `<file>:<n>[i]`).
fn example_keys(lines: &[Value]) -> Vec<String> {
    let keys = lines.iter().filter_map(|line| line["keys"].as_array()).flatten();
    keys.map(|key| key.as_str().unwrap().to_owned()).collect()
}

/// Four files of 100 short records, and a spec reading them twice unbatched: each record's
/// bytes, decoded raw, are its examples, batched by 16 again.
fn unbatched_dataset() -> (tempfile::TempDir, String) {
    unbatched_records(100, |file, n| format!("{file}-{n}"), 16)
}

/// Four files of `records` records (`record(file, n)`), and a spec reading them twice
/// unbatched: each record's bytes, decoded raw, are its examples, batched by `batch`.
fn unbatched_records(
    records: usize,
    record: impl Fn(usize, usize) -> String,
    batch: usize,
) -> (tempfile::TempDir, String) {
    let data = tempfile::tempdir().unwrap();
    for file in 0..FILES {
        let records: Vec<Vec<u8>> = (0..records).map(|n| record(file, n).into_bytes()).collect();
        write_tfrecord(&data.path().join(format!("part-{file}.tfrecord")), &records);
    }
    let spec = json!({
        "source": {"files": ["part-*.tfrecord"], "format": "TFRECORD"},
        "decoder": {"raw": {"outType": "UINT8"}},
        "pipeline": {"numEpochs": EPOCHS, "shuffleFiles": true, "seed": 11, "unbatch": true, "batchSize": batch}
    });
    let spec = write_spec(&data, &spec);
    (data, spec)
}

/// Jobs of an unbatched reader: each record's bytes, decoded raw, are its examples, batched
/// by 16 again. Every job gets the private stream's batches; a job that comes once the
/// others are done reads alone (the window moved on), and the others took theirs from the
/// window, decoded once.
#[tokio::test]
async fn jobs_of_an_unbatched_reader_each_get_every_example_once_per_epoch() {
    let (data, spec) = unbatched_dataset();
    // A window of a few dozen batches (each counts its payloads and its encoding for the
    // wire, keys included), of the 196 each job reads.
    let server = ServerProcess::start_with(&[data.path()], &["--job-window-bytes", "16000"]);
    let addr = server.addr.clone();
    let reference = example_keys(&private_lines(&addr, &spec));
    // Each file's records are "F-0" to "F-99": 10 of 3 bytes, 90 of 4.
    assert_eq!(reference.len(), EPOCHS * FILES * (10 * 3 + 90 * 4), "examples of the private stream");

    let together: Vec<(&str, Child)> =
        ["default", "b", "c"].into_iter().map(|job| (job, read_job(&addr, &spec, job, &[]))).collect();
    for (job, child) in together {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "job {job}: {}", String::from_utf8_lossy(&output.stdout));
        assert!(example_keys(&jsonl(&output.stdout)) == reference, "job {job}: not the reader's examples");
    }
    let late = read_job(&addr, &spec, "late", &[]).wait_with_output().unwrap();
    assert!(late.status.success(), "{}", String::from_utf8_lossy(&late.stdout));
    assert!(example_keys(&jsonl(&late.stdout)) == reference, "the late job: not the reader's examples");

    let stats = stats(&server).await;
    let jobs: HashMap<&str, &pb::JobStats> = stats.jobs.iter().map(|job| (job.name.as_str(), job)).collect();
    eprintln!("decoded {}; {jobs:?}", stats.elements_decoded);
    let batches = jobs["late"].position;
    // The others' window had moved on: it read alone (at least until it caught up).
    assert!(jobs["late"].detachments >= 1 && jobs["late"].elements_decoded > 0, "{:?}", jobs["late"]);
    for job in jobs.values() {
        assert_eq!(job.position, batches, "{job:?}");
        assert_eq!(job.elements_shared + job.elements_decoded, batches, "{job:?}");
    }
    // Three jobs read together, decoded about once; the late one mostly on its own, and a
    // job that started after the small window moved on (a loaded machine starts the three
    // apart) on its own until it caught up: fewer decodings than jobs, and at least one
    // job's worth taken from the window.
    assert!(stats.elements_decoded < 4 * batches, "decoded {} of {batches} for 4 jobs", stats.elements_decoded);
    let shared: i64 = jobs.values().map(|job| job.elements_shared).sum();
    assert!(shared >= batches, "the jobs took {shared} elements from the window, of {batches} each");
}

/// A job of an unbatched reader resumes exactly from its token after `kill -9`: a token
/// taken inside a record (its examples split between batches) goes on from that example.
#[tokio::test]
async fn a_job_of_an_unbatched_reader_resumes_exactly_after_kill_9() {
    let (data, spec) = unbatched_dataset();
    let state = tempfile::tempdir().unwrap();
    let args = ["--job-window-bytes", "4000"];
    let server = ServerProcess::start_in(state.path(), &[data.path()], &args);
    let reference = example_keys(&private_lines(&server.addr, &spec));
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("b");
    let read = &mut read_job_command(&server.addr, &spec, "b", &["--step-ms", "5", "--checkpoint-every", "7"]);
    let mut job = read.stdout(std::fs::File::create(&path).unwrap()).spawn().unwrap();
    // The job default reads along, so that b takes from the window.
    let mut default = read_job(&server.addr, &spec, "default", &["--step-ms", "5"]);
    let printed = || std::fs::read_to_string(&path).unwrap_or_default().lines().count();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while printed() < 60 {
        assert!(std::time::Instant::now() < deadline, "job b printed too little");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill();
    job.wait().unwrap();
    default.kill().unwrap();
    default.wait().unwrap();
    let lines = jsonl(&std::fs::read(&path).unwrap());
    let at = lines.iter().rposition(|line| line.get("checkpoint").is_some()).expect("a checkpoint");
    let (token, after_seq) = (lines[at]["checkpoint"].as_str().unwrap(), lines[at]["after_seq"].as_i64().unwrap());
    let elements: Vec<&Value> = lines[..at].iter().filter(|line| line.get("keys").is_some()).collect();
    let mut all = example_keys(&elements[..=after_seq as usize].iter().map(|line| (*line).clone()).collect::<Vec<_>>());
    assert!(all.len().is_multiple_of(16) && reference[..all.len()] == all[..], "printed before the kill");

    let server = ServerProcess::start_in(state.path(), &[data.path()], &args);
    let resumed = read_job(&server.addr, &spec, "b", &["--resume", token]).wait_with_output().unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stdout));
    all.extend(example_keys(&jsonl(&resumed.stdout)));
    assert!(all == reference, "job b: {} examples in all, {} in the reader's", all.len(), reference.len());
}

/// A job of an unbatched reader that falls behind the window while attached: the chunks
/// it took end inside records (1,000 examples a record, 256 a batch), where no state can
/// be taken, so it goes back to the last state it kept and reads again, unsent, up to
/// where it was. Every job gets the reader's examples exactly, neither skipping nor
/// repeating.
#[tokio::test]
async fn an_unbatched_job_that_falls_behind_inside_a_record_reads_again_from_the_last_state() {
    let (data, spec) = unbatched_records(20, |file, n| format!("{file}-{n}-{}", "x".repeat(994)), 256);
    let server = ServerProcess::start_with(&[data.path()], &["--job-window-bytes", "4000"]);
    let addr = server.addr.clone();
    let reference = example_keys(&private_lines(&addr, &spec));
    let out = tempfile::tempdir().unwrap();
    let start = |job: &'static str, step: &str| {
        let file = std::fs::File::create(out.path().join(job)).unwrap();
        (job, read_job_command(&addr, &spec, job, &["--step-ms", step]).stdout(file).spawn().unwrap())
    };
    // The slow job first, alone at the window, so that it takes from it; then two fast
    // ones, which leave it behind.
    let mut readers = vec![start("slow", "5")];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while try_stats(&server).await.map_or(0, |s| s.jobs.iter().map(|job| job.position).sum::<i64>()) < 20 {
        assert!(std::time::Instant::now() < deadline, "the slow job did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    readers.extend([start("default", "0"), start("b", "0")]);
    for (job, mut child) in readers {
        let status = child.wait().unwrap();
        let printed = std::fs::read(out.path().join(job)).unwrap();
        assert!(status.success(), "job {job}: {}", String::from_utf8_lossy(&printed));
        assert!(example_keys(&jsonl(&printed)) == reference, "job {job}: not the reader's examples");
    }
    // Which job falls behind, and whether one does, depends on the machine's timing (the
    // consumers' HTTP/2 windows hold all of this data): the test shows the exactness; run
    // alone, a job fell behind inside a record in every run (INTERNAL before the fix).
    let stats = stats(&server).await;
    let fell_behind = stats.jobs.iter().filter(|job| job.elements_shared > 0 && job.detachments > 0).count();
    eprintln!(
        "decoded {}, {fell_behind} jobs fell behind after taking from the window; {:?}",
        stats.elements_decoded, stats.jobs
    );
    for job in &stats.jobs {
        assert_eq!(job.elements_shared + job.elements_decoded, job.position, "{job:?}");
        // Only a job that fell behind reads again, and never more than it had taken.
        assert!(job.elements_read_again == 0 || job.detachments > 0, "{job:?}");
        assert!(job.elements_read_again <= job.elements_shared, "{job:?}");
    }
    let alone: i64 = stats.jobs.iter().map(|job| job.elements_decoded + job.elements_read_again).sum();
    assert!(stats.elements_decoded >= alone, "the reader's decoding counts every job's: {stats:?}");
}

/// `readerctl delete` of shared reader `sweep`, with `args`: its exit status and stderr.
fn delete(addr: &str, args: &[&str]) -> (bool, String) {
    let args: Vec<&str> = ["delete", "--shared-name", "sweep"].into_iter().chain(args.iter().copied()).collect();
    let output = readerd_tests::readerctl(addr, &args);
    (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// Whether job `job` of `sweep` is there: `readerctl checkpoint` of it succeeds.
fn job_is_there(addr: &str, job: &str) -> bool {
    let output = readerd_tests::readerctl(addr, &["checkpoint", "--shared-name", "sweep", "--job", job]);
    output.status.success()
}

#[test]
fn delete_with_a_job_releases_that_job_alone() {
    let (data, spec) = dataset();
    let server = ServerProcess::start(&[data.path()]);
    for job in ["a", "b"] {
        let read = read_job_command(&server.addr, &spec, job, &["--max-batches", "3"]).stdout(Stdio::null()).status();
        assert!(read.unwrap().success());
    }
    assert!(job_is_there(&server.addr, "a") && job_is_there(&server.addr, "b"));
    assert_eq!(delete(&server.addr, &["--job", "a"]), (true, String::new()));
    assert!(!job_is_there(&server.addr, "a"), "job a is released");
    assert!(job_is_there(&server.addr, "b"), "job b is not");
    let (deleted, stderr) = delete(&server.addr, &["--job", "a"]);
    assert!(!deleted && stderr.contains("NOT_FOUND") && stderr.contains("job a of /sweep"), "{stderr}");
    // Without --job: the reader with every job left on it.
    assert_eq!(delete(&server.addr, &[]), (true, String::new()));
    assert!(!job_is_there(&server.addr, "b"));
    let (deleted, stderr) = delete(&server.addr, &[]);
    assert!(!deleted && stderr.contains("NOT_FOUND"), "{stderr}");
}

#[test]
fn on_replicas_delete_finds_a_reader_only_jobs_use_from_any_replica() {
    let Some(db) = readerd_tests::postgres::Database::new() else { return };
    let (data, _dir, spec) = lines_in_batches();
    let (replicas, _) = two_replicas(&db.url(), data.path(), &[]);
    let [first, second] = [0, 1].map(|i| replicas[i].as_ref().unwrap().addr.clone());
    for job in ["a", "b"] {
        let status =
            read_job_command(&first, &spec, job, &["--max-batches", "3"]).stdout(Stdio::null()).status().unwrap();
        assert!(status.success());
    }
    // Job a alone, through the replica that never served it: its ledger job goes.
    assert_eq!(delete(&second, &["--job", "a"]), (true, String::new()));
    let (deleted, stderr) = delete(&second, &["--job", "a"]);
    assert!(!deleted && stderr.contains("NOT_FOUND"), "job a is gone from the ledger: {stderr}");
    // The shared name, which no stream of the job default ever read: every job on it.
    assert_eq!(delete(&second, &[]), (true, String::new()));
    let (deleted, stderr) = delete(&second, &["--job", "b"]);
    assert!(!deleted && stderr.contains("NOT_FOUND"), "job b went with the shared name: {stderr}");
    let (deleted, stderr) = delete(&second, &[]);
    assert!(!deleted && stderr.contains("NOT_FOUND"), "{stderr}");
}
