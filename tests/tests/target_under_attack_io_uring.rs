//! `target_under_attack.rs` with the reactors' NVMe/TCP sockets on io_uring (see `target_tcp_io_uring.rs`).

#[path = "target_under_attack.rs"]
mod scenarios;
