//! PostgreSQL going away under a cluster: a PostgreSQL of each test's own (started from
//! the installed binaries on a port of its own, `OwnPostgres`) is stopped mid-epoch, for
//! 15 s or for a restart, while replicas serve a shared reader to consumers that read from
//! every replica. Replicas wait for it and carry on: consumers see a pause, no error, and
//! every record exactly once per epoch.

use std::path::Path;

use readerd_tests::postgres::OwnPostgres;
use readerd_tests::shared_reads::{
    assert_every_example_twice, assert_every_key_twice, assert_every_key_twice_but_the_killeds_last,
    assert_every_key_twice_in_its_component, assert_taken_in_each_of_two_epochs, count_off_by_key, every_example_twice,
    every_key_twice, keys_and_end, lines_printed, mixture_of_two_halves, spawn_consumers, wait_for_consumers,
    wait_until_printed, write_line_files, write_lines,
};
use readerd_tests::{ServerProcess, write_spec};
use serde_json::json;

const LINES: usize = 2000;

/// Held by the tests that load both cores for minutes (3 replicas and 4 consumers over
/// tens of thousands of records) and by the one whose jobs must keep up with a window:
/// they run one at a time, beside the lighter tests only.
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_heavy_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn spec() -> serde_json::Value {
    json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 3, "shuffleFiles": true, "cycleLength": 2, "shuffle": {"bufferSize": 32},
                     "numEpochs": 2, "batchSize": 8}
    })
}

/// The exact global shuffle of the same files.
fn global_spec() -> serde_json::Value {
    json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 3, "shuffle": {"global": true}, "numEpochs": 2, "batchSize": 8}
    })
}

/// A replica (or single server) on `postgres`, with 2 s leases, a 30 s grace for the
/// consumers of a replica that died (unless `extra` sets another) and `extra` flags.
fn replica_with(postgres: &OwnPostgres, data: &Path, extra: &[&str]) -> (ServerProcess, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let url = postgres.url();
    let grace: &[&str] = if extra.contains(&"--failover-grace") { &[] } else { &["--failover-grace", "30s"] };
    let args: Vec<&str> = ["--state-url", url.as_str(), "--lease-time", "2s"]
        .into_iter()
        .chain(grace.iter().copied())
        .chain(extra.iter().copied())
        .collect();
    (ServerProcess::start_in(state.path(), &[data], &args), state)
}

fn replica(postgres: &OwnPostgres, data: &Path) -> (ServerProcess, tempfile::TempDir) {
    replica_with(postgres, data, &[])
}

/// The last line a consumer printed is the error of a stream that ended past the outage
/// limit, naming the store: the split ledger, or the state store when a checkpoint of the
/// consumer's (`--checkpoint-every`) was the first to fail (readerctl stops there too).
fn assert_ended_past_the_limit(status: std::process::ExitStatus, lines: &[serde_json::Value]) {
    let last = lines.last().unwrap();
    assert!(!status.success() && last["error"]["code"] == "UNAVAILABLE", "{last}");
    let message = last["error"]["message"].as_str().unwrap();
    let names_the_store = message.contains("split ledger") || message.contains("postgres state store");
    assert!(names_the_store && message.contains("outage limit"), "{message}");
}

/// `replicas` servers on a PostgreSQL of the test's own and 4 consumers (each reading
/// from all of them, with `consumer_args`) of `spec`; once they printed a tenth of the
/// job, `outage` is done to PostgreSQL. Every record must then come exactly once per
/// epoch, and every consumer end with the end of the sequence.
fn read_through(spec: serde_json::Value, replicas: usize, consumer_args: &[&str], outage: impl FnOnce(&OwnPostgres)) {
    let all = read_keys_through(spec, replicas, consumer_args, outage);
    assert_every_key_twice(&all, LINES);
}

