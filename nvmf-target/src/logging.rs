//! Log setup for the daemon: `tracing` to stderr, filtered by `RUST_LOG` when set, else by `[logging] level`.

use nvmf_config::target::{LogFormat, LoggingConfig};
use tracing_subscriber::EnvFilter;

/// Install the global subscriber. JSON output is not built yet: it falls back to text with a warning.
pub fn init(config: &LoggingConfig) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.level));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    if config.format == LogFormat::Json {
        tracing::warn!("[logging] format = \"json\" is not supported by this build; logging as text");
    }
}
