//! `nvmf-vm`: boot the test VM by hand, to run one command or to get a root shell in the guest.
//!
//! ```text
//! cargo run -p nvmf-tests --bin nvmf-vm -- [OPTIONS] [--] [COMMAND...]
//! ```
//! Without a command: an interactive shell on this terminal (Ctrl-D powers off, Ctrl-A X kills QEMU).
//! With one: its stdout and stderr, and its exit status (124: deadline, 125: guest setup failed or crashed).

use std::process::ExitCode;
use std::time::Duration;

use nvmf_tests::vm::{GuestStatus, Vm};

const USAGE: &str = "\
usage: nvmf-vm [OPTIONS] [--] [COMMAND...]
  --bare            no Soft-RoCE and no modules beyond --modules (default: the lab set, see below)
  --modules A,B     load these kernel modules too
  --rxe / --no-rxe  Soft-RoCE rxe0 on dummy0, 10.77.0.1/24 (default on)
  --nvme SIZE       attach a QEMU-emulated NVMe drive (e.g. 1G, 512M)
  --share DIR       mount this host folder read-write at the same path (repeatable)
  --logs DIR        $NVMF_VM_LOGS in the guest, shared; logs are collected there after COMMAND
  --env KEY=VALUE   export to COMMAND (repeatable)
  --cpus N --mem MIB --deadline SECS   (defaults 2, 3072, 1800)
The lab set: rdma_rxe ib_uverbs rdma_ucm nvme_tcp nvme_rdma nvmet_tcp nvmet_rdma null_blk nbd ublk_drv.
COMMAND runs with bash in the guest, with tests/vm/guest-lib.sh sourced, in the current directory.";

const LAB_MODULES: [&str; 7] = ["nvme_tcp", "nvme_rdma", "nvmet_tcp", "nvmet_rdma", "null_blk", "nbd", "ublk_drv"];

fn main() -> ExitCode {
    match parse(std::env::args().skip(1).collect()) {
        Ok((vm, None)) => match vm.interactive() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e.to_string()),
        },
        Ok((vm, Some(command))) => match vm.run(&command) {
            Ok(out) => {
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
            Err(e) => fail(&e.to_string()),
        },
        Err(msg) => fail(&format!("{msg}\n{USAGE}")),
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("nvmf-vm: {msg}");
    ExitCode::from(125)
}

fn parse(args: Vec<String>) -> Result<(Vm, Option<String>), String> {
    let mut vm = Vm::new("nvmf-vm").deadline(Duration::from_secs(1800));
    let mut lab = true;
    let mut rxe = None;
    let mut it = args.into_iter();
    let mut command = Vec::new();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => return Err("help".into()),
            "--bare" => lab = false,
            "--rxe" => rxe = Some(true),
            "--no-rxe" => rxe = Some(false),
            "--modules" => vm = vm.modules(value("--modules")?.split(',').filter(|m| !m.is_empty()).map(String::from)),
            "--nvme" => vm = vm.nvme_drive(parse_size(&value("--nvme")?)?),
            "--share" => vm = vm.share(value("--share")?),
            "--logs" => vm = vm.logs(value("--logs")?),
            "--env" => {
                let kv = value("--env")?;
                let (k, v) = kv.split_once('=').ok_or_else(|| format!("--env {kv}: expected KEY=VALUE"))?;
                vm = vm.env(k, v);
            }
            "--cpus" => vm = vm.cpus(number(&value("--cpus")?)?),
            "--mem" => vm = vm.memory_mib(number(&value("--mem")?)?),
            "--deadline" => vm = vm.deadline(Duration::from_secs(number(&value("--deadline")?)?.into())),
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
    vm = vm.rxe(rxe.unwrap_or(lab));
    Ok((vm, (!command.is_empty()).then(|| command.join(" "))))
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
