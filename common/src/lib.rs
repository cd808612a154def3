//! nvmf-common: the NVMe and NVMe-oF protocol and fabric layers shared by `nvmf-target` and `nvmf-host`.
//!
//! It owns no policy. The wire modules ([`nvme`], [`fabrics`], [`transport::tcp`] PDUs and
//! [`transport::rdma`] private data) are plain structs that parse from `&[u8]` and encode into
//! `&mut [u8]`: no I/O, no allocation on the parse path, every length, offset and enum value checked,
//! and a typed [`WireError`] naming the structure and field on bad input. Byte layouts follow the NVMe
//! Base Specification 2.0 and the NVMe over Fabrics 1.1 / NVMe/TCP and NVMe/RDMA transport specifications;
//! field names are the spec's.
#![deny(missing_docs)]

pub mod fabrics;
pub mod fuzzing;
pub mod nvme;
pub mod transport;
pub mod wire;

pub use wire::WireError;
