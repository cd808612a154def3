//! `target_tcp.rs`'s scenarios again with the reactors' NVMe/TCP sockets on io_uring (`[reactors] socket_io =
//! "io_uring"`): the harness picks it in a test binary whose name ends in `_io_uring`
//! (`target_support::socket_io_uring`).

#[path = "target_tcp.rs"]
mod scenarios;
