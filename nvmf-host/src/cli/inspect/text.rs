//! The inspection commands' normal output, as nvme-cli prints it: `label : value` lines with its labels and
//! number forms, power states and LBA formats as its lines, its hex dump for `get-log`. The device in headers
//! is the subsystem NQN (there is no `/dev/nvmeX` here).

use std::io::{Result, Write};

use nvmf_common::fabrics::discovery::TransportType;
use nvmf_common::nvme::identify::{IdentifyController, IdentifyNamespace, PowerStateDescriptor, LBA_FORMATS};
use nvmf_common::nvme::log_page::{ErrorInformationEntry, SmartLog};

use super::fields::{self, Field, Value};
use super::ControllerView;

/// C's `%#x`: `0x` before any value but 0 (Rust's `{:#x}` writes `0x0`).
fn c_hex(n: impl Into<u64>) -> String {
    match n.into() {
        0 => "0".into(),
        n => format!("{n:#x}"),
    }
}

fn field_line(out: &mut dyn Write, f: &Field, width: usize) -> Result<()> {
    let name = f.name;
    match &f.value {
        Value::Dec(n) => writeln!(out, "{name:<width$}: {n}"),
        Value::Hex(n) => writeln!(out, "{name:<width$}: {}", c_hex(*n)),
        Value::Big(n) => writeln!(out, "{name:<width$}: {n}"),
        Value::Text(t) => writeln!(out, "{name:<width$}: {t}"),
        Value::Oui(n) => writeln!(out, "{name:<width$}: {n:06x}"),
    }
}

/// A power in units of 0.0001 W or 0.01 W as nvme-cli prints it (`9.00W`, `0.5000W`).
fn watts(power: u16, scale: u8) -> String {
    match scale {
        0 => "-".into(),
        1 => format!("{}.{:04}W", power / 10000, power % 10000),
        2 => format!("{}.{:02}W", power / 100, power % 100),
        _ => "reserved".into(),
    }
}

fn workload(apws: u8) -> &'static str {
    match apws & 0x7 {
        0 => "-",
        1 => "1MiB 32 RW, 30s idle",
        2 => "80K 128KiB SW",
        _ => "reserved",
    }
}

fn power_state(out: &mut dyn Write, i: usize, p: &PowerStateDescriptor) -> Result<()> {
    let mxps = p.flags & PowerStateDescriptor::FLAGS_MXPS != 0;
    let nops = if p.flags & PowerStateDescriptor::FLAGS_NOPS != 0 { "non-" } else { "" };
    writeln!(
        out,
        "ps {i:>4} : mp:{} {nops}operational enlat:{} exlat:{} rrt:{} rrl:{}",
        watts(p.mp, if mxps { 1 } else { 2 }),
        p.enlat,
        p.exlat,
        p.rrt,
        p.rrl
    )?;
    writeln!(
        out,
        "            rwt:{} rwl:{} idle_power:{} active_power:{}",
        p.rwt,
        p.rwl,
        watts(p.idlp, PowerStateDescriptor::scale(p.ips)),
        watts(p.actp, PowerStateDescriptor::scale(p.apws))
    )?;
    writeln!(out, "            active_power_workload:{}", workload(p.apws))
}

/// `nvme id-ctrl`.
pub fn id_ctrl(c: &IdentifyController<'_>, out: &mut dyn Write) -> Result<()> {
    writeln!(out, "NVME Identify Controller:")?;
    for f in fields::id_ctrl(c) {
        field_line(out, &f, 10)?;
    }
    for (i, p) in c.psd.iter().take(usize::from(c.npss) + 1).enumerate() {
        power_state(out, i, p)?;
    }
    Ok(())
}

/// `nvme id-ns`.
pub fn id_ns(nsid: u32, ns: &IdentifyNamespace, out: &mut dyn Write) -> Result<()> {
    writeln!(out, "NVME Identify Namespace {nsid}:")?;
    for f in fields::id_ns(ns) {
        field_line(out, &f, 8)?;
    }
    let count = (usize::from(ns.nlbaf) + 1).min(LBA_FORMATS);
    for (i, f) in ns.lbaf[..count].iter().enumerate() {
        let in_use = if i == ns.format_index() { " (in use)" } else { "" };
        writeln!(out, "lbaf {i:>2} : ms:{:<3} lbads:{:<2} rp:{}{in_use}", f.ms, f.lbads, c_hex(f.rp))?;
    }
    Ok(())
}

