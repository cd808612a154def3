//! [`RdmaError`]: which verb or RDMA CM call failed, with the errno it returned and what it was doing.
#![forbid(unsafe_code)]

use std::fmt;

use crate::WireError;

/// An errno value with its name and the C library's message, e.g. `ENODEV (No such device)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// The symbolic name of the errno values verbs and RDMA CM return, or `None`.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::EINTR => "EINTR",
            libc::EIO => "EIO",
            libc::EBADF => "EBADF",
            libc::EAGAIN => "EAGAIN",
            libc::ENOMEM => "ENOMEM",
            libc::EACCES => "EACCES",
            libc::EFAULT => "EFAULT",
            libc::EBUSY => "EBUSY",
            libc::EEXIST => "EEXIST",
            libc::ENODEV => "ENODEV",
            libc::EINVAL => "EINVAL",
            libc::ENOSPC => "ENOSPC",
            libc::ERANGE => "ERANGE",
            libc::ENOSYS => "ENOSYS",
            libc::ENODATA => "ENODATA",
            libc::EPROTO => "EPROTO",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            libc::EADDRINUSE => "EADDRINUSE",
            libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
            libc::ENETUNREACH => "ENETUNREACH",
            libc::ECONNABORTED => "ECONNABORTED",
            libc::ECONNRESET => "ECONNRESET",
            libc::ENOBUFS => "ENOBUFS",
            libc::EISCONN => "EISCONN",
            libc::ENOTCONN => "ENOTCONN",
            libc::ETIMEDOUT => "ETIMEDOUT",
            libc::ECONNREFUSED => "ECONNREFUSED",
            libc::EHOSTUNREACH => "EHOSTUNREACH",
            _ => return None,
        })
    }

    /// The calling thread's `errno` (read right after the failing call).
    pub(crate) fn last() -> Self {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = std::io::Error::from_raw_os_error(self.0);
        // io::Error's Display appends " (os error N)"; keep only the message.
        let text = msg.to_string();
        let text = text.split(" (os error").next().unwrap_or("");
        match self.name() {
            Some(name) => write!(f, "{name} ({text})"),
            None => write!(f, "errno {} ({text})", self.0),
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A verbs or RDMA CM operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    /// A verb or RDMA CM call returned an error.
    #[error("{verb} failed{}: {errno}", Context(context))]
    Verb {
        /// The C function that failed (`ibv_reg_mr`, `rdma_resolve_addr`, ...).
        verb: &'static str,
        /// What it returned or left in `errno`.
        errno: Errno,
        /// What it was asked to do (address, sizes), empty when nothing useful.
        context: String,
    },
    /// `ibv_post_send`/`ibv_post_recv`/`ibv_post_srq_recv` refused a work request of a chained batch. The
    /// requests before it were posted and will complete; it and the ones after it were not.
    #[error("{verb} failed at work request {posted} of {total}: {errno}")]
    Post {
        /// The C function that failed.
        verb: &'static str,
        /// What it returned.
        errno: Errno,
        /// Work requests posted (they precede the refused one).
        posted: usize,
        /// Work requests in the batch.
        total: usize,
    },
    /// An argument was rejected before any verb was called (a bound, a size, a state).
    #[error("{what}: {detail}")]
    InvalidArgument {
        /// The argument or operation.
        what: &'static str,
        /// What is wrong and what would be valid.
        detail: String,
    },
    /// NVMe/RDMA private data could not be encoded.
    #[error("NVMe/RDMA private data: {0}")]
    PrivateData(#[from] WireError),
}

struct Context<'a>(&'a str);

impl fmt::Display for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, " ({})", self.0)
        }
    }
}

impl RdmaError {
    /// A failed verb with the errno it returned.
    pub(crate) fn verb(verb: &'static str, errno: i32, context: impl Into<String>) -> Self {
        RdmaError::Verb { verb, errno: Errno(errno), context: context.into() }
    }

    /// A failed verb whose errno is in the thread's `errno`.
    pub(crate) fn last(verb: &'static str, context: impl Into<String>) -> Self {
        RdmaError::Verb { verb, errno: Errno::last(), context: context.into() }
    }

    /// An argument rejected before calling the verb.
    pub(crate) fn invalid(what: &'static str, detail: impl Into<String>) -> Self {
        RdmaError::InvalidArgument { what, detail: detail.into() }
    }

    /// The errno, if a verb failed.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            RdmaError::Verb { errno, .. } | RdmaError::Post { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// The C function that failed, if any.
    pub fn verb_name(&self) -> Option<&'static str> {
        match self {
            RdmaError::Verb { verb, .. } | RdmaError::Post { verb, .. } => Some(verb),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_verb_the_errno_and_the_context() {
        let e = RdmaError::verb("rdma_resolve_addr", libc::ENODEV, "127.0.0.1:4420");
        assert_eq!(e.to_string(), "rdma_resolve_addr failed (127.0.0.1:4420): ENODEV (No such device)");
        assert_eq!(e.errno(), Some(Errno(libc::ENODEV)));
        assert_eq!(e.verb_name(), Some("rdma_resolve_addr"));

        let e = RdmaError::verb("ibv_alloc_pd", libc::ENOMEM, "");
        assert_eq!(e.to_string(), "ibv_alloc_pd failed: ENOMEM (Cannot allocate memory)");

        let e = RdmaError::Post { verb: "ibv_post_send", errno: Errno(libc::ENOMEM), posted: 3, total: 8 };
        assert_eq!(e.to_string(), "ibv_post_send failed at work request 3 of 8: ENOMEM (Cannot allocate memory)");

        assert_eq!(Errno(4095).to_string(), "errno 4095 (Unknown error 4095)");
        let e = RdmaError::invalid("Sge", "offset 10 + length 20 exceeds the region's 16 bytes");
        assert_eq!(e.to_string(), "Sge: offset 10 + length 20 exceeds the region's 16 bytes");
        assert_eq!(e.errno(), None);

        let e = RdmaError::from(WireError::Short { structure: "RdmaCmRequest", need: 32, got: 4 });
        assert_eq!(e.to_string(), "NVMe/RDMA private data: RdmaCmRequest: 4 bytes received, at least 32 needed");
    }
}
