//! Ceph RBD images as namespace storage, through librbd's asynchronous API.
//!
//! - [`RbdSpec`]: which image, through which Ceph configuration and user, with which timeouts.
//! - `cluster`: the process's Ceph connections (one `rados_t` per configuration and user, shared by its images).
//! - `image`: an open image: size, header watch (a resize), and the asynchronous calls.
//! - `completions`: how an op's end reaches its reactor (a lock-free stack of slots and the engine's eventfd).
//! - `ffi`: the generated librados/librbd bindings.
//!
//! Reads land in, and writes leave from, the reactor's pool buffers: librbd copies a write's data when the call
//! starts (`rbd_disable_zero_copy_writes`, on by default) and a read's when it completes, before the callback.
//!
//! Built with the `rbd` feature (librbd-dev at build time); without it [`RbdSpec`] parses and opening one says the
//! build has no RBD. `unsafe` lives in `cluster.rs`, `image.rs` and `completions.rs`.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

#[cfg(feature = "rbd")]
mod cluster;
#[cfg(feature = "rbd")]
mod completions;
#[cfg(feature = "rbd")]
mod ffi;
#[cfg(feature = "rbd")]
mod image;

#[cfg(feature = "rbd")]
pub(crate) use completions::Completions;
#[cfg(feature = "rbd")]
pub(crate) use image::{Aio, Image, OnChange};

/// The longest Compare and Write librbd does in one call: librbd before Reef (18) refuses one that leaves its
/// 512-byte sector (`EINVAL`), Reef one that leaves its stripe unit.
#[cfg(feature = "rbd")]
pub(crate) const COMPARE_AND_WRITE_LIMIT: u32 = 512;

/// How long librados may wait for the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterTimeouts {
    /// Connecting and each monitor request (`client_mount_timeout`, `rados_mon_op_timeout`). Default 30 s.
    pub mon: Duration,
    /// Each OSD request (`rados_osd_op_timeout`): an op still unanswered then completes with `ETIMEDOUT`.
    /// Default 30 s.
    pub osd: Duration,
}

impl Default for ClusterTimeouts {
    fn default() -> Self {
        ClusterTimeouts { mon: Duration::from_secs(30), osd: Duration::from_secs(30) }
    }
}

/// An RBD image to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbdSpec {
    /// The pool.
    pub pool: String,
    /// The RADOS namespace in the pool (empty: the default one).
    pub rados_namespace: String,
    /// The image.
    pub image: String,
    /// The Ceph configuration file (monitors, keyring).
    pub ceph_conf: PathBuf,
    /// The cephx user, without `client.`.
    pub ceph_id: String,
    /// librados' waits.
    pub timeouts: ClusterTimeouts,
}

impl RbdSpec {
    /// `pool/image` or `pool/namespace/image`.
    pub fn image_name(&self) -> String {
        if self.rados_namespace.is_empty() {
            format!("{}/{}", self.pool, self.image)
        } else {
            format!("{}/{}/{}", self.pool, self.rados_namespace, self.image)
        }
    }
}

/// What failed while reaching an RBD image.
#[derive(Debug, thiserror::Error)]
pub enum RbdError {
    /// This build has no librbd (the `rbd` feature is off).
    #[error("this nvmf-target was built without RBD support (cargo feature `rbd`)")]
    NotBuilt,
    /// A name or path holds a NUL byte.
    #[error("{0} contains a NUL byte")]
    Nul(&'static str),
    /// Creating, configuring or connecting the RADOS client failed.
    #[error("cannot {step} ({} as client.{id})", conf.display())]
    Connect {
        /// The configuration file.
        conf: PathBuf,
        /// The user.
        id: String,
        /// What was being done.
        step: &'static str,
        /// librados' errno.
        #[source]
        source: io::Error,
    },
    /// The keyring holding the user's cephx key is not its owner's alone.
    #[error("the Ceph keyring {} {problem}", path.display())]
    KeyringNotPrivate {
        /// The keyring file.
        path: PathBuf,
        /// What is wrong and the fix ([`nvmf_config::secret::private_file_problem`]).
        problem: String,
    },
    /// The pool cannot be opened.
    #[error("cannot open pool {pool}")]
    Pool {
        /// The pool.
        pool: String,
        /// librados' errno.
        #[source]
        source: io::Error,
    },
    /// The image cannot be opened.
    #[error("cannot open RBD image {image} ({cluster})")]
    Open {
        /// `pool/image`.
        image: String,
        /// The configuration and user.
        cluster: String,
        /// librbd's errno.
        #[source]
        source: io::Error,
    },
    /// The image's size cannot be read.
    #[error("cannot read the size of RBD image {image}")]
    Size {
        /// `pool/image`.
        image: String,
        /// librbd's errno.
        #[source]
        source: io::Error,
    },
    /// The image's header cannot be watched.
    #[error("cannot watch RBD image {image} for changes")]
    Watch {
        /// `pool/image`.
        image: String,
        /// librbd's errno.
        #[source]
        source: io::Error,
    },
}

/// Opens the image `spec` names (connecting to its cluster unless this process is already): the image and its
/// size in bytes.
#[cfg(feature = "rbd")]
pub(crate) fn open(spec: &RbdSpec) -> Result<(Image, u64), RbdError> {
    let cluster = cluster::Cluster::connect(&spec.ceph_conf, &spec.ceph_id, spec.timeouts)?;
    let image = Image::open(cluster, &spec.pool, &spec.rados_namespace, &spec.image)?;
    let size = image.size().map_err(|source| RbdError::Size { image: image.name().to_owned(), source })?;
    Ok((image, size))
}
