//! The Discovery Log Page (log identifier 0x70): 1024-byte header and 1024-byte entries.
//!
//! NVMe-oF 1.1 §5.3 (Figures 31-32) / NVMe Base 2.0 §5.16.1.23; Linux `struct nvmf_disc_rsp_page_hdr`
//! and `struct nvmf_disc_rsp_page_entry` in `include/linux/nvme.h`.
//!
//! Header: genctr u64 @0, numrec u64 @8, recfmt u16 @16, reserved to 1024, then `numrec` entries.
//!
//! Entry: trtype @0, adrfam @1, subtype @2, treq @3, portid u16 @4, cntlid u16 @6, asqsz u16 @8, eflags
//! u16 @10, `trsvcid[32]` @32, `subnqn[256]` @256, `traddr[256]` @512, `tsas[256]` @768 (RDMA: qptype @768,
//! prtype @769, cms @770, pkey u16 @772; TCP: sectype @768).
//!
//! A host usually reads the page in pieces (Get Log Page with an offset) and may read less than the
//! whole page; [`DiscoveryLogPage::parse`] therefore accepts a buffer holding the header and any number
//! of whole entries and iterates over the entries present, up to `numrec`. Text fields are borrowed
//! from the page. `trsvcid` and `traddr` may be NUL- or space-padded (SPDK pads with spaces); trailing
//! spaces are dropped. `subnqn` is read without judging its grammar (see
//! [`super::nqn::nqn_field_text`]), since targets list subsystems whatever their names.

use super::nqn::{nqn_field_text, write_nqn_field_text, NQN_FIELD_LEN};
use crate::wire::{ascii_field, fixed, fixed_mut, le16, le64, put16, put64, put_ascii_field, WireError};

/// Log Identifier of the Discovery Log Page (Linux `NVME_LOG_DISC`).
pub const DISCOVERY_LOG_PAGE_ID: u8 = 0x70;

/// Size of the page header.
pub const HEADER_SIZE: usize = 1024;

/// Size of one entry.
pub const ENTRY_SIZE: usize = 1024;

/// The only record format defined (`recfmt` 0).
pub const DISCOVERY_RECFMT: u16 = 0;

const TRSVCID_SIZE: usize = 32;
const TRADDR_SIZE: usize = 256;
const ENTRY: &str = "DiscoveryLogEntry";

/// Bytes a page with `entries` entries occupies, or `None` if that overflows `usize`.
pub fn log_page_len(entries: usize) -> Option<usize> {
    entries.checked_add(1)?.checked_mul(ENTRY_SIZE)
}

