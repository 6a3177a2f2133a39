//! A plain HTTP server that misbehaves on purpose (tests/hostile_http.py, Python's
//! standard library only), as a separate process on an ephemeral port: redirects
//! (`redirect*`, `redirect-get*`), Range ignored (`norange*`), ranged bodies far longer
//! than asked for (`long*`). Every request it receives is logged, so a test can check
//! that a server was never reached.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A hostile_http.py process, killed on drop.
pub struct HostileHttp {
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    child: Child,
    dir: tempfile::TempDir,
}

impl HostileHttp {
    /// Serves the `files` (name, bytes) at `/<name>`, with `args` added
    /// (`--redirect-to URL`, `--long-bytes N`).
    pub fn start(files: &[(&str, &[u8])], args: &[&str]) -> HostileHttp {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        for (name, bytes) in files {
            crate::write_file(&root, name, bytes);
        }
        std::fs::create_dir_all(&root).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hostile_http.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg("--dir")
            .arg(&root)
            .arg("--log")
            .arg(dir.path().join("requests.log"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|err| panic!("python3 tests/hostile_http.py: {err}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("hostile_http.py: {line:?}"));
        HostileHttp { endpoint: format!("http://127.0.0.1:{port}"), child, dir }
    }

    /// The requests received so far, one `METHOD PATH` a line.
    pub fn requests(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("requests.log")
    }
}

impl Drop for HostileHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
