//! The lab: several guests (nodes) joined by point-to-point Ethernet links, each with its own vCPUs, memory, MAC
//! and addresses, Soft-RoCE on each link's NIC, so NVMe/TCP and NVMe/RDMA cross a link between two kernels
//! instead of loopback inside one.
//!
//! A link is a QEMU stream netdev over a Unix socket on each end, one end listening and the other connecting
//! (nothing leaves the machine, no multicast); each end is a virtio-net NIC. A stream holds a frame until the peer
//! takes it, where the earlier transports lost or delayed them: UDP on 127.0.0.1 dropped bursts at the receiving
//! QEMU's socket buffer (a 128 KiB RDMA transfer then waited for Soft-RoCE's retransmission timer), and TCP
//! without `TCP_NODELAY` held small frames back for the peer's delayed ACK (about 40 ms a round trip). Link `i`
//! is the subnet `10.88.{i+1}.0/24`, where node `n` (in declaration order, from 0) has the address `.{n+1}`; on
//! each node its links are `eth0`, `eth1`, … in the order they were declared, with `rxe0`, `rxe1`, … on them, and
//! each peer's name resolves (`/etc/hosts`) to its address on the link. A host linked to two target nodes models
//! two fabrics, as multipath deployments have.
//!
//! Each node runs an agent (`tests/vm/agent.sh`) that takes jobs — bash scripts, `guest-lib.sh` sourced — from
//! its control folder, runs them concurrently and leaves their output and status there: [`RunningLab::run`]
//! waits for one, [`RunningLab::spawn`] returns a [`Job`] to wait for later, and a node's script can hand a job to
//! another node (`on_node`). [`RunningLab::cut`] and [`RunningLab::restore`] take a link's carrier down and up at
//! one node's end through its QEMU monitor (`set_link`): that node sees its NIC lose carrier, the peer sees
//! silence, as with a pulled cable. [`RunningLab::kill`] ends a node's QEMU at once, a power loss.
//!
//! Dropping the [`RunningLab`] (also when a test panics) collects each live node's logs (`collect_logs` into its
//! logs folder, with its console, stderr and serial output) and powers every node off, killing what does not stop.

use std::fmt::Write as _;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{
    console_tail, enabled, find_qemu, find_static_busybox, guest_times, initramfs, machine_lock, note, skip_or_panic,
    timeout_factor, Console, GuestStatus, Kernel, KernelNeed, QemuChild, RunDir, Vm, VmError, VmOutput, ONE_GUEST,
};
use crate::vm::lock::DirLock;

/// How long the nodes may take to boot and set up, scaled by `NVMF_VM_TIMEOUT_FACTOR`.
const BOOT_TIMEOUT: Duration = Duration::from_secs(240);
/// How long a node's QEMU may take to listen on its links' sockets after it starts.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long stopping waits for each node's logs, then for its power-off.
const COLLECT_TIMEOUT: Duration = Duration::from_secs(60);
const POWEROFF_TIMEOUT: Duration = Duration::from_secs(15);

/// Several guests joined by links: the builder. [`Lab::start`] boots them.
#[derive(Debug, Clone)]
pub struct Lab {
    name: String,
    nodes: Vec<(String, Vm)>,
    links: Vec<(usize, usize)>,
    kernel: KernelNeed,
    logs: Option<PathBuf>,
    deadline: Duration,
}

/// One end of a link on a node: what its NIC and the guest's setup need.
#[derive(Debug, Clone)]
pub(crate) struct Nic {
    /// QEMU's netdev id (`link0`), which `set_link` names.
    netdev: String,
    /// The stream netdev's options: `server=on|off,addr.type=unix,addr.path=PATH`.
    stream: String,
    /// The socket this end listens on (the other end connects to it), if this end is the listening one.
    listens: Option<PathBuf>,
    mac: String,
    /// The guest's interface name: `eth0`, `eth1`, … in the node's link order.
    ifname: String,
    /// This node's address on the link, with its prefix length.
    addr: String,
    peer: String,
    peer_addr: String,
}

/// What makes a guest a lab node: its name, the lab folder, its NICs and its monitor socket.
#[derive(Debug, Clone)]
pub(crate) struct Wiring {
    pub(crate) node: String,
    pub(crate) nodes: Vec<String>,
    pub(crate) lab_dir: PathBuf,
    pub(crate) nics: Vec<Nic>,
    monitor: PathBuf,
}

