//! Process signals for a daemon: SIGTERM and SIGINT end it, SIGHUP asks it to reload its configuration.
//! Handlers only set flags (signal-hook); the main thread waits for them.

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals as SignalIterator;

/// What a signal asks the daemon to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Stop (SIGTERM, SIGINT).
    Terminate,
    /// Re-read the configuration and apply the difference (SIGHUP).
    Reload,
}

/// The daemon's signals, installed before it starts serving so none is missed.
#[derive(Debug)]
pub struct Signals(SignalIterator);

impl Signals {
    /// Install handlers for SIGTERM, SIGINT and SIGHUP.
    pub fn new() -> std::io::Result<Self> {
        Ok(Signals(SignalIterator::new([SIGTERM, SIGINT, SIGHUP])?))
    }

    /// Block until a signal arrives and say what it asks for.
    pub fn wait(&mut self) -> Request {
        match self.0.forever().next() {
            Some(SIGHUP) => {
                tracing::info!("SIGHUP: reloading the configuration");
                Request::Reload
            }
            Some(signal) => {
                tracing::info!(signal, "termination signal");
                Request::Terminate
            }
            // The iterator only ends when closed, which nothing here does; treat it as a request to stop.
            None => Request::Terminate,
        }
    }

    /// Block until SIGTERM or SIGINT arrives, ignoring SIGHUP.
    pub fn wait_for_termination(mut self) {
        while self.wait() != Request::Terminate {}
    }
}
