//! readerd's command line offers the flags and variables of the scripted contract
//! (DESIGN.md), and refuses a bad configuration at start, not at first use.

use std::process::Command;

#[test]
fn help_lists_the_contract_flags_and_variables() {
    let output = Command::new(env!("CARGO_BIN_EXE_readerd")).arg("--help").output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for flag in
        ["--listen", "--data-root", "--state-dir", "--state-url", "--allow-unauthenticated", "--max-record-bytes"]
    {
        assert!(help.contains(flag), "readerd --help lacks {flag}");
    }
    for variable in ["READERD_LISTEN", "READERD_DATA_ROOT", "READERD_STATE_DIR", "READERD_STATE_URL"] {
        assert!(help.contains(variable), "readerd --help lacks {variable}");
    }
}

#[test]
fn bad_configuration_fails_at_start() {
    let state = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_readerd"))
            .args(["--listen", "127.0.0.1:0", "--allow-unauthenticated", "--state-dir"])
            .arg(state.path())
            .args(args)
            .output()
            .unwrap()
    };
    let missing_root = run(&["--data-root", "/definitely/not/here"]);
    assert!(!missing_root.status.success());
    assert!(String::from_utf8_lossy(&missing_root.stderr).contains("/definitely/not/here"));
    let bad_url = run(&["--data-root", "/tmp", "--state-url", "mysql://x"]);
    assert!(!bad_url.status.success());
    assert!(String::from_utf8_lossy(&bad_url.stderr).contains("unsupported state URL"));
    let unreachable = run(&["--data-root", "/tmp", "--state-url", "postgres://postgres:s3cret@127.0.0.1:1/test"]);
    assert!(!unreachable.status.success());
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert!(stderr.contains("state store postgres://postgres:***@127.0.0.1:1/test"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "the password is never printed: {stderr}");
}
