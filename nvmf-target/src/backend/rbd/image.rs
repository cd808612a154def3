//! One RBD image as a namespace sees it: the librbd handle ops go to now, and how it is replaced when the cluster
//! fences this client or the client loses the cluster.
//!
//! A [`Handle`] is one `rbd_open` (with its I/O context, its header watch and the connection under it). The
//! [`Image`] points at its current handle; ops load that pointer (one atomic load). When an op fails with
//! `ESHUTDOWN` (librbd's `EBLOCKLISTED`: another gateway broke this client's exclusive lock and the cluster
//! blocklisted it, so every later op of this client fails too) or `ETIMEDOUT` (the cluster did not answer within
//! the OSD timeout: this node may be cut off and about to be fenced), a recovery thread connects a new client (see
//! `Cluster::replace`), opens the image again, watches it again and makes the new handle current. Old handles are
//! never closed (an op may still be running on one, closing a fenced client's image may wait on the cluster, and
//! losing the cluster is rare). The recovery retries every 5 s for as long as the namespace exists.

use std::ffi::{c_void, CString};
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::cluster::Cluster;
use super::{ffi, RbdError};

/// What a change of the image's header calls (on a librbd thread: it must not block).
pub(crate) type OnChange = Arc<dyn Fn() + Send + Sync>;

/// One open of the image.
struct Handle {
    image: ffi::rbd_image_t,
    ioctx: ffi::rados_ioctx_t,
    /// The update watch's handle and its callback (boxed: librbd keeps the pointer).
    watch: Mutex<Option<(u64, Box<OnChange>)>>,
    // Last: shut down after the image and its context.
    cluster: Arc<Cluster>,
}

/// An image serving a namespace.
pub(crate) struct Image {
    /// The handle ops go to: a leaked `Box<Handle>`, freed by Drop with the retired ones.
    current: AtomicPtr<Handle>,
    /// Handles replaced after a fence, never freed (see Drop).
    retired: Mutex<Vec<*mut Handle>>,
    /// How many times `current` was replaced: an op's end triggers a recovery only if it ran on the current one.
    generation: AtomicU64,
    /// A recovery thread is running.
    recovering: AtomicBool,
    /// The header watch's callback, for the handles opened later.
    on_change: Mutex<Option<OnChange>>,
    pool: String,
    namespace: String,
    image: String,
    name: String,
    /// Ops started, ended, and ended with an error (for metrics; counted by the reactors); fences recovered.
    started: AtomicU64,
    ended: AtomicU64,
    errors: AtomicU64,
    reopened: AtomicU64,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image").field("name", &self.name).finish_non_exhaustive()
    }
}

// SAFETY: librbd's image handle may be used from several threads at once (ImageCtx locks inside); the ioctx is
// only used by librbd through the handle; the handles behind the pointers are only freed by Drop; the watch
// callback is Send + Sync.
unsafe impl Send for Image {}
// SAFETY: as above.
unsafe impl Sync for Image {}

/// One asynchronous operation on the image.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Aio {
    Read {
        offset: u64,
        len: u32,
        buf: *mut u8,
    },
    Write {
        offset: u64,
        len: u32,
        buf: *const u8,
    },
    Flush,
    Discard {
        offset: u64,
        len: u64,
    },
    WriteZeroes {
        offset: u64,
        len: u64,
    },
    /// Writes `buf` if the image holds `cmp` there (else `EILSEQ`); librbd stores the first differing byte's
    /// offset in `mismatch`.
    CompareAndWrite {
        offset: u64,
        len: u32,
        cmp: *const u8,
        buf: *const u8,
        mismatch: *mut u64,
    },
}

fn full_name(pool: &str, namespace: &str, image: &str) -> String {
    if namespace.is_empty() {
        format!("{pool}/{image}")
    } else {
        format!("{pool}/{namespace}/{image}")
    }
}

impl Handle {
    /// Opens `pool/namespace/image` through `cluster` (blocks: librbd reads the header).
    fn open(cluster: Arc<Cluster>, pool: &str, namespace: &str, image: &str) -> Result<Handle, RbdError> {
        let c_name = CString::new(image).map_err(|_| RbdError::Nul("the image name"))?;
        let ioctx = cluster.create_ioctx(pool, namespace)?;
        let mut handle: ffi::rbd_image_t = ptr::null_mut();
        // SAFETY: a valid context; `handle` is written on success; a null snapshot name opens the head.
        let rc = unsafe { ffi::rbd_open(ioctx, c_name.as_ptr(), &mut handle, ptr::null()) };
        if rc < 0 {
            Cluster::destroy_ioctx(ioctx);
            return Err(RbdError::Open {
                image: full_name(pool, namespace, image),
                cluster: cluster.describe(),
                source: io::Error::from_raw_os_error(-rc),
            });
        }
        Ok(Handle { image: handle, ioctx, watch: Mutex::new(None), cluster })
    }

