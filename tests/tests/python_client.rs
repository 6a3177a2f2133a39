//! The Python client's own tests (pytest, in `client/python/tests`), run against this
//! build's `readerd` and `readerctl`: the Arrow Flight plane as pyarrow sees it, resume,
//! reconnection, gRPC reflection and the training-loop example. They need python3 with
//! pyarrow, numpy, pytest, grpcio and grpcio-reflection (`pip install -r
//! client/python/requirements-test.txt`; `.ci/run` does it).

use std::path::Path;
use std::process::Command;

#[test]
fn python_client_tests_pass() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let ready =
        Command::new("python3").args(["-c", "import pyarrow.flight, numpy, pytest, grpc, grpc_reflection"]).output();
    match ready {
        Ok(out) if out.status.success() => {}
        other => panic!(
            "python3 with pyarrow, numpy, pytest, grpcio and grpcio-reflection is needed: pip install -r client/python/requirements-test.txt\n{other:?}"
        ),
    }
    let status = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "client/python/tests"])
        .current_dir(repo)
        .env("READERD_BIN", readerd_tests::binary("readerd"))
        .env("READERCTL_BIN", readerd_tests::binary("readerctl"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .status()
        .expect("run pytest");
    assert!(status.success(), "pytest client/python/tests failed (its output is above)");
}