/// `value` data units of 512 000 bytes in SI units, as nvme-cli prints them (`1.05 MB`).
fn si_bytes(units: u128) -> String {
    // The display only: precision beyond f64's is not needed.
    #[expect(clippy::cast_precision_loss, reason = "an approximate size for people")]
    let mut v = units as f64 * 512_000.0;
    let mut suffix = 0;
    const SUFFIXES: [&str; 9] = ["", "k", "M", "G", "T", "P", "E", "Z", "Y"];
    while v >= 1000.0 && suffix + 1 < SUFFIXES.len() {
        v /= 1000.0;
        suffix += 1;
    }
    format!("{v:.2} {}B", SUFFIXES[suffix])
}

fn celsius(kelvin: u16) -> i32 {
    i32::from(kelvin) - 273
}

/// `nvme smart-log`.
pub fn smart_log(device: &str, nsid: u32, s: &SmartLog, out: &mut dyn Write) -> Result<()> {
    let t = s.composite_temperature;
    writeln!(out, "Smart Log for NVME device:{device} namespace-id:{nsid:x}")?;
    writeln!(out, "critical_warning                        : {}", c_hex(s.critical_warning))?;
    writeln!(out, "temperature                             : {}°C ({t} Kelvin)", celsius(t))?;
    writeln!(out, "available_spare                         : {}%", s.available_spare)?;
    writeln!(out, "available_spare_threshold               : {}%", s.available_spare_threshold)?;
    writeln!(out, "percentage_used                         : {}%", s.percentage_used)?;
    writeln!(out, "endurance group critical warning summary: {}", c_hex(s.endurance_group_critical_warning_summary))?;
    writeln!(out, "Data Units Read                         : {} ({})", s.data_units_read, si_bytes(s.data_units_read))?;
    writeln!(
        out,
        "Data Units Written                      : {} ({})",
        s.data_units_written,
        si_bytes(s.data_units_written)
    )?;
    writeln!(out, "host_read_commands                      : {}", s.host_read_commands)?;
    writeln!(out, "host_write_commands                     : {}", s.host_write_commands)?;
    writeln!(out, "controller_busy_time                    : {}", s.controller_busy_time)?;
    writeln!(out, "power_cycles                            : {}", s.power_cycles)?;
    writeln!(out, "power_on_hours                          : {}", s.power_on_hours)?;
    writeln!(out, "unsafe_shutdowns                        : {}", s.unsafe_shutdowns)?;
    writeln!(out, "media_errors                            : {}", s.media_errors)?;
    writeln!(out, "num_err_log_entries                     : {}", s.number_of_error_log_entries)?;
    writeln!(out, "Warning Temperature Time                : {}", s.warning_temperature_time)?;
    writeln!(out, "Critical Composite Temperature Time     : {}", s.critical_temperature_time)?;
    for (i, t) in s.temperature_sensors.iter().enumerate().filter(|(_, t)| **t != 0) {
        writeln!(out, "Temperature Sensor {}                    : {}°C ({t} Kelvin)", i + 1, celsius(*t))?;
    }
    writeln!(out, "Thermal Management T1 Trans Count       : {}", s.thermal_management_1_transitions)?;
    writeln!(out, "Thermal Management T2 Trans Count       : {}", s.thermal_management_2_transitions)?;
    writeln!(out, "Thermal Management T1 Total Time        : {}", s.thermal_management_1_time)?;
    writeln!(out, "Thermal Management T2 Total Time        : {}", s.thermal_management_2_time)
}

