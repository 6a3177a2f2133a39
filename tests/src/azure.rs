//! A real Azure Blob protocol server for the end-to-end tests of `az://` data roots:
//! Azurite (`npm install -g azurite`, installed by `.ci/run`) on an ephemeral port with
//! its well-known development account, filled with Microsoft's own Python client
//! (`azure-storage-blob`, `pip install -r tests/requirements.txt`).

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Azurite's development account (public, documented by Microsoft).
pub const ACCOUNT: &str = "devstoreaccount1";
const ACCOUNT_KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
const INSTALL_HINT: &str = "Azurite and azure-storage-blob are needed: `npm install -g azurite` and \
                            `python3 -m pip install -r tests/requirements.txt`";

/// An Azurite blob server on an ephemeral port of 127.0.0.1, killed on drop.
pub struct AzuriteServer {
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    child: Child,
    dir: tempfile::TempDir,
}

impl AzuriteServer {
    pub fn start() -> AzuriteServer {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::fs::File::create(dir.path().join("azurite.log")).unwrap();
        let child = Command::new("azurite-blob")
            .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string(), "--skipApiVersionCheck", "--location"])
            .arg(dir.path().join("data"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot run azurite-blob ({err}): {INSTALL_HINT}"));
        let mut server = AzuriteServer { endpoint: format!("http://127.0.0.1:{port}"), child, dir };
        let log = server.dir.path().join("azurite.log");
        crate::wait_for_port(&mut server.child, port, "Azurite", INSTALL_HINT, || {
            std::fs::read_to_string(&log).unwrap_or_default()
        });
        server
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("azurite.log")).unwrap_or_default()
    }

    fn connection_string(&self) -> String {
        format!(
            "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={}/{ACCOUNT};",
            self.endpoint
        )
    }

    /// Creates `container` and uploads every file under `dir` as `prefix/<relative path>`,
    /// with Microsoft's Python client.
    pub fn upload_dir(&self, container: &str, prefix: &str, dir: &Path) {
        let script = r#"
import os, sys
from azure.storage.blob import BlobServiceClient
connection, container, prefix, root = sys.argv[1:5]
client = BlobServiceClient.from_connection_string(connection).get_container_client(container)
if not client.exists():
    client.create_container()
for folder, _, files in os.walk(root):
    for name in files:
        path = os.path.join(folder, name)
        key = os.path.relpath(path, root).replace(os.sep, "/")
        with open(path, "rb") as data:
            client.upload_blob(f"{prefix}/{key}" if prefix else key, data, overwrite=True)
"#;
        let output = Command::new("python3")
            .args(["-c", script, &self.connection_string(), container, prefix])
            .arg(dir)
            .output()
            .unwrap();
        assert!(output.status.success(), "upload failed: {}\n{INSTALL_HINT}", String::from_utf8_lossy(&output.stderr));
    }

    /// Environment for a readerd process to reach this Azurite (object_store's emulator
    /// settings and the development account).
    pub fn azure_env(&self) -> Vec<(String, String)> {
        [
            ("AZURE_STORAGE_USE_EMULATOR", "true"),
            ("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT),
            ("AZURE_STORAGE_ACCOUNT_KEY", ACCOUNT_KEY),
            ("AZURITE_BLOB_STORAGE_URL", self.endpoint.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }
}

impl Drop for AzuriteServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
