//! `nvmf-vm`: boot the test VM by hand, to run one command or to get a root shell in the guest; or boot a lab of
//! several guests joined by links and run a command on one of them.
//!
//! ```text
//! cargo run -p nvmf-tests --bin nvmf-vm -- [OPTIONS] [--] [COMMAND...]
//! cargo run -p nvmf-tests --bin nvmf-vm -- --node a --node b --link a-b --on b [OPTIONS] [--] COMMAND...
//! ```
//! Without a command: an interactive shell on this terminal (Ctrl-D powers off, Ctrl-A X kills QEMU).
//! With one: its stdout and stderr, and its exit status (124: deadline, 125: guest setup failed or crashed).

use std::process::ExitCode;
use std::time::Duration;

use nvmf_tests::vm::{GuestStatus, KernelLine, KernelNeed, KernelVersion, Lab, Vm, VmOutput};

const USAGE: &str = "\
usage: nvmf-vm [OPTIONS] [--] [COMMAND...]
  --kernel K        lts (Linux 6.12, the default), backports (the newest Linux of Debian's trixie-backports),
                    or a version X.Y: the oldest of the two at that version or later
  --bare            no Soft-RoCE and no modules beyond --modules (default: the lab set, see below)
  --modules A,B     load these kernel modules too
  --rxe / --no-rxe  Soft-RoCE: rxe0 on dummy0, 10.77.0.1/24; on a lab node rxeK on each link ethK (default on)
  --siw             Soft-iWARP: siw0 on dummy0 (with --no-rxe alone on it), on a lab node siwK on each ethK;
                    siw.ko is built for the kernel once (tests/src/vm/siw.rs)
  --nvme SIZE       attach a QEMU-emulated NVMe drive (e.g. 1G, 512M)
  --debian13        the Debian 13 user space (nvme-cli 2.13, tlshd; built once): nvme13, tlshd_start, ...
                    (tests/vm/debian13-lib.sh)
  --share DIR       mount this host folder read-write at the same path (repeatable)
  --logs DIR        $NVMF_VM_LOGS in the guest, shared; logs are collected there after COMMAND (a lab: DIR/NODE)
  --env KEY=VALUE   export to COMMAND (repeatable)
  --cpus N --mem MIB --deadline SECS   (defaults 2, 3072, 1800)
A lab (several guests, each with the options above, joined by point-to-point links; see tests/README.md):
  --node NAME[:cpus=N][:mem=MIB]   a node (repeatable; 1-12 lowercase letters and digits)
  --link A-B        a link between nodes A and B (repeatable): link i is 10.88.{i+1}.0/24, node n is .{n+1}
  --on NODE         where COMMAND runs (default: the last node); it can run scripts on the others with on_node
The lab set: rdma_rxe ib_uverbs rdma_ucm nvme_tcp nvme_rdma nvmet_tcp nvmet_rdma null_blk nbd ublk_drv.
COMMAND runs with bash in the guest, with tests/vm/guest-lib.sh sourced, in the current directory.";

const LAB_MODULES: [&str; 7] = ["nvme_tcp", "nvme_rdma", "nvmet_tcp", "nvmet_rdma", "null_blk", "nbd", "ublk_drv"];

/// What the command line asks for.
struct Request {
    vm: Vm,
    kernel: KernelNeed,
    command: Option<String>,
    /// A lab: its nodes (name, CPUs, memory), links and the node the command runs on.
    nodes: Vec<(String, Option<u32>, Option<u32>)>,
    links: Vec<(String, String)>,
    on: Option<String>,
    logs: Option<String>,
    deadline: Duration,
}

fn main() -> ExitCode {
    let req = match parse(std::env::args().skip(1).collect()) {
        Ok(req) => req,
        Err(msg) => return fail(&format!("{msg}\n{USAGE}")),
    };
    if !req.nodes.is_empty() {
        return run_lab(req);
    }
    let vm = req.vm.kernel(req.kernel);
    let vm = match &req.logs {
        Some(logs) => vm.logs(logs),
        None => vm,
    };
    match req.command {
        None => match vm.interactive() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e.to_string()),
        },
        Some(command) => match vm.run(&command) {
            Ok(out) => report(&out),
            Err(e) => fail(&e.to_string()),
        },
    }
}

fn run_lab(req: Request) -> ExitCode {
    let Some(command) = req.command else {
        return fail("a lab runs a COMMAND on a node (--on NODE); it has no interactive shell");
    };
    let on = req.on.unwrap_or_else(|| req.nodes.last().map(|n| n.0.clone()).unwrap_or_default());
    let mut lab = Lab::new("nvmf-vm").kernel(req.kernel).deadline(req.deadline);
    if let Some(logs) = &req.logs {
        lab = lab.logs(logs);
    }
    for (name, cpus, mem) in &req.nodes {
        let mut vm = req.vm.clone();
        if let Some(c) = cpus {
            vm = vm.cpus(*c);
        }
        if let Some(m) = mem {
            vm = vm.memory_mib(*m);
        }
        lab = lab.node(name, vm);
    }
    for (a, b) in &req.links {
        lab = lab.link(a, b);
    }
    let running = match lab.start() {
        Ok(running) => running,
        Err(e) => return fail(&e.to_string()),
    };
    if !req.nodes.iter().any(|n| n.0 == on) {
        return fail(&format!("--on {on}: no such node"));
    }
    let out = running.run(&on, &command);
    drop(running);
    report(&out)
}

