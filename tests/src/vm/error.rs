//! What can go wrong before a scenario's command gets to run.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why the harness could not boot the guest or run a command in it.
///
/// [`VmError::Unavailable`] means this machine cannot run the VM at all (no QEMU, no kernel to be had):
/// tests skip on it unless `NVMF_REQUIRE_VM=1`. Every other variant is a failure of a machine that should
/// be able to run it.
#[derive(Debug)]
pub enum VmError {
    /// This machine lacks something the VM needs; the text says what and how to get it.
    Unavailable(String),
    /// A host tool (apt-get, dpkg-deb, depmod, xz, …) failed.
    Tool {
        /// The command line, for the message.
        command: String,
        /// Its exit status and the tail of its stderr.
        detail: String,
    },
    /// A file or directory operation failed.
    Io {
        /// What the harness was doing.
        what: String,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The kernel tree is not what the harness expects (no vmlinuz, no modules, a module missing), or a lab or
    /// guest was described wrongly.
    Kernel(String),
    /// A guest did not come up (a lab node whose setup failed, whose QEMU ended or whose kernel panicked), or its
    /// QEMU refused a command; the text has its stderr and console tail.
    Guest(String),
}

impl VmError {
    pub(crate) fn io(what: impl Into<String>, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let (what, path) = (what.into(), path.into());
        move |source| Self::Io { what, path, source }
    }
}

impl fmt::Display for VmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unavailable(why) => write!(f, "the test VM cannot run on this machine: {why}"),
            Self::Tool { command, detail } => write!(f, "`{command}` failed: {detail}"),
            Self::Io { what, path, source } => write!(f, "{what} {}: {source}", path.display()),
            Self::Kernel(why) => write!(f, "guest kernel: {why}"),
            Self::Guest(why) => write!(f, "guest: {why}"),
        }
    }
}

impl std::error::Error for VmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
