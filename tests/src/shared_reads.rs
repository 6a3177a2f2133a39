//! Consumers of one shared reader `team/train`, as `readerctl read` processes printing
//! to files, and what a test asserts of what they printed together: the lines of
//! [`write_lines`]' files, each exactly once per epoch.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{jsonl, write_file};

/// 8 text files of `lines` lines (keys `part-<f>.txt:<line>`).
pub fn write_lines(root: &Path, lines: usize) {
    write_line_files(root, 8, lines);
}

/// `files` text files of `lines` lines (keys `part-<f>.txt:<line>`).
pub fn write_line_files(root: &Path, files: usize, lines: usize) {
    for f in 0..files {
        let text: String = (0..lines).map(|l| format!("{f}-{l}\n")).collect();
        write_file(root, &format!("part-{f}.txt"), text.as_bytes());
    }
}

/// Every key of `write_lines(_, lines)`, twice (two epochs), sorted.
pub fn every_key_twice(lines: usize) -> Vec<String> {
    let mut expected: Vec<String> =
        (0..8).flat_map(|f| (1..=lines).map(move |l| format!("part-{f}.txt:{l}"))).collect();
    expected.extend(expected.clone());
    expected.sort();
    expected
}

/// `readerctl --addr ADDRS read ARGS` of the shared reader `team/train`, one process per
/// output file, each printing to its file.
pub fn spawn_consumers(addrs: &str, args: &[&str], outputs: &[PathBuf]) -> Vec<std::process::Child> {
    outputs
        .iter()
        .map(|path| {
            std::process::Command::new(crate::binary("readerctl"))
                .args(["--addr", addrs, "--quiet", "read"])
                .args(args)
                .args(["--container", "team", "--shared-name", "train", "--output", "jsonl"])
                .stdout(std::fs::File::create(path).unwrap())
                .stderr(std::fs::File::create(path.with_extension("err")).unwrap())
                .spawn()
                .unwrap()
        })
        .collect()
}

/// The keys of every element in `readerctl read --output jsonl` output, and its last line.
pub fn keys_and_end(stdout: &[u8]) -> (Vec<String>, Value) {
    let lines = jsonl(stdout);
    let keys = lines
        .iter()
        .filter_map(|line| line["keys"].as_array())
        .flatten()
        .map(|key| key.as_str().unwrap().to_owned())
        .collect();
    (keys, lines.last().cloned().unwrap_or(Value::Null))
}

/// `all` (sorted) holds every key of `write_lines(_, lines)` exactly twice; the message
/// names the first keys that are not.
pub fn assert_every_key_twice(all: &[String], lines: usize) {
    let mut counts = std::collections::BTreeMap::new();
    for key in all {
        *counts.entry(key.as_str()).or_insert(0usize) += 1;
    }
    let expected = every_key_twice(lines);
    let wrong: Vec<(&str, usize)> = expected
        .iter()
        .step_by(2)
        .map(|key| (key.as_str(), counts.get(key.as_str()).copied().unwrap_or(0)))
        .filter(|(_, n)| *n != 2)
        .collect();
    let foreign = counts.keys().filter(|key| !expected.iter().any(|e| e == *key)).count();
    assert!(
        wrong.is_empty() && foreign == 0 && all.len() == expected.len(),
        "{} keys printed, {} expected; {} keys not printed exactly twice, the first: {:?}",
        all.len(),
        expected.len(),
        wrong.len(),
        &wrong[..wrong.len().min(12)]
    );
}

/// Every example key of `write_lines(_, lines)` read unbatched (each line decoded raw,
/// its bytes its examples, `part-<f>.txt:<line>[<i>]`), twice (two epochs), sorted.
pub fn every_example_twice(lines: usize) -> Vec<String> {
    let mut expected: Vec<String> = (0..8)
        .flat_map(|f| (0..lines).map(move |l| (f, l)))
        .flat_map(|(f, l)| (0..format!("{f}-{l}").len()).map(move |i| format!("part-{f}.txt:{}[{i}]", l + 1)))
        .collect();
    expected.extend(expected.clone());
    expected.sort();
    expected
}

