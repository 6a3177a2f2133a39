//! The framework adapters' tests, with real TensorFlow and torch: `readerd.tf`
//! (`client/python/tests/test_tf.py`: element specs of every kind of spec, values as
//! TensorFlow parses them, a Keras `fit` and a `tf.train.Checkpoint` loop killed with
//! SIGKILL and resumed) and `readerd.torch` (`test_torch.py`: writable tensors, refused
//! double batching, `state_dict`/`load_state_dict` with 0 and 2 workers).
//!
//! The frameworks live in a venv of their own (`tests/run.sh` makes it; its python is
//! `READERD_ADAPTERS_PYTHON`, else `target/adapters-venv/bin/python`), with the readerd
//! wheel installed. Each file runs in its own process: DataLoader workers are forked, and
//! a process that imported TensorFlow forks badly.

use std::path::{Path, PathBuf};
use std::process::Command;

fn adapters_python(repo: &Path) -> PathBuf {
    let python = std::env::var_os("READERD_ADAPTERS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target/adapters-venv/bin/python"));
    let ready = Command::new(&python)
        .args(["-c", "import tensorflow, torch, pytest, readerd._native"])
        .current_dir(std::env::temp_dir())
        .output();
    match ready {
        Ok(out) if out.status.success() => python,
        other => panic!(
            "{} with tensorflow-cpu, torch, pytest and the readerd wheel is needed: `bash tests/run.sh` makes it \
             (or set READERD_ADAPTERS_PYTHON)\n{other:?}",
            python.display()
        ),
    }
}

fn pytest(file: &str) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let python = adapters_python(repo);
    let status = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", file])
        .current_dir(repo)
        .env("READERD_BIN", readerd_tests::binary("readerd"))
        .env("READERCTL_BIN", readerd_tests::binary("readerctl"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("TF_CPP_MIN_LOG_LEVEL", "2")
        .status()
        .expect("run pytest");
    assert!(status.success(), "pytest {file} failed (its output is above)");
}

#[test]
fn tensorflow_adapter_tests_pass() {
    pytest("client/python/tests/test_tf.py");
}

#[test]
fn torch_adapter_tests_pass() {
    pytest("client/python/tests/test_torch.py");
}
