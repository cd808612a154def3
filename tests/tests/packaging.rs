//! Packaging checks: the systemd units (nvmf-target's with its drop-in, nvmf-host's; their sysusers.d entries) pass
//! `systemd-analyze verify` and `systemd-sysusers --dry-run`, every fio job file in `fio-jobs/` parses with `fio
//! --parse-only`, and `install.sh --destdir` stages every file and never overwrites an existing configuration.
//!
//! `systemd-analyze verify` insists that the `ExecStart=` binary exists and is executable. The check therefore
//! verifies a copy of each unit (with its `<unit>.d/` drop-ins) in a temporary folder whose
//! `/usr/local/bin/nvmf-target` is rewritten to a stub script there: it does not need a build nor root, and
//! what it checks (every key known and well-formed, dependencies resolvable) does not depend on the binary.
//! Warnings on stderr (an unknown key is only a warning to systemd) fail the test too.
//!
//! A missing tool (`systemd-analyze`, `systemd-sysusers`: Debian package `systemd`; `fio`: package `fio`) makes
//! a test print `SKIPPED: ...` and pass, unless `NVMF_REQUIRE_VM=1` (what `.ci/run` sets), `NVMF_REQUIRE_TOOLS=1`
//! or `CI` (any value but empty, `0`, `false`) is set: then it fails.

use std::env;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The path the unit names and `install.sh` installs to with the default prefix.
const UNIT_BINARY: &str = "/usr/local/bin/nvmf-target";
/// The same for the host daemon's unit.
const HOST_UNIT_BINARY: &str = "/usr/local/bin/nvmf-host";

