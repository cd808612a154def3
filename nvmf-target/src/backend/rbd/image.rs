//! One open RBD image: its librbd handle, the I/O context and connection under it, a watch that reports changes
//! of its header (a resize), and the asynchronous calls of the data path.

use std::ffi::{c_void, CString};
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::cluster::Cluster;
use super::{ffi, RbdError};

/// What a change of the image's header calls (on a librbd thread: it must not block).
pub(crate) type OnChange = Box<dyn Fn() + Send + Sync>;

/// An open image.
pub(crate) struct Image {
    handle: ffi::rbd_image_t,
    ioctx: ffi::rados_ioctx_t,
    /// The update watch's handle and its callback's state (boxed: librbd keeps the pointer).
    watch: Mutex<Option<(u64, Box<OnChange>)>>,
    name: String,
    /// Ops started, ended, and ended with an error (for metrics; counted by the reactors).
    started: AtomicU64,
    ended: AtomicU64,
    errors: AtomicU64,
    // Last: closed after the image and its context.
    cluster: Arc<Cluster>,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image").field("name", &self.name).finish_non_exhaustive()
    }
}

// SAFETY: librbd's image handle may be used from several threads at once (ImageCtx locks inside); the ioctx is
// only used by librbd through the handle; the watch callback is Send + Sync.
unsafe impl Send for Image {}
// SAFETY: as above.
unsafe impl Sync for Image {}

/// One asynchronous operation on the image.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Aio {
    Read { offset: u64, len: u32, buf: *mut u8 },
    Write { offset: u64, len: u32, buf: *const u8 },
    Flush,
    Discard { offset: u64, len: u64 },
    WriteZeroes { offset: u64, len: u64 },
}

impl Image {
    /// Opens `pool/namespace/name` through `cluster` (blocks: librbd reads the header).
    pub(crate) fn open(cluster: Arc<Cluster>, pool: &str, namespace: &str, name: &str) -> Result<Image, RbdError> {
        let full_name =
            if namespace.is_empty() { format!("{pool}/{name}") } else { format!("{pool}/{namespace}/{name}") };
        let c_name = CString::new(name).map_err(|_| RbdError::Nul("the image name"))?;
        let ioctx = cluster.create_ioctx(pool, namespace)?;
        let mut handle: ffi::rbd_image_t = ptr::null_mut();
        // SAFETY: a valid context; `handle` is written on success; a null snapshot name opens the head.
        let rc = unsafe { ffi::rbd_open(ioctx, c_name.as_ptr(), &mut handle, ptr::null()) };
        if rc < 0 {
            Cluster::destroy_ioctx(ioctx);
            return Err(RbdError::Open {
                image: full_name,
                cluster: cluster.describe(),
                source: io::Error::from_raw_os_error(-rc),
            });
        }
        Ok(Image {
            handle,
            ioctx,
            watch: Mutex::new(None),
            name: full_name,
            started: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            cluster,
        })
    }

