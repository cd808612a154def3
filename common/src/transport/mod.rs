//! Transports: how capsules and data move between host and controller: the wire formats of NVMe/TCP
//! ([`tcp`]), and for NVMe/RDMA ([`rdma`]) the connection private data and, with the `rdma` feature, the
//! verbs and RDMA CM wrappers both sides' transports build on.

pub mod rdma;
pub mod tcp;
#[cfg(feature = "tls")]
pub mod tls;
