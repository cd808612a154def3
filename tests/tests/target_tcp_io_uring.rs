//! `target_tcp.rs`'s scenarios again with the reactors' NVMe/TCP sockets on io_uring (`[reactors] socket_io =
//! "io_uring"`): the harness picks it in a test binary whose name ends in `_io_uring`
//! (`target_support::socket_io_uring`). `target_deadlines_io_uring` and `target_under_attack_io_uring` do the same
//! for the peers that stall, flood or stop reading (backpressure on the ring cancels and re-arms the receive), each
//! a binary of its own as on epoll: their timeouts are measured against a target that only they load.

#[path = "target_tcp.rs"]
mod scenarios;