    fn size(&self) -> io::Result<u64> {
        let mut size = 0u64;
        // SAFETY: an open handle; `size` is written on success.
        let rc = unsafe { ffi::rbd_get_size(self.image, &mut size) };
        if rc < 0 {
            return Err(io::Error::from_raw_os_error(-rc));
        }
        Ok(size)
    }

    fn watch(&self, on_change: OnChange) -> io::Result<()> {
        let state: Box<OnChange> = Box::new(on_change);
        let mut handle = 0u64;
        let arg = ptr::from_ref::<OnChange>(&*state).cast_mut().cast::<c_void>();
        // SAFETY: an open handle; `arg` points into the box, which lives until `rbd_update_unwatch` returned
        // (Drop), and `on_update` only reads it.
        let rc = unsafe { ffi::rbd_update_watch(self.image, &mut handle, Some(on_update), arg) };
        if rc < 0 {
            return Err(io::Error::from_raw_os_error(-rc));
        }
        *self.watch.lock().unwrap_or_else(|e| e.into_inner()) = Some((handle, state));
        Ok(())
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Some((handle, _state)) = self.watch.get_mut().unwrap_or_else(|e| e.into_inner()) {
            // SAFETY: the watch registered on this open image; after it returns librbd calls it no more, so the
            // box may go.
            let rc = unsafe { ffi::rbd_update_unwatch(self.image, *handle) };
            if rc < 0 {
                tracing::debug!(rc, "rbd_update_unwatch failed");
            }
        }
        // SAFETY: the open handle; every aio of it has completed (each holds the storage, which holds the image).
        let rc = unsafe { ffi::rbd_close(self.image) };
        if rc < 0 {
            tracing::debug!(rc, "rbd_close failed");
        }
        Cluster::destroy_ioctx(self.ioctx);
    }
}

impl Image {
    /// Opens `pool/namespace/image` through `cluster` (blocks: librbd reads the header).
    pub(crate) fn open(cluster: Arc<Cluster>, pool: &str, namespace: &str, image: &str) -> Result<Image, RbdError> {
        let handle = Handle::open(cluster, pool, namespace, image)?;
        Ok(Image {
            current: AtomicPtr::new(Box::into_raw(Box::new(handle))),
            retired: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            recovering: AtomicBool::new(false),
            on_change: Mutex::new(None),
            pool: pool.to_owned(),
            namespace: namespace.to_owned(),
            image: image.to_owned(),
            name: full_name(pool, namespace, image),
            started: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            reopened: AtomicU64::new(0),
        })
    }

