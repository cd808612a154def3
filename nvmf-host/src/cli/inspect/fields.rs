//! The fields of Identify Controller and Identify Namespace as nvme-cli lists them, in its JSON order, with how each
//! prints: one table that both the JSON ([`super::json`]) and the normal output ([`super::text`]) render, so the
//! two never list different fields.

use nvmf_common::nvme::identify::{IdentifyController, IdentifyNamespace};

/// One field's value and its format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A number; decimal in the normal output.
    Dec(u64),
    /// A number; `0x…` in the normal output (nvme-cli's `%#x`, so 0 is `0`).
    Hex(u64),
    /// A 128-bit counter or capacity: a decimal string in JSON (nvme-cli's uint128), decimal in the normal output.
    Big(u128),
    /// Text, printed as is.
    Text(String),
    /// The IEEE OUI: a number in JSON, six hex digits (most significant byte first) in the normal output.
    Oui(u32),
}

/// A named field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// nvme-cli's name for it (JSON key and normal-output label).
    pub name: &'static str,
    /// Its value.
    pub value: Value,
}

fn dec(name: &'static str, v: impl Into<u64>) -> Field {
    Field { name, value: Value::Dec(v.into()) }
}

fn hex(name: &'static str, v: impl Into<u64>) -> Field {
    Field { name, value: Value::Hex(v.into()) }
}

fn big(name: &'static str, v: u128) -> Field {
    Field { name, value: Value::Big(v) }
}

fn text(name: &'static str, v: String) -> Field {
    Field { name, value: Value::Text(v) }
}

/// Bytes as lower-case hex digits, in wire order (NGUID, EUI-64).
pub fn hex_bytes(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// 16 bytes in the UUID text form (FGUID), as libnvme prints it.
pub fn uuid_text(b: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*b).hyphenated().to_string()
}

/// Identify Controller up to the power state descriptors (those are a list: see the renderers). `sn`, `mn` and
/// `fr` get their space padding back, as nvme-cli prints the whole field.
pub fn id_ctrl(c: &IdentifyController<'_>) -> Vec<Field> {
    let [ieee0, ieee1, ieee2] = c.ieee;
    vec![
        hex("vid", c.vid),
        hex("ssvid", c.ssvid),
        text("sn", format!("{:<20}", c.sn)),
        text("mn", format!("{:<40}", c.mn)),
        text("fr", format!("{:<8}", c.fr)),
        dec("rab", c.rab),
        Field { name: "ieee", value: Value::Oui(u32::from_le_bytes([ieee0, ieee1, ieee2, 0])) },
        hex("cmic", c.cmic),
        dec("mdts", c.mdts),
        hex("cntlid", c.cntlid),
        hex("ver", c.ver),
        hex("rtd3r", c.rtd3r),
        hex("rtd3e", c.rtd3e),
        hex("oaes", c.oaes),
        hex("ctratt", c.ctratt),
        hex("rrls", c.rrls),
        dec("cntrltype", c.cntrltype),
        text("fguid", uuid_text(&c.fguid)),
        dec("crdt1", c.crdt[0]),
        dec("crdt2", c.crdt[1]),
        dec("crdt3", c.crdt[2]),
        dec("nvmsr", c.nvmsr),
        dec("vwci", c.vwci),
        dec("mec", c.mec),
        hex("oacs", c.oacs),
        dec("acl", c.acl),
        dec("aerl", c.aerl),
        hex("frmw", c.frmw),
        hex("lpa", c.lpa),
        dec("elpe", c.elpe),
        dec("npss", c.npss),
        hex("avscc", c.avscc),
        hex("apsta", c.apsta),
        dec("wctemp", c.wctemp),
        dec("cctemp", c.cctemp),
        dec("mtfa", c.mtfa),
        dec("hmpre", c.hmpre),
        dec("hmmin", c.hmmin),
        big("tnvmcap", c.tnvmcap),
        big("unvmcap", c.unvmcap),
        hex("rpmbs", c.rpmbs),
        dec("edstt", c.edstt),
        dec("dsto", c.dsto),
        dec("fwug", c.fwug),
        dec("kas", c.kas),
        hex("hctma", c.hctma),
        dec("mntmt", c.mntmt),
        dec("mxtmt", c.mxtmt),
        hex("sanicap", c.sanicap),
        dec("hmminds", c.hmminds),
        dec("hmmaxd", c.hmmaxd),
        dec("nsetidmax", c.nsetidmax),
        dec("endgidmax", c.endgidmax),
        dec("anatt", c.anatt),
        dec("anacap", c.anacap),
        dec("anagrpmax", c.anagrpmax),
        dec("nanagrpid", c.nanagrpid),
        dec("pels", c.pels),
        dec("domainid", c.domainid),
        big("megcap", c.megcap),
        hex("sqes", c.sqes),
        hex("cqes", c.cqes),
        dec("maxcmd", c.maxcmd),
        dec("nn", c.nn),
        hex("oncs", c.oncs),
        hex("fuses", c.fuses),
        hex("fna", c.fna),
        hex("vwc", c.vwc),
        dec("awun", c.awun),
        dec("awupf", c.awupf),
        dec("icsvscc", c.icsvscc),
        dec("nwpc", c.nwpc),
        dec("acwu", c.acwu),
        hex("ocfs", c.ocfs),
        hex("sgls", c.sgls),
        dec("mnan", c.mnan),
        big("maxdna", c.maxdna),
        dec("maxcna", c.maxcna),
        text("subnqn", c.subnqn.to_owned()),
        dec("ioccsz", c.ioccsz),
        dec("iorcsz", c.iorcsz),
        dec("icdoff", c.icdoff),
        hex("fcatt", c.fcatt),
        dec("msdbd", c.msdbd),
        dec("ofcs", c.ofcs),
    ]
}

