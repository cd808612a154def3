//! `target_deadlines.rs` with the reactors' NVMe/TCP sockets on io_uring (see `target_tcp_io_uring.rs`).

#[path = "target_deadlines.rs"]
mod scenarios;
