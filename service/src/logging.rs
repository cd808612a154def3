//! Log setup for a daemon: `tracing` to stderr, filtered by `RUST_LOG` when set, else by `[logging] level`, as
//! human-readable lines or one JSON object per line (`[logging] format`).

use nvmf_config::target::{LogFormat, LoggingConfig};
use tracing_subscriber::EnvFilter;

/// Install the global subscriber.
pub fn init(config: &LoggingConfig) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match config.format {
        LogFormat::Json => builder.json().try_init(),
        // Colours only on a terminal: a log file or the journal gets plain text.
        LogFormat::Text => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init(),
    };
}
