//! NVMe/RDMA (NVMe over Fabrics RDMA Transport Specification): the RDMA CM private data exchanged at
//! connection setup.

pub mod private_data;
