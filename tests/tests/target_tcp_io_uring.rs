//! The scenarios of `target_tcp.rs`, `target_deadlines.rs` and `target_under_attack.rs` again with the reactors'
//! NVMe/TCP sockets on io_uring (`[reactors] socket_io = "io_uring"`): the harness picks it in a test binary whose
//! name ends in `_io_uring` (`target_support::socket_io_uring`).
#![expect(clippy::duplicate_mod, reason = "each scenario file brings the harness module, as when it runs alone")]

#[path = "target_tcp.rs"]
mod scenarios;

// The peers that stall, flood or stop reading: backpressure on the ring cancels and re-arms the receive.
#[path = "target_deadlines.rs"]
mod deadlines;

#[path = "target_under_attack.rs"]
mod under_attack;