fn report(out: &VmOutput) -> ExitCode {
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
    eprintln!("nvmf-vm: kernel {}, {:?}, {}", out.kernel_release, out.status, out.timing());
    match out.status {
        GuestStatus::Exited(code) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        GuestStatus::TimedOut | GuestStatus::NoStatus => {
            eprintln!("nvmf-vm: kernel console (tail):\n{}", out.console_tail);
            ExitCode::from(if out.status == GuestStatus::TimedOut { 124 } else { 125 })
        }
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("nvmf-vm: {msg}");
    ExitCode::from(125)
}

fn parse(args: Vec<String>) -> Result<Request, String> {
    let mut vm = Vm::new("nvmf-vm");
    let mut req = Request {
        vm: Vm::new("nvmf-vm"),
        kernel: KernelNeed::Any,
        command: None,
        nodes: Vec::new(),
        links: Vec::new(),
        on: None,
        logs: None,
        deadline: Duration::from_secs(1800),
    };
    let mut lab = true;
    let mut rxe = None;
    let mut it = args.into_iter();
    let mut command = Vec::new();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => return Err("help".into()),
            "--kernel" => req.kernel = parse_kernel(&value("--kernel")?)?,
            "--bare" => lab = false,
            "--rxe" => rxe = Some(true),
            "--no-rxe" => rxe = Some(false),
            "--siw" => vm = vm.siw(true),
            "--debian13" => vm = vm.debian13_userspace(),
            "--modules" => vm = vm.modules(value("--modules")?.split(',').filter(|m| !m.is_empty()).map(String::from)),
            "--nvme" => vm = vm.nvme_drive(parse_size(&value("--nvme")?)?),
            "--share" => vm = vm.share(value("--share")?),
            "--logs" => req.logs = Some(value("--logs")?),
            "--env" => {
                let kv = value("--env")?;
                let (k, v) = kv.split_once('=').ok_or_else(|| format!("--env {kv}: expected KEY=VALUE"))?;
                vm = vm.env(k, v);
            }
            "--cpus" => vm = vm.cpus(number(&value("--cpus")?)?),
            "--mem" => vm = vm.memory_mib(number(&value("--mem")?)?),
            "--deadline" => req.deadline = Duration::from_secs(number(&value("--deadline")?)?.into()),
            "--node" => req.nodes.push(parse_node(&value("--node")?)?),
            "--link" => {
                let l = value("--link")?;
                let (a, b) = l.split_once('-').ok_or_else(|| format!("--link {l}: expected A-B"))?;
                req.links.push((a.to_owned(), b.to_owned()));
            }
            "--on" => req.on = Some(value("--on")?),
            "--" => {
                command.extend(it.by_ref());
                break;
            }
            a if a.starts_with("--") => return Err(format!("unknown option {a}")),
            _ => {
                command.push(arg);
                command.extend(it.by_ref());
                break;
            }
        }
    }
    if lab {
        vm = vm.modules(LAB_MODULES);
    }
    req.vm = vm.rxe(rxe.unwrap_or(lab)).deadline(req.deadline);
    req.command = (!command.is_empty()).then(|| command.join(" "));
    Ok(req)
}

fn parse_kernel(s: &str) -> Result<KernelNeed, String> {
    if let Some(line) = KernelLine::parse(s) {
        return Ok(line.into());
    }
    let v = KernelVersion::of(s).ok_or_else(|| format!("--kernel {s}: expected lts, backports or X.Y"))?;
    Ok(KernelNeed::AtLeast(v))
}

/// `NAME[:cpus=N][:mem=MIB]`.
fn parse_node(s: &str) -> Result<(String, Option<u32>, Option<u32>), String> {
    let mut parts = s.split(':');
    let name = parts.next().unwrap_or_default().to_owned();
    let (mut cpus, mut mem) = (None, None);
    for p in parts {
        match p.split_once('=') {
            Some(("cpus", n)) => cpus = Some(number(n)?),
            Some(("mem", n)) => mem = Some(number(n)?),
            _ => return Err(format!("--node {s}: expected NAME[:cpus=N][:mem=MIB]")),
        }
    }
    Ok((name, cpus, mem))
}

fn number(s: &str) -> Result<u32, String> {
    s.parse().map_err(|_| format!("{s}: not a number"))
}

fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits.parse().map_err(|_| format!("{s}: not a size"))?;
    let shift = match unit {
        "" => 0,
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        _ => return Err(format!("{s}: unit must be K, M or G")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("{s}: too large"))
}
