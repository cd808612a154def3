//! RDMA CM private data for NVMe/RDMA: the connect request, accept and reject formats.
#![forbid(unsafe_code)]
