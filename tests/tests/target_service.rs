//! The `nvmf-target` binary under a (fake) service manager: with `$NOTIFY_SOCKET` and `$WATCHDOG_USEC` set it
//! reports READY=1 once it accepts connections, then WATCHDOG=1 and STATUS= periodically, and STOPPING=1 on
//! SIGTERM before it exits successfully — what `Type=notify` with `WatchdogSec=` in the systemd unit relies on.

use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn next_message(socket: &UnixDatagram, deadline: Instant) -> String {
    let mut buf = [0u8; 512];
    let timeout = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    socket.set_read_timeout(Some(timeout)).unwrap();
    let n = socket.recv(&mut buf).unwrap_or_else(|e| panic!("no sd_notify message in time: {e}"));
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn notifies_ready_watchdog_status_and_stopping() {
    let bin = nvmf_tests::workspace_bin::nvmf_target().expect("nvmf-target binary");
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    // Configurations cannot say port 0: take a free port and hand it over.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();

    let mut child = Command::new(bin)
        .args(["--listen", &format!("tcp://127.0.0.1:{port}"), "--namespace", "memory:4MiB"])
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "1000000")
        .env_remove("WATCHDOG_PID")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    assert_eq!(next_message(&socket, deadline), "READY=1");
    // Ready means accepting connections.
    let connection = TcpStream::connect(("127.0.0.1", port)).expect("the target accepts once READY=1 was sent");

    // Half the watchdog interval later at most: a watchdog ping with the status, counting our connection.
    let mut saw_connection = false;
    for _ in 0..10 {
        let message = next_message(&socket, Instant::now() + Duration::from_secs(2));
        assert!(message.starts_with("WATCHDOG=1\nSTATUS=serving, "), "{message:?}");
        // `serving, N connection(s), X IOPS`
        let iops = message.rsplit_once(", ").and_then(|(_, rate)| rate.strip_suffix(" IOPS"));
        assert!(iops.is_some_and(|n| n.parse::<u64>().is_ok()), "no IOPS in {message:?}");
        if message.contains(", 1 connection(s), ") {
            saw_connection = true;
            break;
        }
    }
    assert!(saw_connection, "STATUS never counted the open connection");
    drop(connection);

    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let message = next_message(&socket, deadline);
        if message == "STOPPING=1" {
            break;
        }
        assert!(message.starts_with("WATCHDOG=1\nSTATUS="), "unexpected {message:?}");
    }
    let exit = child.wait().unwrap();
    assert!(exit.success(), "nvmf-target exited with {exit}");
}