macro_rules! wire_enum {
    (
        $(#[$doc:meta])* $name:ident, $field:literal, $allowed:literal
        { $($(#[$vdoc:meta])* $variant:ident = $value:literal),* $(,)? }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant),*
        }

        impl $name {
            /// Decode, or an error naming the field.
            pub fn from_u8(v: u8) -> Result<Self, WireError> {
                match v {
                    $($value => Ok($name::$variant),)*
                    _ => Err(WireError::invalid(ENTRY, $field, v, $allowed)),
                }
            }

            /// The wire value.
            pub fn to_u8(self) -> u8 {
                match self {
                    $($name::$variant => $value),*
                }
            }
        }
    };
}

wire_enum!(
    /// Transport Type, TRTYPE (Linux `NVMF_TRTYPE_*`).
    TransportType, "trtype", "1 RDMA, 2 FC, 3 TCP, 254 loop" {
        /// RDMA.
        Rdma = 1,
        /// Fibre Channel.
        Fc = 2,
        /// TCP.
        Tcp = 3,
        /// Intra-host loopback (reserved for host use).
        Loop = 254,
    }
);

impl TransportType {
    /// nvme-cli's name (`--transport`, `nvme discover`'s `trtype:`): `rdma`, `fc`, `tcp`, `loop`.
    pub fn name(self) -> &'static str {
        match self {
            TransportType::Rdma => "rdma",
            TransportType::Fc => "fc",
            TransportType::Tcp => "tcp",
            TransportType::Loop => "loop",
        }
    }
}

wire_enum!(
    /// Address Family, ADRFAM (Linux `NVMF_ADDR_FAMILY_*`).
    AddressFamily, "adrfam", "0 PCIe, 1 IPv4, 2 IPv6, 3 InfiniBand, 4 FC, 254 loop" {
        /// PCIe.
        Pci = 0,
        /// IPv4.
        Ipv4 = 1,
        /// IPv6.
        Ipv6 = 2,
        /// InfiniBand.
        Ib = 3,
        /// Fibre Channel.
        Fc = 4,
        /// Intra-host loopback (reserved for host use).
        Loop = 254,
    }
);

wire_enum!(
    /// Subsystem Type, SUBTYPE (Linux `enum nvme_subsys_type`).
    SubsystemType, "subtype", "1 referral, 2 NVM subsystem, 3 current discovery subsystem" {
        /// Referral to another discovery subsystem.
        Referral = 1,
        /// An NVM subsystem.
        Nvm = 2,
        /// The discovery subsystem being read.
        CurrentDiscovery = 3,
    }
);

wire_enum!(
    /// RDMA QP Service Type, RDMA_QPTYPE (Linux `NVMF_RDMA_QPTYPE_*`).
    RdmaQpType, "tsas.rdma_qptype", "1 reliable connected, 2 reliable datagram" {
        /// Reliable Connected.
        Connected = 1,
        /// Reliable Datagram.
        Datagram = 2,
    }
);

wire_enum!(
    /// RDMA Provider Type, RDMA_PRTYPE (Linux `NVMF_RDMA_PRTYPE_*`).
    RdmaProviderType, "tsas.rdma_prtype", "1 not specified, 2 InfiniBand, 3 RoCE, 4 RoCEv2, 5 iWARP" {
        /// No provider specified.
        NotSpecified = 1,
        /// InfiniBand.
        Ib = 2,
        /// RoCE (v1).
        Roce = 3,
        /// RoCE v2.
        RoceV2 = 4,
        /// iWARP.
        Iwarp = 5,
    }
);

wire_enum!(
    /// RDMA Connection Management Service, RDMA_CMS (Linux `NVMF_RDMA_CMS_*`).
    RdmaCms, "tsas.rdma_cms", "1 RDMA_CM" {
        /// Sockets-based endpoint addressing through the RDMA CM.
        RdmaCm = 1,
    }
);

wire_enum!(
    /// TCP Security Type, SECTYPE (NVMe/TCP 1.0 §3.6.1.1; Linux `NVMF_TCP_SECTYPE_*`).
    TcpSecurityType, "tsas.sectype", "0 none, 1 TLS 1.2, 2 TLS 1.3" {
        /// No security.
        None = 0,
        /// TLS 1.2.
        Tls12 = 1,
        /// TLS 1.3.
        Tls13 = 2,
    }
);

/// Transport Specific Address Subtype (entry bytes 768..1024), interpreted by `trtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tsas {
    /// RDMA (Linux `tsas.rdma`).
    Rdma {
        /// QP service type (byte 768).
        qptype: RdmaQpType,
        /// Provider type (byte 769).
        prtype: RdmaProviderType,
        /// Connection management service (byte 770).
        cms: RdmaCms,
        /// Partition key (bytes 772-773; InfiniBand).
        pkey: u16,
    },
    /// TCP (Linux `tsas.tcp`).
    Tcp {
        /// Security type (byte 768).
        sectype: TcpSecurityType,
    },
    /// Fibre Channel and loop define no subtype: the bytes are written as zeros and ignored on parse.
    None,
}

/// `treq` bits 1:0: secure channel requirement (Linux `NVMF_TREQ_*`).
pub mod treq {
    /// Not specified.
    pub const NOT_SPECIFIED: u8 = 0;
    /// A secure channel is required.
    pub const REQUIRED: u8 = 1;
    /// A secure channel is not required.
    pub const NOT_REQUIRED: u8 = 2;
    /// Mask of the secure channel field.
    pub const SECURE_CHANNEL_MASK: u8 = 0x3;
    /// Bit 2: the controller supports disabling SQ flow control.
    pub const DISABLE_SQFLOW: u8 = 1 << 2;
}

/// `eflags` bits (Linux `NVME_DISC_EFLAGS_*`).
pub mod eflags {
    /// Duplicate Returned Information.
    pub const DUPRETINFO: u16 = 1 << 0;
    /// Explicit Persistent Connection Support for Discovery.
    pub const EPCSD: u16 = 1 << 1;
    /// No CDC Connectivity.
    pub const NCC: u16 = 1 << 2;
}

/// The Discovery Log Page header (NVMe-oF 1.1 Figure 31, Linux `struct nvmf_disc_rsp_page_hdr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DiscoveryLogHeader {
    /// Generation Counter: changes whenever the page's content changes.
    pub genctr: u64,
    /// Number of Records in the page.
    pub numrec: u64,
}

