//! The test VM: throw-away QEMU/TCG guests running a Debian kernel (Linux 6.12, or 7.x from trixie-backports) with
//! this machine's root file system, alone or as the nodes of a lab joined by links.
//!
//! This machine, the developers' and CI's run a kernel without RDMA, NVMe-oF, nbd, ublk or configfs; the guest
//! has them all. Its root is the host's `/`, read-only over 9p under a tmpfs overlay, so binaries built here
//! run there unchanged at the same path, as root. There is no network (`-nic none`); Soft-RoCE runs on a
//! guest-only dummy netdev (10.77.0.1/24) because rdma_cm does not work over loopback.
//!
//! [`Vm`] is the builder: kernel, CPUs, memory, modules, Soft-RoCE, an emulated NVMe drive, shared writable
//! folders, a logs folder and a deadline; [`Vm::run`] boots, runs a bash script with `tests/vm/guest-lib.sh`
//! sourced and returns a [`VmOutput`] (stdout, stderr, exit status, the kernel console's tail, boot and run
//! times). A script that outlives its deadline is killed with the guest, and reported with the console tail.
//! [`Lab`] boots several guests ([`Vm`]s as nodes) joined by point-to-point links, runs scripts on any of them,
//! cuts and restores links, and stops them all ([`lab`]).
//!
//! Only one guest or lab runs at a time on a machine: [`Vm::run`] and [`Lab::start`] hold a process-wide mutex
//! and a cross-process lock (`$TMPDIR/nvmf-vm.lock`) while QEMU runs (TCG guests are CPU-bound; two runs time
//! each other out). The kernel is fetched through apt once and cached ([`kernel`]: [`KernelLine::Lts`], Linux
//! 6.12, by default; a scenario that needs a later one says so with [`Vm::kernel`]); the initramfs is built per
//! boot ([`initramfs`]). Scenarios that cannot run on this machine are skipped with a `SKIPPED:` line on stderr
//! unless `NVMF_REQUIRE_VM=1` ([`Vm::run_or_skip`]); they are opt-in with `NVMF_VM=1` otherwise, so that a
//! plain `cargo test` on a developer's machine does not spend minutes booting guests.

mod apt;
pub mod debian13;
mod error;
pub mod initramfs;
pub mod kernel;
pub mod lab;
mod lock;
pub mod siw;
mod transcript;

use std::collections::VecDeque;
use std::env;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

pub use error::VmError;
pub use kernel::{cache_dir, Kernel, KernelLine, KernelNeed, KernelVersion};
use lab::Wiring;
pub use lab::{Job, Lab, RunningLab};
use lock::DirLock;
pub use transcript::Transcript;

/// The guest side of every run: bash helpers for scenarios.
const GUEST_LIB: &str = include_str!("../../vm/guest-lib.sh");
/// Runs in the guest after `init`: modules, configfs, Soft-RoCE, links, then the scenario or the lab agent.
const STAGE2: &str = include_str!("../../vm/stage2.sh");
/// A lab node's job runner (`stage2.sh` runs it instead of a scenario).
const AGENT: &str = include_str!("../../vm/agent.sh");
/// The guest side of [`Vm::debian13_userspace`]: the chroot, `nvme13`, `tlshd_start`, the TLS helpers.
const DEBIAN13_LIB: &str = include_str!("../../vm/debian13-lib.sh");
/// Modules that make `rxe0` and let user space use it (verbs and rdma_cm).
const RXE_MODULES: [&str; 4] = ["rdma_rxe", "ib_uverbs", "rdma_ucm", "dummy"];
/// What `siw.ko` (built by [`siw::module`]) depends on, and what lets user space use `siw0`.
const SIW_MODULES: [&str; 4] = ["ib_uverbs", "rdma_ucm", "libcrc32c", "dummy"];
/// Lines of the kernel console kept in [`VmOutput::console_tail`].
const CONSOLE_TAIL_LINES: usize = 40;

/// One guest to boot: what it has and how long it may run. Cheap to build; [`Vm::run`] boots it.
#[derive(Debug, Clone)]
pub struct Vm {
    name: String,
    kernel: KernelNeed,
    cpus: u32,
    memory_mib: u32,
    modules: Vec<String>,
    rxe: bool,
    siw: bool,
    nvme_drive_bytes: Option<u64>,
    debian13: bool,
    /// Shared host folders, and whether each bypasses the guest's page cache.
    shares: Vec<(PathBuf, bool)>,
    logs: Option<PathBuf>,
    env: Vec<(String, String)>,
    deadline: Duration,
}

