//! A PostgreSQL database of a test's own on the real server (`READERD_TEST_POSTGRES_URL`;
//! `.ci/run` sets it), for replicas sharing a state store.

/// A database of its own, dropped at the end.
pub struct Database {
    admin: String,
    name: String,
}

impl Database {
    /// `None` (saying so) when `READERD_TEST_POSTGRES_URL` is not set.
    pub fn new() -> Option<Database> {
        let Ok(admin) = std::env::var("READERD_TEST_POSTGRES_URL") else {
            eprintln!("READERD_TEST_POSTGRES_URL is not set: replicas are not tested here (.ci/run sets it)");
            return None;
        };
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let name = format!("readerd_replicas_{}_{nanos}", std::process::id());
        let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
        client.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        Some(Database { admin, name })
    }

    /// The database's URL: the admin URL with its database replaced.
    pub fn url(&self) -> String {
        let (base, _) = self.admin.rsplit_once('/').unwrap();
        format!("{base}/{}", self.name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

/// A PostgreSQL server of a test's own, from the installed binaries (`initdb`, `pg_ctl`)
/// on a port of its own, that the test stops and starts (never the machine's shared
/// one). Run as the `postgres` user when the test runs as root (PostgreSQL refuses root).
pub struct OwnPostgres {
    _dir: tempfile::TempDir,
    data: std::path::PathBuf,
    log: std::path::PathBuf,
    bin: std::path::PathBuf,
    port: u16,
}

impl OwnPostgres {
    /// A new cluster (trust authentication, no fsync), started.
    pub fn start() -> OwnPostgres {
        let dir = tempfile::tempdir().unwrap();
        let (data, log) = (dir.path().join("data"), dir.path().join("postgres.log"));
        let port = crate::free_address().rsplit_once(':').unwrap().1.parse().unwrap();
        let server = OwnPostgres { bin: bin_dir(), data, log, port, _dir: dir };
        if running_as_root() {
            let chown = std::process::Command::new("chown").args(["-R", "postgres"]).arg(server._dir.path()).status();
            assert!(chown.unwrap().success(), "chown the test's PostgreSQL folder to postgres");
        }
        let data = server.data.to_str().unwrap().to_owned();
        server.run("initdb", &["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"]);
        server.start_again();
        server
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server (`pg_ctl stop -m fast`: every session is ended, as when an
    /// operator stops or restarts it).
    pub fn stop(&self) {
        let data = self.data.to_str().unwrap().to_owned();
        self.run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"]);
    }

    /// Starts the stopped server again, on the same port and data.
    pub fn start_again(&self) {
        let (data, log) = (self.data.to_str().unwrap().to_owned(), self.log.to_str().unwrap().to_owned());
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off -c max_connections=100",
            self.port
        );
        self.run("pg_ctl", &["-D", &data, "-l", &log, "-o", &options, "-w", "-t", "60", "start"]);
    }

    fn run(&self, program: &str, args: &[&str]) {
        let program = self.bin.join(program);
        let output = if running_as_root() {
            std::process::Command::new("runuser").args(["-u", "postgres", "--"]).arg(&program).args(args).output()
        } else {
            std::process::Command::new(&program).args(args).output()
        }
        .unwrap_or_else(|err| panic!("run {}: {err}", program.display()));
        assert!(
            output.status.success(),
            "{} {args:?}: {}{}\n{}",
            program.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let data = self.data.to_str().unwrap().to_owned();
        let program = self.bin.join("pg_ctl");
        let args = ["-D", data.as_str(), "-m", "immediate", "stop"];
        let _ = if running_as_root() {
            std::process::Command::new("runuser").args(["-u", "postgres", "--"]).arg(&program).args(args).output()
        } else {
            std::process::Command::new(&program).args(args).output()
        };
    }
}

/// Where the installed PostgreSQL's server programs are (`pg_config --bindir`, else the
/// newest `/usr/lib/postgresql/*/bin`).
fn bin_dir() -> std::path::PathBuf {
    if let Ok(output) = std::process::Command::new("pg_config").arg("--bindir").output() {
        let dir = std::path::PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut versions: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's server programs (initdb, pg_ctl) are installed")
        .filter_map(|entry| Some(entry.ok()?.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().expect("initdb under /usr/lib/postgresql/*/bin")
}

fn running_as_root() -> bool {
    std::process::Command::new("id").arg("-u").output().is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}