/// [`read_through`]'s run: every key the consumers printed, sorted, once each ended with
/// the end of the sequence.
fn read_keys_through(
    spec: serde_json::Value,
    replicas: usize,
    consumer_args: &[&str],
    outage: impl FnOnce(&OwnPostgres),
) -> Vec<String> {
    let postgres = OwnPostgres::start();
    let data = tempfile::tempdir().unwrap();
    write_lines(data.path(), LINES);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &spec);
    let servers: Vec<_> = (0..replicas).map(|_| replica(&postgres, data.path())).collect();
    let addrs = servers.iter().map(|(server, _)| server.addr.clone()).collect::<Vec<_>>().join(",");
    let outputs: Vec<std::path::PathBuf> = (0..4).map(|i| dir.path().join(format!("consumer-{i}.jsonl"))).collect();
    let args: Vec<&str> = ["--spec", spec_path.as_str()].into_iter().chain(consumer_args.iter().copied()).collect();
    let consumers = spawn_consumers(&addrs, &args, &outputs);
    // 2 epochs of 8 x 2,000 lines in batches of 8: up to 4,000 lines printed; a tenth.
    wait_until_printed(&outputs, 400);
    outage(&postgres);
    let printed_during = lines_printed(&outputs);
    let mut all = wait_for_consumers(consumers, &outputs, true);
    all.sort();
    assert!(printed_during * 8 < all.len(), "the job was over before PostgreSQL came back: nothing was tested");
    all
}

/// Stopped for 15 s, then started again.
fn fifteen_seconds_down(postgres: &OwnPostgres) {
    postgres.stop();
    std::thread::sleep(std::time::Duration::from_secs(15));
    postgres.start_again();
}

/// Restarted (every session ended).
fn restarted(postgres: &OwnPostgres) {
    postgres.stop();
    postgres.start_again();
}

#[test]
fn three_replicas_wait_out_a_15_s_postgres_outage_and_deliver_every_record_once() {
    read_through(spec(), 3, &[], fifteen_seconds_down);
}

#[test]
fn three_replicas_serving_a_global_shuffle_wait_out_a_15_s_outage_and_deliver_every_record_once() {
    read_through(global_spec(), 3, &[], fifteen_seconds_down);
}

#[test]
fn three_replicas_skipping_and_taking_wait_out_a_15_s_outage_and_take_exactly_per_epoch() {
    // Replicas claim the fates of the records they read in the ledger, 64 at a time: the
    // outage stops claims (retried) as well as leases and acknowledgements.
    let mut skipping = spec();
    skipping["pipeline"]["select"] = json!({"skip": 1000, "take": 8000});
    let all = read_keys_through(skipping, 3, &[], fifteen_seconds_down);
    let thrice = all.windows(3).find(|keys| keys[0] == keys[2]);
    assert!(thrice.is_none(), "printed three times: {thrice:?}");
    assert_eq!(all.len(), 2 * 8000, "exactly the take of each epoch, counted across the outage");
}

/// Two jobs of two consumers each, sharing a window on each of two replicas (the window's
/// reader leases each split for the jobs seated at it, in their own ledger jobs): a 15 s
/// outage stalls every ledger job's leases; each job still gets every record once per
/// epoch.
#[test]
fn jobs_sharing_windows_on_two_replicas_wait_out_a_15_s_outage_and_each_get_every_record_once() {
    jobs_sharing_windows_through_a_15_s_outage(spec(), every_key_twice(LINES).len(), assert_every_key_twice);
}

/// The same with the exact global shuffle, whose splits are ranges of each epoch's
/// permutation.
#[test]
fn jobs_sharing_windows_of_a_global_shuffle_wait_out_a_15_s_outage_and_each_get_every_record_once() {
    jobs_sharing_windows_through_a_15_s_outage(global_spec(), every_key_twice(LINES).len(), assert_every_key_twice);
}

/// The same with each line unbatched (decoded raw, its bytes its examples, batched by 64
/// again): the jobs' ledger jobs count examples.
#[test]
fn jobs_sharing_windows_of_an_unbatched_spec_wait_out_a_15_s_outage_and_each_get_every_example_once() {
    let mut spec = spec();
    spec["decoder"] = json!({"raw": {"outType": "UINT8"}});
    spec["pipeline"]["unbatch"] = json!(true);
    spec["pipeline"]["batchSize"] = json!(64);
    jobs_sharing_windows_through_a_15_s_outage(spec, every_example_twice(LINES).len(), assert_every_example_twice);
}

/// The same skipping the first 1,000 records of each epoch and taking the next 8,000 (of
/// 16,000): the window claims the fates for the seated jobs as for itself, and the outage
/// stops claims as well as leases.
#[test]
fn jobs_sharing_windows_skipping_and_taking_wait_out_a_15_s_outage_and_take_exactly_per_epoch() {
    let mut spec = spec();
    spec["pipeline"]["select"] = json!({"skip": 1000, "take": 8000});
    fn took_8000_an_epoch(keys: &[String], lines: usize) {
        assert_taken_in_each_of_two_epochs(keys, 8000, lines);
    }
    jobs_sharing_windows_through_a_15_s_outage(spec, 2 * 8000, took_8000_an_epoch);
}