impl Wiring {
    /// The guest's `links` file: `IFNAME MAC ADDR/PREFIX PEER PEER_ADDR`, one NIC a line.
    pub(crate) fn links_file(&self) -> String {
        self.nics.iter().fold(String::new(), |mut s, n| {
            let _ = writeln!(s, "{} {} {} {} {}", n.ifname, n.mac, n.addr, n.peer, n.peer_addr);
            s
        })
    }

    /// QEMU's NICs and the node's monitor.
    pub(crate) fn qemu_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for n in &self.nics {
            args.extend(["-netdev".into(), format!("stream,id={},{}", n.netdev, n.stream)]);
            args.extend(["-device".into(), format!("virtio-net-pci,netdev={},mac={}", n.netdev, n.mac)]);
        }
        if self.nics.is_empty() {
            args.extend(["-nic".into(), "none".into()]);
        }
        let monitor = self.monitor.to_string_lossy().replace(',', ",,");
        args.extend(["-monitor".into(), format!("unix:{monitor},server=on,wait=off")]);
        args
    }
}

impl Lab {
    /// A lab named `name` (in messages and folder names), no nodes yet, a 15-minute deadline.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            nodes: Vec::new(),
            links: Vec::new(),
            kernel: KernelNeed::Any,
            logs: None,
            deadline: Duration::from_secs(900),
        }
    }

    /// A node: `name` (1-12 lowercase letters and digits, unique) and its guest (CPUs, memory, modules, Soft-RoCE
    /// on its links with `rxe(true)`, shares, environment; its own kernel need and deadline are not used: the lab's
    /// apply).
    #[must_use]
    pub fn node(mut self, name: impl Into<String>, vm: Vm) -> Self {
        self.nodes.push((name.into(), vm));
        self
    }

    /// A link between two nodes declared before.
    #[must_use]
    pub fn link(mut self, a: &str, b: &str) -> Self {
        let index = |n: &str| self.nodes.iter().position(|(name, _)| name == n).unwrap_or(usize::MAX);
        let pair = (index(a), index(b));
        self.links.push(pair);
        self
    }

    /// The kernel every node boots (default: [`KernelNeed::Any`]).
    #[must_use]
    pub fn kernel(mut self, need: impl Into<KernelNeed>) -> Self {
        self.kernel = need.into();
        self
    }

    /// A host folder for the nodes' logs: `DIR/NODE` is each node's `$NVMF_VM_LOGS` (shared), where stopping the
    /// lab leaves its `collect_logs` output, console, stderr and serial output.
    #[must_use]
    pub fn logs(mut self, dir: impl Into<PathBuf>) -> Self {
        self.logs = Some(dir.into());
        self
    }

    /// The longest the whole lab may run, boot included (scaled by `NVMF_VM_TIMEOUT_FACTOR`); a job still waited
    /// for then is [`GuestStatus::TimedOut`].
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    fn check(&self) -> Result<(), VmError> {
        let bad = |why: String| Err(VmError::Kernel(format!("lab {}: {why}", self.name)));
        for (i, (name, _)) in self.nodes.iter().enumerate() {
            let valid = !name.is_empty()
                && name.len() <= 12
                && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
            if !valid {
                return bad(format!("{name:?} is not a node name (1-12 lowercase letters and digits)"));
            }
            if self.nodes[..i].iter().any(|(n, _)| n == name) {
                return bad(format!("two nodes are named {name}"));
            }
        }
        for (i, &(a, b)) in self.links.iter().enumerate() {
            if a >= self.nodes.len() || b >= self.nodes.len() {
                return bad(format!("link {i} names a node that was not declared before it"));
            }
            if a == b {
                return bad(format!("link {i} joins node {} to itself", self.nodes[a].0));
            }
            let same = |&(x, y): &(usize, usize)| (x, y) == (a, b) || (x, y) == (b, a);
            if self.links[..i].iter().any(same) {
                return bad(format!("two links join {} and {}", self.nodes[a].0, self.nodes[b].0));
            }
        }
        if self.links.len() > 254 || self.nodes.len() > 254 {
            return bad("at most 254 nodes and 254 links".into());
        }
        Ok(())
    }

    /// Boot every node, wait until each is ready (links up, Soft-RoCE on them, its agent running).
    pub fn start(&self) -> Result<RunningLab, VmError> {
        self.check()?;
        let qemu = find_qemu()?;
        let busybox = find_static_busybox()?;
        let kernel = Kernel::obtain(self.kernel)?;
        let run = RunDir::create(&format!("lab-{}", self.name))?;
        let initrd = run.path.join("initramfs.cpio");
        initramfs::build(&kernel, &busybox, &initrd)?;
        let names: Vec<String> = self.nodes.iter().map(|(n, _)| n.clone()).collect();

        // Each link: a Unix socket in the run folder, on which its end at the node declared first listens (that
        // node starts first), its subnet, a MAC per end.
        let mut nics: Vec<Vec<Nic>> = vec![Vec::new(); self.nodes.len()];
        for (i, &(a, b)) in self.links.iter().enumerate() {
            let path = run.path.join(format!("link{i}.sock"));
            let opt_path = path.to_string_lossy().replace(',', ",,");
            let addr = |n: usize| format!("10.88.{}.{}", i + 1, n + 1);
            for (me, peer) in [(a, b), (b, a)] {
                let k = nics[me].len();
                let listens = me < peer;
                nics[me].push(Nic {
                    netdev: format!("link{k}"),
                    stream: format!(
                        "server={},addr.type=unix,addr.path={opt_path}",
                        if listens { "on" } else { "off" }
                    ),
                    listens: listens.then(|| path.clone()),
                    mac: format!("52:54:00:88:{:02x}:{:02x}", i + 1, me + 1),
                    ifname: format!("eth{k}"),
                    addr: format!("{}/24", addr(me)),
                    peer: names[peer].clone(),
                    peer_addr: addr(peer),
                });
            }
        }

        let _in_process = ONE_GUEST.lock().unwrap_or_else(PoisonError::into_inner);
        let on_machine = DirLock::acquire(&machine_lock())?;
        let started = Instant::now();
        let mut lab = RunningLab {
            name: self.name.clone(),
            nodes: Vec::new(),
            deadline: started + self.deadline.mul_f64(timeout_factor()),
            kernel_release: kernel.release.clone(),
            logs: self.logs.clone(),
            seq: AtomicU32::new(0),
            _heartbeat: Heartbeat::start(run.path.join("heartbeat"))?,
            _on_machine: on_machine,
            _in_process,
            run,
        };
        for (k, (name, vm)) in self.nodes.iter().enumerate() {
            let ctl = lab.run.path.join(name);
            fs::create_dir_all(ctl.join("jobs")).map_err(VmError::io("creating", &ctl))?;
            let wiring = Wiring {
                node: name.clone(),
                nodes: names.clone(),
                lab_dir: lab.run.path.clone(),
                nics: nics[k].clone(),
                monitor: ctl.join("monitor.sock"),
            };
            let mut vm = vm.clone();
            if let (Some(logs), None) = (&self.logs, &vm.logs) {
                vm = vm.logs(logs.join(name));
            }
            let mut cmd = vm.qemu_command(&qemu, &kernel, &ctl, &initrd, None, Console::File, Some(&wiring))?;
            let child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(fs::File::create(ctl.join("qemu.stderr")).map_err(VmError::io("creating", &ctl))?)
                .spawn()
                .map_err(VmError::io("starting", &qemu))?;
            let mut qemu_child = QemuChild(child);
            // The nodes declared later connect to this one's sockets: QEMU must listen on them first.
            for path in nics[k].iter().filter_map(|n| n.listens.as_ref()) {
                let until = Instant::now() + LISTEN_TIMEOUT;
                while !path.exists() {
                    if Instant::now() > until || !matches!(qemu_child.0.try_wait(), Ok(None)) {
                        return Err(VmError::Guest(format!(
                            "node {name}: QEMU did not listen on {} (see {})",
                            path.display(),
                            ctl.join("qemu.stderr").display()
                        )));
                    }
                    thread::sleep(Duration::from_millis(20));
                }
            }
            lab.nodes.push(Node {
                name: name.clone(),
                ctl,
                qemu: Mutex::new(Some(qemu_child)),
                monitor: wiring.monitor,
                nics: nics[k].clone(),
                logs: vm.logs.clone(),
            });
        }
        let boot_deadline = started + BOOT_TIMEOUT.mul_f64(timeout_factor());
        for k in 0..lab.nodes.len() {
            lab.wait_ready(k, boot_deadline)?;
        }
        let boots: Vec<String> = lab
            .nodes
            .iter()
            .map(|n| format!("{} {:.1} s", n.name, guest_times(&n.ctl, Duration::ZERO).0.as_secs_f64()))
            .collect();
        note(&format!(
            "lab {}: kernel {}, {} nodes up after {:.1} s (boot: {})",
            self.name,
            lab.kernel_release,
            lab.nodes.len(),
            started.elapsed().as_secs_f64(),
            boots.join(", ")
        ));
        Ok(lab)
    }

    /// [`Lab::start`] for a test: `None` (after a `SKIPPED: <why>` line) when VM scenarios are not enabled or this
    /// machine cannot run them, unless `NVMF_REQUIRE_VM=1`, which makes that a panic. A lab whose boot a guest
    /// kernel panic ended is started once more (TCG's code patching oopses now and then).
    pub fn start_or_skip(&self) -> Option<RunningLab> {
        if let Err(why) = enabled() {
            return skip_or_panic(&self.name, &why);
        }
        let mut retried = false;
        loop {
            match self.start() {
                Ok(lab) => return Some(lab),
                Err(VmError::Unavailable(why)) => return skip_or_panic(&self.name, &why),
                Err(VmError::Guest(why)) if !retried && why.contains("Kernel panic") => {
                    note(&format!(
                        "lab {}: a guest kernel panicked while booting; starting once more\n{why}",
                        self.name
                    ));
                    retried = true;
                }
                Err(e) => panic!("lab {}: {e}", self.name),
            }
        }
    }
}