impl DiscoveryLogHeader {
    /// Parse the first 1024 bytes of `buf`; `recfmt` must be 0.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<HEADER_SIZE>(buf, "DiscoveryLogHeader")?;
        let recfmt = le16(b, 16);
        if recfmt != DISCOVERY_RECFMT {
            return Err(WireError::invalid("DiscoveryLogHeader", "recfmt", recfmt, "0"));
        }
        Ok(DiscoveryLogHeader { genctr: le64(b, 0), numrec: le64(b, 8) })
    }

    /// Encode into the first 1024 bytes of `buf` (recfmt 0, reserved bytes zeroed).
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<HEADER_SIZE>(buf, "DiscoveryLogHeader")?;
        b.fill(0);
        put64(b, 0, self.genctr);
        put64(b, 8, self.numrec);
        put16(b, 16, DISCOVERY_RECFMT);
        Ok(())
    }
}

/// One Discovery Log Page entry (NVMe-oF 1.1 Figure 32, Linux `struct nvmf_disc_rsp_page_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscoveryLogEntry<'a> {
    /// Transport Type.
    pub trtype: TransportType,
    /// Address Family.
    pub adrfam: AddressFamily,
    /// Subsystem Type.
    pub subtype: SubsystemType,
    /// Transport Requirements (see [`treq`]).
    pub treq: u8,
    /// Port ID.
    pub portid: u16,
    /// Controller ID (0xFFFF: dynamic controller model).
    pub cntlid: u16,
    /// Admin Max SQ Size.
    pub asqsz: u16,
    /// Entry Flags (see [`eflags`]).
    pub eflags: u16,
    /// Transport Service Identifier (for IP transports, the port number as decimal text).
    pub trsvcid: &'a str,
    /// NVM Subsystem Qualified Name.
    pub subnqn: &'a str,
    /// Transport Address.
    pub traddr: &'a str,
    /// Transport Specific Address Subtype.
    pub tsas: Tsas,
}

fn text_field<'a>(b: &'a [u8], field: &'static str) -> Result<&'a str, WireError> {
    Ok(ascii_field(b, ENTRY, field)?.trim_end_matches(' '))
}

