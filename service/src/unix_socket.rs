//! Unix stream sockets only their owner can connect to, at a path that held a socket or nothing: the daemons'
//! control sockets and `nvmf-host`'s NBD exports. A stale socket (nobody accepting) is replaced; a live one, or
//! anything that is not a socket (a mistyped path naming a regular file, a directory, a symlink), is left alone.
//!
//! The socket file is created with mode 0600 from the start: the descriptor's mode is set before `bind`, which
//! gives it to the new file (minus the umask), so there is no moment when a looser mode lets another user
//! connect. Linux checks write permission on the socket file at `connect`.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use rustix::fs::Mode;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

/// The socket file's mode: read and write (connect) for its owner only.
pub const OWNER_ONLY: u32 = 0o600;

/// Connections waiting to be accepted (the kernel caps it at `net.core.somaxconn`).
const BACKLOG: i32 = 128;

/// Why a socket could not be bound at a path.
#[derive(Debug, thiserror::Error)]
pub enum SocketPathError {
    /// A live process accepts on the socket at the path.
    #[error("{}: another process serves this socket", .0.display())]
    InUse(PathBuf),
    /// Something other than a socket is at the path: it is left alone.
    #[error("{}: the path exists and is not a socket (refusing to replace it)", .0.display())]
    NotASocket(PathBuf),
    /// A system call failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The socket path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

/// Listen on a new unix stream socket at `path`, mode [`OWNER_ONLY`]. A stale socket file at `path` is replaced;
/// a live socket is [`SocketPathError::InUse`], anything else [`SocketPathError::NotASocket`]. The parent
/// directory must exist. The caller removes the file when it stops serving.
pub fn bind_owner_only(path: &Path) -> Result<UnixListener, SocketPathError> {
    let io_err = |what| move |source| SocketPathError::Io { what, path: path.to_owned(), source };
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => return Err(SocketPathError::NotASocket(path.to_owned())),
        Ok(_) if UnixStream::connect(path).is_ok() => return Err(SocketPathError::InUse(path.to_owned())),
        Ok(_) => std::fs::remove_file(path).map_err(io_err("removing the stale socket"))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("inspecting")(e)),
    }
    let listener = bind_with_mode(path).map_err(io_err("binding"))?;
    // The umask may have taken the owner's bits too (0600 & ~umask); this only ever sets the owner's.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(OWNER_ONLY))
        .map_err(io_err("setting the mode of"))?;
    Ok(listener)
}

/// `socket`, `fchmod(0600)`, `bind`, `listen`: the file `bind` creates takes the descriptor's mode.
fn bind_with_mode(path: &Path) -> io::Result<UnixListener> {
    let fd: OwnedFd = rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(OWNER_ONLY))?;
    rustix::net::bind(&fd, &SocketAddrUnix::new(path)?)?;
    rustix::net::listen(&fd, BACKLOG)?;
    Ok(UnixListener::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_socket_is_owner_only_from_its_creation() {
        let dir = tempfile::tempdir().unwrap();
        // Before the chmod: a umask of 022 (the usual one) would leave 0755 without the fchmod.
        let early = dir.path().join("early.sock");
        let _l = bind_with_mode(&early).unwrap();
        assert_eq!(mode(&early) & 0o077, 0, "group/other bits at bind: {:o}", mode(&early));
        let path = dir.path().join("s.sock");
        let listener = bind_owner_only(&path).unwrap();
        assert_eq!(mode(&path), OWNER_ONLY);
        let _client = UnixStream::connect(&path).unwrap();
        assert!(listener.accept().is_ok());
    }

    #[test]
    fn a_path_that_is_not_a_socket_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("precious");
        std::fs::write(&file, "data").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let sub = dir.path().join("dir");
        std::fs::create_dir(&sub).unwrap();
        for path in [&file, &link, &sub] {
            let err = bind_owner_only(path).unwrap_err();
            assert!(matches!(err, SocketPathError::NotASocket(_)), "{err}");
            assert_eq!(
                err.to_string(),
                format!("{}: the path exists and is not a socket (refusing to replace it)", path.display())
            );
        }
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "data");
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert!(sub.is_dir());
    }

    #[test]
    fn a_live_socket_is_in_use_and_a_stale_one_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let live = bind_owner_only(&path).unwrap();
        assert!(matches!(bind_owner_only(&path), Err(SocketPathError::InUse(_))));
        drop(live);
        // The file stays behind, nobody accepts: stale.
        assert!(path.exists());
        let again = bind_owner_only(&path).unwrap();
        let _client = UnixStream::connect(&path).unwrap();
        assert!(again.accept().is_ok());
    }

    #[test]
    fn a_missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = bind_owner_only(&dir.path().join("no/such.sock")).unwrap_err();
        assert!(matches!(err, SocketPathError::Io { what: "binding", .. }), "{err}");
    }
}
