//! The Ceph connection: one `rados_t` per (configuration file, cephx user) in the process, shared by every image
//! opened through it, shut down when the last image using it closes.
//!
//! Connecting reads the configuration file (monitors, keyring path) and then the keyring, inside librados: the
//! cephx key never passes through our code or our logs. Every wait librados may do is bounded here, whatever the
//! file says: connecting and monitor requests by `ClusterTimeouts::mon`, each OSD request by
//! `ClusterTimeouts::osd` (an op that outlives it completes with `ETIMEDOUT`, so no command of a host waits
//! forever and an engine being dropped can wait for its ops). librbd's cache is off: a write is on the OSDs when
//! it completes, as a namespace without a volatile write cache promises, and two gateways never hold stale
//! copies of one image.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::{Arc, Mutex, Weak};

use super::{ffi, ClusterTimeouts, RbdError};

/// A connected `rados_t`.
#[derive(Debug)]
pub(crate) struct Cluster {
    handle: ffi::rados_t,
    conf: PathBuf,
    id: String,
    timeouts: ClusterTimeouts,
}

// SAFETY: librados' handle may be used from any thread and from several at once (its calls lock inside).
unsafe impl Send for Cluster {}
// SAFETY: as above.
unsafe impl Sync for Cluster {}

/// The process's connections, by configuration file and user.
static CLUSTERS: Mutex<Vec<Weak<Cluster>>> = Mutex::new(Vec::new());

/// A C string of a configuration value; our values and paths never hold a NUL unless a user wrote one.
fn c_string(what: &'static str, s: &str) -> Result<CString, RbdError> {
    CString::new(s).map_err(|_| RbdError::Nul(what))
}

impl Cluster {
    /// The connection for `conf` and `id` (a user name without `client.`): the process's existing one, or a new
    /// one (blocks while connecting, at most `timeouts.mon`).
    pub(crate) fn connect(conf: &Path, id: &str, timeouts: ClusterTimeouts) -> Result<Arc<Cluster>, RbdError> {
        let mut clusters = CLUSTERS.lock().unwrap_or_else(|e| e.into_inner());
        clusters.retain(|c| c.strong_count() > 0);
        if let Some(cluster) =
            clusters.iter().filter_map(Weak::upgrade).find(|c| c.conf == conf && c.id == id && c.timeouts == timeouts)
        {
            return Ok(cluster);
        }
        let cluster = Arc::new(Self::connect_new(conf, id, timeouts)?);
        clusters.push(Arc::downgrade(&cluster));
        Ok(cluster)
    }

    /// A new connection for the same configuration and user, replacing this one (which the cluster fenced) for
    /// every image that connects or reconnects from now on; the one another image's recovery made already, if any.
    pub(crate) fn replace(self: &Arc<Self>) -> Result<Arc<Cluster>, RbdError> {
        let mut clusters = CLUSTERS.lock().unwrap_or_else(|e| e.into_inner());
        clusters.retain(|c| c.strong_count() > 0);
        let same = |c: &Arc<Cluster>| c.conf == self.conf && c.id == self.id && c.timeouts == self.timeouts;
        if let Some(newer) = clusters.iter().filter_map(Weak::upgrade).find(|c| same(c) && !Arc::ptr_eq(c, self)) {
            return Ok(newer);
        }
        let cluster = Arc::new(Self::connect_new(&self.conf, &self.id, self.timeouts)?);
        clusters.retain(|c| !std::ptr::eq(c.as_ptr(), Arc::as_ptr(self)));
        clusters.push(Arc::downgrade(&cluster));
        Ok(cluster)
    }