    /// The current handle.
    fn handle(&self) -> &Handle {
        // SAFETY: `current` always holds a `Box<Handle>` pointer, freed only by Drop (replaced ones are retired).
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// How many times the handle was replaced (the generation of the current one).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether a recovery from a fence is under way.
    pub(crate) fn is_recovering(&self) -> bool {
        self.recovering.load(Ordering::Acquire)
    }

    /// `pool/image` (or `pool/namespace/image`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// An op [`Image::start`] started on handle `generation` ended with librbd's `rc`. A fenced current client
    /// (`ESHUTDOWN`), or one that lost the cluster (`ETIMEDOUT`: another gateway may be fencing it now, and a fenced
    /// client learns it only seconds after its link returns), starts the recovery (once at a time; the late ends of
    /// ops on a replaced handle do not). Replacing a client that was not fenced is safe: the new one asks the old
    /// one for the exclusive lock, which it gives up once its writes in flight completed.
    pub(crate) fn count_end(self: &Arc<Self>, generation: u64, rc: i64) {
        self.ended.fetch_add(1, Ordering::Relaxed);
        if rc < 0 {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        let lost = [libc::ESHUTDOWN, libc::ETIMEDOUT].into_iter().find(|&e| rc == -i64::from(e));
        if let Some(errno) = lost.filter(|_| generation == self.generation.load(Ordering::Acquire)) {
            if self.recovering.swap(true, Ordering::AcqRel) {
                return;
            }
            let image = Arc::clone(self);
            let fenced = errno == libc::ESHUTDOWN;
            let spawned =
                std::thread::Builder::new().name("nvmf-rbd-reopen".into()).spawn(move || image.recover(fenced));
            if let Err(e) = spawned {
                tracing::error!(image = %self.name, error = %e, "cannot start the thread that reopens an RBD image");
                self.recovering.store(false, Ordering::Release);
            }
        }
    }

    /// The cluster blocklisted this client (`fenced`) or an op timed out: connect a new one, open the image again
    /// and make it current. Retries every 5 s until it works.
    fn recover(self: &Arc<Self>, fenced: bool) {
        if fenced {
            tracing::warn!(image = %self.name, "the cluster fenced this client (blocklisted): reconnecting and reopening");
        } else {
            tracing::warn!(image = %self.name, "an op on the image timed out: reconnecting and reopening");
        }
        let old_client = Arc::clone(&self.handle().cluster);
        loop {
            if Arc::strong_count(self) == 1 {
                // The namespace is gone: nobody needs the image any more.
                return;
            }
            let reopened = old_client.replace().and_then(|cluster| {
                let handle = Handle::open(cluster, &self.pool, &self.namespace, &self.image)?;
                let on_change = self.on_change.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let Some(on_change) = on_change {
                    handle.watch(on_change).map_err(|source| RbdError::Watch { image: self.name.clone(), source })?;
                }
                Ok(handle)
            });
            match reopened {
                Ok(handle) => {
                    let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
                    let old = self.current.swap(Box::into_raw(Box::new(handle)), Ordering::AcqRel);
                    self.generation.fetch_add(1, Ordering::AcqRel);
                    retired.push(old);
                    drop(retired);
                    self.reopened.fetch_add(1, Ordering::Relaxed);
                    self.recovering.store(false, Ordering::Release);
                    tracing::info!(image = %self.name, "RBD image reopened through a new client");
                    return;
                }
                Err(e) => {
                    tracing::warn!(image = %self.name, error = %e, "reopening the RBD image failed; retrying in 5 s");
                    std::thread::sleep(Duration::from_secs(5));
                }
            }
        }
    }

    /// Ops in librbd now, ops that ended with an error since open, and times the image was reopened after a fence.
    pub(crate) fn stats(&self) -> (u64, u64, u64) {
        let ended = self.ended.load(Ordering::Relaxed);
        let in_flight = self.started.load(Ordering::Relaxed).saturating_sub(ended);
        (in_flight, self.errors.load(Ordering::Relaxed), self.reopened.load(Ordering::Relaxed))
    }

    /// The image's size in bytes, as librbd last saw it (it refreshes the header after a watch notification).
    pub(crate) fn size(&self) -> io::Result<u64> {
        self.handle().size()
    }

    /// Have `on_change` called whenever the image's header changes (a resize among others). A second call
    /// replaces nothing: the first watch stays.
    pub(crate) fn watch(&self, on_change: OnChange) -> Result<(), RbdError> {
        let mut slot = self.on_change.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return Ok(());
        }
        self.handle()
            .watch(Arc::clone(&on_change))
            .map_err(|source| RbdError::Watch { image: self.name.clone(), source })?;
        *slot = Some(on_change);
        Ok(())
    }

    /// Starts `aio` on the current handle, whose end calls `callback(completion, arg)` on a librbd thread.
    /// Returns the handle's generation, for [`Image::count_end`].
    ///
    /// # Safety
    /// The buffer of a read (written) or write (read) must stay valid and unused by anyone else until the
    /// callback ran, and `arg` must stay valid for the callback.
    pub(crate) unsafe fn start(
        &self,
        aio: Aio,
        callback: unsafe extern "C" fn(ffi::rbd_completion_t, *mut c_void),
        arg: *mut c_void,
    ) -> io::Result<u64> {
        // Read before the handle: an op started on a handle being replaced ends with the older generation.
        let generation = self.generation.load(Ordering::Acquire);
        let image = self.handle().image;
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
                    ffi::rbd_aio_read(image, offset, len as usize, buf.cast(), completion)
                }
                Aio::Write { offset, len, buf } => {
                    ffi::rbd_aio_write(image, offset, len as usize, buf.cast(), completion)
                }
                Aio::Flush => ffi::rbd_aio_flush(image, completion),
                Aio::Discard { offset, len } => ffi::rbd_aio_discard(image, offset, len, completion),
                Aio::CompareAndWrite { offset, len, cmp, buf, mismatch } => {
                    let rc = ffi::rbd_aio_compare_and_write(
                        image,
                        offset,
                        len as usize,
                        cmp.cast(),
                        buf.cast(),
                        completion,
                        mismatch,
                        0,
                    );
                    i32::try_from(rc).unwrap_or(-libc::EINVAL)
                }
                Aio::WriteZeroes { offset, len } => match usize::try_from(len) {
                    Ok(len) => ffi::rbd_aio_write_zeroes(image, offset, len, completion, 0, 0),
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
        Ok(generation)
    }
}

/// The watch's callback: runs the image's `OnChange`.
unsafe extern "C" fn on_update(arg: *mut c_void) {
    // SAFETY: `arg` is the `OnChange` box a handle's watch registered, alive until unwatched.
    let on_change = unsafe { &*arg.cast::<OnChange>() };
    on_change();
}

impl Drop for Image {
    /// Closes the current handle. The replaced ones belong to clients the cluster fenced or that lost it: closing
    /// them would ask the cluster to release locks they may no longer hold, and may wait for it, so they are left as
    /// they are.
    fn drop(&mut self) {
        let current = *self.current.get_mut();
        // SAFETY: a `Box<Handle>` leaked by `open` or `recover`, freed only here, once; every op on it has
        // completed (each op holds the storage, which holds this image).
        drop(unsafe { Box::from_raw(current) });
    }
}