/// How the guest's command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestStatus {
    /// The command exited with this status (125: the guest could not be set up as asked).
    Exited(i32),
    /// The deadline passed; QEMU was killed.
    TimedOut,
    /// QEMU exited without the guest reporting a status (kernel panic, init failure, QEMU error).
    NoStatus,
}

/// What a guest run produced.
#[derive(Debug, Clone)]
pub struct VmOutput {
    /// The scenario's name (for messages).
    pub name: String,
    /// The command's stdout (the guest's second serial port).
    pub stdout: String,
    /// The command's stderr, and the guest setup's complaints.
    pub stderr: String,
    /// How it ended.
    pub status: GuestStatus,
    /// The last lines of the kernel console (ttyS0), and QEMU's own stderr if it had any.
    pub console_tail: String,
    /// Guest uptime when the command started: kernel boot, root mount, modules, Soft-RoCE.
    pub boot_time: Duration,
    /// How long the command ran (guest clock).
    pub command_time: Duration,
    /// Host wall time from starting QEMU to its exit.
    pub wall_time: Duration,
    /// `uname -r` of the guest.
    pub kernel_release: String,
}

impl VmOutput {
    /// Whether the command exited 0.
    pub fn success(&self) -> bool {
        self.status == GuestStatus::Exited(0)
    }

    /// Panics with everything the run produced unless the command exited 0.
    #[track_caller]
    pub fn assert_success(&self) {
        assert!(self.success(), "{}", self.report());
    }

    /// Panics with everything the run produced unless its stdout holds every one of `needles`.
    #[track_caller]
    pub fn assert_lines(&self, needles: &[&str]) {
        for needle in needles {
            assert!(self.stdout.contains(needle), "stdout lacks {needle:?}\n{}", self.report());
        }
    }

    /// A human-readable account of the run: status, times, stdout, stderr, console tail.
    pub fn report(&self) -> String {
        let status = match self.status {
            GuestStatus::Exited(code) => format!("exited with status {code}"),
            GuestStatus::TimedOut => "killed at its deadline".to_owned(),
            GuestStatus::NoStatus => "ended without reporting a status (crash?)".to_owned(),
        };
        format!(
            "VM scenario {} {status} ({})\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- kernel console (tail) ---\n{}",
            self.name,
            self.timing(),
            self.stdout.trim_end(),
            self.stderr.trim_end(),
            self.console_tail.trim_end()
        )
    }

    /// `boot 6.1 s, command 12.0 s, wall 19.2 s`.
    pub fn timing(&self) -> String {
        format!(
            "boot {:.1} s, command {:.1} s, wall {:.1} s",
            self.boot_time.as_secs_f64(),
            self.command_time.as_secs_f64(),
            self.wall_time.as_secs_f64()
        )
    }
}

