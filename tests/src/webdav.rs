//! A real HTTP file server for the end-to-end tests of `http://` data roots: WsgiDAV
//! (`pip install -r tests/requirements.txt`), a WebDAV server, on an ephemeral port,
//! serving a copy of the folders it is given. object_store reads `http(s)://` roots with
//! ranged GETs and lists them with WebDAV's PROPFIND, which a plain HTTP server lacks.

use std::path::Path;
use std::process::{Child, Command, Stdio};

const INSTALL_HINT: &str = "WsgiDAV is needed: `python3 -m pip install -r tests/requirements.txt`";

/// A WsgiDAV server on an ephemeral port of 127.0.0.1, killed on drop.
pub struct WebDavServer {
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    child: Child,
    dir: tempfile::TempDir,
}

impl WebDavServer {
    /// Serves every `(prefix, dir)`: the files under `dir` at `/<prefix>/<relative path>`.
    pub fn start(folders: &[(&str, &Path)]) -> WebDavServer {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        for (prefix, source) in folders {
            crate::copy_dir(source, &root.join(prefix));
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::fs::File::create(dir.path().join("webdav.log")).unwrap();
        let child = Command::new("python3")
            .args([
                "-m",
                "wsgidav.server.server_cli",
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--auth",
                "anonymous",
            ])
            .arg("--root")
            .arg(&root)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("python3 -m wsgidav ({err}): {INSTALL_HINT}"));
        let mut server = WebDavServer { endpoint: format!("http://127.0.0.1:{port}"), child, dir };
        let log = server.dir.path().join("webdav.log");
        crate::wait_for_port(&mut server.child, port, "WsgiDAV", INSTALL_HINT, || {
            std::fs::read_to_string(&log).unwrap_or_default()
        });
        server
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("webdav.log")).unwrap_or_default()
    }
}

impl Drop for WebDavServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
