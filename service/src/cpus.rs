//! CPU affinity: the CPUs this process may run on, CPU lists as `taskset -c` writes them, and pinning the calling
//! thread to one CPU (the target's reactors, the host's I/O queue, ublk queue and perf threads), through
//! `sched_{get,set}affinity`.

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// Why a CPU list or a pin was refused.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    /// The text is not a CPU list.
    #[error("bad CPU list {text:?}: {reason} (expected CPU numbers and ranges, e.g. 0,2-3)")]
    List {
        /// The list as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `sched_setaffinity`/`sched_getaffinity` failed (a CPU that is offline or outside the cgroup's set).
    #[error("CPU affinity ({what}): {source}")]
    Os {
        /// The call and its CPU.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// The CPUs this process may run on, in ascending order (its affinity mask: `taskset`, cgroup cpusets).
pub fn allowed() -> Result<Vec<usize>, CpuError> {
    let set =
        sched_getaffinity(None).map_err(|e| CpuError::Os { what: "sched_getaffinity".into(), source: e.into() })?;
    Ok((0..CpuSet::MAX_CPU).filter(|&cpu| set.is_set(cpu)).collect())
}

/// The CPUs this machine can ever have online (`/sys/devices/system/cpu/possible`), in ascending order.
pub fn possible() -> Result<Vec<usize>, CpuError> {
    let path = "/sys/devices/system/cpu/possible";
    let text =
        std::fs::read_to_string(path).map_err(|source| CpuError::Os { what: format!("reading {path}"), source })?;
    parse_list(text.trim())
}

/// Run the calling thread at nice `nice` (Linux schedules threads, so this thread only): background work that must
/// not take CPU time from the threads serving I/O when both want it.
pub fn lower_current_thread_priority(nice: i32) -> std::io::Result<()> {
    rustix::process::setpriority_process(None, nice).map_err(Into::into)
}

/// Pin the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<(), CpuError> {
    let what = || format!("pinning a thread to CPU {cpu}");
    if cpu >= CpuSet::MAX_CPU {
        let source = std::io::Error::new(std::io::ErrorKind::InvalidInput, "no such CPU");
        return Err(CpuError::Os { what: what(), source });
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).map_err(|e| CpuError::Os { what: what(), source: e.into() })
}

/// Pin the calling thread to `cpu` if given; a CPU it may not run on leaves it unpinned with a warning naming the
/// thread (placement is an optimisation, never a reason for a thread not to run).
pub fn place_current_thread(cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    if let Err(error) = pin_current_thread(cpu) {
        let thread = std::thread::current();
        tracing::warn!(thread = thread.name().unwrap_or("unnamed"), cpu, %error, "thread left unpinned");
    }
}

/// Parse a CPU list as `taskset -c` and `/sys/devices/system/cpu/online` write it: numbers and inclusive ranges,
/// comma-separated (`0,2-3` is CPUs 0, 2 and 3), kept in the order given, each CPU once.
pub fn parse_list(text: &str) -> Result<Vec<usize>, CpuError> {
    let bad = |reason: String| CpuError::List { text: text.to_owned(), reason };
    let number = |s: &str| {
        s.trim()
            .parse::<usize>()
            .ok()
            .filter(|&cpu| cpu < CpuSet::MAX_CPU)
            .ok_or_else(|| bad(format!("{:?} is not a CPU number below {}", s.trim(), CpuSet::MAX_CPU)))
    };
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(part)?, number(part)?),
        };
        if first > last {
            return Err(bad(format!("range {} runs backwards", part.trim())));
        }
        for cpu in first..=last {
            if cpus.contains(&cpu) {
                return Err(bad(format!("CPU {cpu} is listed twice")));
            }
            cpus.push(cpu);
        }
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_like_taskset() {
        assert_eq!(parse_list("0").unwrap(), [0]);
        assert_eq!(parse_list("3,0-1").unwrap(), [3, 0, 1]);
        assert_eq!(parse_list(" 2 - 4 , 7").unwrap(), [2, 3, 4, 7]);
        for bad in ["", "a", "1,,2", "3-1", "0,0", "1-2,2", "-1", "99999"] {
            assert!(matches!(parse_list(bad), Err(CpuError::List { .. })), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_thread_pins_to_an_allowed_cpu_and_not_to_a_missing_one() {
        let cpus = allowed().unwrap();
        assert!(!cpus.is_empty());
        let last = *cpus.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(last).unwrap();
            assert_eq!(allowed().unwrap(), [last]);
            assert!(pin_current_thread(CpuSet::MAX_CPU).is_err());
            // A CPU the kernel does not have (none when all MAX_CPU are possible): EINVAL from sched_setaffinity.
            let missing = possible().unwrap().last().map(|c| c + 1).filter(|&c| c < CpuSet::MAX_CPU);
            if let Some(cpu) = missing {
                assert!(pin_current_thread(cpu).is_err(), "pinned to CPU {cpu}");
            }
        })
        .join()
        .unwrap();
    }
}