impl<'a> DiscoveryLogEntry<'a> {
    /// Parse the first 1024 bytes of `buf`.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let b = fixed::<ENTRY_SIZE>(buf, ENTRY)?;
        let trtype = TransportType::from_u8(b[0])?;
        let nqn: &'a [u8; NQN_FIELD_LEN] = b[256..512].try_into().map_err(|_| WireError::Short {
            structure: ENTRY,
            need: ENTRY_SIZE,
            got: buf.len(),
        })?;
        let tsas = match trtype {
            TransportType::Rdma => Tsas::Rdma {
                qptype: RdmaQpType::from_u8(b[768])?,
                prtype: RdmaProviderType::from_u8(b[769])?,
                cms: RdmaCms::from_u8(b[770])?,
                pkey: le16(b, 772),
            },
            TransportType::Tcp => Tsas::Tcp { sectype: TcpSecurityType::from_u8(b[768])? },
            TransportType::Fc | TransportType::Loop => Tsas::None,
        };
        Ok(DiscoveryLogEntry {
            trtype,
            adrfam: AddressFamily::from_u8(b[1])?,
            subtype: SubsystemType::from_u8(b[2])?,
            treq: b[3],
            portid: le16(b, 4),
            cntlid: le16(b, 6),
            asqsz: le16(b, 8),
            eflags: le16(b, 10),
            trsvcid: text_field(&b[32..32 + TRSVCID_SIZE], "trsvcid")?,
            subnqn: nqn_field_text(nqn).map_err(|e| WireError::InvalidText {
                structure: ENTRY,
                field: "subnqn",
                reason: e.reason(),
            })?,
            traddr: text_field(&b[512..512 + TRADDR_SIZE], "traddr")?,
            tsas,
        })
    }

    /// Encode into the first 1024 bytes of `buf` (text NUL-padded, reserved bytes zeroed). `tsas` must
    /// match `trtype` (field `tsas`).
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<ENTRY_SIZE>(buf, ENTRY)?;
        b.fill(0);
        b[0] = self.trtype.to_u8();
        b[1] = self.adrfam.to_u8();
        b[2] = self.subtype.to_u8();
        b[3] = self.treq;
        put16(b, 4, self.portid);
        put16(b, 6, self.cntlid);
        put16(b, 8, self.asqsz);
        put16(b, 10, self.eflags);
        put_ascii_field(&mut b[32..32 + TRSVCID_SIZE], self.trsvcid, 0, ENTRY, "trsvcid")?;
        let nqn: &mut [u8; NQN_FIELD_LEN] = (&mut b[256..512]).try_into().map_err(|_| WireError::OutputTooSmall {
            structure: ENTRY,
            need: ENTRY_SIZE,
            got: 0,
        })?;
        write_nqn_field_text(nqn, self.subnqn).map_err(|e| WireError::InvalidText {
            structure: ENTRY,
            field: "subnqn",
            reason: e.reason(),
        })?;
        put_ascii_field(&mut b[512..512 + TRADDR_SIZE], self.traddr, 0, ENTRY, "traddr")?;
        match (self.trtype, self.tsas) {
            (TransportType::Rdma, Tsas::Rdma { qptype, prtype, cms, pkey }) => {
                b[768] = qptype.to_u8();
                b[769] = prtype.to_u8();
                b[770] = cms.to_u8();
                put16(b, 772, pkey);
            }
            (TransportType::Tcp, Tsas::Tcp { sectype }) => b[768] = sectype.to_u8(),
            (TransportType::Fc | TransportType::Loop, Tsas::None) => {}
            (trtype, _) => {
                return Err(WireError::invalid(ENTRY, "tsas", trtype.to_u8(), "the variant of the entry's trtype"))
            }
        }
        Ok(())
    }

    /// The entry as 1024 bytes.
    pub fn to_bytes(&self) -> Result<[u8; ENTRY_SIZE], WireError> {
        let mut b = [0u8; ENTRY_SIZE];
        self.encode(&mut b)?;
        Ok(b)
    }
}

/// A Discovery Log Page borrowed from a buffer: the header and the whole entries present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscoveryLogPage<'a> {
    /// The header.
    pub header: DiscoveryLogHeader,
    entries: &'a [u8],
}

impl<'a> DiscoveryLogPage<'a> {
    /// Parse the header at the start of `buf`; the entries that follow are read lazily by
    /// [`Self::entries`]. A trailing partial entry is ignored.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let header = DiscoveryLogHeader::parse(buf)?;
        let rest = buf.get(HEADER_SIZE..).unwrap_or_default();
        let present = rest.len() / ENTRY_SIZE;
        let count = usize::try_from(header.numrec).map_or(present, |n| n.min(present));
        // count * ENTRY_SIZE <= rest.len(), so the range is in bounds.
        let entries = rest.get(..count * ENTRY_SIZE).unwrap_or_default();
        Ok(DiscoveryLogPage { header, entries })
    }

    /// Number of entries present in the buffer (at most `numrec`).
    pub fn entries_present(&self) -> usize {
        self.entries.len() / ENTRY_SIZE
    }

    /// True if every one of the `numrec` entries is present.
    pub fn is_complete(&self) -> bool {
        u64::try_from(self.entries_present()).is_ok_and(|n| n == self.header.numrec)
    }

    /// The entries present, each parsed on demand (a malformed entry does not hide the others).
    pub fn entries(&self) -> DiscoveryLogEntries<'a> {
        DiscoveryLogEntries { chunks: self.entries.chunks_exact(ENTRY_SIZE) }
    }
}

/// Iterator over the entries of a [`DiscoveryLogPage`].
#[derive(Debug, Clone)]
pub struct DiscoveryLogEntries<'a> {
    chunks: std::slice::ChunksExact<'a, u8>,
}