/// `nvme error-log`.
pub fn error_log(device: &str, entries: &[ErrorInformationEntry], out: &mut dyn Write) -> Result<()> {
    writeln!(out, "Error Log Entries for device:{device} entries:{}", entries.len())?;
    writeln!(out, ".................")?;
    for (i, e) in entries.iter().enumerate() {
        writeln!(out, " Entry[{i:>2}]   ")?;
        writeln!(out, ".................")?;
        writeln!(out, "error_count     : {}", e.error_count)?;
        writeln!(out, "sqid            : {}", e.sqid)?;
        writeln!(out, "cmdid           : {}", c_hex(e.cid))?;
        writeln!(out, "status_field    : {}({})", c_hex(e.status.field()), e.status)?;
        writeln!(out, "phase_tag       : {}", c_hex(u8::from(e.phase)))?;
        writeln!(out, "parm_err_loc    : {}", c_hex(e.parameter_error_location))?;
        writeln!(out, "lba             : {}", c_hex(e.lba))?;
        writeln!(out, "nsid            : {}", c_hex(e.nsid))?;
        writeln!(out, "vs              : {}", e.vs)?;
        writeln!(
            out,
            "trtype          : {}",
            TransportType::from_u8(e.trtype).map_or("unrecognized", TransportType::name)
        )?;
        writeln!(out, "cs              : {}", c_hex(e.command_specific))?;
        writeln!(out, "trtype_spec_info: {}", c_hex(e.transport_specific))?;
        writeln!(out, ".................")?;
    }
    Ok(())
}

/// `nvme list-ns`: `[index]:nsid` per active namespace.
pub fn ns_list(nsids: &[u32], out: &mut dyn Write) -> Result<()> {
    for (i, n) in nsids.iter().enumerate() {
        writeln!(out, "[{i:>4}]:{}", c_hex(*n))?;
    }
    Ok(())
}

/// `nvme list-subsys` for one controller.
pub fn subsystem_list(v: &ControllerView, out: &mut dyn Write) -> Result<()> {
    writeln!(out, "{} - NQN={}", v.subnqn, v.subnqn)?;
    writeln!(out, "\\")?;
    writeln!(out, " +- {} {} {} {}", v.name, v.transport, v.address, v.state)
}

/// nvme-cli's hex dump (`get-log` without `-b`): a column header, then 16 bytes a line after a 4-digit offset,
/// with their printable characters quoted at the end.
pub fn hex_dump(buf: &[u8], out: &mut dyn Write) -> Result<()> {
    write!(out, "     ")?;
    for i in 0..16 {
        write!(out, "{i:>3x}")?;
    }
    for (line, chunk) in buf.chunks(16).enumerate() {
        write!(out, "\n{:04x}:", line * 16)?;
        for b in chunk {
            write!(out, " {b:02x}")?;
        }
        let ascii: String = chunk.iter().map(|&b| if b.is_ascii_graphic() { char::from(b) } else { '.' }).collect();
        // A short last line is padded to where the text column starts.
        let pad = if chunk.len() < 16 { 3 * (16 - chunk.len()) + 1 } else { 0 };
        write!(out, " {:pad$}\"{ascii}\"", "")?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: impl FnOnce(&mut dyn Write) -> Result<()>) -> String {
        let mut out = Vec::new();
        f(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn hex_dump_lines_as_nvme_cli() {
        let mut buf: Vec<u8> = (0u8..16).collect();
        buf.extend_from_slice(b"AB");
        let t = text(|o| hex_dump(&buf, o));
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "       0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f");
        assert_eq!(lines[1], "0000: 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f \"................\"");
        assert_eq!(lines[2], format!("0010: 41 42{}\"AB\"", " ".repeat(44)));
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn power_state_line() {
        let p = PowerStateDescriptor { mp: 900, ips: 0x40, idlp: 5000, apws: 0x81, actp: 250, ..Default::default() };
        let t = text(|o| power_state(o, 0, &p));
        assert!(t.starts_with("ps    0 : mp:9.00W operational enlat:0 exlat:0 rrt:0 rrl:0\n"), "{t}");
        assert!(t.contains("idle_power:0.5000W active_power:2.50W\n"), "{t}");
        assert!(t.ends_with("active_power_workload:1MiB 32 RW, 30s idle\n"), "{t}");
    }

    #[test]
    fn data_units_in_si() {
        assert_eq!(si_bytes(0), "0.00 B");
        assert_eq!(si_bytes(3), "1.54 MB");
        assert_eq!(si_bytes(2_000_000), "1.02 TB");
    }
}