/// The job files issue 7 asks for.
const FIO_JOBS: [&str; 7] = [
    "randread-4k-qd1.fio",
    "randread-4k-qd32.fio",
    "randwrite-4k-qd1.fio",
    "randwrite-4k-qd32.fio",
    "seqread-128k.fio",
    "seqwrite-128k.fio",
    "randrw-70-30-4k.fio",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

fn flag(name: &str) -> bool {
    env::var(name).is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

fn tools_required() -> bool {
    env::var("NVMF_REQUIRE_VM").is_ok_and(|v| v == "1") || flag("NVMF_REQUIRE_TOOLS") || flag("CI")
}

/// The tool's path on `PATH`, or `None` after printing `SKIPPED` (panics instead when tools are required).
fn tool_or_skip(test: &str, tool: &str, package: &str) -> Option<PathBuf> {
    let found = env::var_os("PATH")
        .map(|p| env::split_paths(&p).map(|d| d.join(tool)).find(|c| c.is_file()))
        .unwrap_or_default();
    if found.is_none() {
        let why = format!("{tool} is not installed (Debian package {package})");
        assert!(!tools_required(), "{test}: {why}, and NVMF_REQUIRE_VM/NVMF_REQUIRE_TOOLS/CI requires it");
        eprintln!("SKIPPED: {test}: {why}");
    }
    found
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn files_with_extension(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.is_file() && p.extension() == Some(OsStr::new(ext)))
        .collect();
    files.sort();
    files
}

fn write_stub(dir: &Path) -> PathBuf {
    let stub = dir.join("nvmf-target");
    fs::write(&stub, "#!/bin/sh\nexit 0\n").expect("write stub");
    fs::set_permissions(&stub, fs::Permissions::from_mode(0o755)).expect("chmod stub");
    stub
}

/// Copies `unit` and its `<unit>.d/*.conf` drop-ins into `dir` with the binary path pointing at `stub`, runs
/// `systemd-analyze verify` on the copy and returns its complaints (empty when clean).
fn verify_unit(analyze: &Path, unit: &Path, dir: &Path, stub: &Path) -> String {
    let name = unit.file_name().expect("unit file name");
    let original = fs::read_to_string(unit).expect("read unit");
    let copy = original
        .replace(UNIT_BINARY, &stub.display().to_string())
        .replace(HOST_UNIT_BINARY, &stub.display().to_string());
    fs::write(dir.join(name), copy).expect("copy unit");
    let dropins = unit.with_file_name(format!("{}.d", name.to_string_lossy()));
    if dropins.is_dir() {
        let copy = dir.join(dropins.file_name().expect("drop-in folder name"));
        fs::create_dir_all(&copy).expect("drop-in folder");
        for conf in files_with_extension(&dropins, "conf") {
            fs::copy(&conf, copy.join(conf.file_name().expect("drop-in name"))).expect("copy drop-in");
        }
    }
    let out = run(Command::new(analyze).arg("verify").arg(dir.join(name)).env("SYSTEMD_LOG_COLOR", "0"));
    let mut complaints = text(&out.stderr);
    complaints.push_str(&text(&out.stdout));
    if !out.status.success() && complaints.trim().is_empty() {
        complaints = format!("systemd-analyze verify exited with {}", out.status);
    }
    complaints.trim().to_owned()
}

#[test]
fn systemd_units_verify() {
    let test = "systemd_units_verify";
    let Some(analyze) = tool_or_skip(test, "systemd-analyze", "systemd") else { return };
    let Some(sysusers) = tool_or_skip(test, "systemd-sysusers", "systemd") else { return };
    let systemd = repo().join("systemd");
    let units = files_with_extension(&systemd, "service");
    let names: Vec<_> = units.iter().map(|u| u.file_name().expect("name").to_string_lossy().into_owned()).collect();
    assert_eq!(
        names,
        ["nvmf-host.service", "nvmf-target.service"],
        "units in systemd/ (update this test when one is added)"
    );

    let tmp = tempfile::tempdir().expect("tempdir");
    let stub = write_stub(tmp.path());
    for unit in &units {
        let text = fs::read_to_string(unit).expect("read unit");
        let binary = format!("/usr/local/bin/{}", unit.file_stem().expect("stem").to_string_lossy());
        assert!(text.contains(&format!("ExecStart={binary} ")), "{} runs {binary}", unit.display());
        let dir = tmp.path().join(unit.file_name().expect("name"));
        fs::create_dir(&dir).expect("unit folder");
        let complaints = verify_unit(&analyze, unit, &dir, &stub);
        assert!(complaints.is_empty(), "systemd-analyze verify {}:\n{complaints}", unit.display());
    }

    // The check can fail: a misspelt key in a drop-in is reported.
    let src = tmp.path().join("bad-src");
    fs::create_dir_all(src.join("nvmf-target.service.d")).expect("bad source");
    fs::copy(systemd.join("nvmf-target.service"), src.join("nvmf-target.service")).expect("bad unit");
    fs::write(src.join("nvmf-target.service.d/typo.conf"), "[Service]\nLimitMEMLOK=infinity\n").expect("typo");
    let bad = tmp.path().join("bad");
    fs::create_dir(&bad).expect("bad folder");
    let complaints = verify_unit(&analyze, &src.join("nvmf-target.service"), &bad, &stub);
    assert!(complaints.contains("LimitMEMLOK"), "a misspelt key must be reported, got: {complaints:?}");

    // The drop-in `nvmf-target systemd-devices` prints verifies beside the unit, and allows exactly the device
    // node the configuration names.
    let node = fs::read_dir("/dev")
        .expect("/dev")
        .flatten()
        .map(|e| e.path())
        .find(|p| fs::metadata(p).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type())));
    if let Some(node) = node {
        let config = format!(
            "[[listener]]\naddress = \"127.0.0.1\"\n[[subsystem]]\nnqn = \"nqn.2024-01.io.nvmf-rs:unit\"\n\
             [[subsystem.namespace]]\nmemory = \"1MiB\"\n[[subsystem.namespace]]\npath = \"{}\"\n",
            node.display()
        );
        let config = nvmf_config::TargetConfig::from_str(&config, "target.toml").expect("config");
        let devices =
            nvmf_target::systemd_devices::drop_in(&config, Path::new("/etc/nvmf/target.toml")).expect("drop-in");
        assert!(devices.contains(&format!("\nDeviceAllow={} rw\n", node.display())), "{devices}");
        assert_eq!(devices.matches("DeviceAllow=").count(), 1, "{devices}");
        let src = tmp.path().join("devices-src");
        fs::create_dir_all(src.join("nvmf-target.service.d")).expect("devices source");
        fs::copy(systemd.join("nvmf-target.service"), src.join("nvmf-target.service")).expect("unit");
        fs::write(src.join("nvmf-target.service.d/devices.conf"), &devices).expect("devices.conf");
        let dir = tmp.path().join("devices");
        fs::create_dir(&dir).expect("devices folder");
        let complaints = verify_unit(&analyze, &src.join("nvmf-target.service"), &dir, &stub);
        assert!(complaints.is_empty(), "systemd-analyze verify with devices.conf:\n{complaints}\n{devices}");
    }
    // The unit alone allows no block device and gives no device group.
    let unit = fs::read_to_string(systemd.join("nvmf-target.service")).expect("unit");
    assert!(unit.contains("\nDevicePolicy=closed\n"));
    assert!(
        !unit.lines().any(|l| l.starts_with("DeviceAllow=block-") || l.starts_with("SupplementaryGroups=")),
        "{unit}"
    );

    // sysusers.d: parses and declares each service user (in no device group: the devices drop-in grants it).
    let root = tmp.path().join("root");
    fs::create_dir_all(root.join("etc")).expect("sysusers root");
    for (file, user) in [("nvmf.conf", "nvmf"), ("nvmf-host.conf", "nvmf-host")] {
        let conf = systemd.join("sysusers.d").join(file);
        let out = run(Command::new(&sysusers).arg("--dry-run").arg(format!("--root={}", root.display())).arg(&conf));
        let log = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "systemd-sysusers --dry-run {}:\n{log}", conf.display());
        assert!(log.contains(&format!("Creating user '{user}'")), "sysusers.d creates user {user}:\n{log}");
        assert!(!log.to_lowercase().contains("ignoring"), "sysusers.d has a line systemd ignores:\n{log}");
    }
}

