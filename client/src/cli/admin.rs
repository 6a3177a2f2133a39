//! The calls that manage a server's readers (`list`, `stats`, `reset`, `delete`,
//! `reset-container`, `checkpoint`), `datasets`, and `health`.

use std::process::ExitCode;

use readerd_client::{Client, ConnectOptions, reader_ref, v1 as pb};
use serde_json::json;

use super::args::Output;

/// `readerctl list`: the readers of a container, one line each.
pub async fn list(mut client: Client, container: String, output: Output) -> anyhow::Result<ExitCode> {
    let request = pb::ListReadersRequest { container };
    let readers = client.service().list_readers(request).await?.into_inner().readers;
    for info in readers {
        let name = info.reader.unwrap_or_default();
        let stats = info.stats.unwrap_or_default();
        match output {
            Output::Jsonl => println!(
                "{}",
                json!({"container": name.container, "shared_name": name.shared_name,
                       "fingerprint": info.fingerprint, "records_produced": stats.records_produced,
                       "work_units_completed": stats.work_units_completed,
                       "active_streams": stats.active_streams})
            ),
            Output::Text => println!(
                "{}/{}  spec {}  records {}  files done {}  streams {}",
                name.container,
                name.shared_name,
                &info.fingerprint[..12.min(info.fingerprint.len())],
                stats.records_produced,
                stats.work_units_completed,
                stats.active_streams
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `readerctl stats`: a reader's counters, and each stream's deliveries.
pub async fn stats(mut client: Client, container: &str, shared_name: &str) -> anyhow::Result<ExitCode> {
    let request = pb::GetReaderStatsRequest { reader: Some(reader_ref(container, shared_name)) };
    let stats = client.service().get_reader_stats(request).await?.into_inner();
    println!(
        "records produced {}\nwork units completed {}\nelements produced {}\nrecords skipped {}\nactive streams {}",
        stats.records_produced,
        stats.work_units_completed,
        stats.elements_produced,
        stats.records_skipped,
        stats.active_streams
    );
    println!("files cut short {}", stats.files_cut_short);
    // Where its consumers' time goes (their clients' reports of the last 10 s).
    match stats.input_bound {
        Some(waiting) => println!("input-bound {:.1}%", 100.0 * waiting),
        None => println!("input-bound unknown (no consumer reported yet)"),
    }
    println!("replicas recommended {}", stats.replicas_recommended);
    println!(
        "elements in flight {}\nelements awaiting redelivery {}",
        stats.elements_in_flight, stats.elements_awaiting_redelivery
    );
    println!("elements decoded {}", stats.elements_decoded);
    // Jobs sharing its decoded elements: where each is, and how often it fell behind.
    for job in &stats.jobs {
        println!(
            "job {}: {} position {} shared {} decoded alone {} read again {} detachments {} reattachments {} streams {}",
            job.name,
            if job.attached { "attached" } else { "detached" },
            job.position,
            job.elements_shared,
            job.elements_decoded,
            job.elements_read_again,
            job.detachments,
            job.reattachments,
            job.active_streams
        );
    }
    for consumer in stats.consumers {
        println!(
            "stream {}: delivered {} acknowledged {} redelivered {}",
            consumer.stream_id, consumer.delivered, consumer.acknowledged, consumer.redelivered
        );
    }
    // A mixture: each component, in the spec's order.
    for (i, component) in stats.components.iter().enumerate() {
        println!(
            "component {i}: elements taken {} epochs completed {} records produced {}{}",
            component.elements_taken,
            component.epochs_completed,
            component.records_produced,
            if component.exhausted { " (exhausted)" } else { "" }
        );
    }
    // Served by replicas: the job on each of them, as the split ledger has it.
    for replica in stats.replicas {
        println!(
            "replica {} at {}{}: splits leased {} done {} elements in flight {} consumers {}",
            replica.replica_id,
            replica.address,
            if replica.alive { "" } else { " (no heartbeat)" },
            replica.splits_leased,
            replica.splits_done,
            replica.elements_in_flight,
            replica.consumers
        );
    }
    // Its job's skip and take, counted over every replica.
    for selection in stats.selections {
        let whose = match selection.scope {
            0 => String::new(),
            scope => format!(" of component {}", scope - 1),
        };
        println!("selection{whose} epoch {}: skipped {} taken {}", selection.epoch, selection.skipped, selection.taken);
    }
    Ok(ExitCode::SUCCESS)
}

/// `readerctl reset`: rewinds a reader to its first record.
pub async fn reset(mut client: Client, container: &str, shared_name: &str) -> anyhow::Result<ExitCode> {
    let request = pb::ResetReaderRequest { reader: Some(reader_ref(container, shared_name)) };
    client.service().reset_reader(request).await?;
    Ok(ExitCode::SUCCESS)
}

/// `readerctl delete`: releases a reader with every job on it, or job `job` alone; their
/// streams end.
pub async fn delete(mut client: Client, container: &str, shared_name: &str, job: &str) -> anyhow::Result<ExitCode> {
    let request = pb::DeleteReaderRequest { reader: Some(reader_ref(container, shared_name)), job: job.to_owned() };
    client.service().delete_reader(request).await?;
    Ok(ExitCode::SUCCESS)
}

/// `readerctl checkpoint`: checkpoints a shared reader as a whole and prints the token.
pub async fn checkpoint(mut client: Client, container: &str, shared_name: &str, job: &str) -> anyhow::Result<ExitCode> {
    let reader = Some(reader_ref(container, shared_name));
    let request = pb::CheckpointRequest { reader, job: job.to_owned(), ..Default::default() };
    let token = client.service().checkpoint(request).await?.into_inner().token;
    println!("{}", json!({"checkpoint": token}));
    Ok(ExitCode::SUCCESS)
}

/// `readerctl datasets`: the datasets the server defines by name, with their specs.
pub async fn datasets(mut client: Client) -> anyhow::Result<ExitCode> {
    let datasets = client.service().list_datasets(pb::ListDatasetsRequest {}).await?.into_inner().datasets;
    for (name, spec) in datasets {
        println!("{name}\t{}", serde_json::to_string(&spec)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// `readerctl reset-container`: releases every reader of a container.
pub async fn reset_container(mut client: Client, container: String) -> anyhow::Result<ExitCode> {
    let released = client.service().reset_container(pb::ResetContainerRequest { container }).await?;
    println!("released {} readers", released.into_inner().readers_released);
    Ok(ExitCode::SUCCESS)
}

/// The gRPC health check of the data service (container health checks, probes).
pub async fn health(addr: &str, options: &ConnectOptions) -> anyhow::Result<ExitCode> {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let status = async {
        let channel = Client::channel(addr, options).await?;
        let request = HealthCheckRequest { service: "readerd.v1.DataService".into() };
        anyhow::Ok(HealthClient::new(channel).check(request).await?.into_inner().status())
    };
    match tokio::time::timeout(std::time::Duration::from_secs(5), status).await {
        Ok(Ok(ServingStatus::Serving)) => {
            println!("SERVING");
            Ok(ExitCode::SUCCESS)
        }
        Ok(Ok(other)) => {
            println!("{}", other.as_str_name());
            Ok(ExitCode::FAILURE)
        }
        Ok(Err(err)) => {
            println!("UNREACHABLE: {err:#}");
            Ok(ExitCode::FAILURE)
        }
        Err(_) => {
            println!("UNREACHABLE: no answer within 5 s");
            Ok(ExitCode::FAILURE)
        }
    }
}
