//! A cross-process lock: a directory that only one process can create.
//!
//! Used so that two test processes neither prepare the same kernel at once nor boot two VMs at once (the
//! guest is CPU-bound under TCG; two of them on a small machine time each other out). A lock whose owner
//! died is taken over: the owner's pid is in the directory and `/proc/<pid>` tells whether it still runs.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::error::VmError;

/// Held while the lock is ours; dropping it releases the lock.
#[derive(Debug)]
pub struct DirLock {
    path: PathBuf,
}

impl DirLock {
    /// Waits until the lock at `path` is ours. Says once on stderr whom it is waiting for.
    pub fn acquire(path: &Path) -> Result<Self, VmError> {
        let started = Instant::now();
        let mut told = false;
        loop {
            match fs::create_dir(path) {
                Ok(()) => {
                    let pid = std::process::id().to_string();
                    fs::write(path.join("pid"), pid).map_err(VmError::io("writing the lock owner", path))?;
                    return Ok(Self { path: path.to_owned() });
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(VmError::io("creating the lock", path)(e)),
            }
            match fs::read_to_string(path.join("pid")) {
                Ok(pid) if !Path::new("/proc").join(pid.trim()).exists() => {
                    // The owner died without releasing it.
                    let _ = fs::remove_dir_all(path);
                    continue;
                }
                Err(_) if started.elapsed() > Duration::from_secs(5) => {
                    // Created but never given an owner: its creator died in between.
                    let _ = fs::remove_dir_all(path);
                    continue;
                }
                Ok(pid) if !told => {
                    crate::vm::note(&format!("waiting for {} (held by pid {})", path.display(), pid.trim()));
                    told = true;
                }
                _ => {}
            }
            thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}
