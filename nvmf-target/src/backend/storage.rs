//! One namespace's storage: what it is, how big, which block size and which capabilities.
//!
//! Opened once at start (or when a namespace is added) by the control plane, then shared by all reactors through
//! an `Arc<Storage>`. Opening may block (open, stat, ioctls, probes); nothing here blocks afterwards, except
//! [`Storage::flush_blocking`], meant for shutdown.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(feature = "rbd")]
use std::sync::{Arc, Weak};

use super::memory::MemoryStore;
use super::nvme::{self, NvmeBacking};
#[cfg(feature = "rbd")]
use super::rbd;
use super::rbd::RbdSpec;
use super::{ring, BackendError};

/// What to open: a spec from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageSpec {
    /// Reads return zeros, writes are discarded.
    Null {
        /// Capacity in bytes.
        size: u64,
        /// Logical block size in bytes.
        block_size: u32,
    },
    /// RAM, zero until written, lost at exit.
    Memory {
        /// Capacity in bytes.
        size: u64,
        /// Logical block size in bytes.
        block_size: u32,
    },
    /// A regular file (its size is the capacity), a block device, or an NVMe generic character device
    /// (`/dev/ngXnY`: the namespace is driven with NVMe commands through io_uring, see
    /// [`Storage::is_nvme_passthrough`]).
    Path {
        /// The file or device.
        path: PathBuf,
        /// Logical block size in bytes; at least a block device's logical block size.
        block_size: u32,
    },
    /// A Ceph RBD image (its size rounded down to the block size is the capacity, and follows resizes).
    Rbd {
        /// The image and how to reach it.
        spec: RbdSpec,
        /// Logical block size in bytes.
        block_size: u32,
    },
}

impl StorageSpec {
    /// Parses `null:SIZE`, `memory:SIZE` (SIZE in bytes or with a K/M/G/T suffix, powers of 1024) or a path.
    pub fn parse(spec: &str, block_size: u32) -> Result<Self, BackendError> {
        let invalid = || BackendError::InvalidSpec(spec.to_owned());
        if let Some(size) = spec.strip_prefix("null:") {
            Ok(StorageSpec::Null { size: parse_size(size).ok_or_else(invalid)?, block_size })
        } else if let Some(size) = spec.strip_prefix("memory:") {
            Ok(StorageSpec::Memory { size: parse_size(size).ok_or_else(invalid)?, block_size })
        } else if spec.is_empty() {
            Err(invalid())
        } else {
            Ok(StorageSpec::Path { path: PathBuf::from(spec), block_size })
        }
    }

    /// The configured logical block size.
    pub fn block_size(&self) -> u32 {
        match self {
            StorageSpec::Null { block_size, .. }
            | StorageSpec::Memory { block_size, .. }
            | StorageSpec::Path { block_size, .. }
            | StorageSpec::Rbd { block_size, .. } => *block_size,
        }
    }
}

fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, shift) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 10),
        (i, 'm' | 'M') => (&s[..i], 20),
        (i, 'g' | 'G') => (&s[..i], 30),
        (i, 't' | 'T') => (&s[..i], 40),
        _ => (s, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

/// How Write Zeroes is carried out on a regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZeroMode {
    /// `fallocate(FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)`: keeps the allocation.
    ZeroRange,
    /// `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`: the filesystem lacks ZERO_RANGE (tmpfs).
    PunchHole,
    /// Neither is supported.
    Unsupported,
}

/// An RBD image's counters ([`Storage::rbd_stats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbdStats {
    /// `pool/image`.
    pub image: String,
    /// Ops in librbd now.
    pub in_flight: u64,
    /// Ops librbd failed or refused since the image was opened.
    pub errors: u64,
    /// Times the image was reopened through a new client after the cluster fenced this one.
    pub reopened: u64,
}

/// A regular file or block device.
#[derive(Debug)]
pub(crate) struct FileBacking {
    pub(crate) file: File,
    pub(crate) path: PathBuf,
    /// Opened with O_DIRECT.
    pub(crate) direct: bool,
    pub(crate) zero_mode: ZeroMode,
}