/// Asserts that `all` (sorted) is every example of `write_lines(_, lines)` read
/// unbatched, each printed exactly twice ([`every_example_twice`]).
pub fn assert_every_example_twice(all: &[String], lines: usize) {
    let expected = every_example_twice(lines);
    if all != expected {
        let missing = expected.iter().filter(|key| all.binary_search(key).is_err()).take(12).collect::<Vec<_>>();
        let mut repeated: Vec<&String> = all.windows(3).filter(|w| w[0] == w[2]).map(|w| &w[0]).collect();
        repeated.truncate(12);
        panic!(
            "{} examples printed, {} expected; missing: {missing:?}; printed more than twice: {repeated:?}",
            all.len(),
            expected.len()
        );
    }
}

/// Asserts that `all` (sorted) is what a job taking `take` records of each of two epochs
/// of `write_lines(_, lines)` printed: `2 * take` keys of those files, none more than
/// twice (once an epoch).
pub fn assert_taken_in_each_of_two_epochs(all: &[String], take: usize, lines: usize) {
    let thrice = all.windows(3).find(|keys| keys[0] == keys[2]);
    assert!(thrice.is_none(), "printed three times: {thrice:?}");
    let every = every_key_twice(lines);
    let foreign = all.iter().find(|key| every.binary_search(key).is_err());
    assert!(foreign.is_none(), "not a record of the files: {foreign:?}");
    assert_eq!(all.len(), 2 * take, "exactly the take of each epoch");
}

/// A mixture of `write_lines`' files in two components, files 0 to 3 and 4 to 7, each
/// read twice (two epochs), weighed evenly, in batches of `batch`.
pub fn mixture_of_two_halves(batch: usize) -> Value {
    let component = |files: [usize; 4], seed: u64| {
        let files: Vec<String> = files.iter().map(|f| format!("part-{f}.txt")).collect();
        serde_json::json!({"source": {"files": files, "format": "TEXT_LINE"},
                           "pipeline": {"seed": seed, "shuffleFiles": true, "numEpochs": 2}})
    };
    serde_json::json!({
        "mix": {"datasets": [component([0, 1, 2, 3], 5), component([4, 5, 6, 7], 7)], "weights": [0.5, 0.5]},
        "pipeline": {"seed": 3, "batchSize": batch}
    })
}

/// [`assert_every_key_twice`] of what [`mixture_of_two_halves`] printed: a mixture names
/// each record `<component>/<key>`, and files 0 to 3 are component 0's.
pub fn assert_every_key_twice_in_its_component(all: &[String], lines: usize) {
    let mut keys: Vec<String> = (all.iter())
        .map(|key| {
            let (component, record) = key.split_once('/').unwrap_or_else(|| panic!("{key}: no component"));
            let file = record.strip_prefix("part-").and_then(|rest| rest.chars().next());
            let expected = if file.is_some_and(|file| file < '4') { "0" } else { "1" };
            assert_eq!(component, expected, "{key}");
            record.to_owned()
        })
        .collect();
    keys.sort();
    assert_every_key_twice(&keys, lines);
}

/// How many keys of `all` were printed other than once per epoch (`epochs` times), of the
/// `files` files of `lines` lines of [`write_line_files`]: `(missing, repeated)` records,
/// counted, with the first few of each named in the assertion's message by the caller.
pub fn count_off_by_key(all: &[String], files: usize, lines: usize, epochs: usize) -> (Vec<String>, Vec<String>) {
    let mut counts = std::collections::HashMap::with_capacity(files * lines);
    for key in all {
        *counts.entry(key.as_str()).or_insert(0usize) += 1;
    }
    let (mut missing, mut repeated) = (Vec::new(), Vec::new());
    for f in 0..files {
        for l in 1..=lines {
            let key = format!("part-{f}.txt:{l}");
            let n = counts.remove(key.as_str()).unwrap_or(0);
            missing.extend(std::iter::repeat_n(key.clone(), epochs.saturating_sub(n)));
            repeated.extend(std::iter::repeat_n(key, n.saturating_sub(epochs)));
        }
    }
    repeated.extend(counts.into_iter().flat_map(|(key, n)| std::iter::repeat_n(key.to_owned(), n)));
    (missing, repeated)
}

