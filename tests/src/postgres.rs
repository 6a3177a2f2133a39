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
