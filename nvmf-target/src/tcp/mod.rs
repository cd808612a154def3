//! NVMe/TCP transport of the target (NVMe/TCP Transport Specification 1.0).
//!
//! One [`TcpConnection`] per accepted socket: it owns the socket (non-blocking `mio::net::TcpStream`), the
//! controller's [`crate::controller::Queue`] for that connection, a `PduDecoder` from
//! `nvmf_common::transport::tcp` (all wire work is done there), a send queue and the per-command transfer
//! state. It negotiates ICReq/ICResp, hands command capsules (with in-capsule data) to the queue, solicits
//! host data with R2Ts and places H2CData into the command's engine buffer, sends read data as C2HData
//! PDUs and completions as CapsuleResps, and ends the connection with a C2HTermReq on a fatal transport
//! error.
//!
//! Threading: the acceptor thread ([`listener`]) accepts and hands each connection over; with `[reactors] placement =
//! "incoming_cpu"` the connection may move once more, when its queue's Connect arrives, to the reactor on the CPU
//! its packets arrive on ([`placement`]); from then on a connection lives on one reactor thread, in its
//! [`TcpPollGroup`], and is driven by that reactor's readiness events, storage completions and timers (the queue's
//! Connect and keep-alive deadlines; the transfer timeout while it waits on a host that moves no data). It never
//! blocks: sockets are non-blocking, a full socket leaves bytes queued until the next writable event, and reading
//! pauses while the send backlog is large. No lock, no allocation per command once its tables are warm.
//!
//! - [`listener`] — the acceptor thread: TCP listeners, accepting and handing connections over.
//! - `poll_group` — [`TcpPollGroup`], a reactor's connection table (the transport's [`crate::transport::PollGroup`]).
//! - [`placement`] — which reactor serves a connection once its queue's Connect arrives (by `SO_INCOMING_CPU`).
//! - [`config`] — [`TcpTransportConfig`], the port's settings.
//! - `connection` — [`TcpConnection`], the state machine and socket I/O.
//! - `outgoing` — framing of ICResp, R2T, C2HData, CapsuleResp and C2HTermReq.
//! - `transfer` — per-command R2T/H2CData bookkeeping.
//! - `send` — the vectored, zero-copy send queue.
//! - [`error`] — [`ConnectionError`], why a connection ended.

pub mod config;
mod connection;
pub mod error;
pub mod listener;
mod outgoing;
pub mod placement;
mod poll_group;
mod send;
mod tls_gate;
mod transfer;

pub use config::TcpTransportConfig;
pub use connection::{Initialized, SocketIo, TcpConnection};
pub use error::ConnectionError;
pub use listener::{
    Acceptor, BoundListener, BoundListeners, ListenerError, ListenerSlot, TcpListenerSpec, TlsGateParams,
};
pub use poll_group::{AcceptedConnection, TcpPollGroup, TcpSocketPath};
pub use tls_gate::{TlsCounters, TlsGate, TlsKeyring};
pub use transfer::ProtocolViolation;

#[cfg(test)]
mod tests;