/// Lines printed so far to `outputs`.
pub fn lines_printed(outputs: &[PathBuf]) -> usize {
    outputs.iter().map(|p| std::fs::read(p).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count())).sum()
}

/// Waits (at most 2 minutes) until `outputs` hold `lines` lines in all.
pub fn wait_until_printed(outputs: &[PathBuf], lines: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while lines_printed(outputs) < lines {
        assert!(std::time::Instant::now() < deadline, "the consumers printed only {} lines", lines_printed(outputs));
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// What each consumer printed (its keys), once it exited with success; `end` says whether
/// each must have reached the end of the sequence. One still reading after 5 minutes
/// (replicas that wait for each other for ever) is killed and the test fails.
pub fn wait_for_consumers(consumers: Vec<std::process::Child>, outputs: &[PathBuf], end: bool) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let mut all = Vec::new();
    for (mut consumer, path) in consumers.into_iter().zip(outputs) {
        let status = loop {
            if let Some(status) = consumer.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = consumer.kill();
                let printed = keys_and_end(&std::fs::read(path).unwrap()).0.len();
                panic!("{} still reading after 5 minutes ({printed} records printed)", path.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let (keys, last) = keys_and_end(&std::fs::read(path).unwrap());
        let stderr = std::fs::read_to_string(path.with_extension("err")).unwrap_or_default();
        assert!(status.success(), "{}: {status}, last line {last}, stderr: {}", path.display(), stderr.trim());
        assert!(!end || last["end_of_sequence"] == true, "{}: last line {last}", path.display());
        all.extend(keys);
    }
    all
}

/// `all` holds every key of `write_lines(_, lines)` at least twice (two epochs), and a
/// key more often only if `killed_keys` (what a consumer killed mid-read printed) holds
/// it: the killed consumer printed it and died before its acknowledgement was answered,
/// `most_again` keys at most (its last batch).
pub fn assert_every_key_twice_but_the_killeds_last(
    all: &[String],
    killed_keys: &[String],
    lines: usize,
    most_again: usize,
) {
    let mut counts = std::collections::BTreeMap::new();
    for key in all {
        *counts.entry(key.as_str()).or_insert(0usize) += 1;
    }
    let expected = every_key_twice(lines);
    let missing: Vec<&String> =
        expected.iter().step_by(2).filter(|key| counts.get(key.as_str()).copied().unwrap_or(0) < 2).collect();
    assert!(missing.is_empty(), "lost: {:?}", &missing[..missing.len().min(5)]);
    let again: Vec<&str> = counts.iter().filter(|(_, n)| **n > 2).map(|(k, _)| *k).collect();
    assert!(again.len() <= most_again, "printed again: {again:?}");
    assert!(
        again.iter().all(|key| killed_keys.iter().any(|k| k == key)),
        "printed again but not by the killed consumer: {again:?}"
    );
}

/// What one `readerctl read` of shared reader `team/train` of the spec at `spec_path`
/// through `addr` printed: its elements' record keys, in order. It must end at the end of
/// the sequence.
pub fn read_shared(addr: &str, spec_path: &str) -> Vec<String> {
    let args = ["read", "--spec", spec_path, "--container", "team", "--shared-name", "train", "--output", "jsonl"];
    let output = crate::readerctl(addr, &args);
    let lines = jsonl(&output.stdout);
    assert!(output.status.success(), "readerctl failed: {lines:?}\n{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(lines.last().unwrap()["end_of_sequence"], true, "{:?}", lines.last());
    keys_and_end(&output.stdout).0
}
