//! NVMe/RDMA (NVMe over Fabrics RDMA Transport Specification): the RDMA CM private data exchanged at
//! connection setup and, with the `rdma` feature, safe wrappers of RDMA verbs and RDMA CM ([`verbs`]).

pub mod private_data;
#[cfg(feature = "rdma")]
pub mod verbs;