impl Vm {
    /// A guest named `name` (used in messages and log folder names): 2 CPUs, 3 GiB, no extra modules, no
    /// Soft-RoCE, a 5-minute deadline.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kernel: KernelNeed::Any,
            cpus: 2,
            memory_mib: 3072,
            modules: Vec::new(),
            rxe: false,
            siw: false,
            nvme_drive_bytes: None,
            debian13: false,
            shares: Vec::new(),
            logs: None,
            env: Vec::new(),
            deadline: Duration::from_secs(300),
        }
    }

    /// The kernel it needs: a [`KernelLine`], or [`Kernel::at_least`] (the oldest line that meets it boots).
    /// Default: [`KernelNeed::Any`] (Linux 6.12 unless `NVMF_VM_KERNEL` says otherwise).
    #[must_use]
    pub fn kernel(mut self, need: impl Into<KernelNeed>) -> Self {
        self.kernel = need.into();
        self
    }

    /// Virtual CPUs.
    #[must_use]
    pub fn cpus(mut self, cpus: u32) -> Self {
        self.cpus = cpus;
        self
    }

    /// Guest memory in MiB.
    #[must_use]
    pub fn memory_mib(mut self, mib: u32) -> Self {
        self.memory_mib = mib;
        self
    }

    /// Kernel modules to load before the command (with their dependencies), e.g. `nvmet_tcp`.
    #[must_use]
    pub fn modules<I, S>(mut self, modules: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.modules.extend(modules.into_iter().map(Into::into));
        self
    }

    /// Soft-RoCE: `rxe0` on a guest-only `dummy0` with 10.77.0.1/24 (`$NVMF_RDMA_ADDR`), MTU 9000.
    #[must_use]
    pub fn rxe(mut self, on: bool) -> Self {
        self.rxe = on;
        self
    }

    /// Soft-iWARP: `siw0` on the guest-only `dummy0` with 10.77.0.1/24 (`$NVMF_RDMA_ADDR`), beside `rxe0` with
    /// [`Vm::rxe`] (then rdma_cm binds that address to one of the two: a scenario deletes the other), or on a lab
    /// node `siwK` on each link `ethK`. Debian's kernels have no `siw`: [`siw::module`] builds it once per kernel.
    #[must_use]
    pub fn siw(mut self, on: bool) -> Self {
        self.siw = on;
        self
    }

    /// Attach a QEMU-emulated PCIe NVMe drive of this many bytes (guest `/dev/nvme0n1`, `/dev/ng0n1`);
    /// loads the `nvme` module.
    #[must_use]
    pub fn nvme_drive(mut self, bytes: u64) -> Self {
        self.nvme_drive_bytes = Some(bytes);
        self
    }

    /// The Debian 13 user space beside this machine's: nvme-cli 2.13 and ktls-utils' `tlshd` (NVMe/TCP over TLS),
    /// keyutils, fio, built once into the cache ([`debian13`]) and chrooted into with `/dev`, `/proc` and `/sys`
    /// bound, its `/run` and `/tmp` in tmpfs and the guest's host NQN and host ID; `tests/vm/debian13-lib.sh` has
    /// the helpers (`deb13 CMD`, `nvme13`, `keyctl13`, `tlshd_start`, `host_connect_tls`, …). NVMe/TCP over TLS
    /// needs Linux 6.7 or later (6.12 and 7.x have it).
    #[must_use]
    pub fn debian13_userspace(mut self) -> Self {
        self.debian13 = true;
        self
    }

    /// Mount this host folder read-write in the guest at the same path.
    #[must_use]
    pub fn share(mut self, dir: impl Into<PathBuf>) -> Self {
        self.shares.push((dir.into(), false));
        self
    }

    /// Mount this host folder read-write at the same path without the guest's page cache (9p `cache=none`): every
    /// read and write goes to this machine's file, so several guests (lab nodes) see each other's writes at once,
    /// as with shared storage. (A [`Vm::share`] caches: a write reaches the file at writeback, a read may be stale.)
    #[must_use]
    pub fn share_uncached(mut self, dir: impl Into<PathBuf>) -> Self {
        self.shares.push((dir.into(), true));
        self
    }

    /// A host folder (created if missing, and shared) where the guest leaves its logs: `$NVMF_VM_LOGS` in
    /// the guest; daemons started with `start_daemon` log there and `collect_logs` runs after the command.
    #[must_use]
    pub fn logs(mut self, dir: impl Into<PathBuf>) -> Self {
        self.logs = Some(dir.into());
        self
    }

    /// Export `key=value` to the command.
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Export where our two daemons are (`NVMF_HOST_BIN`, `NVMF_TARGET_BIN`), built first, when the VM can run; else
    /// unchanged (`run_or_skip` says why it skips, or fails under `NVMF_REQUIRE_VM=1`).
    #[must_use]
    pub fn with_our_daemons(self) -> Self {
        if enabled().is_err() {
            return self;
        }
        let host = crate::workspace_bin::workspace_bin("nvmf-host", "nvmf-host")
            .unwrap_or_else(|e| panic!("nvmf-host binary: {e}"));
        let target = crate::workspace_bin::nvmf_target().unwrap_or_else(|e| panic!("nvmf-target binary: {e}"));
        self.env("NVMF_HOST_BIN", host.to_string_lossy()).env("NVMF_TARGET_BIN", target.to_string_lossy())
    }

    /// Kill the guest if the command has not finished this long after QEMU starts (boot included), scaled
    /// by `NVMF_VM_TIMEOUT_FACTOR` for slow machines.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Boot, run `script` with bash (the guest helpers sourced, cwd = the host's current directory, as
    /// root) and power off. Errors only when the guest could not be started; how the command ended is in
    /// [`VmOutput::status`].
    pub fn run(&self, script: &str) -> Result<VmOutput, VmError> {
        self.boot(Some(script)).map(|o| o.expect("a scripted run has output"))
    }

    /// [`Vm::run`] for a test: `None` (after a `SKIPPED: <why>` line on stderr) when VM scenarios are not
    /// enabled here or this machine cannot run them, unless `NVMF_REQUIRE_VM=1`, which makes that a panic.
    /// Prints the run's times on stderr.
    ///
    /// A run whose guest kernel panicked is run once more (and says so): under TCG the guest kernel's own code
    /// patching crashes now and then (an `int3` Oops in a function being patched, in CI once), whatever the
    /// scenario does. A scenario that crashes the kernel itself crashes it again and fails.
    pub fn run_or_skip(&self, script: &str) -> Option<VmOutput> {
        if let Err(why) = enabled() {
            return skip_or_panic(&self.name, &why);
        }
        let mut retried = false;
        loop {
            match self.run(script) {
                Ok(out) => {
                    note(&format!("{}: kernel {}, {:?}, {}", self.name, out.kernel_release, out.status, out.timing()));
                    if !retried && out.status == GuestStatus::NoStatus && out.console_tail.contains("Kernel panic") {
                        note(&format!("{}: the guest kernel panicked; running the scenario once more", self.name));
                        eprintln!("{}", out.console_tail);
                        retried = true;
                        continue;
                    }
                    return Some(out);
                }
                Err(VmError::Unavailable(why)) => return skip_or_panic(&self.name, &why),
                Err(e) => panic!("VM scenario {}: {e}", self.name),
            }
        }
    }

    /// Boot into an interactive root shell on this terminal; the guest powers off when the shell exits
    /// (Ctrl-A X quits QEMU at once). The deadline does not apply.
    pub fn interactive(&self) -> Result<(), VmError> {
        self.boot(None).map(drop)
    }

    fn boot(&self, script: Option<&str>) -> Result<Option<VmOutput>, VmError> {
        let qemu = find_qemu()?;
        let busybox = find_static_busybox()?;
        let kernel = Kernel::obtain(self.kernel)?;
        let run = RunDir::create(&self.name)?;
        let initrd = run.path.join("initramfs.cpio");
        initramfs::build(&kernel, &busybox, &initrd)?;
        let mode = if script.is_some() { Console::Piped } else { Console::Interactive };
        let mut cmd = self.qemu_command(&qemu, &kernel, &run.path, &initrd, script, mode, None)?;

        // One guest at a time, in this process and on this machine.
        let _in_process = ONE_GUEST.lock().unwrap_or_else(PoisonError::into_inner);
        let _on_machine = DirLock::acquire(&machine_lock())?;

        let Some(_) = script else {
            let status = cmd.status().map_err(VmError::io("starting", &qemu))?;
            if !status.success() {
                return Err(VmError::Tool { command: qemu.display().to_string(), detail: status.to_string() });
            }
            return Ok(None);
        };
        let deadline = self.deadline.mul_f64(timeout_factor());
        let started = Instant::now();
        let mut child = QemuChild(
            cmd.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(VmError::io("starting", &qemu))?,
        );
        let verbose = env_flag("NVMF_VM_VERBOSE");
        let stdout = drain(child.0.stdout.take().expect("piped"), verbose.then(io::stderr));
        let qemu_stderr = drain(child.0.stderr.take().expect("piped"), None);
        let stderr_path = run.path.join("stderr");
        let mut stderr_seen = 0;
        let timed_out = loop {
            if verbose {
                stderr_seen = echo_new_bytes(&stderr_path, stderr_seen);
            }
            if child.0.try_wait().map_err(VmError::io("waiting for", &qemu))?.is_some() {
                break false;
            }
            if started.elapsed() > deadline {
                let _ = child.0.kill();
                let _ = child.0.wait();
                break true;
            }
            thread::sleep(Duration::from_millis(100));
        };
        let wall_time = started.elapsed();
        let stdout = stdout.join().unwrap_or_default();
        let qemu_stderr = qemu_stderr.join().unwrap_or_default();

        let read = |f: &str| fs::read_to_string(run.path.join(f)).unwrap_or_default();
        let status = match (timed_out, read("status").trim().parse::<i32>()) {
            (true, _) => GuestStatus::TimedOut,
            (false, Ok(code)) => GuestStatus::Exited(code),
            (false, Err(_)) => GuestStatus::NoStatus,
        };
        let console_tail = console_tail(&run.path, &String::from_utf8_lossy(&qemu_stderr));
        let (boot_time, command_time) = guest_times(&run.path, wall_time);
        if let Some(logs) = &self.logs {
            // The run's own record beside what the guest collected, for CI artifacts and post-mortems.
            let _ = fs::write(logs.join("stdout.txt"), &stdout);
            let _ = fs::copy(run.path.join("stderr"), logs.join("stderr.txt"));
            let _ = fs::copy(run.path.join("console.log"), logs.join("console.log"));
        }
        Ok(Some(VmOutput {
            name: self.name.clone(),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: read("stderr"),
            status,
            console_tail,
            boot_time,
            command_time,
            wall_time,
            kernel_release: kernel.release,
        }))
    }

    /// The QEMU command line of this guest, its control folder `ctl` filled (`env`, `shares`, `cmd`, the guest
    /// scripts); `wiring` makes it a lab node.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn qemu_command(
        &self,
        qemu: &Path,
        kernel: &Kernel,
        ctl: &Path,
        initrd: &Path,
        script: Option<&str>,
        console: Console,
        wiring: Option<&Wiring>,
    ) -> Result<Command, VmError> {
        self.write_control_files(ctl, kernel, script, wiring)?;
        if let Some(bytes) = self.nvme_drive_bytes {
            let image = ctl.join("nvme0.img");
            let f = fs::File::create(&image).map_err(VmError::io("creating", &image))?;
            f.set_len(bytes).map_err(VmError::io("sizing", &image))?;
        }
        let mut cmd = Command::new(qemu);
        cmd.args(self.qemu_args(kernel, ctl, initrd, console, wiring)?);
        Ok(cmd)
    }

    /// `env`, `shares`, `links`, `cmd`, `stage2.sh`, `agent.sh` and `guest-lib.sh` in the control folder the guest
    /// mounts.
    fn write_control_files(
        &self,
        run: &Path,
        kernel: &Kernel,
        script: Option<&str>,
        wiring: Option<&Wiring>,
    ) -> Result<(), VmError> {
        let mut modules: Vec<String> = Vec::new();
        let rxe: &[&str] = if self.rxe { &RXE_MODULES } else { &[] };
        let siw: &[&str] = if self.siw { &SIW_MODULES } else { &[] };
        let nvme: &[&str] = if self.nvme_drive_bytes.is_some() { &["nvme"] } else { &[] };
        let net: &[&str] = if wiring.is_some_and(|w| !w.nics.is_empty()) { &["virtio_net"] } else { &[] };
        for m in
            rxe.iter().chain(siw).chain(nvme).chain(net).map(|m| (*m).to_owned()).chain(self.modules.iter().cloned())
        {
            if m.is_empty() || !m.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return Err(VmError::Kernel(format!("{m:?} is not a module name")));
            }
            if !modules.contains(&m) {
                modules.push(m);
            }
        }
        let cwd = env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let mut envfile = format!(
            "NVMF_VM_KDIR={}\nNVMF_VM_MODULES={}\nNVMF_VM_RXE={}\nNVMF_VM_CWD={}\nexport NVMF_VM_NAME={}\n",
            shell_quote(&kernel.dir.to_string_lossy()),
            shell_quote(&modules.join(" ")),
            u8::from(self.rxe),
            shell_quote(&cwd.to_string_lossy()),
            shell_quote(&self.name),
        );
        if self.siw {
            let ko = siw::module(kernel)?;
            envfile.push_str(&format!("NVMF_VM_SIW={}\n", shell_quote(&ko.to_string_lossy())));
        }
        if let Some(config) = &kernel.config {
            envfile.push_str(&format!("NVMF_VM_KCONFIG={}\n", shell_quote(&config.to_string_lossy())));
        }
        if self.debian13 {
            let root = debian13::root()?;
            envfile.push_str(&format!("export NVMF_DEBIAN13_ROOT={}\n", shell_quote(&root.to_string_lossy())));
        }
        if let Some(w) = wiring {
            envfile.push_str(&format!(
                "NVMF_VM_AGENT=1\nexport NVMF_NODE={}\nexport NVMF_LAB_NODES={}\n",
                shell_quote(&w.node),
                shell_quote(&w.nodes.join(" "))
            ));
        }
        if script.is_none() && wiring.is_none() {
            // The host terminal's size and type, so that full-screen programs in the guest fit.
            let size = Command::new("stty").arg("size").stdin(Stdio::inherit()).stderr(Stdio::null()).output();
            if let Some(size) = size.ok().filter(|o| o.status.success()) {
                let size = String::from_utf8_lossy(&size.stdout).trim().to_owned();
                envfile.push_str(&format!("NVMF_VM_TTY_SIZE={}\n", shell_quote(&size)));
            }
            if let Ok(term) = env::var("TERM") {
                envfile.push_str(&format!("NVMF_VM_TERM={}\n", shell_quote(&term)));
            }
        }
        if env_flag("NVMF_VM_TRACE") {
            envfile.push_str("NVMF_VM_TRACE=1\n");
        }
        let mut shares = String::new();
        for (dir, uncached) in self.shared_dirs()? {
            let cache = if uncached { "none" } else { "mmap" };
            shares.push_str(&format!("{cache} {}\n", dir.to_string_lossy()));
        }
        if let Some(logs) = &self.logs {
            let logs = fs::canonicalize(logs).map_err(VmError::io("resolving", logs))?;
            envfile.push_str(&format!("export NVMF_VM_LOGS={}\n", shell_quote(&logs.to_string_lossy())));
        }
        for (key, value) in &self.env {
            let valid = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(VmError::Kernel(format!("{key:?} is not an environment variable name")));
            }
            envfile.push_str(&format!("export {key}={}\n", shell_quote(value)));
        }
        let links = wiring.map(Wiring::links_file).unwrap_or_default();
        let files = [
            ("env", envfile),
            ("shares", shares),
            ("links", links),
            ("stage2.sh", STAGE2.to_owned()),
            ("agent.sh", AGENT.to_owned()),
            ("guest-lib.sh", GUEST_LIB.to_owned()),
            ("debian13-lib.sh", DEBIAN13_LIB.to_owned()),
            ("stderr", String::new()),
        ];
        for (name, text) in files {
            fs::write(run.join(name), text).map_err(VmError::io("writing", run.join(name)))?;
        }
        if let Some(script) = script {
            let cmd = format!(". /run/nvmf-vm/guest-lib.sh\n{script}\n");
            fs::write(run.join("cmd"), cmd).map_err(VmError::io("writing", run.join("cmd")))?;
        }
        Ok(())
    }

    /// The shared folders (logs first), created if missing, as absolute paths.
    fn shared_dirs(&self) -> Result<Vec<(PathBuf, bool)>, VmError> {
        let mut dirs: Vec<(PathBuf, bool)> = Vec::new();
        for (dir, uncached) in self.logs.iter().map(|l| (l, false)).chain(self.shares.iter().map(|(d, u)| (d, *u))) {
            fs::create_dir_all(dir).map_err(VmError::io("creating the shared folder", dir))?;
            let dir = fs::canonicalize(dir).map_err(VmError::io("resolving", dir))?;
            if !dirs.iter().any(|(d, _)| *d == dir) {
                dirs.push((dir, uncached));
            }
        }
        Ok(dirs)
    }

    fn qemu_args(
        &self,
        kernel: &Kernel,
        ctl: &Path,
        initrd: &Path,
        console: Console,
        wiring: Option<&Wiring>,
    ) -> Result<Vec<String>, VmError> {
        let verbose = env_flag("NVMF_VM_VERBOSE");
        let accel =
            env::var("NVMF_VM_ACCEL").ok().filter(|a| !a.is_empty()).unwrap_or_else(|| "tcg,thread=multi".into());
        let cpu = env::var("NVMF_VM_CPU").ok().filter(|c| !c.is_empty()).unwrap_or_else(|| "max".into());
        let kconsole = if verbose { "console=ttyS0 loglevel=7" } else { "console=ttyS0 loglevel=4 quiet" };
        let mut args: Vec<String> = [
            "-nodefaults",
            "-no-user-config",
            "-machine",
            "pc",
            "-accel",
            &accel,
            "-cpu",
            &cpu,
            "-smp",
            &self.cpus.to_string(),
            "-m",
            &format!("{}M", self.memory_mib),
            "-vga",
            "none",
            "-display",
            "none",
            "-no-reboot",
        ]
        .map(String::from)
        .to_vec();
        let mut append = format!("{kconsole} panic=-1 mitigations=off tsc=unstable rdinit=/init");
        args.extend(["-kernel".into(), kernel.vmlinuz.to_string_lossy().into_owned()]);
        args.extend(["-initrd".into(), initrd.to_string_lossy().into_owned()]);
        let virtfs = |path: &Path, tag: &str, extra: &str| {
            let path = path.to_string_lossy().replace(',', ",,");
            format!("local,path={path},mount_tag={tag},security_model=none,multidevs=remap{extra}")
        };
        let escape = |p: &Path| p.to_string_lossy().replace(',', ",,");
        args.extend(["-virtfs".into(), virtfs(Path::new("/"), "hostroot", ",readonly=on")]);
        match wiring {
            // A lab node mounts the whole lab folder (every node's control folder, for `on_node`) and its own.
            Some(w) => {
                args.extend(["-virtfs".into(), virtfs(&w.lab_dir, "nvmfctl", "")]);
                append.push_str(&format!(" nvmf.node={}", w.node));
                args.extend(w.qemu_args());
            }
            None => args.extend(["-virtfs".into(), virtfs(ctl, "nvmfctl", ""), "-nic".into(), "none".into()]),
        }
        args.extend(["-append".into(), append]);
        for (i, (dir, _)) in self.shared_dirs()?.iter().enumerate() {
            args.extend(["-virtfs".into(), virtfs(dir, &format!("share{i}"), "")]);
        }
        if self.nvme_drive_bytes.is_some() {
            let image = escape(&ctl.join("nvme0.img"));
            args.extend(["-drive".into(), format!("file={image},if=none,id=nvm0,format=raw,cache=unsafe")]);
            args.extend(["-device".into(), "nvme,serial=nvmfvm0,drive=nvm0".into()]);
        }
        // ttyS0: the kernel console, to a file. ttyS1: the command's stdio.
        args.extend(["-serial".into(), format!("file:{}", escape(&ctl.join("console.log")))]);
        match console {
            Console::Piped => args.extend([
                "-chardev".into(),
                "stdio,id=cmdio,signal=off".into(),
                "-serial".into(),
                "chardev:cmdio".into(),
            ]),
            Console::Interactive => args.extend(["-serial".into(), "mon:stdio".into()]),
            Console::File => args.extend(["-serial".into(), format!("file:{}", escape(&ctl.join("serial.log")))]),
        }
        Ok(args)
    }
}

