//! The inspection commands' JSON, as nvme-cli 2.3 (Debian 12's, the test VM's) prints it: its key names, its
//! key order, its value forms (128-bit counters and capacities as decimal strings, NGUID/EUI-64 as hex strings,
//! FGUID as a UUID). Where nvme-cli 2.3 differs from the spec's value we print the spec's: a 32-bit field with
//! bit 31 set is negative there (`json_object_new_int`), unsigned here, as later nvme-cli prints it.
//!
//! [`Json`] keeps object keys in the order given (serde_json's map would sort them).

use nvmf_common::nvme::identify::{IdentifyController, IdentifyNamespace, LBA_FORMATS};
use nvmf_common::nvme::log_page::{ErrorInformationEntry, SmartLog};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use super::fields::{self, Field, Value};
use super::ControllerView;

/// A JSON value whose objects keep their keys in insertion order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Json {
    /// A number.
    Num(u64),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<Json>),
    /// An object, keys in order.
    Obj(Vec<(String, Json)>),
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Num(n) => s.serialize_u64(*n),
            Json::Str(t) => s.serialize_str(t),
            Json::Arr(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    seq.serialize_element(i)?;
                }
                seq.end()
            }
            Json::Obj(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// Write `v` pretty-printed, with a final newline.
pub fn write(v: &Json, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, v)?;
    writeln!(out)
}

fn num(v: impl Into<u64>) -> Json {
    Json::Num(v.into())
}

