//! What `nvmf-target` prints for the mistakes a new user makes: one line on stderr naming the mistake, exit
//! status 1, no backtrace even with `RUST_BACKTRACE=1`, no cause repeated. And the names Linux nvmet accepts for
//! a subsystem are accepted.

use std::process::{Command, Output};

fn nvmf_target(args: &[&str]) -> Output {
    let bin = nvmf_tests::workspace_bin::nvmf_target().expect("nvmf-target binary");
    Command::new(bin).args(args).env("RUST_BACKTRACE", "1").env("RUST_LOG", "warn").output().expect("run nvmf-target")
}

/// The run failed with exactly `line` on stderr.
#[track_caller]
fn fails_with(out: &Output, line: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr, format!("{line}\n"));
}

#[test]
fn common_mistakes_get_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("target.toml");
    fails_with(
        &nvmf_target(&["--config", missing.to_str().unwrap()]),
        &format!(
            "nvmf-target: {}: cannot read the configuration file: No such file or directory (os error 2)",
            missing.display()
        ),
    );
    let bad_key = dir.path().join("bad.toml");
    std::fs::write(&bad_key, "[target]\nmdts = \"1MiB\"\nkeep_alive_max = 60000\n").unwrap();
    let out = nvmf_target(&["--config", bad_key.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = format!(
        "nvmf-target: {}:3:1: target.keep_alive_max: unknown field `keep_alive_max`, expected one of",
        bad_key.display()
    );
    assert!(stderr.starts_with(&expected) && stderr.lines().count() == 1, "{stderr}");
    assert_eq!(out.status.code(), Some(1));
    fails_with(
        &nvmf_target(&["--config", bad_key.to_str().unwrap(), "--nqn", "testnqn"]),
        "nvmf-target: --config cannot be combined with --listen, --namespace, --nqn, --allow-host, --metrics or \
         --cntlid-range: put them in the file",
    );
    fails_with(
        &nvmf_target(&["--nqn", "", "--check"]),
        "nvmf-target: --nqn \"\": \"\" is not a valid NQN: NQN is empty; allowed: a name of 1 to 223 bytes without \
         control characters, best an NQN \"nqn.yyyy-mm.reverse.domain[:name]\" or \
         \"nqn.2014-08.org.nvmexpress:uuid:<UUID>\"",
    );
    fails_with(
        &nvmf_target(&["--listen", "tcp://127.0.0.1:99999"]),
        "nvmf-target: --listen \"tcp://127.0.0.1:99999\": port \"99999\" is not 1..=65535; allowed: \
         tcp://ADDRESS[:PORT] or rdma://ADDRESS[:PORT], IPv6 in brackets, e.g. tcp://0.0.0.0:4420 or tcp://[::1]:4420",
    );
}

#[test]
fn check_opens_path_namespaces_unless_told_not_to() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("target.toml");
    std::fs::write(
        &config,
        "[[listener]]\naddress = \"127.0.0.1\"\n[[subsystem]]\nnqn = \"testnqn\"\n[[subsystem.namespace]]\n\
         path = \"disk.img\"\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    fails_with(
        &nvmf_target(&["--config", config, "--check"]),
        &format!(
            "nvmf-target: subsystem testnqn namespace 1: cannot stat {}: No such file or directory (os error 2)",
            dir.path().join("disk.img").display()
        ),
    );
    let out = nvmf_target(&["--config", config, "--check", "--no-path-check"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Once the file is there (and a whole number of blocks), the check passes.
    std::fs::write(dir.path().join("disk.img"), vec![0u8; 1 << 20]).unwrap();
    let out = nvmf_target(&["--config", config, "--check"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_port_in_use_is_named() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = nvmf_target(&["--listen", &format!("tcp://127.0.0.1:{port}"), "--namespace", "memory:4MiB"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.lines().last(),
        Some(
            format!(
                "nvmf-target: starting the target: cannot listen on tcp://127.0.0.1:{port}: Address already in use \
                 (os error 98)"
            )
            .as_str()
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("backtrace") && !stderr.contains("Caused by"), "{stderr}");
}

#[test]
fn subsystem_names_linux_nvmet_accepts_are_accepted() {
    for name in ["testnqn", "storage-subsystem-1"] {
        let out = nvmf_target(&["--nqn", name, "--allow-host", "host1", "--check"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(&format!("nqn = \"{name}\"")), "{stdout}");
        assert!(stdout.contains("hosts = [\"host1\"]"), "{stdout}");
    }
}

#[test]
fn listeners_take_a_state_per_ana_group() {
    // Node A of a gateway group: group 1 optimized, group 2 non-optimized; --check prints it as a file says it.
    let listen = "tcp://127.0.0.1:4420,ana-group-state=2:non-optimized,ana-group-state=3:inaccessible";
    let out = nvmf_target(&["--listen", listen, "--check"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(
            "ana_state = \"optimized\"\n\n[listener.ana_group_states]\n2 = \"non-optimized\"\n3 = \"inaccessible\"\n"
        ),
        "{stdout}"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("target.toml");
    std::fs::write(&config, stdout.as_bytes()).unwrap();
    let again = nvmf_target(&["--config", config.to_str().unwrap(), "--check"]);
    assert_eq!(String::from_utf8_lossy(&again.stdout), stdout, "the printed file loads as itself");

    let twice = "tcp://127.0.0.1:4420,ana-group-state=2:optimized,ana-group-state=2:inaccessible";
    fails_with(
        &nvmf_target(&["--listen", twice, "--check"]),
        &format!(
            "nvmf-target: --listen \"{twice}\": option \"ana-group-state\" names group 2 twice; allowed: options \
             ana-state=STATE (once), ana-group-state=GROUP:STATE (each group once), GROUP 1..=128, STATE \
             optimized|non-optimized|inaccessible|persistent-loss|change, and tls=none|allowed|required (tcp, once)"
        ),
    );
    std::fs::write(
        &config,
        "[[listener]]\naddress = \"127.0.0.1\"\nana_group_states = { 2 = \"non-optimized\", 200 = \"optimized\" }\n\
         [[subsystem]]\nnqn = \"testnqn\"\n",
    )
    .unwrap();
    fails_with(
        &nvmf_target(&["--config", config.to_str().unwrap(), "--check"]),
        &format!(
            "nvmf-target: {}:3:49: listener[0].ana_group_states.200: ANA group 200 is out of range; allowed: ANA group \
             IDs 1..=128 as keys, each once, e.g. ana_group_states = {{ 2 = \"non-optimized\" }}",
            config.display()
        ),
    );
}

#[test]
fn under_the_journal_lines_carry_their_priority() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    let file = std::fs::File::create(&log).unwrap();
    let meta = file.metadata().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let bin = nvmf_tests::workspace_bin::nvmf_target().expect("nvmf-target binary");
    let status = Command::new(bin)
        .args(["--listen", &format!("tcp://127.0.0.1:{port}"), "--namespace", "memory:4MiB"])
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .env("RUST_LOG", "info")
        .stderr(file)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.iter().any(|l| l.starts_with("<6>nvmf_target::daemon: namespace ")), "{text}");
    assert!(
        lines.iter().all(|l| l.starts_with('<') && !l.contains("Z ")),
        "a line without priority or with a timestamp:\n{text}"
    );
    assert_eq!(
        lines.last().copied(),
        Some(
            format!("<3>nvmf-target: starting the target: cannot listen on tcp://127.0.0.1:{port}: Address already in use (os error 98)")
                .as_str()
        ),
        "{text}"
    );
}