    /// The keyring librados will read the user's key from (the first file of the configuration's `keyring` list
    /// that exists) must be its owner's alone, as every secret file of ours: refused otherwise.
    fn check_keyring(&self) -> Result<(), RbdError> {
        let name = c_string("a Ceph option", "keyring")?;
        let mut value = vec![0u8; 4096];
        // SAFETY: a configured handle; librados writes at most `value.len()` bytes, NUL included.
        let rc = unsafe { ffi::rados_conf_get(self.handle, name.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        if rc < 0 {
            // No keyring option: nothing of ours to check (librados reports a missing key at connect).
            return Ok(());
        }
        let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
        let list = String::from_utf8_lossy(&value[..end]).into_owned();
        let first = list
            .split([',', ';', ' ', '\t'])
            .filter(|p| !p.is_empty())
            .find_map(|p| std::fs::metadata(p).ok().map(|meta| (p.to_owned(), meta)));
        match first.and_then(|(path, meta)| Some((path, nvmf_config::secret::private_file_problem(&meta)?))) {
            Some((path, problem)) => Err(RbdError::KeyringNotPrivate { path: path.into(), problem }),
            None => Ok(()),
        }
    }

    fn connect_new(conf: &Path, id: &str, timeouts: ClusterTimeouts) -> Result<Cluster, RbdError> {
        let c_id = c_string("the Ceph user", id)?;
        let c_conf = c_string("the Ceph configuration path", &conf.to_string_lossy())?;
        let fail = |step: &'static str, rc: i32| RbdError::Connect {
            conf: conf.to_owned(),
            id: id.to_owned(),
            step,
            source: io::Error::from_raw_os_error(-rc),
        };
        let mut handle: ffi::rados_t = ptr::null_mut();
        // SAFETY: `handle` is written on success; `c_id` outlives the call.
        let rc = unsafe { ffi::rados_create(&mut handle, c_id.as_ptr()) };
        if rc < 0 {
            return Err(fail("create a RADOS client", rc));
        }
        // From here the handle is shut down by Drop, whatever fails.
        let cluster = Cluster { handle, conf: conf.to_owned(), id: id.to_owned(), timeouts };
        // SAFETY: a created, unconnected handle; `c_conf` outlives the call.
        let rc = unsafe { ffi::rados_conf_read_file(handle, c_conf.as_ptr()) };
        if rc < 0 {
            return Err(fail("read the Ceph configuration", rc));
        }
        let mon = timeouts.mon.as_secs().max(1).to_string();
        let osd = timeouts.osd.as_secs().max(1).to_string();
        let settings = [
            ("client_mount_timeout", mon.as_str()),
            ("rados_mon_op_timeout", mon.as_str()),
            ("rados_osd_op_timeout", osd.as_str()),
            ("rbd_cache", "false"),
            // A gateway cut off from the cluster retries its connections at least every second (Ceph backs off to
            // 15 s): when its link returns it learns within a second that it was fenced, rather than holding hosts'
            // I/O in a session that is not there yet.
            ("ms_max_backoff", "1"),
            // Its monitor session likewise: a lost one is hunted for every second or two (Ceph backs off to 30 s), so
            // the fence (the blocklist in the new OSD map) reaches it soon after its link returns. Until it does,
            // its ops wait: the OSDs drop a blocklisted client's requests without an answer.
            ("mon_client_hunt_interval", "1"),
            ("mon_client_hunt_interval_max_multiple", "2"),
            ("mon_client_ping_interval", "2"),
            ("mon_client_ping_timeout", "10"),
            // Its watches (hence its exclusive locks) are pinged every second (Ceph: 5 s), so a cluster may set
            // `osd_client_watch_timeout` to a few seconds: the time a vanished gateway keeps its lock.
            ("objecter_tick_interval", "1"),
            // Our log says what failed, in one line; librados' own stderr lines would interleave with it.
            ("log_to_stderr", "false"),
            ("err_to_stderr", "false"),
        ];
        for (name, value) in settings {
            let (c_name, c_value) = (c_string("a Ceph option", name)?, c_string("a Ceph option", value)?);
            // SAFETY: an unconnected handle; both strings outlive the call.
            let rc = unsafe { ffi::rados_conf_set(handle, c_name.as_ptr(), c_value.as_ptr()) };
            if rc < 0 {
                return Err(fail("set a Ceph option", rc));
            }
        }
        cluster.check_keyring()?;
        // SAFETY: a configured handle; blocks at most client_mount_timeout.
        let rc = unsafe { ffi::rados_connect(handle) };
        if rc < 0 {
            return Err(fail("connect to the cluster", rc));
        }
        tracing::info!(conf = %conf.display(), id, "connected to the Ceph cluster");
        Ok(cluster)
    }

    /// An I/O context on `pool` (and `namespace`, when not empty). Destroy it with [`Cluster::destroy_ioctx`].
    pub(crate) fn create_ioctx(&self, pool: &str, namespace: &str) -> Result<ffi::rados_ioctx_t, RbdError> {
        let c_pool = c_string("the pool", pool)?;
        let mut ioctx: ffi::rados_ioctx_t = ptr::null_mut();
        // SAFETY: a connected handle; `ioctx` is written on success; `c_pool` outlives the call.
        let rc = unsafe { ffi::rados_ioctx_create(self.handle, c_pool.as_ptr(), &mut ioctx) };
        if rc < 0 {
            return Err(RbdError::Pool { pool: pool.to_owned(), source: io::Error::from_raw_os_error(-rc) });
        }
        if !namespace.is_empty() {
            let c_namespace = match c_string("the RADOS namespace", namespace) {
                Ok(c) => c,
                Err(e) => {
                    Self::destroy_ioctx(ioctx);
                    return Err(e);
                }
            };
            // SAFETY: the context just created; the string outlives the call (librados copies it).
            unsafe { ffi::rados_ioctx_set_namespace(ioctx, c_namespace.as_ptr()) };
        }
        Ok(ioctx)
    }

    /// Destroys a context [`Cluster::create_ioctx`] made, once nothing uses it.
    pub(crate) fn destroy_ioctx(ioctx: ffi::rados_ioctx_t) {
        // SAFETY: the caller's context, no longer used by any image.
        unsafe { ffi::rados_ioctx_destroy(ioctx) };
    }

    /// The configuration file and user, for messages.
    pub(crate) fn describe(&self) -> String {
        format!("{} as client.{}", self.conf.display(), self.id)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: the handle rados_create made; no image or context of it is left (they hold the Arc).
        unsafe { ffi::rados_shutdown(self.handle) };
    }
}
