//! SIGINT / SIGTERM: the first starts a graceful drain, the second (or the grace period
//! running out) exits at once.

use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

/// Resolves at the first SIGINT or SIGTERM.
pub async fn signal_received() {
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut interrupt = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
}

/// Exits the process at a second signal or after `grace`, whichever comes first.
pub async fn exit_after(grace: Duration) {
    tokio::select! {
        _ = signal_received() => tracing::warn!("second signal, exiting now"),
        _ = tokio::time::sleep(grace) => tracing::warn!(?grace, "shutdown grace period over, exiting now"),
    }
    std::process::exit(1);
}