/// Identify Namespace up to the LBA formats (a list: see the renderers), in the order of nvme-cli's JSON (its
/// normal output has NSATTR and NVMSETID after ANAGRPID, and NGUID before EUI64). NPWG..NOWS only when NSFEAT
/// bit 4 says they are defined, as nvme-cli does.
pub fn id_ns(ns: &IdentifyNamespace) -> Vec<Field> {
    let mut f = vec![
        hex("nsze", ns.nsze),
        hex("ncap", ns.ncap),
        hex("nuse", ns.nuse),
        hex("nsfeat", ns.nsfeat),
        dec("nlbaf", ns.nlbaf),
        hex("flbas", ns.flbas),
        hex("mc", ns.mc),
        hex("dpc", ns.dpc),
        hex("dps", ns.dps),
        hex("nmic", ns.nmic),
        hex("rescap", ns.rescap),
        hex("fpi", ns.fpi),
        dec("dlfeat", ns.dlfeat),
        dec("nawun", ns.nawun),
        dec("nawupf", ns.nawupf),
        dec("nacwu", ns.nacwu),
        dec("nabsn", ns.nabsn),
        dec("nabo", ns.nabo),
        dec("nabspf", ns.nabspf),
        dec("noiob", ns.noiob),
        big("nvmcap", ns.nvmcap),
        dec("nsattr", ns.nsattr),
        dec("nvmsetid", ns.nvmsetid),
    ];
    if ns.nsfeat & IdentifyNamespace::NSFEAT_OPTIMAL_IO != 0 {
        f.extend([
            dec("npwg", ns.npwg),
            dec("npwa", ns.npwa),
            dec("npdg", ns.npdg),
            dec("npda", ns.npda),
            dec("nows", ns.nows),
        ]);
    }
    f.extend([
        dec("mssrl", ns.mssrl),
        dec("mcl", ns.mcl),
        dec("msrc", ns.msrc),
        dec("nulbaf", ns.nulbaf),
        dec("anagrpid", ns.anagrpid),
        dec("endgid", ns.endgid),
        text("eui64", hex_bytes(&ns.eui64)),
        text("nguid", hex_bytes(&ns.nguid)),
    ]);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value<'a>(fields: &'a [Field], name: &str) -> &'a Value {
        &fields.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no field {name}")).value
    }

    #[test]
    fn id_ctrl_fields_keep_nvme_cli_forms() {
        let c = IdentifyController {
            sn: "SN1",
            ieee: [0x56, 0x34, 0x12],
            tnvmcap: 1 << 70,
            fguid: [0xab; 16],
            subnqn: "nqn.x",
            ..Default::default()
        };
        let f = id_ctrl(&c);
        assert_eq!(value(&f, "sn"), &Value::Text(format!("SN1{}", " ".repeat(17))));
        assert_eq!(value(&f, "ieee"), &Value::Oui(0x12_3456));
        assert_eq!(value(&f, "tnvmcap"), &Value::Big(1 << 70));
        assert_eq!(value(&f, "fguid"), &Value::Text("abababab-abab-abab-abab-abababababab".into()));
        assert_eq!(f.iter().filter(|f| f.name == "subnqn").count(), 1);
        assert_eq!(f.first().map(|f| f.name), Some("vid"));
        assert_eq!(f.last().map(|f| f.name), Some("ofcs"));
    }

    #[test]
    fn id_ns_optimal_io_fields_only_when_defined() {
        let mut ns = IdentifyNamespace { nguid: [0x01; 16], eui64: [0xfe; 8], ..Default::default() };
        assert!(!id_ns(&ns).iter().any(|f| f.name == "npwg"));
        ns.nsfeat = IdentifyNamespace::NSFEAT_OPTIMAL_IO;
        ns.npwg = 7;
        let f = id_ns(&ns);
        assert_eq!(value(&f, "npwg"), &Value::Dec(7));
        assert_eq!(value(&f, "nguid"), &Value::Text("01".repeat(16)));
        assert_eq!(value(&f, "eui64"), &Value::Text("fe".repeat(8)));
    }
}
