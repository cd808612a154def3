//! Cross-crate integration tests and the test VM harness.
//!
//! [`nvme_tcp_client`] is a small blocking NVMe/TCP host the native target tests drive our target with; [`ceph`] starts
//! a one-node Ceph cluster for the RBD tests; [`executor`] runs the async host API's tests (here and in `nvmf-host`).
//!
//! [`vm`] boots a throw-away Linux 6.12 guest under QEMU (TCG) whose root file system is this machine's own,
//! read-only over 9p under a tmpfs overlay, so a binary built here runs there unchanged at the same path.
//! The guest has what this machine's kernel lacks: Soft-RoCE, the kernel NVMe-oF host and target, null_blk,
//! configfs. The scenarios that use it are the integration tests in `tests/vm_*.rs`; `tests/README.md` says
//! how to run one by hand and how to get a shell in the guest.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod ceph;
pub mod executor;
pub mod nvme_tcp_client;
pub mod vm;
pub mod workspace_bin;
