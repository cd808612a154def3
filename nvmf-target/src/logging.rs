//! Log setup (`[logging]` level and text/JSON format, `RUST_LOG` preferred): `nvmf_service::logging`, shared with
//! the host daemon.

pub use nvmf_service::logging::init;
