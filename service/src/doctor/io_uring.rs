//! io_uring: whether this kernel lets the process create a ring (`io_uring_setup`, through the io-uring crate).
//! Kernels can lack it, or forbid it (`kernel.io_uring_disabled`, seccomp filters in containers).

use std::io;

use super::report::Finding;

/// Try to create a two-entry ring.
pub fn probe() -> io::Result<()> {
    io_uring::IoUring::new(2).map(drop)
}

/// The finding for `probe`'s result; `required`: the daemon cannot run without it (else `what` needs it).
pub fn io_uring(probe: &io::Result<()>, required: bool, what: &str) -> Finding {
    let check = "io_uring";
    let Err(e) = probe else { return Finding::ok(check, format!("available ({what})")) };
    let (finding, fix) = match rustix::io::Errno::from_io_error(e) {
        Some(rustix::io::Errno::NOSYS) => {
            ("this kernel has no io_uring".to_owned(), "a kernel built with CONFIG_IO_URING (5.19 or later)")
        }
        Some(rustix::io::Errno::PERM) => (
            "io_uring_setup refused (EPERM): disabled by sysctl kernel.io_uring_disabled or a seccomp filter"
                .to_owned(),
            "sysctl kernel.io_uring_disabled=0, or allow io_uring in the container's seccomp profile",
        ),
        _ => (format!("io_uring_setup failed: {e}"), "see the error; io_uring needs a 5.19 or later kernel"),
    };
    if required {
        Finding::fail(check, format!("{finding}; {what} needs it"), fix)
    } else {
        Finding::warn(check, format!("{finding}; only {what} need it"), fix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::report::Level;

    #[test]
    fn probe_outcomes() {
        assert_eq!(io_uring(&Ok(()), true, "storage I/O").level, Level::Ok);
        let f = io_uring(&Err(io::Error::from_raw_os_error(1)), true, "storage I/O");
        assert_eq!(f.level, Level::Fail);
        assert!(f.finding.contains("EPERM"), "{f:?}");
        let f = io_uring(&Err(io::Error::from_raw_os_error(38)), false, "ublk exports");
        assert_eq!(f.level, Level::Warn);
        assert!(f.finding.starts_with("this kernel has no io_uring"), "{f:?}");
        // This machine: the probe answers one way or the other, and the finding says which.
        let here = io_uring(&probe(), true, "storage I/O");
        assert!(matches!(here.level, Level::Ok | Level::Fail));
    }
}
