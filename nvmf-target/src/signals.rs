//! Process signals for the daemon: SIGTERM and SIGINT end it. Handlers only set flags (signal-hook); the main
//! thread waits for them.

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals as SignalIterator;

/// The termination signals, installed before the target starts so none is missed.
#[derive(Debug)]
pub struct Signals(SignalIterator);

impl Signals {
    /// Install handlers for SIGTERM and SIGINT.
    pub fn new() -> std::io::Result<Self> {
        Ok(Signals(SignalIterator::new([SIGTERM, SIGINT])?))
    }

    /// Block until SIGTERM or SIGINT arrives.
    pub fn wait_for_termination(mut self) {
        if let Some(signal) = self.0.forever().next() {
            tracing::info!(signal, "termination signal");
        }
    }
}
