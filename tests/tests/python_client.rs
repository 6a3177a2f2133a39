//! The Python client's own tests (pytest, in `client/python/tests`), run against this
//! build's `readerd` and `readerctl`: the installed `readerd` package (its native core,
//! the Rust client) for tensors, resume, reconnection, shared readers and the
//! training-loop example; the Arrow Flight plane as plain pyarrow sees it; gRPC
//! reflection. They need the package installed (`pip install ./client/python`, which
//! builds it with maturin) and python3 with pyarrow, numpy, pytest, grpcio and
//! grpcio-reflection (`pip install -r client/python/requirements-test.txt`); `.ci/run`
//! does both.

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
    // From outside the repository: the installed package, not the sources.
    let installed =
        Command::new("python3").args(["-c", "import readerd._native"]).current_dir(std::env::temp_dir()).output();
    match installed {
        Ok(out) if out.status.success() => {}
        other => panic!("the readerd package is needed: pip install ./client/python\n{other:?}"),
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