/// Where a guest's command stdio (its second serial port) goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Console {
    /// A pipe the harness reads: a scripted run.
    Piped,
    /// This terminal, with QEMU's monitor on Ctrl-A.
    Interactive,
    /// A file in the control folder: a lab node, whose jobs have their own output files.
    File,
}

/// One guest at a time in this process (with [`machine_lock`], on this machine).
pub(crate) static ONE_GUEST: Mutex<()> = Mutex::new(());

/// The cross-process lock held while any guest runs.
pub(crate) fn machine_lock() -> PathBuf {
    env::temp_dir().join("nvmf-vm.lock")
}

/// The last lines of a guest's kernel console, and QEMU's own stderr if it had any.
pub(crate) fn console_tail(ctl: &Path, qemu_stderr: &str) -> String {
    let mut tail = tail(&fs::read_to_string(ctl.join("console.log")).unwrap_or_default(), CONSOLE_TAIL_LINES);
    if !qemu_stderr.trim().is_empty() {
        tail.push_str("\n--- qemu stderr ---\n");
        tail.push_str(qemu_stderr.trim_end());
    }
    tail
}

/// (boot, command) times of a guest from the uptimes it recorded in its control folder.
pub(crate) fn guest_times(ctl: &Path, wall_time: Duration) -> (Duration, Duration) {
    let uptime =
        |f: &str| fs::read_to_string(ctl.join(f)).ok()?.trim().parse::<f64>().ok().map(Duration::from_secs_f64);
    let boot_time = uptime("t-command").unwrap_or_default();
    let command_time = match (uptime("t-command"), uptime("t-end")) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        (Some(_), None) => wall_time.saturating_sub(boot_time),
        _ => Duration::ZERO,
    };
    (boot_time, command_time)
}

