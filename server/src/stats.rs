//! A reader's stats as `GetReaderStats` (and every call that returns stats) answers
//! them: its counters and its consumers' input-bound share ([`to_pb`]), and for a shared
//! name its jobs' figures and its coordinator's reports ([`of_shared_reader`]).

use readerd_proto::v1 as pb;

use crate::error::{Result, ServeError};
use crate::reader::Reader;
use crate::registry::ReaderRegistry;

/// A reader's counters for the wire, with its consumers' input-bound share and the
/// replicas recommended for it as its coordinator last saw the servers serving it
/// (derived from the consumers' figures in its stats, so every call that returns stats
/// agrees). Asks nothing.
pub fn to_pb(reader: &Reader) -> pb::ReaderStats {
    let stats = reader.stats();
    let serving = reader.coordinator().servers_serving();
    let input_bound =
        crate::watch::consumer_time::input_bound(stats.consumers.iter().filter_map(|consumer| consumer.time));
    pb::ReaderStats {
        records_produced: stats.records_produced as i64,
        work_units_completed: stats.work_units_completed as i64,
        elements_produced: stats.elements_produced as i64,
        records_skipped: stats.records_skipped as i64,
        files_cut_short: stats.files_cut_short as i64,
        consumers: stats
            .consumers
            .into_iter()
            .map(|c| pb::ConsumerStats {
                stream_id: c.stream_id,
                delivered: c.delivered as i64,
                acknowledged: c.acknowledged as i64,
                redelivered: c.redelivered as i64,
                input_bound: c.time.and_then(|time| time.input_bound()),
                elements_per_second: c.time.and_then(|time| time.elements_per_second()),
            })
            .collect(),
        elements_in_flight: stats.elements_in_flight as i64,
        elements_awaiting_redelivery: stats.elements_awaiting_redelivery as i64,
        active_streams: stats.active_streams as i64,
        replicas: Vec::new(),
        components: stats.components,
        selections: Vec::new(),
        input_bound,
        replicas_recommended: crate::watch::replicas_recommended(serving, input_bound) as i64,
        elements_decoded: stats.elements_decoded as i64,
        jobs: Vec::new(),
    }
}

/// Shared reader `container/shared_name`'s stats: its job `default`'s reader's, with the
/// figures of its other jobs, and every server's report on it as its coordinator gives
/// them (blocking: on replicas, asks the ledger). Only jobs other than `default` reading
/// it: their figures.
pub fn of_shared_reader(registry: &ReaderRegistry, container: &str, shared_name: &str) -> Result<pb::ReaderStats> {
    let (decoded, jobs) = registry.job_stats(container, shared_name);
    let reader = match registry.get(container, shared_name) {
        Ok(reader) => reader,
        Err(ServeError::ReaderNotFound(_)) if !jobs.is_empty() => {
            let active_streams = jobs.iter().map(|job| job.active_streams).sum();
            return Ok(pb::ReaderStats {
                elements_decoded: decoded as i64,
                jobs,
                active_streams,
                ..Default::default()
            });
        }
        Err(err) => return Err(err),
    };
    let mut stats = to_pb(&reader);
    stats.elements_decoded += decoded as i64;
    stats.jobs = jobs;
    if let Some((replicas, selections)) = reader.coordinator().job_reports()? {
        let serving = replicas.iter().filter(|replica| replica.alive).count() as u64;
        stats.replicas_recommended = crate::watch::replicas_recommended(serving, stats.input_bound) as i64;
        stats.selections = selections.iter().map(pb::EpochSelection::from).collect();
        stats.replicas = replicas
            .into_iter()
            .map(|replica| pb::ReplicaStats {
                replica_id: replica.replica,
                address: replica.address,
                alive: replica.alive,
                splits_leased: replica.splits_leased as i64,
                elements_in_flight: replica.elements_in_flight as i64,
                consumers: replica.consumers as i64,
                splits_done: replica.splits_done as i64,
                heartbeat_age_seconds: replica.heartbeat_age,
            })
            .collect();
    }
    Ok(stats)
}
