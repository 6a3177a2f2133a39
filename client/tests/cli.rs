//! readerctl's command line offers the flags of the scripted contract (DESIGN.md).
//! (Also: this integration test makes `cargo test` build the readerctl binary that the
//! end-to-end tests in tests/ run.)

use std::process::Command;

fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_readerctl")).args(args).arg("--help").output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn read_offers_the_contract_flags() {
    let read = help(&["read"]);
    for flag in [
        "--addr",
        "--spec",
        "--container",
        "--shared-name",
        "--resume",
        "--max-batches",
        "--checkpoint-every",
        "--output",
    ] {
        assert!(read.contains(flag), "readerctl read --help lacks {flag}:\n{read}");
    }
    assert!(read.contains("jsonl"));
    let top = help(&[]);
    for command in ["read", "list", "stats", "reset", "delete", "reset-container"] {
        assert!(top.contains(command), "readerctl --help lacks {command}:\n{top}");
    }
}

#[test]
fn unreachable_server_is_a_clear_failure() {
    let output =
        Command::new(env!("CARGO_BIN_EXE_readerctl")).args(["--addr", "http://127.0.0.1:1", "list"]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot connect to http://127.0.0.1:1"));
}