/// Whether VM scenarios should run here: `NVMF_REQUIRE_VM=1` or `NVMF_VM=1`, and QEMU is installed.
pub fn enabled() -> Result<(), String> {
    if !env_flag("NVMF_REQUIRE_VM") && !env_flag("NVMF_VM") {
        return Err("VM scenarios are opt-in (each boots a QEMU guest for 20-60 s): set NVMF_VM=1 to run them \
                    (.ci/run sets NVMF_REQUIRE_VM=1)"
            .into());
    }
    find_qemu().map(drop).map_err(|e| e.to_string())
}

pub(crate) fn skip_or_panic<T>(name: &str, why: &str) -> Option<T> {
    if env_flag("NVMF_REQUIRE_VM") {
        panic!("VM scenario {name} cannot run and NVMF_REQUIRE_VM=1: {why}");
    }
    note(&format!("SKIPPED: {name}: {why}"));
    None
}

/// Say something on the process's real stderr, past the test harness's output capture.
pub fn note(msg: &str) {
    let _ = writeln!(io::stderr(), "nvmf-vm: {msg}");
}

pub(crate) fn env_flag(name: &str) -> bool {
    env::var(name).is_ok_and(|v| v == "1")
}

pub(crate) fn timeout_factor() -> f64 {
    env::var("NVMF_VM_TIMEOUT_FACTOR").ok().and_then(|f| f.parse::<f64>().ok()).filter(|f| *f > 0.0).unwrap_or(1.0)
}

