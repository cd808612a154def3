//! `nvmf-target list`'s human-readable output: a tree like `nvmetcli ls`, one subsystem after another with its
//! namespaces and live controllers (a controller's queues as a small table), then the listeners with their ANA
//! states.

use std::io::{self, Write};

use super::protocol::{ControllerView, Listing, NamespaceView, SubsystemView};

/// Write `listing` as text.
pub fn write_listing(listing: &Listing, out: &mut dyn Write) -> io::Result<()> {
    for s in &listing.subsystems {
        write_subsystem(s, out)?;
    }
    writeln!(out, "listeners")?;
    if listing.listeners.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for l in &listing.listeners {
        let ana: Vec<String> = l.ana_states.iter().map(|a| format!("group {} {}", a.group, a.state)).collect();
        let ana = if ana.is_empty() { String::new() } else { format!(", ANA {}", ana.join(", ")) };
        writeln!(out, "  {} {}  (port {}{ana})", l.transport, address(&l.traddr, &l.trsvcid), l.port_id)?;
    }
    Ok(())
}

fn write_subsystem(s: &SubsystemView, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "subsystem {} ({})", s.nqn, s.subtype)?;
    if s.subtype != "discovery" {
        let hosts = if s.allow_any_host { "any".to_owned() } else { s.hosts.join(", ") };
        writeln!(
            out,
            "  serial {}, model {}, hosts: {}",
            s.serial,
            s.model,
            if hosts.is_empty() { "none" } else { &hosts }
        )?;
        if s.namespaces.is_empty() {
            writeln!(out, "  namespaces: none")?;
        }
        for ns in &s.namespaces {
            write_namespace(ns, out)?;
        }
    }
    if s.controllers.is_empty() && s.subtype != "discovery" {
        writeln!(out, "  controllers: none")?;
    }
    for c in &s.controllers {
        write_controller(c, out)?;
    }
    Ok(())
}

fn write_namespace(ns: &NamespaceView, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "  namespace {}: {}, {} ({} x {} B), uuid {}, nguid {}, ANA group {}",
        ns.nsid,
        ns.backend,
        human_size(ns.size),
        ns.blocks,
        ns.block_size,
        ns.uuid,
        ns.nguid,
        ns.ana_group
    )
}

fn write_controller(c: &ControllerView, out: &mut dyn Write) -> io::Result<()> {
    let kato = if c.kato_ms == 0 { "off".to_owned() } else { format!("{} s", f64::from(c.kato_ms) / 1000.0) };
    writeln!(
        out,
        "  controller {}: host {} (hostid {}), {} {}, kato {}, {}, up {}",
        c.cntlid,
        c.hostnqn,
        c.hostid,
        c.transport,
        address(&c.traddr, &c.trsvcid),
        kato,
        if c.ready { "ready" } else { "not ready" },
        human_duration(c.connected_seconds)
    )?;
    writeln!(
        out,
        "    reads {} ({}), writes {} ({}), errors {}",
        c.read_commands,
        human_size(c.bytes_read),
        c.write_commands,
        human_size(c.bytes_written),
        c.errors
    )?;
    writeln!(out, "    {:>5} {:>6} {:>9} {:>12} {:>12}  peer", "qid", "depth", "in-flight", "reads", "writes")?;
    for q in &c.queues {
        writeln!(
            out,
            "    {:>5} {:>6} {:>9} {:>12} {:>12}  {}",
            q.qid, q.depth, q.in_flight, q.read_commands, q.write_commands, q.peer
        )?;
    }
    Ok(())
}

/// `ADDR:PORT`, with IPv6 addresses in brackets.
fn address(traddr: &str, trsvcid: &str) -> String {
    if traddr.contains(':') {
        format!("[{traddr}]:{trsvcid}")
    } else {
        format!("{traddr}:{trsvcid}")
    }
}

/// Bytes in binary units with one decimal (`1.5 GiB`), exact below 1 KiB.
fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `3d04h`, `2h05m`, `1m02s`, `7s`.
fn human_duration(seconds: u64) -> String {
    let (d, h, m, s) = (seconds / 86_400, seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m{s:02}s"),
        (0, _, _) => format!("{h}h{m:02}m"),
        _ => format!("{d}d{h:02}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::protocol::{AnaGroupState, ListenerView, QueueView};
    use super::*;

    #[test]
    fn a_listing_reads_like_nvmetcli_ls() {
        let listing = Listing {
            subsystems: vec![SubsystemView {
                nqn: "testnqn".into(),
                subtype: "nvm".into(),
                serial: "abc".into(),
                model: "nvmf-rs".into(),
                allow_any_host: false,
                hosts: vec!["nqn.h1".into()],
                cntlid_range: [1, 0xFFEF],
                max_namespaces: 1024,
                namespaces: vec![NamespaceView {
                    nsid: 1,
                    backend: "/var/lib/nvmf/default.img".into(),
                    size: 1 << 30,
                    block_size: 512,
                    blocks: 1 << 21,
                    nguid: "00".repeat(16),
                    uuid: "6f0e6c8e-0000-4000-8000-000000000001".into(),
                    eui64: "00".repeat(8),
                    ana_group: 1,
                }],
                controllers: vec![ControllerView {
                    cntlid: 1,
                    hostnqn: "nqn.h1".into(),
                    hostid: "6f0e6c8e-0000-4000-8000-000000000002".into(),
                    transport: "tcp".into(),
                    traddr: "::1".into(),
                    trsvcid: "51234".into(),
                    kato_ms: 5000,
                    ready: true,
                    connected_at: 0,
                    connected_seconds: 62,
                    queues: vec![QueueView {
                        qid: 0,
                        depth: 32,
                        in_flight: 1,
                        peer: "[::1]:51234".into(),
                        read_commands: 0,
                        write_commands: 0,
                    }],
                    read_commands: 3,
                    write_commands: 1,
                    bytes_read: 12288,
                    bytes_written: 4096,
                    errors: 0,
                }],
            }],
            listeners: vec![ListenerView {
                transport: "tcp".into(),
                traddr: "127.0.0.1".into(),
                trsvcid: "4420".into(),
                port_id: 1,
                ana_states: vec![
                    AnaGroupState { group: 1, state: "optimized".into() },
                    AnaGroupState { group: 2, state: "inaccessible".into() },
                ],
            }],
        };
        let mut out = Vec::new();
        write_listing(&listing, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let want = "subsystem testnqn (nvm)
  serial abc, model nvmf-rs, hosts: nqn.h1
  namespace 1: /var/lib/nvmf/default.img, 1.0 GiB (2097152 x 512 B), uuid 6f0e6c8e-0000-4000-8000-000000000001, \
nguid 00000000000000000000000000000000, ANA group 1
  controller 1: host nqn.h1 (hostid 6f0e6c8e-0000-4000-8000-000000000002), tcp [::1]:51234, kato 5 s, ready, up 1m02s
    reads 3 (12.0 KiB), writes 1 (4.0 KiB), errors 0
      qid  depth in-flight        reads       writes  peer
        0     32         1            0            0  [::1]:51234
listeners
  tcp 127.0.0.1:4420  (port 1, ANA group 1 optimized, group 2 inaccessible)
";
        assert_eq!(text, want);
    }

    #[test]
    fn durations_and_sizes_read_short() {
        assert_eq!(human_duration(7), "7s");
        assert_eq!(human_duration(3 * 3600 + 5 * 60), "3h05m");
        assert_eq!(human_duration(2 * 86_400 + 3600), "2d01h");
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(3 << 40), "3.0 TiB");
    }
}
