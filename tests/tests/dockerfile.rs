//! The Dockerfile cannot be built here (no Docker engine), so this checks what it names
//! against the real binaries: the binaries it copies and runs, the environment variables
//! it sets, the port it exposes and listens on, and the health check command. It also checks
//! what a user of the container meets: the build context (`.dockerignore`), the user's ids,
//! log lines without escape codes, and a `/state` the user cannot write.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use readerd_tests::{ServerBuilder, ServerProcess, binary, golden_dir, readerctl};

fn help(name: &str, args: &[&str]) -> String {
    let output = Command::new(binary(name)).args(args).arg("--help").output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn dockerfile_names_what_the_binaries_offer() {
    let dockerfile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Dockerfile")).unwrap();
    let readerd_help = help("readerd", &[]);
    // Instructions, with `\` continuations joined.
    let instructions = dockerfile.replace("\\\n", " ");
    for line in instructions.lines() {
        if let Some(env) = line.strip_prefix("ENV ") {
            for assignment in env.split_whitespace() {
                let (name, _) = assignment.split_once('=').unwrap();
                assert!(readerd_help.contains(name), "readerd does not read {name}");
            }
        }
    }
    assert!(dockerfile.contains("--bin readerd --bin readerctl"));
    assert!(dockerfile.contains("/src/target/release/readerd /src/target/release/readerctl"));
    assert!(dockerfile.contains(r#"ENTRYPOINT ["readerd"]"#));
    let exposed: Vec<&str> =
        instructions.lines().find_map(|l| l.strip_prefix("EXPOSE ")).unwrap().split_whitespace().collect();
    let [exposed, metrics] = exposed[..] else { panic!("EXPOSE names the gRPC and the metrics ports") };
    assert!(instructions.contains(&format!("READERD_LISTEN=0.0.0.0:{exposed}")), "listens where it exposes");
    assert!(instructions.contains(&format!("READERD_METRICS_LISTEN=0.0.0.0:{metrics}")), "metrics where exposed");
    let health = dockerfile.lines().find(|l| l.starts_with("HEALTHCHECK")).unwrap();
    assert!(health.contains(&format!("http://127.0.0.1:{exposed}")) && health.contains(r#""health""#));
    assert!(help("readerctl", &[]).contains("health"));
}

#[test]
fn health_answers_for_a_serving_server_and_fails_without_one() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let output = readerctl(&server.addr, &["health"]);
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "SERVING");
    let output = readerctl("http://127.0.0.1:1", &["health"]);
    assert_eq!(output.status.code(), Some(1));
}

#[test]
fn dockerignore_keeps_history_build_output_and_state_out_of_the_context() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let ignore = std::fs::read_to_string(format!("{root}/.dockerignore")).expect(".dockerignore beside the Dockerfile");
    let patterns: Vec<&str> = ignore.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    for needed in [".git", "**/target", ".readerd-state", "**/*.db", "**/*.db-wal", "**/*.db-shm"] {
        assert!(patterns.contains(&needed), ".dockerignore does not leave out {needed}: {patterns:?}");
    }
    // What the build stages copy or read must stay in the context.
    for kept in ["Cargo.toml", "Cargo.lock", "proto", "server", "client", "tests", "examples"] {
        assert!(!patterns.iter().any(|p| p.trim_start_matches("**/") == kept), ".dockerignore leaves out {kept}");
    }
}

#[test]
fn readerd_user_and_group_are_10001() {
    let dockerfile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Dockerfile")).unwrap();
    assert!(dockerfile.contains("groupadd --system --gid 10001 readerd"), "readerd's group is gid 10001");
    assert!(dockerfile.contains("useradd --system --uid 10001 --gid 10001 "), "readerd is uid 10001 in group 10001");
    assert!(dockerfile.contains("chown readerd:readerd /state"));
}

/// `docker logs` reads a pipe or a file: the text log has no colour there.
#[test]
fn log_lines_have_no_escape_codes_when_stderr_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("readerd.log");
    let golden = golden_dir();
    let server = ServerBuilder::new(&[golden.to_str().unwrap()])
        .env(&[("RUST_LOG".into(), "info".into())])
        .stderr_log(&log_path)
        .start();
    assert!(readerctl(&server.addr, &["health"]).status.success());
    assert!(server.terminate());
    let log = std::fs::read(&log_path).unwrap();
    let text = String::from_utf8_lossy(&log);
    assert!(text.contains("INFO"), "no info line logged: {text}");
    assert!(!log.contains(&0x1b), "escape codes in a log written to a file: {text:?}");
}

/// A folder of the test's own that any user may enter (mode 0755) under `/tmp`, which
/// every user may enter too: the repository's own folders and `$TMPDIR` may lie under a
/// private home or a 0700 folder, where uid 10001 cannot look.
fn folder_any_user_enters() -> tempfile::TempDir {
    let base = Path::new("/tmp");
    let dir = if base.is_dir() { tempfile::tempdir_in(base) } else { tempfile::tempdir() }.unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Runs readerd on `state_dir` (as uid 10001 when the test runs as root, so that a folder
/// root owns is not writable to it) and returns its stderr; it must fail to start. Its
/// data root is an empty folder of its own that uid 10001 may read, and uid 10001 runs a
/// copy of the binary in another (the build's may lie in a folder it cannot enter).
fn start_failure(state_dir: &Path, as_uid_10001: bool) -> String {
    let data = folder_any_user_enters();
    let bin = folder_any_user_enters();
    let readerd = match as_uid_10001 {
        true => {
            let copy = bin.path().join("readerd");
            std::fs::copy(binary("readerd"), &copy).unwrap();
            copy
        }
        false => binary("readerd"),
    };
    let mut command = Command::new(readerd);
    command.args(["--listen", "127.0.0.1:0", "--allow-unauthenticated", "--state-dir"]).arg(state_dir);
    command.arg("--data-root").arg(data.path()).env("RUST_LOG", "error");
    if as_uid_10001 {
        command.uid(10001).gid(10001);
    }
    let output = command.output().unwrap();
    assert!(!output.status.success(), "readerd started on {}", state_dir.display());
    String::from_utf8(output.stderr).unwrap()
}

/// A host folder mounted at `/state` that the container's user cannot write: the error
/// names the folder, the uid and the fix, not SQLite's "unable to open database file".
#[test]
fn a_state_dir_readerd_cannot_write_is_named_with_the_fix() {
    let running_as_root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    let dir = folder_any_user_enters();

    // A folder owned by someone else (root, as a host folder is), or read-only to us.
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(if running_as_root { 0o755 } else { 0o555 }))
        .unwrap();
    let stderr = start_failure(&state, running_as_root);
    let uid = if running_as_root { 10001 } else { std::fs::metadata("/proc/self").unwrap().uid() };
    for needed in [
        format!("state directory {} is not writable by uid {uid}", state.display()),
        format!("chown -R {uid}"),
        "named volume".to_owned(),
    ] {
        assert!(stderr.contains(&needed), "{needed:?} not in: {stderr}");
    }
    assert!(!stderr.contains("unable to open database file"), "{stderr}");

    // Under a regular file: fails for root too.
    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let state = file.join("state");
    let stderr = start_failure(&state, false);
    assert!(stderr.contains(&format!("state directory {} is not writable", state.display())), "{stderr}");
    assert!(stderr.contains("chown -R") && stderr.contains("named volume"), "{stderr}");
}

#[test]
fn the_final_image_trusts_the_system_roots_and_the_build_caches_its_dependencies() {
    let dockerfile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Dockerfile")).unwrap();
    let final_stage = dockerfile.rsplit("\nFROM ").next().unwrap();
    assert!(final_stage.contains("ca-certificates"), "object stores over HTTPS verify against the system roots");
    let build = dockerfile.split("\nFROM ").nth(1).unwrap();
    assert!(
        build.contains("--mount=type=cache,target=/usr/local/cargo/registry")
            && build.contains("--mount=type=cache,target=/cache/target"),
        "a source change must not rebuild every dependency"
    );
}