pub(crate) fn find_qemu() -> Result<PathBuf, VmError> {
    if let Some(q) = env::var_os("NVMF_VM_QEMU").filter(|q| !q.is_empty()) {
        return Ok(PathBuf::from(q));
    }
    find_in_path("qemu-system-x86_64")
        .ok_or_else(|| VmError::Unavailable("qemu-system-x86_64 not found (apt-get install qemu-system-x86)".into()))
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    env::split_paths(&env::var_os("PATH")?).map(|d| d.join(program)).find(|p| p.is_file())
}

/// A statically linked busybox (an ELF without a PT_INTERP program header): the initramfs has no libc.
pub(crate) fn find_static_busybox() -> Result<PathBuf, VmError> {
    let candidates = ["/bin/busybox", "/usr/bin/busybox"].map(PathBuf::from);
    let unavailable = || VmError::Unavailable("no statically linked busybox (apt-get install busybox-static)".into());
    let path = candidates.into_iter().find(|p| p.is_file()).ok_or_else(unavailable)?;
    let elf = fs::read(&path).map_err(VmError::io("reading", &path))?;
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u64_at = |o: usize| elf.get(o..o + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    let header = (|| {
        if elf.get(..5)? != b"\x7fELF\x02" {
            return None;
        }
        let phoff = usize::try_from(u64_at(0x20)?).ok()?;
        Some((phoff, usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?)))
    })();
    let (phoff, phentsize, phnum) = header.ok_or_else(unavailable)?;
    const PT_INTERP: u32 = 3;
    let dynamic = (0..phnum).any(|i| {
        let o = phoff + i * phentsize;
        elf.get(o..o + 4).is_some_and(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) == PT_INTERP)
    });
    if dynamic {
        return Err(unavailable());
    }
    Ok(path)
}

