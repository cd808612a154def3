//! The control socket: [`nvmf_service::control`]'s JSON lines, with the host's [`HostProtocol`]; [`request`] is
//! the CLI's side.

use std::path::Path;

pub use nvmf_service::control::{ControlError, ControlServer, ServeError};

use super::protocol::{ControlReply, ControlRequest, HostProtocol};

/// Send `request` to the daemon at `path` and wait for its reply.
pub fn request(path: &Path, request: &ControlRequest) -> Result<ControlReply, ControlError> {
    nvmf_service::control::request::<HostProtocol>(path, request)
}