/// A running lab: its nodes, until dropped.
#[derive(Debug)]
pub struct RunningLab {
    name: String,
    nodes: Vec<Node>,
    deadline: Instant,
    kernel_release: String,
    logs: Option<PathBuf>,
    seq: AtomicU32,
    // Field order: the guests stop (Drop) before the heartbeat, the locks and the run folder go.
    _heartbeat: Heartbeat,
    _on_machine: DirLock,
    _in_process: MutexGuard<'static, ()>,
    run: RunDir,
}

#[derive(Debug)]
struct Node {
    name: String,
    ctl: PathBuf,
    qemu: Mutex<Option<QemuChild>>,
    monitor: PathBuf,
    nics: Vec<Nic>,
    logs: Option<PathBuf>,
}

impl Node {
    /// Whether its QEMU still runs.
    fn alive(&self) -> bool {
        let mut qemu = self.qemu.lock().unwrap_or_else(PoisonError::into_inner);
        match qemu.as_mut().map(|q| q.0.try_wait()) {
            Some(Ok(None)) => true,
            Some(_) => {
                *qemu = None;
                false
            }
            None => false,
        }
    }

    fn console_tail(&self) -> String {
        console_tail(&self.ctl, &fs::read_to_string(self.ctl.join("qemu.stderr")).unwrap_or_default())
    }
}

