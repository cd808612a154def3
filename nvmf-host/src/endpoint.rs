//! [`Endpoint`]: where a controller is reached, as NVMe-oF names it (TRTYPE, TRADDR, TRSVCID; nvme-cli's
//! `-t -a -s`), and its resolution to a socket address. The CLI's commands take it as arguments; the daemon
//! builds one from a `connect` request or a configured controller.

use std::net::{SocketAddr, ToSocketAddrs};

use clap::Args;

use crate::controller::Transport;

/// Where to connect (nvme-cli's `-t -a -s`).
#[derive(Debug, Clone, Args)]
pub struct Endpoint {
    /// Transport type.
    #[arg(short = 't', long = "transport", value_enum, default_value = "tcp")]
    pub transport: Transport,
    /// Transport address (IP address or host name).
    #[arg(short = 'a', long = "traddr")]
    pub traddr: String,
    /// Transport service id (TCP port).
    #[arg(short = 's', long = "trsvcid", default_value = "4420")]
    pub trsvcid: String,
}

/// An endpoint's address did not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot resolve {addr}:{port}: {reason}")]
pub struct ResolveError {
    /// TRADDR (`-a`).
    pub addr: String,
    /// TRSVCID (`-s`).
    pub port: String,
    /// Why.
    pub reason: String,
}

impl Endpoint {
    /// The socket address (an IP address on either transport: RDMA CM resolves it to the RDMA device). Blocks
    /// while a host name is looked up.
    pub fn resolve(&self) -> Result<SocketAddr, ResolveError> {
        let err = |reason: String| ResolveError { addr: self.traddr.clone(), port: self.trsvcid.clone(), reason };
        let port: u16 = self.trsvcid.parse().map_err(|e| err(format!("trsvcid: {e}")))?;
        let host = self.traddr.trim_start_matches('[').trim_end_matches(']');
        (host, port).to_socket_addrs().map_err(|e| err(e.to_string()))?.next().ok_or_else(|| err("no address".into()))
    }
}