/// The same with a mixture of two components: the window's components lease their
/// splits for the seated jobs too.
#[test]
fn jobs_sharing_windows_of_a_mixture_wait_out_a_15_s_outage_and_each_get_every_record_once() {
    let spec = mixture_of_two_halves(8);
    jobs_sharing_windows_through_a_15_s_outage(
        spec,
        every_key_twice(LINES).len(),
        assert_every_key_twice_in_its_component,
    );
}

/// Two jobs of two consumers each reading `spec` through two replicas across a 15 s
/// outage, `keys_a_job` keys each: each job's sorted keys pass `assert_every_key` (given
/// the lines a file).
fn jobs_sharing_windows_through_a_15_s_outage(
    spec: serde_json::Value,
    keys_a_job: usize,
    assert_every_key: fn(&[String], usize),
) {
    let batch = spec["pipeline"]["batchSize"].as_u64().unwrap() as usize;
    let _heavy = one_heavy_at_a_time();
    let postgres = OwnPostgres::start();
    let data = tempfile::tempdir().unwrap();
    write_lines(data.path(), LINES);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &spec);
    let metrics: Vec<String> = (0..2).map(|_| readerd_tests::free_address()).collect();
    let servers: Vec<_> =
        metrics.iter().map(|addr| replica_with(&postgres, data.path(), &["--metrics-listen", addr])).collect();
    let addrs = servers.iter().map(|(server, _)| server.addr.clone()).collect::<Vec<_>>().join(",");
    let jobs: Vec<(Vec<std::path::PathBuf>, Vec<std::process::Child>)> = ["a", "b"]
        .iter()
        .map(|job| {
            let outputs: Vec<_> = (0..2).map(|i| dir.path().join(format!("{job}-{i}.jsonl"))).collect();
            let consumers = spawn_consumers(&addrs, &["--spec", spec_path.as_str(), "--job", job], &outputs);
            (outputs, consumers)
        })
        .collect();
    let every_output: Vec<std::path::PathBuf> = jobs.iter().flat_map(|(outputs, _)| outputs.clone()).collect();
    // A tenth of all the lines the two jobs print.
    wait_until_printed(&every_output, 2 * keys_a_job / batch / 10);
    fifteen_seconds_down(&postgres);
    let printed_during = lines_printed(&every_output);
    let mut total = 0;
    for (outputs, consumers) in jobs {
        let mut keys = wait_for_consumers(consumers, &outputs, true);
        keys.sort();
        assert_every_key(&keys, LINES);
        total += keys.len();
    }
    assert!(printed_during * batch < total, "the jobs were over before PostgreSQL came back: nothing was tested");
    // The jobs took their elements from the replicas' windows.
    let shared: u64 = (metrics.iter())
        .map(|addr| {
            let text = readerd_tests::scrape_metrics(addr);
            let line = text.lines().find(|line| line.starts_with("readerd_job_window_shared_elements_total ")).unwrap();
            line.split_whitespace().last().unwrap().parse::<u64>().unwrap()
        })
        .sum();
    assert!(shared > 0, "no job took an element from a window");
}

/// 3 replicas with 2 s leases and the default 10 s grace, 4 consumers reading from all of
/// them, `files` files of `lines` lines read by `spec` for 2 epochs; PostgreSQL stopped
/// for `outage` once a tenth was printed, longer than a lease time and the grace together.
/// No consumer died: every record must come exactly once per epoch.
fn every_record_once_through_an_outage_past_the_lease(
    spec: serde_json::Value,
    files: usize,
    lines: usize,
    outage: std::time::Duration,
) {
    let _heavy = one_heavy_at_a_time();
    let postgres = OwnPostgres::start();
    let data = tempfile::tempdir().unwrap();
    write_line_files(data.path(), files, lines);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &spec);
    let servers: Vec<_> = (0..3).map(|_| replica_with(&postgres, data.path(), &["--failover-grace", "10s"])).collect();
    let addrs = servers.iter().map(|(server, _)| server.addr.clone()).collect::<Vec<_>>().join(",");
    let outputs: Vec<std::path::PathBuf> = (0..4).map(|i| dir.path().join(format!("consumer-{i}.jsonl"))).collect();
    let consumers = spawn_consumers(&addrs, &["--spec", spec_path.as_str()], &outputs);
    let batch = spec["pipeline"]["batchSize"].as_u64().unwrap() as usize;
    wait_until_printed(&outputs, 2 * files * lines / batch / 10);
    postgres.stop();
    std::thread::sleep(outage);
    postgres.start_again();
    let printed_during = lines_printed(&outputs);
    let all = wait_for_consumers(consumers, &outputs, true);
    assert!(
        printed_during * batch * 4 < all.len() * 3,
        "{} of {} records were printed before PostgreSQL came back: too few were left to test",
        printed_during * batch,
        all.len()
    );
    let (missing, repeated) = count_off_by_key(&all, files, lines, 2);
    assert!(
        missing.is_empty() && repeated.is_empty(),
        "{} records missing (the first: {:?}), {} delivered again (the first: {:?}), of {}",
        missing.len(),
        &missing[..missing.len().min(8)],
        repeated.len(),
        &repeated[..repeated.len().min(8)],
        all.len()
    );
}

