//! nvmf-target library. The controller logic lands with its issue; see ../shared/design/ARCHITECTURE.md.
#![deny(missing_docs)]

pub mod backend;
pub mod tcp;
