//! What the PostgreSQL tests of this crate share: a schema of their own in the real
//! PostgreSQL (`READERD_TEST_POSTGRES_URL`; `.ci/run` sets it), dropped at the end.

/// A fresh schema, dropped when the guard goes.
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
    /// `None` (and a note) where no PostgreSQL is configured.
    pub fn new(prefix: &str) -> Option<Schema> {
        let Ok(url) = std::env::var("READERD_TEST_POSTGRES_URL") else {
            eprintln!("READERD_TEST_POSTGRES_URL is not set: PostgreSQL is not tested here (.ci/run sets it)");
            return None;
        };
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        Some(Schema { url, name: format!("{prefix}_{}_{nanos}", std::process::id()) })
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let mut admin = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        admin.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name)).unwrap();
    }
}
