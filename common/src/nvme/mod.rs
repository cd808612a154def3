//! The NVMe command set as it appears on the wire (NVMe Base Specification 2.0, NVM Command Set 1.0):
//! submission and completion queue entries, status codes, SGL descriptors, typed views of every admin
//! and I/O command the target and host exchange, and the data structures those commands move
//! (Identify, log pages, features).
#![forbid(unsafe_code)]

pub mod cqe;
pub mod opcode;
pub mod sgl;
pub mod sqe;
pub mod status;

pub use cqe::CompletionQueueEntry;
pub use sgl::{SglDescriptor, SglSubtype};
pub use sqe::{DataPointerKind, SubmissionQueueEntry};
pub use status::{Status, StatusCodeType};

pub mod admin;
pub mod features;
pub mod identify;
pub mod io;
pub mod log_page;
pub mod reservation;