#[test]
fn fio_jobs_parse() {
    let test = "fio_jobs_parse";
    let Some(fio) = tool_or_skip(test, "fio", "fio") else { return };
    let dir = repo().join("fio-jobs");
    let jobs = files_with_extension(&dir, "fio");
    let names: Vec<_> = jobs.iter().map(|j| j.file_name().expect("name").to_string_lossy().into_owned()).collect();
    let mut expected = FIO_JOBS.map(str::to_owned).to_vec();
    expected.sort();
    assert_eq!(names, expected, "job files in fio-jobs/");

    for job in &jobs {
        let out =
            run(Command::new(&fio).arg("--parse-only").arg(job).env("FILENAME", "/dev/nvme1n1").env("RUNTIME", "60"));
        let log = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "fio --parse-only {}:\n{log}", job.display());
        for bad in ["Bad option", "failed parsing", "dropped"] {
            assert!(!log.contains(bad), "fio --parse-only {}: {bad}\n{log}", job.display());
        }
        // FILENAME is required: without it fio refuses the job rather than writing to a file named "${FILENAME}".
        let out = run(Command::new(&fio).arg("--parse-only").arg(job).env_remove("FILENAME").env("RUNTIME", "60"));
        assert!(!out.status.success(), "{} must need FILENAME", job.display());
    }
}

#[test]
fn install_sh_stages_files_and_keeps_config() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let stub = write_stub(tmp.path());
    let dest = tmp.path().join("dest");
    let install = |prefix: &str| {
        let out = run(Command::new("bash")
            .arg(repo().join("install.sh"))
            .args(["--no-build", "--prefix", prefix, "--destdir"])
            .arg(&dest)
            .env("NVMF_TARGET_BIN", &stub)
            .env("NVMF_HOST_BIN", &stub));
        let log = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "install.sh --prefix {prefix}:\n{log}");
        log
    };

    let log = install("/usr/local");
    assert!(log.contains("installed the default configuration"), "{log}");
    let default = fs::read_to_string(repo().join("systemd/target.toml")).expect("default config");
    let config = dest.join("etc/nvmf/target.toml");
    assert_eq!(fs::read_to_string(&config).expect("config installed"), default);
    let image = dest.join("var/lib/nvmf/default.img");
    assert_eq!(fs::metadata(&image).expect("default namespace file").len(), 1 << 30);
    assert!(log.contains("created /var/lib/nvmf/default.img"), "{log}");
    let host_example = fs::read_to_string(repo().join("config/examples/host.toml")).expect("example host config");
    let host_config = dest.join("etc/nvmf/host.toml");
    assert_eq!(fs::read_to_string(&host_config).expect("host config installed"), host_example);
    assert!(log.contains("installed the example host configuration"), "{log}");
    for file in [
        "usr/local/bin/nvmf-host",
        "usr/local/lib/systemd/system/nvmf-host.service",
        "usr/local/lib/sysusers.d/nvmf-host.conf",
        "usr/local/share/doc/nvmf/host.toml.example",
        "usr/local/share/doc/nvmf/nvmf-host-ublk.conf",
        "usr/local/bin/nvmf-target",
        "usr/local/lib/systemd/system/nvmf-target.service",
        "usr/local/lib/sysusers.d/nvmf.conf",
        "usr/local/share/doc/nvmf/passthrough.conf",
        "usr/local/share/doc/nvmf/target.toml.example",
        "usr/local/share/nvmf/fio-jobs/randrw-70-30-4k.fio",
    ] {
        assert!(dest.join(file).is_file(), "install.sh staged {file}");
    }
    let unit = fs::read_to_string(dest.join("usr/local/lib/systemd/system/nvmf-target.service")).expect("unit");
    assert_eq!(unit, fs::read_to_string(repo().join("systemd/nvmf-target.service")).expect("source unit"));
    let unit = fs::read_to_string(dest.join("usr/local/lib/systemd/system/nvmf-host.service")).expect("host unit");
    assert_eq!(unit, fs::read_to_string(repo().join("systemd/nvmf-host.service")).expect("source host unit"));

    // A second run (another prefix) keeps the administrator's configuration and rewrites the binary path.
    fs::write(&config, "# edited\n").expect("edit config");
    fs::write(&host_config, "# edited host\n").expect("edit host config");
    let log = install("/opt/nvmf");
    assert!(log.contains("keeping the existing /etc/nvmf/target.toml"), "{log}");
    assert!(!log.contains("created /var/lib/nvmf/default.img"), "the namespace file was replaced:\n{log}");
    assert!(log.contains("keeping the existing /etc/nvmf/host.toml"), "{log}");
    assert_eq!(fs::read_to_string(&config).expect("config"), "# edited\n");
    assert_eq!(fs::read_to_string(&host_config).expect("host config"), "# edited host\n");
    let unit = fs::read_to_string(dest.join("etc/systemd/system/nvmf-host.service")).expect("host unit for /opt");
    assert!(unit.contains("ExecStart=/opt/nvmf/bin/nvmf-host run --config /etc/nvmf/host.toml"), "{unit}");
    assert!(!unit.contains("/usr/local"), "no /usr/local path left in the /opt host unit:\n{unit}");
    let unit = fs::read_to_string(dest.join("etc/systemd/system/nvmf-target.service")).expect("unit for /opt");
    assert!(unit.contains("ExecStart=/opt/nvmf/bin/nvmf-target --config /etc/nvmf/target.toml"), "{unit}");
    assert!(!unit.contains("/usr/local"), "no /usr/local path left in the /opt unit:\n{unit}");
    assert!(dest.join("opt/nvmf/bin/nvmf-target").is_file());
}

