//! Errors of opening storage and creating an I/O engine.

use std::io;
use std::path::PathBuf;

/// What failed while opening a [`Storage`](super::Storage) or creating an [`IoEngine`](super::IoEngine).
///
/// Per-I/O failures are not `BackendError`s: they arrive as the `Err` of an
/// [`IoCompletion`](super::IoCompletion)'s result (an errno), which the controller maps to an NVMe status.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A storage spec string is malformed.
    #[error("storage spec {0:?} is invalid: expected null:SIZE, memory:SIZE or a path (SIZE like 1G, 512M, 4096)")]
    InvalidSpec(String),
    /// The block size is not a power of two between 512 and 4096.
    #[error("block size {0} is invalid: must be 512, 1024, 2048 or 4096")]
    InvalidBlockSize(u32),
    /// A null/memory size, or a regular file's size, is zero or not a multiple of the block size.
    #[error("storage size {size} of {what} is invalid: must be > 0 and a multiple of the block size {block_size}")]
    InvalidSize {
        /// Which storage (path or kind).
        what: String,
        /// The size in bytes.
        size: u64,
        /// The configured block size.
        block_size: u32,
    },
    /// A memory namespace larger than this process can address.
    #[error("memory storage of {0} bytes does not fit in the address space")]
    MemoryTooLarge(u64),
    /// The configured block size is smaller than the block device's logical block size.
    #[error("block size {block_size} of {path} is smaller than the device's logical block size {logical}")]
    BlockSizeBelowDevice {
        /// The device.
        path: PathBuf,
        /// The configured block size.
        block_size: u32,
        /// The device's logical block size (BLKSSZGET).
        logical: u32,
    },
    /// The path is neither a regular file, a block device nor an NVMe generic character device.
    #[error("{0} is neither a regular file, a block device nor an NVMe generic character device (/dev/ngXnY)")]
    UnsupportedFileType(PathBuf),
    /// An NVMe generic device whose namespace passthrough cannot serve.
    #[error("NVMe namespace {path} cannot be passed through: {reason}")]
    PassthroughUnsupported {
        /// The device.
        path: PathBuf,
        /// Why.
        reason: &'static str,
    },
    /// An admin command at open (Identify) completed with an NVMe error status.
    #[error("{command} on {path} failed with NVMe status {status}")]
    NvmeCommand {
        /// The device.
        path: PathBuf,
        /// The command.
        command: &'static str,
        /// The drive's status.
        status: nvmf_common::nvme::Status,
    },
    /// Opening or inspecting a file or block device failed.
    #[error("cannot {action} {path}")]
    Io {
        /// What was being done (open, stat, BLKGETSIZE64, ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// An RBD image cannot be reached.
    #[error(transparent)]
    Rbd(#[from] super::rbd::RbdError),
    /// An [`EngineConfig`](super::EngineConfig) value is out of range.
    #[error("engine configuration: {0}")]
    InvalidEngineConfig(&'static str),
    /// Mapping the buffer pool failed.
    #[error("cannot map the {0}-byte buffer pool")]
    PoolMap(usize, #[source] io::Error),
    /// Creating or configuring the io_uring failed.
    #[error("io_uring {action} failed")]
    Ring {
        /// setup, register eventfd, ...
        action: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}
