//! Logging: `tracing` to stderr, filtered by `RUST_LOG` (default `info`), text or JSON.
//!
//! The text format is coloured only when stderr is a terminal and `NO_COLOR` is unset or
//! empty (<https://no-color.org>): `docker logs` and `kubectl logs` read a pipe or a file,
//! where escape codes only get in the way.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(use_colour(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR")));
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Whether log lines are coloured: on a terminal, unless `NO_COLOR` has a non-empty value.
fn use_colour(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    let no_color = no_color.is_some_and(|value| !value.is_empty());
    stderr_is_terminal && !no_color
}

#[cfg(test)]
mod tests {
    use super::use_colour;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some("".into())));
        assert!(!use_colour(true, Some("1".into())));
        assert!(!use_colour(false, None));
        assert!(!use_colour(false, Some("1".into())));
    }
}