impl<'a> Iterator for DiscoveryLogEntries<'a> {
    type Item = Result<DiscoveryLogEntry<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.chunks.next().map(DiscoveryLogEntry::parse)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl ExactSizeIterator for DiscoveryLogEntries<'_> {}

/// Write a complete Discovery Log Page (header with `genctr`, `numrec` = `entries.len()`, then the
/// entries) into the start of `buf`; returns the bytes written ([`log_page_len`]).
pub fn build_log_page(genctr: u64, entries: &[DiscoveryLogEntry<'_>], buf: &mut [u8]) -> Result<usize, WireError> {
    let got = buf.len();
    let need = log_page_len(entries.len()).ok_or(WireError::OutputTooSmall {
        structure: "DiscoveryLogPage",
        need: usize::MAX,
        got,
    })?;
    let page = buf.get_mut(..need).ok_or(WireError::OutputTooSmall { structure: "DiscoveryLogPage", need, got })?;
    let (header, rest) = page.split_at_mut(HEADER_SIZE);
    let numrec = u64::try_from(entries.len()).map_err(|_| WireError::OutputTooSmall {
        structure: "DiscoveryLogPage",
        need,
        got,
    })?;
    DiscoveryLogHeader { genctr, numrec }.encode(header)?;
    for (entry, out) in entries.iter().zip(rest.chunks_exact_mut(ENTRY_SIZE)) {
        entry.encode(out)?;
    }
    Ok(need)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabrics::nqn::DISCOVERY_NQN;
    use proptest::prelude::*;

    fn rdma_entry() -> DiscoveryLogEntry<'static> {
        DiscoveryLogEntry {
            trtype: TransportType::Rdma,
            adrfam: AddressFamily::Ipv4,
            subtype: SubsystemType::Nvm,
            treq: treq::NOT_SPECIFIED,
            portid: 0x0102,
            cntlid: 0xffff,
            asqsz: 32,
            eflags: 0x0304,
            trsvcid: "4420",
            subnqn: "nqn.2016-06.io.spdk:cnode1",
            traddr: "192.168.1.10",
            tsas: Tsas::Rdma {
                qptype: RdmaQpType::Connected,
                prtype: RdmaProviderType::RoceV2,
                cms: RdmaCms::RdmaCm,
                pkey: 0xabcd,
            },
        }
    }

    fn tcp_entry() -> DiscoveryLogEntry<'static> {
        DiscoveryLogEntry {
            trtype: TransportType::Tcp,
            adrfam: AddressFamily::Ipv6,
            subtype: SubsystemType::CurrentDiscovery,
            treq: treq::NOT_REQUIRED | treq::DISABLE_SQFLOW,
            portid: 1,
            cntlid: 0xffff,
            asqsz: 32,
            eflags: eflags::DUPRETINFO | eflags::EPCSD,
            trsvcid: "8009",
            subnqn: DISCOVERY_NQN,
            traddr: "fe80::1",
            tsas: Tsas::Tcp { sectype: TcpSecurityType::Tls13 },
        }
    }

    #[test]
    fn entry_layout_matches_nvmf_disc_rsp_page_entry() {
        // struct nvmf_disc_rsp_page_entry: trtype @0, adrfam @1, subtype @2, treq @3, portid @4,
        // cntlid @6, asqsz @8, eflags @10, trsvcid @32, subnqn @256, traddr @512, tsas @768
        // (rdma: qptype @768, prtype @769, cms @770, pkey @772).
        let e = rdma_entry();
        let b = e.to_bytes().unwrap();
        assert_eq!(&b[0..4], &[1, 1, 2, 0]);
        assert_eq!(&b[4..12], &[0x02, 0x01, 0xff, 0xff, 32, 0, 0x04, 0x03]);
        assert!(b[12..32].iter().all(|&x| x == 0));
        assert_eq!(&b[32..37], b"4420\0");
        assert_eq!(&b[256..282], b"nqn.2016-06.io.spdk:cnode1");
        assert_eq!(b[282], 0);
        assert_eq!(&b[512..525], b"192.168.1.10\0");
        assert_eq!(&b[768..774], &[1, 4, 1, 0, 0xcd, 0xab]);
        assert!(b[774..].iter().all(|&x| x == 0));
        assert_eq!(DiscoveryLogEntry::parse(&b).unwrap(), e);

        let t = tcp_entry();
        let b = t.to_bytes().unwrap();
        assert_eq!(&b[0..4], &[3, 2, 3, 0b110]);
        assert_eq!(b[768], 2);
        assert_eq!(DiscoveryLogEntry::parse(&b).unwrap(), t);
    }

