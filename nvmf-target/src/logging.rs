//! Log setup for the daemon: `tracing` to stderr, filtered by `RUST_LOG` when set, else by `[logging] level`.

use nvmf_config::target::{LogFormat, LoggingConfig};
use tracing_subscriber::EnvFilter;

/// Install the global subscriber. JSON output is not built yet: it falls back to text with a warning.
pub fn init(config: &LoggingConfig) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.level));
    // Colours only on a terminal: a log file or the journal gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).try_init();
    if config.format == LogFormat::Json {
        tracing::warn!("[logging] format = \"json\" is not supported by this build; logging as text");
    }
}