/// 16 files of 2,500 lines, files shuffled and interleaved, batches of 8.
fn sixteen_files_spec() -> serde_json::Value {
    json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 5, "shuffleFiles": true, "cycleLength": 2, "numEpochs": 2, "batchSize": 8}
    })
}

/// The exact global shuffle of 8 files of 20,000 lines, batches of 16.
fn global_batches_of_16_spec() -> serde_json::Value {
    json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 5, "shuffle": {"global": true}, "numEpochs": 2, "batchSize": 16}
    })
}

#[test]
fn a_15_s_outage_past_lease_and_grace_repeats_no_record() {
    let outage = std::time::Duration::from_secs(15);
    every_record_once_through_an_outage_past_the_lease(sixteen_files_spec(), 16, 2500, outage);
}

#[test]
fn a_45_s_outage_past_lease_and_grace_repeats_no_record() {
    let outage = std::time::Duration::from_secs(45);
    every_record_once_through_an_outage_past_the_lease(sixteen_files_spec(), 16, 2500, outage);
}

#[test]
fn a_15_s_outage_past_lease_and_grace_repeats_no_record_of_a_global_shuffle() {
    let outage = std::time::Duration::from_secs(15);
    every_record_once_through_an_outage_past_the_lease(global_batches_of_16_spec(), 8, 20_000, outage);
}

#[test]
fn a_45_s_outage_past_lease_and_grace_repeats_no_record_of_a_global_shuffle() {
    let outage = std::time::Duration::from_secs(45);
    every_record_once_through_an_outage_past_the_lease(global_batches_of_16_spec(), 8, 20_000, outage);
}

#[test]
fn three_replicas_carry_on_after_a_postgres_restart_and_deliver_every_record_once() {
    read_through(spec(), 3, &[], restarted);
}

#[test]
fn a_single_server_on_postgres_waits_out_a_15_s_outage_while_checkpointing() {
    // Checkpoints every 20 elements: the state store's own session must come back too.
    read_through(spec(), 1, &["--checkpoint-every", "20"], fifteen_seconds_down);
}

#[test]
fn past_the_outage_limit_a_stream_ends_unavailable_naming_the_store_and_its_token_resumes_exactly() {
    let postgres = OwnPostgres::start();
    let data = tempfile::tempdir().unwrap();
    write_lines(data.path(), LINES);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &spec());
    let (server, _state) = replica_with(&postgres, data.path(), &["--store-outage-limit", "3s"]);
    let outputs = [dir.path().join("before.jsonl")];
    let consumer = spawn_consumers(&server.addr, &["--spec", &spec_path, "--checkpoint-every", "20"], &outputs);
    wait_until_printed(&outputs, 400);
    postgres.stop();
    let mut consumer = consumer.into_iter().next().unwrap();
    let status = consumer.wait().unwrap();
    postgres.start_again();

    let lines = readerd_tests::jsonl(&std::fs::read(&outputs[0]).unwrap());
    assert_ended_past_the_limit(status, &lines);
    // What was printed up to the last checkpoint, then the rest from its token.
    let at = lines.iter().rposition(|line| line["checkpoint"].is_string()).expect("a checkpoint before the outage");
    let token = lines[at]["checkpoint"].as_str().unwrap();
    let mut all: Vec<String> = readerd_tests::shared_reads::keys_and_end(
        lines[..at].iter().map(|line| format!("{line}\n")).collect::<String>().as_bytes(),
    )
    .0;
    let after = [dir.path().join("after.jsonl")];
    let resumed = spawn_consumers(&server.addr, &["--resume", token], &after);
    all.extend(wait_for_consumers(resumed, &after, true));
    all.sort();
    assert_every_key_twice(&all, LINES);
}