/// A script running on a node; [`Job::wait`] for its output.
#[derive(Debug)]
pub struct Job<'a> {
    lab: &'a RunningLab,
    node: usize,
    id: String,
    started: Instant,
}

impl Job<'_> {
    /// Waits until the script ends, its node dies or the lab's deadline passes.
    pub fn wait(self) -> VmOutput {
        let node = &self.lab.nodes[self.node];
        let file = |ext: &str| node.ctl.join("jobs").join(format!("{}.{ext}", self.id));
        let status = loop {
            if let Some(code) = fs::read_to_string(file("status")).ok().and_then(|s| s.trim().parse().ok()) {
                break GuestStatus::Exited(code);
            }
            if !node.alive() {
                break GuestStatus::NoStatus;
            }
            if Instant::now() > self.lab.deadline {
                break GuestStatus::TimedOut;
            }
            thread::sleep(Duration::from_millis(100));
        };
        let wall_time = self.started.elapsed();
        let read = |ext: &str| fs::read_to_string(file(ext)).unwrap_or_default();
        let out = VmOutput {
            name: format!("{}/{}", self.lab.name, node.name),
            stdout: read("out"),
            stderr: read("err"),
            status,
            console_tail: node.console_tail(),
            boot_time: guest_times(&node.ctl, Duration::ZERO).0,
            command_time: wall_time,
            wall_time,
            kernel_release: self.lab.kernel_release.clone(),
        };
        if status != GuestStatus::Exited(0) {
            note(&format!(
                "lab {}: job {} on {}: {status:?} after {:.1} s",
                self.lab.name,
                self.id,
                node.name,
                wall_time.as_secs_f64()
            ));
        }
        out
    }
}

impl RunningLab {
    /// The guests' `uname -r`.
    pub fn kernel_release(&self) -> &str {
        &self.kernel_release
    }

