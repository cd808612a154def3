//! Transports: how capsules and data move between host and controller. For now the wire formats of
//! NVMe/TCP ([`tcp`]) and the NVMe/RDMA connection private data ([`rdma`]).

pub mod rdma;
pub mod tcp;