/// The kind of storage, matched on the hot path.
#[derive(Debug)]
pub(crate) enum Kind {
    Null,
    Memory(MemoryStore),
    File(FileBacking),
    BlockDevice(FileBacking),
    /// An NVMe namespace through its generic character device.
    Nvme(NvmeBacking),
    /// A Ceph RBD image through librbd.
    #[cfg(feature = "rbd")]
    Rbd(Arc<rbd::Image>),
}

/// One namespace's storage, shared by all reactors (`Arc`). Opened once at start.
#[derive(Debug)]
pub struct Storage {
    /// Unique per process: the engines' key for their fixed-file slots.
    id: u64,
    kind: Kind,
    block_size: u32,
    /// Bytes; changes only for an RBD image that was resized ([`Storage::refresh_capacity`]).
    capacity: AtomicU64,
    discard: bool,
    volatile_write_cache: bool,
}

static NEXT_STORAGE_ID: AtomicU64 = AtomicU64::new(1);

impl Storage {
    /// Opens `spec`: validates the block size and capacity, opens files and devices (O_DIRECT when the
    /// filesystem/device allows it for this block size, buffered with a warning otherwise) and probes what they
    /// support.
    pub fn open(spec: &StorageSpec) -> Result<Storage, BackendError> {
        Self::open_with(spec, true)
    }

    /// Opens `spec` like [`Storage::open`], but files and block devices without O_DIRECT: reads and writes go
    /// through the page cache (nvmet's `buffered_io` namespace attribute). Writes are acknowledged once they are in
    /// the page cache, so the namespace keeps reporting a volatile write cache: Flush becomes `fdatasync` and FUA
    /// writes `RWF_DSYNC`, as with O_DIRECT. NVMe passthrough (`/dev/ngXnY`), null and memory are opened as by
    /// [`Storage::open`].
    pub fn open_buffered(spec: &StorageSpec) -> Result<Storage, BackendError> {
        Self::open_with(spec, false)
    }

    fn open_with(spec: &StorageSpec, allow_direct: bool) -> Result<Storage, BackendError> {
        let block_size = spec.block_size();
        if !(512..=4096).contains(&block_size) || !block_size.is_power_of_two() {
            return Err(BackendError::InvalidBlockSize(block_size));
        }
        let check_size = |what: &str, size: u64| {
            if size == 0 || size % u64::from(block_size) != 0 {
                Err(BackendError::InvalidSize { what: what.to_owned(), size, block_size })
            } else {
                Ok(())
            }
        };
        let (kind, capacity, discard, volatile_write_cache) = match spec {
            StorageSpec::Null { size, .. } => {
                check_size("null", *size)?;
                (Kind::Null, *size, true, false)
            }
            StorageSpec::Memory { size, .. } => {
                check_size("memory", *size)?;
                let store = MemoryStore::new(*size).ok_or(BackendError::MemoryTooLarge(*size))?;
                (Kind::Memory(store), *size, true, false)
            }
            StorageSpec::Path { path, .. } => {
                let io_err = |action| move |source| BackendError::Io { action, path: path.clone(), source };
                let meta = std::fs::metadata(path).map_err(io_err("stat"))?;
                if meta.file_type().is_block_device() {
                    open_block_device(path, block_size, allow_direct)?
                } else if meta.file_type().is_char_device() && nvme::is_nvme_generic(meta.rdev()) {
                    let opened = nvme::open(path, meta.rdev(), block_size)?;
                    (Kind::Nvme(opened.backing), opened.capacity, opened.discard, opened.volatile_write_cache)
                } else if meta.is_file() {
                    check_size(&path.display().to_string(), meta.len())?;
                    open_file(path, block_size, meta.len(), allow_direct)?
                } else {
                    return Err(BackendError::UnsupportedFileType(path.clone()));
                }
            }
            StorageSpec::Rbd { spec, .. } => open_rbd(spec, block_size)?,
        };
        let storage = Storage {
            id: NEXT_STORAGE_ID.fetch_add(1, Ordering::Relaxed),
            kind,
            block_size,
            capacity: AtomicU64::new(capacity),
            discard,
            volatile_write_cache,
        };
        tracing::info!(
            storage = %storage.describe(),
            block_size,
            capacity,
            discard,
            write_zeroes = storage.supports_write_zeroes(),
            direct = storage.is_direct(),
            "storage opened"
        );
        Ok(storage)
    }