    /// `pool/image` (or `pool/namespace/image`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// An op started with [`Image::start`] ended (`failed`: with an error librbd returned).
    pub(crate) fn count_end(&self, failed: bool) {
        self.ended.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Ops in librbd now, and ops that ended with an error since open.
    pub(crate) fn stats(&self) -> (u64, u64) {
        let ended = self.ended.load(Ordering::Relaxed);
        let in_flight = self.started.load(Ordering::Relaxed).saturating_sub(ended);
        (in_flight, self.errors.load(Ordering::Relaxed))
    }

    /// The image's size in bytes, as librbd last saw it (it refreshes the header after a watch notification).
    pub(crate) fn size(&self) -> io::Result<u64> {
        let mut size = 0u64;
        // SAFETY: an open handle; `size` is written on success.
        let rc = unsafe { ffi::rbd_get_size(self.handle, &mut size) };
        if rc < 0 {
            return Err(io::Error::from_raw_os_error(-rc));
        }
        Ok(size)
    }

    /// Have `on_change` called whenever the image's header changes (a resize among others). A second call
    /// replaces nothing: the first watch stays.
    pub(crate) fn watch(&self, on_change: OnChange) -> Result<(), RbdError> {
        let mut watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
        if watch.is_some() {
            return Ok(());
        }
        let state: Box<OnChange> = Box::new(on_change);
        let mut handle = 0u64;
        let arg = ptr::from_ref::<OnChange>(&*state).cast_mut().cast::<c_void>();
        // SAFETY: an open handle; `arg` points into the box, which lives until `rbd_update_unwatch` returned
        // (Drop), and `on_update` only reads it.
        let rc = unsafe { ffi::rbd_update_watch(self.handle, &mut handle, Some(on_update), arg) };
        if rc < 0 {
            return Err(RbdError::Watch { image: self.name.clone(), source: io::Error::from_raw_os_error(-rc) });
        }
        *watch = Some((handle, state));
        Ok(())
    }

    /// Starts `aio`, whose end calls `callback(completion, arg)` on a librbd thread.
    ///
    /// # Safety
    /// The buffer of a read (written) or write (read) must stay valid and unused by anyone else until the
    /// callback ran, and `arg` must stay valid for the callback.
    pub(crate) unsafe fn start(
        &self,
        aio: Aio,
        callback: unsafe extern "C" fn(ffi::rbd_completion_t, *mut c_void),
        arg: *mut c_void,
    ) -> io::Result<()> {
        let mut completion: ffi::rbd_completion_t = ptr::null_mut();
        // SAFETY: `completion` is written on success; `arg` is the caller's to keep valid.
        let rc = unsafe { ffi::rbd_aio_create_completion(arg, Some(callback), &mut completion) };
        if rc < 0 {
            return Err(io::Error::from_raw_os_error(-rc));
        }
        // SAFETY: an open handle and a fresh completion; buffers are the caller's to keep valid until the callback.
        let rc = unsafe {
            match aio {
                Aio::Read { offset, len, buf } => {
                    ffi::rbd_aio_read(self.handle, offset, len as usize, buf.cast(), completion)
                }
                Aio::Write { offset, len, buf } => {
                    ffi::rbd_aio_write(self.handle, offset, len as usize, buf.cast(), completion)
                }
                Aio::Flush => ffi::rbd_aio_flush(self.handle, completion),
                Aio::Discard { offset, len } => ffi::rbd_aio_discard(self.handle, offset, len, completion),
                Aio::WriteZeroes { offset, len } => match usize::try_from(len) {
                    Ok(len) => ffi::rbd_aio_write_zeroes(self.handle, offset, len, completion, 0, 0),
                    Err(_) => -libc::EINVAL,
                },
            }
        };
        if rc < 0 {
            // Refused before it started: the callback never runs.
            // SAFETY: the completion created above, not handed to librbd.
            unsafe { ffi::rbd_aio_release(completion) };
            self.errors.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::from_raw_os_error(-rc));
        }
        self.started.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// The watch's callback: runs the image's `OnChange`.
unsafe extern "C" fn on_update(arg: *mut c_void) {
    // SAFETY: `arg` is the `OnChange` box `Image::watch` registered, alive until unwatched.
    let on_change = unsafe { &*arg.cast::<OnChange>() };
    on_change();
}

impl Drop for Image {
    fn drop(&mut self) {
        if let Some((handle, _state)) = self.watch.get_mut().unwrap_or_else(|e| e.into_inner()) {
            // SAFETY: the watch registered on this open image; after it returns librbd calls it no more, so the
            // box may go.
            let rc = unsafe { ffi::rbd_update_unwatch(self.handle, *handle) };
            if rc < 0 {
                tracing::warn!(image = %self.name, rc, "rbd_update_unwatch failed");
            }
        }
        // SAFETY: the open handle; every aio of it has completed (each holds the storage, which holds the image).
        let rc = unsafe { ffi::rbd_close(self.handle) };
        if rc < 0 {
            tracing::warn!(image = %self.name, rc, "rbd_close failed");
        }
        Cluster::destroy_ioctx(self.ioctx);
        let _ = &self.cluster;
    }
}
