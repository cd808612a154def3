//! The daemon's signals (SIGTERM/SIGINT stop, SIGHUP reloads): `nvmf_service::signals`, shared with the host daemon.

pub use nvmf_service::signals::{Request, Signals};
