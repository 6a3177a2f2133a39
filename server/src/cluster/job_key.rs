//! [`JobKey`]: which job of the split ledger a reading is, typed: a shared reader
//! `(container, shared_name)` has one ledger job per consumer group (`ReadRequest.job`,
//! `default` for the shared reader itself) and, on each replica where its jobs share a
//! window of decoded elements, one for the window's own reading. The ledger keeps the three
//! parts in columns of their own (`readerd_jobs.container, shared_name, job`); nothing is
//! named after a job.

use std::fmt;

/// The job a stream belongs to when it names none: the shared reader itself.
pub const DEFAULT_JOB: &str = "default";

/// A job of the split ledger: a shared reader's reading, as its consumer group `job` or as
/// its jobs' window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobKey {
    pub container: String,
    pub shared_name: String,
    pub reading: Reading,
}

/// Whose reading of a shared reader a ledger job holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reading {
    /// A consumer group's (`default`: the shared reader's own).
    Job(String),
    /// The window its jobs share on a replica: the splits it leases decide what it decodes,
    /// never what a job delivers (each job's own ledger job does).
    Window,
}

impl JobKey {
    /// Consumer group `job`'s reading of `container/shared_name`.
    pub fn job(container: &str, shared_name: &str, job: &str) -> Self {
        Self {
            container: container.to_owned(),
            shared_name: shared_name.to_owned(),
            reading: Reading::Job(job.to_owned()),
        }
    }

    /// The reading of the window `container/shared_name`'s jobs share on a replica.
    pub fn window(container: &str, shared_name: &str) -> Self {
        Self { container: container.to_owned(), shared_name: shared_name.to_owned(), reading: Reading::Window }
    }

    /// The ledger's `job` column: the group's name, or `''` for the window (no group is
    /// named `''`: a request that names none reads as `default`).
    pub fn job_column(&self) -> &str {
        match &self.reading {
            Reading::Job(job) => job,
            Reading::Window => "",
        }
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { container, shared_name, reading } = self;
        match reading {
            Reading::Job(job) if job == DEFAULT_JOB => write!(f, "{container}/{shared_name}"),
            Reading::Job(job) => write!(f, "{container}/{shared_name}, job {job}"),
            Reading::Window => write!(f, "{container}/{shared_name}, its jobs' window"),
        }
    }
}