    #[test]
    fn header_layout_matches_nvmf_disc_rsp_page_hdr() {
        // struct nvmf_disc_rsp_page_hdr: genctr @0, numrec @8, recfmt @16, entries @1024.
        let mut b = [0xaau8; HEADER_SIZE];
        DiscoveryLogHeader { genctr: 0x0102_0304_0506_0708, numrec: 0x1112 }.encode(&mut b).unwrap();
        assert_eq!(&b[0..8], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&b[8..16], &[0x12, 0x11, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[16..18], &[0, 0]);
        assert!(b[18..].iter().all(|&x| x == 0));
        b[16] = 1;
        assert!(matches!(DiscoveryLogHeader::parse(&b), Err(WireError::InvalidField { field: "recfmt", .. })));
        assert!(matches!(DiscoveryLogHeader::parse(&b[..1023]), Err(WireError::Short { need: 1024, .. })));
    }

    #[test]
    fn page_build_and_truncated_parse() {
        let entries = [rdma_entry(), tcp_entry(), rdma_entry()];
        let mut buf = vec![0u8; 5000];
        let n = build_log_page(7, &entries, &mut buf).unwrap();
        assert_eq!(n, 4096);
        assert_eq!(log_page_len(3), Some(4096));
        let page = DiscoveryLogPage::parse(&buf[..n]).unwrap();
        assert_eq!(page.header, DiscoveryLogHeader { genctr: 7, numrec: 3 });
        assert!(page.is_complete());
        let parsed: Vec<_> = page.entries().map(Result::unwrap).collect();
        assert_eq!(parsed, entries);

        // The host read only part of the page: whole entries present are returned.
        let page = DiscoveryLogPage::parse(&buf[..1024 + 2047]).unwrap();
        assert_eq!(page.entries_present(), 1);
        assert!(!page.is_complete());
        assert_eq!(page.entries().next().unwrap().unwrap(), rdma_entry());
        // Only numrec entries are read even if the buffer is longer.
        let page = DiscoveryLogPage::parse(&buf).unwrap();
        assert_eq!(page.entries().len(), 3);
        // A header-only read.
        let page = DiscoveryLogPage::parse(&buf[..1024]).unwrap();
        assert_eq!((page.entries_present(), page.header.numrec), (0, 3));

        assert!(matches!(
            build_log_page(7, &entries, &mut buf[..4095]),
            Err(WireError::OutputTooSmall { need: 4096, got: 4095, .. })
        ));
    }

    #[test]
    fn space_padded_text_is_trimmed() {
        let mut b = rdma_entry().to_bytes().unwrap();
        b[32..64].fill(b' ');
        b[32..36].copy_from_slice(b"4420");
        b[512..768].fill(b' ');
        b[512..520].copy_from_slice(b"10.0.0.1");
        let e = DiscoveryLogEntry::parse(&b).unwrap();
        assert_eq!((e.trsvcid, e.traddr), ("4420", "10.0.0.1"));
    }

    #[test]
    fn entry_rejections() {
        let good = rdma_entry().to_bytes().unwrap();
        let cases: &[(usize, u8, &str)] = &[
            (0, 0, "trtype"),
            (1, 5, "adrfam"),
            (2, 0, "subtype"),
            (768, 3, "tsas.rdma_qptype"),
            (769, 0, "tsas.rdma_prtype"),
            (770, 2, "tsas.rdma_cms"),
            (33, 0x80, "trsvcid"),
            (513, 0x07, "traddr"),
        ];
        for &(off, value, field) in cases {
            let mut b = good;
            b[off] = value;
            let e = DiscoveryLogEntry::parse(&b).unwrap_err();
            let got = match e {
                WireError::InvalidField { field, .. } | WireError::InvalidText { field, .. } => field,
                _ => "",
            };
            assert_eq!(got, field, "byte {off}");
        }
        let mut b = good;
        b[256..512].fill(b'x');
        assert!(matches!(DiscoveryLogEntry::parse(&b), Err(WireError::InvalidText { field: "subnqn", .. })));
        let mut b = tcp_entry().to_bytes().unwrap();
        b[768] = 3;
        assert!(matches!(DiscoveryLogEntry::parse(&b), Err(WireError::InvalidField { field: "tsas.sectype", .. })));
        assert!(matches!(DiscoveryLogEntry::parse(&good[..1000]), Err(WireError::Short { .. })));

        // Encode checks: TSAS must match TRTYPE, text must fit.
        let mismatched = DiscoveryLogEntry { tsas: Tsas::None, ..rdma_entry() };
        assert!(matches!(mismatched.to_bytes(), Err(WireError::InvalidField { field: "tsas", .. })));
        let long = "1".repeat(33);
        let too_long = DiscoveryLogEntry { trsvcid: &long, ..rdma_entry() };
        assert!(matches!(too_long.to_bytes(), Err(WireError::InvalidText { field: "trsvcid", .. })));
        let fc = DiscoveryLogEntry {
            trtype: TransportType::Fc,
            adrfam: AddressFamily::Fc,
            tsas: Tsas::None,
            ..rdma_entry()
        };
        let mut b = fc.to_bytes().unwrap();
        b[768] = 0x55; // ignored for FC
        assert_eq!(DiscoveryLogEntry::parse(&b).unwrap(), fc);
    }

    proptest! {
        #[test]
        fn arbitrary_pages_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..4200),
            numrec in any::<u64>(),
        ) {
            let mut bytes = bytes;
            if bytes.len() >= 18 {
                bytes[8..16].copy_from_slice(&(numrec % 6).to_le_bytes());
                bytes[16] = 0;
                bytes[17] = 0;
            }
            if let Ok(page) = DiscoveryLogPage::parse(&bytes) {
                prop_assert!(page.entries_present() <= 5);
                for e in page.entries().flatten() {
                    let again = e.to_bytes().unwrap();
                    prop_assert_eq!(DiscoveryLogEntry::parse(&again).unwrap(), e);
                }
            }
        }