/// The configuration install.sh installs starts the daemon with the unit's command line: the unit's `ExecStart`
/// arguments, the default file with its paths under a staging directory and its ports free ones (a test cannot
/// take 4420), and a host can connect.
#[test]
fn the_installed_default_configuration_starts_with_the_units_command_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let stub = write_stub(tmp.path());
    let dest = tmp.path().join("dest");
    let out = run(Command::new("bash")
        .arg(repo().join("install.sh"))
        .args(["--no-build", "--destdir"])
        .arg(&dest)
        .env("NVMF_TARGET_BIN", &stub)
        .env("NVMF_HOST_BIN", &stub));
    assert!(out.status.success(), "install.sh: {}{}", text(&out.stdout), text(&out.stderr));
    let unit = fs::read_to_string(dest.join("usr/local/lib/systemd/system/nvmf-target.service")).expect("unit");
    let exec = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("ExecStart");
    let mut args: Vec<String> = exec.split_whitespace().skip(1).map(str::to_owned).collect();
    let free_port = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (port, metrics_port) = (free_port(), free_port());
    let staged = fs::read_to_string(dest.join("etc/nvmf/target.toml"))
        .expect("installed config")
        .replace("/var/lib/nvmf", &dest.join("var/lib/nvmf").to_string_lossy())
        .replace("port = 4420", &format!("port = {port}"))
        .replace("127.0.0.1:9420", &format!("127.0.0.1:{metrics_port}"));
    let config = tmp.path().join("target.toml");
    fs::write(&config, staged).unwrap();
    let at = args.iter().position(|a| a == "/etc/nvmf/target.toml").expect("the unit names /etc/nvmf/target.toml");
    args[at] = config.to_string_lossy().into_owned();

    let bin = nvmf_tests::workspace_bin::nvmf_target().expect("nvmf-target binary");
    let check = run(Command::new(&bin).args(&args).arg("--check"));
    assert!(check.status.success(), "--check: {}", text(&check.stderr));
    let mut daemon = Command::new(&bin)
        .args(&args)
        .arg("--control")
        .arg(tmp.path().join("control.sock"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("nvmf-target starts");
    let mut stdout = std::io::BufReader::new(daemon.stdout.take().unwrap());
    let mut ready = false;
    let mut line = String::new();
    while std::io::BufRead::read_line(&mut stdout, &mut line).unwrap_or(0) > 0 {
        if line.trim() == "nvmf-target: ready" {
            ready = true;
            break;
        }
        line.clear();
    }
    let connected = ready && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert!(ready, "the daemon never said it was ready");
    assert!(connected, "no listener on 127.0.0.1:{port}");
}