/// A per-run folder under the temp dir, removed afterwards unless `NVMF_VM_KEEP=1`.
#[derive(Debug)]
pub(crate) struct RunDir {
    pub(crate) path: PathBuf,
}

impl RunDir {
    pub(crate) fn create(name: &str) -> Result<Self, VmError> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        let path = env::temp_dir().join(format!(
            "nvmf-vm-{safe}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).map_err(VmError::io("creating the run folder", &path))?;
        Ok(Self { path })
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if env_flag("NVMF_VM_KEEP") {
            note(&format!("kept {}", self.path.display()));
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// QEMU, killed if the harness unwinds while it runs.
#[derive(Debug)]
pub(crate) struct QemuChild(pub(crate) Child);

impl Drop for QemuChild {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Read `from` to its end on a thread, echoing to `echo` as it comes.
fn drain(mut from: impl Read + Send + 'static, echo: Option<io::Stderr>) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            if let Some(mut e) = echo.as_ref().map(io::Stderr::lock) {
                let _ = e.write_all(&buf[..n]);
            }
        }
        all
    })
}

/// Echo what was appended to `path` since `seen` bytes; returns the new length.
fn echo_new_bytes(path: &Path, seen: usize) -> usize {
    match fs::read(path) {
        Ok(bytes) if bytes.len() > seen => {
            let _ = io::stderr().write_all(&bytes[seen..]);
            bytes.len()
        }
        _ => seen,
    }
}

fn tail(text: &str, lines: usize) -> String {
    let mut last: VecDeque<&str> = VecDeque::with_capacity(lines + 1);
    for line in text.lines() {
        last.push_back(line);
        if last.len() > lines {
            last.pop_front();
        }
    }
    last.into_iter().collect::<Vec<_>>().join("\n")
}

/// `'it'\''s'`: a string as one bash word.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::{shell_quote, tail};

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("1\n2\n3\n4", 2), "3\n4");
        assert_eq!(tail("1", 5), "1");
    }
}
