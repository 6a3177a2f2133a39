//! Exactly once across consumers: several `readerctl read` processes share one reader over
//! two epochs; one is killed (SIGKILL) mid-epoch while elements it was given are still
//! unacknowledged. What every process acknowledged (printed) is exactly two copies of the
//! dataset: nothing lost, nothing twice.

use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

use readerd_tests::{ServerProcess, binary, write_file};
use serde_json::Value;

const LINES: usize = 3000;

fn readerctl_command(addr: &str, spec: &str) -> Command {
    let mut command = Command::new(binary("readerctl"));
    command
        .args(["--addr", addr, "read", "--spec", spec, "--container", "train", "--shared-name", "shared"])
        .args(["--output", "jsonl"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    command
}

fn keys_of_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("seq").is_some())
        .flat_map(|line| {
            line["keys"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_owned()).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn four_consumers_one_killed_acknowledge_every_element_exactly_once() {
    let root = tempfile::tempdir().unwrap();
    let text: String = (0..LINES).map(|l| format!("line {l:05} {}\n", "x".repeat(40))).collect();
    write_file(root.path(), "data.txt", text.as_bytes());
    let spec = root.path().join("spec.json");
    std::fs::write(
        &spec,
        r#"{"source": {"files": ["data.txt"], "format": "TEXT_LINE"}, "pipeline": {"numEpochs": 2}}"#,
    )
    .unwrap();
    let spec = spec.to_str().unwrap().to_owned();
    let server = ServerProcess::start(&[root.path()]);

    // The victim: nobody reads its stdout, so once the pipe is full it stops printing
    // (and acknowledging) while its stream still holds elements.
    let mut victim = readerctl_command(&server.addr, &spec).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // Survivors print freely: their output is read as it comes.
    let survivors: Vec<_> = (0..3)
        .map(|_| {
            let mut survivor = readerctl_command(&server.addr, &spec).spawn().unwrap();
            let stdout = survivor.stdout.take().unwrap();
            let reader = std::thread::spawn(move || {
                let mut output = String::new();
                BufReader::new(stdout).read_to_string(&mut output).unwrap();
                output
            });
            (survivor, reader)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    victim.kill().unwrap();
    victim.wait().unwrap();
    let mut victim_output = String::new();
    victim.stdout.take().unwrap().read_to_string(&mut victim_output).unwrap();
    // Only complete lines were printed (and so acknowledged); a cut last line was not.
    let complete = victim_output.rfind('\n').map_or("", |end| &victim_output[..=end]);
    let victim_keys = keys_of_lines(complete);
    assert!(!victim_keys.is_empty() && victim_keys.len() < LINES, "killed mid-epoch: {} lines", victim_keys.len());

    // readerctl acknowledges a line right after printing it: the victim's last printed
    // line may have been killed before its acknowledgement, and then printed again
    // (DESIGN: "elements printed by a process killed before it acknowledged them may be
    // printed again by another").
    let victim_last = victim_keys.last().cloned();
    let mut keys = victim_keys;
    for (mut survivor, reader) in survivors {
        let output = reader.join().unwrap();
        assert!(survivor.wait().unwrap().success());
        let last: Value = serde_json::from_str(output.lines().last().unwrap()).unwrap();
        assert_eq!(last["end_of_sequence"], true);
        keys.extend(keys_of_lines(&output));
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for key in keys {
        *counts.entry(key).or_default() += 1;
    }
    assert_eq!(counts.len(), LINES, "every line was acknowledged");
    let wrong: Vec<_> =
        counts.iter().filter(|&(key, &n)| n != 2 && !(n == 3 && Some(key) == victim_last.as_ref())).take(5).collect();
    assert!(wrong.is_empty(), "each line exactly once per epoch; off: {wrong:?}");
}
