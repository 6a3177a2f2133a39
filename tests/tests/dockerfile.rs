//! The Dockerfile cannot be built here (no Docker engine), so this checks what it names
//! against the real binaries: the binaries it copies and runs, the environment variables
//! it sets, the port it exposes and listens on, and the health check command.

use std::process::Command;

use readerd_tests::{ServerProcess, binary, golden_dir, readerctl};

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