    /// Logical block size in bytes (512..=4096).
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Capacity in logical blocks.
    pub fn num_blocks(&self) -> u64 {
        self.capacity() / u64::from(self.block_size)
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Relaxed)
    }

    /// An RBD image's name (`pool/image`) and counters; `None` for other kinds.
    pub fn rbd_stats(&self) -> Option<RbdStats> {
        #[cfg(feature = "rbd")]
        if let Kind::Rbd(image) = &self.kind {
            let (in_flight, errors, reopened) = image.stats();
            return Some(RbdStats { image: image.name().to_owned(), in_flight, errors, reopened });
        }
        None
    }

    /// Reads the size again (an RBD image: librbd refreshes its header when it changed) and returns the new
    /// capacity when it changed; `None` when it did not, for other kinds, or when the size cannot be read (logged).
    pub fn refresh_capacity(&self) -> Option<u64> {
        #[cfg(feature = "rbd")]
        if let Kind::Rbd(image) = &self.kind {
            let size = match image.size() {
                Ok(size) => size,
                Err(e) => {
                    tracing::warn!(image = image.name(), error = %e, "cannot read the RBD image's size");
                    return None;
                }
            };
            let capacity = size - size % u64::from(self.block_size);
            if capacity == 0 {
                tracing::warn!(image = image.name(), size, "the RBD image shrank below one block; capacity kept");
                return None;
            }
            let old = self.capacity.swap(capacity, Ordering::Relaxed);
            return (old != capacity).then_some(capacity);
        }
        None
    }

    /// Call `on_resize(new capacity)` whenever the storage's size changes (an RBD image: its header is watched;
    /// other kinds never change and `Ok(false)` says so). It runs on a thread of its own, once per change.
    #[cfg(feature = "rbd")]
    pub fn watch_resize(
        self: &Arc<Self>,
        on_resize: impl Fn(u64) + Send + Sync + 'static,
    ) -> Result<bool, BackendError> {
        let Kind::Rbd(image) = &self.kind else { return Ok(false) };
        let storage = Arc::downgrade(self);
        let on_resize = Arc::new(on_resize);
        let on_change: rbd::OnChange = Arc::new(move || {
            // librbd calls this on its own thread, which must not wait for the header refresh the size needs.
            let (storage, on_resize): (Weak<Storage>, _) = (storage.clone(), Arc::clone(&on_resize));
            let spawned = std::thread::Builder::new().name("nvmf-rbd-resize".into()).spawn(move || {
                if let Some(capacity) = storage.upgrade().and_then(|s| s.refresh_capacity()) {
                    on_resize(capacity);
                }
            });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start the thread that reads an RBD image's new size");
            }
        });
        image.watch(on_change)?;
        Ok(true)
    }

    /// See the `rbd` feature's version: without it no storage changes size.
    #[cfg(not(feature = "rbd"))]
    pub fn watch_resize(
        self: &std::sync::Arc<Self>,
        _on_resize: impl Fn(u64) + Send + Sync + 'static,
    ) -> Result<bool, BackendError> {
        Ok(false)
    }

    /// Whether writes may sit in a volatile cache until a Flush: true for files and block devices (we never open
    /// them O_SYNC; a block device whose queue reports "write through" is the exception), false for null/memory.
    pub fn volatile_write_cache(&self) -> bool {
        self.volatile_write_cache
    }

    /// Whether Discard (Dataset Management deallocate) does anything: punch hole on files, BLKDISCARD on devices
    /// that advertise it, free chunks on memory. After a discard, files and memory read zeros; a block device
    /// reads whatever it reads.
    pub fn supports_discard(&self) -> bool {
        self.discard
    }

    /// Whether Write Zeroes is supported (it is, except on files whose filesystem has neither ZERO_RANGE nor
    /// PUNCH_HOLE).
    pub fn supports_write_zeroes(&self) -> bool {
        match &self.kind {
            Kind::File(f) => f.zero_mode != ZeroMode::Unsupported,
            Kind::Nvme(n) => n.write_zeroes,
            Kind::Null | Kind::Memory(_) | Kind::BlockDevice(_) => true,
            #[cfg(feature = "rbd")]
            Kind::Rbd(_) => true,
        }
    }

    /// The longest Compare and Write (fused Compare + Write) this storage does atomically, in bytes; `None` when it
    /// cannot do one atomically at all. Memory compares and writes under the locks of every chunk it touches, null
    /// compares against zeros and drops the write; RBD has the OSD do the compare and the write as one operation, which
    /// librbd before Reef (18) allows within one 512-byte sector only (Reef: one stripe unit), so the smaller is
    /// taken. Files, block devices and NVMe drives through the kernel have no such operation: another writer (a
    /// reactor, a process) could change the blocks between a compare and a write.
    pub fn compare_and_write_limit(&self) -> Option<u32> {
        match &self.kind {
            Kind::Null | Kind::Memory(_) => Some(u32::MAX),
            #[cfg(feature = "rbd")]
            Kind::Rbd(_) => Some(super::rbd::COMPARE_AND_WRITE_LIMIT),
            Kind::File(_) | Kind::BlockDevice(_) | Kind::Nvme(_) => None,
        }
    }

    /// Whether data bypasses the page cache (O_DIRECT, or NVMe passthrough). False for null/memory, for files and
    /// block devices opened with [`Storage::open_buffered`], and where the filesystem refused O_DIRECT.
    pub fn is_direct(&self) -> bool {
        match &self.kind {
            Kind::File(f) | Kind::BlockDevice(f) => f.direct,
            Kind::Nvme(_) => true,
            Kind::Null | Kind::Memory(_) => false,
            #[cfg(feature = "rbd")]
            Kind::Rbd(_) => false,
        }
    }

    /// Whether this is an NVMe namespace driven through its generic character device (`/dev/ngXnY`): a path
    /// naming a character device of the `nvme-generic` class (its major in `/proc/devices`). Reads, writes,
    /// flushes, write zeroes and deallocations become NVMe commands (`IORING_OP_URING_CMD`), and a failing one
    /// completes with the drive's NVMe status (see [`drive_status`](super::drive_status)).
    pub fn is_nvme_passthrough(&self) -> bool {
        matches!(self.kind, Kind::Nvme(_))
    }

    /// A short description for logs: `null`, `memory`, or the path.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Null => "null".to_owned(),
            Kind::Memory(_) => "memory".to_owned(),
            Kind::File(f) | Kind::BlockDevice(f) => f.path.display().to_string(),
            Kind::Nvme(n) => format!("{} (NVMe passthrough, NSID {})", n.path.display(), n.nsid),
            #[cfg(feature = "rbd")]
            Kind::Rbd(image) => format!("rbd:{}", image.name()),
        }
    }

    /// Makes written data durable, synchronously (`fdatasync`). For shutdown (CC.SHN), not for the data path —
    /// reactors send [`IoOp::Flush`](super::IoOp::Flush) through their engine.
    pub fn flush_blocking(&self) -> std::io::Result<()> {
        match &self.kind {
            Kind::File(f) | Kind::BlockDevice(f) => f.file.sync_data(),
            Kind::Nvme(n) => nvme::flush_blocking(n),
            // librbd's cache is off: a completed write is on the OSDs.
            Kind::Null | Kind::Memory(_) => Ok(()),
            #[cfg(feature = "rbd")]
            Kind::Rbd(_) => Ok(()),
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn kind(&self) -> &Kind {
        &self.kind
    }

    /// The file descriptor of a file or block device.
    pub(crate) fn raw_fd(&self) -> Option<RawFd> {
        match &self.kind {
            Kind::File(f) | Kind::BlockDevice(f) => Some(f.file.as_raw_fd()),
            Kind::Nvme(n) => Some(n.file.as_raw_fd()),
            Kind::Null | Kind::Memory(_) => None,
            #[cfg(feature = "rbd")]
            Kind::Rbd(_) => None,
        }
    }
}

/// An RBD image: capacity is its size rounded down to the block size; discard and write zeroes supported; no
/// volatile write cache (librbd's cache is off).
#[cfg(feature = "rbd")]
fn open_rbd(spec: &RbdSpec, block_size: u32) -> Result<(Kind, u64, bool, bool), BackendError> {
    let (image, size) = rbd::open(spec)?;
    let capacity = size - size % u64::from(block_size);
    if capacity == 0 {
        return Err(BackendError::InvalidSize { what: format!("rbd:{}", image.name()), size, block_size });
    }
    Ok((Kind::Rbd(Arc::new(image)), capacity, true, false))
}

#[cfg(not(feature = "rbd"))]
fn open_rbd(_spec: &RbdSpec, _block_size: u32) -> Result<(Kind, u64, bool, bool), BackendError> {
    Err(super::rbd::RbdError::NotBuilt.into())
}

/// Opens read-write, with O_DIRECT when `direct`; on EINVAL (the filesystem refuses O_DIRECT) retries buffered.
/// Returns the file and whether it is direct.
fn open_rw(path: &Path, direct: bool) -> Result<(File, bool), BackendError> {
    let open = |flags| OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC | flags).open(path);
    if direct {
        match open(libc::O_DIRECT) {
            Ok(file) => return Ok((file, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::warn!(path = %path.display(), "O_DIRECT refused by the filesystem; using buffered I/O");
            }
            Err(source) => return Err(BackendError::Io { action: "open", path: path.to_owned(), source }),
        }
    }
    let file = open(0).map_err(|source| BackendError::Io { action: "open", path: path.to_owned(), source })?;
    Ok((file, false))
}

/// Regular file: O_DIRECT when statx says direct I/O at this block size and our 4096-byte buffer alignment works;
/// probes punch hole and zero range beyond EOF (no data changes).
fn open_file(
    path: &Path,
    block_size: u32,
    size: u64,
    allow_direct: bool,
) -> Result<(Kind, u64, bool, bool), BackendError> {
    let want_direct = allow_direct
        && match ring::dio_alignment(path) {
            Some((mem, offset)) if mem > 0 && offset > 0 && mem <= 4096 && offset <= block_size => true,
            Some((0, _) | (_, 0)) | None => {
                tracing::warn!(path = %path.display(), "the filesystem offers no O_DIRECT; using buffered I/O");
                false
            }
            Some((mem, offset)) => {
                tracing::warn!(
                    path = %path.display(), mem, offset, block_size,
                    "O_DIRECT alignment exceeds the block size or buffer alignment; using buffered I/O"
                );
                false
            }
        };
    let (file, direct) = open_rw(path, want_direct)?;
    let fd = file.as_raw_fd();
    let probe_len = u64::from(block_size);
    let punch = ring::fallocate(fd, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, size, probe_len).is_ok();
    let zero_range =
        ring::fallocate(fd, libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE, size, probe_len).is_ok();
    if zero_range && punch {
        // Give back the block the probe may have allocated past EOF.
        let _ = ring::fallocate(fd, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, size, probe_len);
    }
    let zero_mode = match (zero_range, punch) {
        (true, _) => ZeroMode::ZeroRange,
        (false, true) => ZeroMode::PunchHole,
        (false, false) => ZeroMode::Unsupported,
    };
    let backing = FileBacking { file, path: path.to_owned(), direct, zero_mode };
    Ok((Kind::File(backing), size, punch, true))
}

/// Block device: size from BLKGETSIZE64, logical block size from BLKSSZGET, discard/write cache from sysfs.
fn open_block_device(
    path: &Path,
    block_size: u32,
    allow_direct: bool,
) -> Result<(Kind, u64, bool, bool), BackendError> {
    let (file, direct) = open_rw(path, allow_direct)?;
    let fd = file.as_raw_fd();
    let io_err = |action| move |source| BackendError::Io { action, path: path.to_owned(), source };
    let size = ring::block_device_size(fd).map_err(io_err("BLKGETSIZE64"))?;
    let logical = ring::block_device_logical_block_size(fd).map_err(io_err("BLKSSZGET"))?;
    if block_size < logical {
        return Err(BackendError::BlockSizeBelowDevice { path: path.to_owned(), block_size, logical });
    }
    let capacity = size - size % u64::from(block_size);
    if capacity == 0 {
        return Err(BackendError::InvalidSize { what: path.display().to_string(), size, block_size });
    }
    let rdev = file.metadata().map_err(io_err("stat"))?.rdev();
    let queue_attr = |name: &str| -> Option<String> {
        let dev = format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev));
        // A partition's queue attributes live in its parent disk's directory.
        [format!("{dev}/queue/{name}"), format!("{dev}/../queue/{name}")]
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|s| s.trim().to_owned())
    };
    let discard = queue_attr("discard_max_bytes").and_then(|s| s.parse::<u64>().ok()).is_some_and(|n| n > 0);
    let volatile_write_cache = queue_attr("write_cache").is_none_or(|s| s != "write through");
    let backing = FileBacking { file, path: path.to_owned(), direct, zero_mode: ZeroMode::ZeroRange };
    Ok((Kind::BlockDevice(backing), capacity, discard, volatile_write_cache))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_is_shared_across_reactors() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Storage>();
    }

    #[test]
    fn parse_specs() {
        assert_eq!(StorageSpec::parse("null:1G", 512).unwrap(), StorageSpec::Null { size: 1 << 30, block_size: 512 });
        assert_eq!(
            StorageSpec::parse("memory:64m", 4096).unwrap(),
            StorageSpec::Memory { size: 64 << 20, block_size: 4096 }
        );
        assert_eq!(
            StorageSpec::parse("memory:8192", 512).unwrap(),
            StorageSpec::Memory { size: 8192, block_size: 512 }
        );
        assert_eq!(
            StorageSpec::parse("/dev/vdb", 512).unwrap(),
            StorageSpec::Path { path: "/dev/vdb".into(), block_size: 512 }
        );
        for bad in ["null:", "memory:x", "null:99999999999T", ""] {
            assert!(StorageSpec::parse(bad, 512).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_and_block_sizes_are_validated() {
        assert!(matches!(
            Storage::open(&StorageSpec::Null { size: 1 << 20, block_size: 1000 }),
            Err(BackendError::InvalidBlockSize(1000))
        ));
        assert!(matches!(
            Storage::open(&StorageSpec::Null { size: 1 << 20, block_size: 8192 }),
            Err(BackendError::InvalidBlockSize(8192))
        ));
        assert!(matches!(
            Storage::open(&StorageSpec::Memory { size: 1000, block_size: 512 }),
            Err(BackendError::InvalidSize { .. })
        ));
        assert!(matches!(
            Storage::open(&StorageSpec::Memory { size: 0, block_size: 512 }),
            Err(BackendError::InvalidSize { .. })
        ));
        let s = Storage::open(&StorageSpec::Memory { size: 1 << 20, block_size: 4096 }).unwrap();
        assert_eq!((s.block_size(), s.num_blocks(), s.volatile_write_cache()), (4096, 256, false));
        assert!(s.supports_discard() && s.supports_write_zeroes());
    }

    #[test]
    fn file_size_must_be_a_block_multiple() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("odd");
        std::fs::write(&path, vec![0u8; 1000]).unwrap();
        assert!(matches!(
            Storage::open(&StorageSpec::Path { path: path.clone(), block_size: 512 }),
            Err(BackendError::InvalidSize { .. })
        ));
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(
            Storage::open(&StorageSpec::Path { path, block_size: 512 }),
            Err(BackendError::InvalidSize { .. })
        ));
        assert!(matches!(
            Storage::open(&StorageSpec::Path { path: dir.path().to_owned(), block_size: 512 }),
            Err(BackendError::UnsupportedFileType(_))
        ));
        assert!(matches!(
            Storage::open(&StorageSpec::Path { path: dir.path().join("missing"), block_size: 512 }),
            Err(BackendError::Io { action: "stat", .. })
        ));
        // A character device that is not an NVMe generic node.
        assert!(matches!(
            Storage::open(&StorageSpec::Path { path: "/dev/null".into(), block_size: 512 }),
            Err(BackendError::UnsupportedFileType(_))
        ));
    }
}