        #[test]
        fn arbitrary_entries_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 1024), kind in 0u8..4) {
            // Steer the enum bytes towards valid values so the text checks get exercised too.
            bytes[0] = [1, 2, 3, 254][usize::from(kind)];
            bytes[1] %= 5;
            bytes[2] = bytes[2] % 3 + 1;
            bytes[768] = if kind == 2 { bytes[768] % 3 } else { bytes[768] % 2 + 1 };
            bytes[769] = bytes[769] % 5 + 1;
            bytes[770] = 1;
            if let Ok(e) = DiscoveryLogEntry::parse(&bytes) {
                let again = e.to_bytes().unwrap();
                prop_assert_eq!(DiscoveryLogEntry::parse(&again).unwrap(), e);
            }
        }

        #[test]
        fn entry_round_trip(portid in any::<u16>(), cntlid in any::<u16>(), asqsz in any::<u16>(), ef in any::<u16>(),
                            tq in any::<u8>(), svc in "[0-9]{1,5}", addr in "[0-9a-f.:]{1,39}",
                            name in "[a-z0-9]{1,40}",
                            pkey in any::<u16>(), genctr in any::<u64>()) {
            let subnqn = format!("nqn.2014-08.org.example:{name}");
            let e = DiscoveryLogEntry {
                trtype: TransportType::Rdma, adrfam: AddressFamily::Ib, subtype: SubsystemType::Referral,
                treq: tq, portid, cntlid, asqsz, eflags: ef, trsvcid: &svc, subnqn: &subnqn, traddr: &addr,
                tsas: Tsas::Rdma {
                    qptype: RdmaQpType::Datagram, prtype: RdmaProviderType::Ib, cms: RdmaCms::RdmaCm, pkey,
                },
            };
            let b = e.to_bytes().unwrap();
            prop_assert_eq!(DiscoveryLogEntry::parse(&b).unwrap(), e);
            let mut page = vec![0u8; 3 * 1024];
            prop_assert_eq!(build_log_page(genctr, &[e, e], &mut page).unwrap(), 3072);
            let p = DiscoveryLogPage::parse(&page).unwrap();
            prop_assert_eq!(p.header, DiscoveryLogHeader { genctr, numrec: 2 });
            prop_assert_eq!(p.entries().map(Result::unwrap).collect::<Vec<_>>(), vec![e, e]);
        }
    }
}