fn obj<const N: usize>(entries: [(&str, Json); N]) -> Json {
    Json::Obj(entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn field(f: Field) -> (String, Json) {
    let v = match f.value {
        Value::Dec(n) | Value::Hex(n) => Json::Num(n),
        Value::Oui(n) => num(n),
        Value::Big(n) => Json::Str(n.to_string()),
        Value::Text(t) => Json::Str(t),
    };
    (f.name.to_owned(), v)
}

/// `nvme id-ctrl -o json`.
pub fn id_ctrl(c: &IdentifyController<'_>) -> Json {
    let mut entries: Vec<(String, Json)> = fields::id_ctrl(c)
        .into_iter()
        // nvme-cli leaves an empty SUBNQN out.
        .filter(|f| !(f.name == "subnqn" && f.value == Value::Text(String::new())))
        .map(field)
        .collect();
    let psds = c.psd.iter().take(usize::from(c.npss) + 1).map(|p| {
        obj([
            ("max_power", num(p.mp)),
            ("flags", num(p.flags)),
            ("entry_lat", num(p.enlat)),
            ("exit_lat", num(p.exlat)),
            ("read_tput", num(p.rrt)),
            ("read_lat", num(p.rrl)),
            ("write_tput", num(p.rwt)),
            ("write_lat", num(p.rwl)),
            ("idle_power", num(p.idlp)),
            ("idle_scale", num(p.ips >> 6)),
            ("active_power", num(p.actp)),
            ("active_power_work", num(p.apws & 0x7)),
            ("active_scale", num(p.apws >> 6)),
        ])
    });
    entries.push(("psds".into(), Json::Arr(psds.collect())));
    Json::Obj(entries)
}

/// `nvme id-ns -o json`.
pub fn id_ns(ns: &IdentifyNamespace) -> Json {
    let mut entries: Vec<(String, Json)> = fields::id_ns(ns).into_iter().map(field).collect();
    let count = (usize::from(ns.nlbaf) + 1).min(LBA_FORMATS);
    let lbafs = ns.lbaf[..count].iter().map(|f| obj([("ms", num(f.ms)), ("ds", num(f.lbads)), ("rp", num(f.rp))]));
    entries.push(("lbafs".into(), Json::Arr(lbafs.collect())));
    Json::Obj(entries)
}

/// `nvme smart-log -o json`.
pub fn smart_log(s: &SmartLog) -> Json {
    let big = |v: u128| Json::Str(v.to_string());
    let mut entries = vec![
        ("critical_warning".to_owned(), num(s.critical_warning)),
        ("temperature".into(), num(s.composite_temperature)),
        ("avail_spare".into(), num(s.available_spare)),
        ("spare_thresh".into(), num(s.available_spare_threshold)),
        ("percent_used".into(), num(s.percentage_used)),
        ("endurance_grp_critical_warning_summary".into(), num(s.endurance_group_critical_warning_summary)),
        ("data_units_read".into(), big(s.data_units_read)),
        ("data_units_written".into(), big(s.data_units_written)),
        ("host_read_commands".into(), big(s.host_read_commands)),
        ("host_write_commands".into(), big(s.host_write_commands)),
        ("controller_busy_time".into(), big(s.controller_busy_time)),
        ("power_cycles".into(), big(s.power_cycles)),
        ("power_on_hours".into(), big(s.power_on_hours)),
        ("unsafe_shutdowns".into(), big(s.unsafe_shutdowns)),
        ("media_errors".into(), big(s.media_errors)),
        ("num_err_log_entries".into(), big(s.number_of_error_log_entries)),
        ("warning_temp_time".into(), num(s.warning_temperature_time)),
        ("critical_comp_time".into(), num(s.critical_temperature_time)),
    ];
    // Sensors that report 0 are not implemented; nvme-cli leaves them out.
    for (i, t) in s.temperature_sensors.iter().enumerate().filter(|(_, t)| **t != 0) {
        entries.push((format!("temperature_sensor_{}", i + 1), num(*t)));
    }
    entries.extend([
        ("thm_temp1_trans_count".to_owned(), num(s.thermal_management_1_transitions)),
        ("thm_temp2_trans_count".into(), num(s.thermal_management_2_transitions)),
        ("thm_temp1_total_time".into(), num(s.thermal_management_1_time)),
        ("thm_temp2_total_time".into(), num(s.thermal_management_2_time)),
    ]);
    Json::Obj(entries)
}

/// `nvme error-log -o json`.
pub fn error_log(entries: &[ErrorInformationEntry]) -> Json {
    let errors = entries.iter().map(|e| {
        obj([
            ("error_count", num(e.error_count)),
            ("sqid", num(e.sqid)),
            ("cmdid", num(e.cid)),
            ("status_field", num(e.status.field())),
            ("phase_tag", num(e.phase)),
            ("parm_error_location", num(e.parameter_error_location)),
            ("lba", num(e.lba)),
            ("nsid", num(e.nsid)),
            ("vs", num(e.vs)),
            ("trtype", num(e.trtype)),
            ("cs", num(e.command_specific)),
            ("trtype_spec_info", num(e.transport_specific)),
        ])
    });
    obj([("errors", Json::Arr(errors.collect()))])
}

/// `nvme list-ns -o json`: the active NSIDs.
pub fn ns_list(nsids: &[u32]) -> Json {
    obj([("nsid_list", Json::Arr(nsids.iter().map(|n| obj([("nsid", num(*n))])).collect()))])
}

/// `nvme list-subsys -o json` for one controller: a host, its subsystem, the controller as its one path.
pub fn subsystem_list(v: &ControllerView) -> Json {
    let path = obj([
        ("Name", Json::Str(v.name.clone())),
        ("Transport", Json::Str(v.transport.into())),
        ("Address", Json::Str(v.address.clone())),
        ("State", Json::Str(v.state.into())),
    ]);
    let subsystem = obj([
        ("Name", Json::Str(v.subnqn.clone())),
        ("NQN", Json::Str(v.subnqn.clone())),
        ("Paths", Json::Arr(vec![path])),
    ]);
    Json::Arr(vec![obj([
        ("HostNQN", Json::Str(v.hostnqn.clone())),
        ("HostID", Json::Str(v.hostid.clone())),
        ("Subsystems", Json::Arr(vec![subsystem])),
    ])])
}