    /// Run `script` on `node` (bash as root, `guest-lib.sh` sourced, in the current folder) and wait for it.
    pub fn run(&self, node: &str, script: &str) -> VmOutput {
        self.spawn(node, script).wait()
    }

    /// Start `script` on `node` and return at once.
    ///
    /// # Panics
    /// If the lab has no node `node`, or its control folder cannot be written.
    pub fn spawn(&self, node: &str, script: &str) -> Job<'_> {
        let k = self.index(node);
        let id = format!("host-{}", self.seq.fetch_add(1, Ordering::Relaxed));
        let jobs = self.nodes[k].ctl.join("jobs");
        let tmp = jobs.join(format!("{id}.tmp"));
        fs::write(&tmp, script)
            .and_then(|()| fs::rename(&tmp, jobs.join(format!("{id}.sh"))))
            .unwrap_or_else(|e| panic!("lab {}: handing a job to {node}: {e}", self.name));
        Job { lab: self, node: k, id, started: Instant::now() }
    }

    /// `node`'s address on its link to `peer`.
    ///
    /// # Panics
    /// If there is no such link.
    pub fn addr(&self, node: &str, peer: &str) -> String {
        let nic = self.nic(node, peer);
        nic.addr.split('/').next().unwrap_or_default().to_owned()
    }

    /// Take the link between `node` and `peer` down at `node`'s end: `node`'s NIC loses carrier and drops every
    /// frame; `peer` sees nothing but silence.
    pub fn cut(&self, node: &str, peer: &str) -> Result<(), VmError> {
        self.set_link(node, peer, false)
    }

    /// Bring the link between `node` and `peer` back up at `node`'s end.
    pub fn restore(&self, node: &str, peer: &str) -> Result<(), VmError> {
        self.set_link(node, peer, true)
    }

    /// End `node`'s QEMU at once (SIGKILL): a power loss. Its jobs end without a status.
    pub fn kill(&self, node: &str) {
        let k = self.index(node);
        let mut qemu = self.nodes[k].qemu.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(mut q) = qemu.take() {
            let _ = q.0.kill();
            let _ = q.0.wait();
            note(&format!("lab {}: node {node} killed", self.name));
        }
    }

    /// Whether `node`'s QEMU still runs.
    pub fn is_alive(&self, node: &str) -> bool {
        self.nodes[self.index(node)].alive()
    }

    /// Collect every live node's logs and power them all off (what dropping the lab does).
    pub fn stop(self) {}

    fn index(&self, node: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.name == node)
            .unwrap_or_else(|| panic!("lab {} has no node {node:?}", self.name))
    }

    fn nic(&self, node: &str, peer: &str) -> &Nic {
        self.nodes[self.index(node)]
            .nics
            .iter()
            .find(|n| n.peer == peer)
            .unwrap_or_else(|| panic!("lab {}: no link between {node} and {peer}", self.name))
    }

    fn set_link(&self, node: &str, peer: &str, up: bool) -> Result<(), VmError> {
        let netdev = self.nic(node, peer).netdev.clone();
        let state = if up { "on" } else { "off" };
        let reply = self.monitor(node, &format!("set_link {netdev} {state}"))?;
        if reply.to_lowercase().contains("error") {
            return Err(VmError::Guest(format!("node {node}: set_link {netdev} {state}: {}", reply.trim())));
        }
        note(&format!("lab {}: link {node}-{peer} {} at {node}", self.name, if up { "restored" } else { "cut" }));
        Ok(())
    }

    /// One command to `node`'s QEMU monitor (HMP); its reply.
    fn monitor(&self, node: &str, command: &str) -> Result<String, VmError> {
        let path = &self.nodes[self.index(node)].monitor;
        let mut s = UnixStream::connect(path).map_err(VmError::io("connecting to the QEMU monitor", path))?;
        s.set_read_timeout(Some(Duration::from_secs(10))).map_err(VmError::io("configuring", path))?;
        let prompt = "(qemu) ";
        read_until(&mut s, prompt).map_err(VmError::io("reading the QEMU monitor", path))?;
        s.write_all(format!("{command}\n").as_bytes()).map_err(VmError::io("writing to the QEMU monitor", path))?;
        let reply = read_until(&mut s, prompt).map_err(VmError::io("reading the QEMU monitor", path))?;
        // The monitor echoes the command line (with terminal escapes) before its answer.
        Ok(reply.lines().skip(1).collect::<Vec<_>>().join("\n").replace(prompt, ""))
    }

    /// Until node `k`'s agent runs; its setup failure or crash is an error.
    fn wait_ready(&self, k: usize, until: Instant) -> Result<(), VmError> {
        let node = &self.nodes[k];
        loop {
            if node.ctl.join("ready").exists() {
                return Ok(());
            }
            let status = fs::read_to_string(node.ctl.join("status")).ok();
            if status.is_some() || !node.alive() || Instant::now() > until {
                let why = match status {
                    Some(s) => format!("its setup failed (status {})", s.trim()),
                    None if Instant::now() > until => "it was not ready in time".into(),
                    None => "its QEMU ended".into(),
                };
                let stderr = fs::read_to_string(node.ctl.join("stderr")).unwrap_or_default();
                return Err(VmError::Guest(format!(
                    "node {}: {why}\n--- stderr ---\n{}\n--- kernel console (tail) ---\n{}",
                    node.name,
                    stderr.trim_end(),
                    node.console_tail()
                )));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for RunningLab {
    fn drop(&mut self) {
        let live: Vec<usize> = (0..self.nodes.len()).filter(|&k| self.nodes[k].alive()).collect();
        // Logs first, on every live node at once.
        let collecting: Vec<(usize, String)> = live
            .iter()
            .filter(|&&k| self.nodes[k].logs.is_some())
            .map(|&k| (k, self.spawn(&self.nodes[k].name.clone(), "collect_logs").id))
            .collect();
        let until = Instant::now() + COLLECT_TIMEOUT;
        for (k, id) in collecting {
            let status = self.nodes[k].ctl.join("jobs").join(format!("{id}.status"));
            while !status.exists() && self.nodes[k].alive() && Instant::now() < until {
                thread::sleep(Duration::from_millis(100));
            }
        }
        for &k in &live {
            let _ = fs::write(self.nodes[k].ctl.join("poweroff"), "");
        }
        let until = Instant::now() + POWEROFF_TIMEOUT;
        while live.iter().any(|&k| self.nodes[k].alive()) && Instant::now() < until {
            thread::sleep(Duration::from_millis(100));
        }
        for node in &self.nodes {
            if let Some(mut q) = node.qemu.lock().unwrap_or_else(PoisonError::into_inner).take() {
                let _ = q.0.kill();
                let _ = q.0.wait();
            }
            if let Some(logs) = &node.logs {
                for f in ["console.log", "stderr", "serial.log", "qemu.stderr"] {
                    let _ = fs::copy(node.ctl.join(f), logs.join(format!("node-{f}")));
                }
            }
        }
        if let Some(logs) = &self.logs {
            note(&format!("lab {}: stopped; logs in {}", self.name, logs.display()));
        }
    }
}

/// The harness's sign of life to the nodes: `heartbeat` in the lab folder holds this machine's Unix time, rewritten
/// every 2 s. A node's agent powers off when it is two minutes old: the test process died (the CI watchdog's
/// SIGKILL) without stopping the lab, whose guests would otherwise run on and take the CPU from what comes next.
#[derive(Debug)]
struct Heartbeat {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Heartbeat {
    fn start(path: PathBuf) -> Result<Self, VmError> {
        let beat = move |path: &Path| {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
            fs::write(path, format!("{now}\n"))
        };
        beat(&path).map_err(VmError::io("writing", &path))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                for _ in 0..20 {
                    if stopped.load(Ordering::Relaxed) {
                        return;
                    }
                    thread::sleep(Duration::from_millis(100));
                }
                let _ = beat(&path);
            }
        });
        Ok(Self { stop, thread: Some(thread) })
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Read from `s` until `marker` arrives; what came before it.
fn read_until(s: &mut UnixStream, marker: &str) -> io::Result<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let text = String::from_utf8_lossy(&got);
        if let Some(at) = text.find(marker) {
            return Ok(text[..at].to_owned());
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the monitor closed"));
        }
        got.extend_from_slice(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::{Lab, Vm};

    #[test]
    fn a_lab_refuses_bad_names_and_links() {
        let two = || Lab::new("t").node("a", Vm::new("a")).node("b", Vm::new("b"));
        assert!(two().link("a", "b").check().is_ok());
        for bad in [
            two().link("a", "a"),
            two().link("a", "c"),
            two().link("a", "b").link("b", "a"),
            Lab::new("t").node("A", Vm::new("a")),
            Lab::new("t").node("a", Vm::new("a")).node("a", Vm::new("a")),
            Lab::new("t").node("averyveryverylongname", Vm::new("a")),
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }
}