#[test]
fn past_the_outage_limit_a_stream_in_the_middle_of_a_split_ends_unavailable_too() {
    // One file, leased at the start: the pipeline asks the ledger for nothing more, so the
    // stream learns of the outage from the lease renewals alone (it waited for ever).
    let postgres = OwnPostgres::start();
    let data = tempfile::tempdir().unwrap();
    let text: String = (0..40_000).map(|l| format!("0-{l}\n")).collect();
    readerd_tests::write_file(data.path(), "part-0.txt", text.as_bytes());
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &spec());
    let (server, _state) = replica_with(&postgres, data.path(), &["--store-outage-limit", "3s"]);
    let outputs = [dir.path().join("consumer.jsonl")];
    let mut consumer = spawn_consumers(&server.addr, &["--spec", &spec_path], &outputs).pop().unwrap();
    wait_until_printed(&outputs, 200);
    postgres.stop();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = consumer.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "the stream still waits a minute into the outage");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    postgres.start_again();
    let lines = readerd_tests::jsonl(&std::fs::read(&outputs[0]).unwrap());
    assert_ended_past_the_limit(status, &lines);
}

#[test]
fn elements_taken_for_a_stream_that_stops_before_sending_them_go_to_another_consumer() {
    // PostgreSQL stops: once the replica's leases are a lease time (2 s) unconfirmed, a
    // stream takes its next chunk and waits for a renewal before sending it. Its consumer
    // is killed there. The chunk's elements must go back to the reader, for the next
    // consumer: else they were never delivered, and the job never ended.
    let postgres = OwnPostgres::start();
    let data = tempfile::tempdir().unwrap();
    write_lines(data.path(), 300);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &spec());
    let (server, _state) = replica_with(&postgres, data.path(), &["--failover-grace", "1s"]);
    let first = [dir.path().join("first.jsonl")];
    let mut consumer = spawn_consumers(&server.addr, &["--spec", &spec_path], &first).pop().unwrap();
    wait_until_printed(&first, 40);
    postgres.stop();
    std::thread::sleep(std::time::Duration::from_secs(4));
    let printed = lines_printed(&first);
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(lines_printed(&first), printed, "the stream waits for its leases, nothing is sent");
    consumer.kill().unwrap();
    consumer.wait().unwrap();
    postgres.start_again();
    let (killed_keys, _) = keys_and_end(&std::fs::read(&first[0]).unwrap());
    let next = [dir.path().join("next.jsonl")];
    let consumer = spawn_consumers(&server.addr, &["--spec", &spec_path], &next);
    let mut all = killed_keys.clone();
    all.extend(wait_for_consumers(consumer, &next, true));
    assert_every_key_twice_but_the_killeds_last(&all, &killed_keys, 300, 8);
}

#[test]
fn the_status_page_and_metrics_answer_from_memory_while_postgresql_is_down() {
    let postgres = OwnPostgres::start();
    let data = tempfile::tempdir().unwrap();
    write_lines(data.path(), 200);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &spec());
    let metrics = readerd_tests::free_address();
    let (replica, _state) = replica_with(&postgres, data.path(), &["--metrics-listen", &metrics]);
    let read = ["read", "--spec", &spec_path, "--container", "team", "--shared-name", "train", "--max-batches", "5"];
    assert!(readerd_tests::readerctl(&replica.addr, &read).status.success());
    // The listener's task asks the ledger for the job's replicas every 5 s.
    let replicas = |status: &serde_json::Value| status["replicas"].as_array().map_or(0, Vec::len);
    let status = || -> serde_json::Value {
        let (code, body) = readerd_tests::http_get(&metrics, "/status.json", &[]);
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    };
    for _ in 0..100 {
        if replicas(&status()) > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(replicas(&status()), 1);
    postgres.stop();
    // Down: the page, its data and the metrics answer from the job's last view (within
    // the helper's 10 s), not after the outage limit.
    assert_eq!(replicas(&status()), 1, "the last view of the job is kept");
    let (code, page) = readerd_tests::http_get(&metrics, "/", &[]);
    assert!(code == 200 && page.contains("readerd"));
    let scraped = readerd_tests::scrape_metrics(&metrics);
    assert!(
        scraped.contains("readerd_reader_replicas_recommended{container=\"team\",reader=\"train\"} 1"),
        "{scraped}"
    );
    postgres.start_again();
}
