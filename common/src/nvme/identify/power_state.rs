//! One Power State Descriptor of Identify Controller (bytes 3071:2048, 32 of them; Base 2.0 Figure 276, Linux
//! `struct nvme_id_power_state`): what a power state draws and costs to enter and leave.

use crate::wire::{le16, le32, put16, put32};

/// Size of one Power State Descriptor.
pub const POWER_STATE_DESCRIPTOR_SIZE: usize = 32;

/// Power State Descriptors in Identify Controller (PSD0..PSD31).
pub const POWER_STATE_DESCRIPTORS: usize = 32;

/// One Power State Descriptor (Base 2.0 Figure 276, Linux `struct nvme_id_power_state`), 32 bytes. Reserved
/// bits are kept as read, so that a parse and encode reproduce the bytes a controller sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PowerStateDescriptor {
    /// Maximum Power (bytes 1:0), in the unit [`Self::FLAGS_MXPS`] selects.
    pub mp: u16,
    /// Byte 3: Max Power Scale (bit 0) and Non-Operational State (bit 1).
    pub flags: u8,
    /// Entry Latency in microseconds (bytes 7:4).
    pub enlat: u32,
    /// Exit Latency in microseconds (bytes 11:8).
    pub exlat: u32,
    /// Relative Read Throughput (byte 12).
    pub rrt: u8,
    /// Relative Read Latency (byte 13).
    pub rrl: u8,
    /// Relative Write Throughput (byte 14).
    pub rwt: u8,
    /// Relative Write Latency (byte 15).
    pub rwl: u8,
    /// Idle Power (bytes 17:16), in the unit of the scale in [`Self::ips`].
    pub idlp: u16,
    /// Idle Power Scale (byte 18, bits 7:6).
    pub ips: u8,
    /// Active Power (bytes 21:20), in the unit of the scale in [`Self::apws`].
    pub actp: u16,
    /// Active Power Workload (byte 22, bits 2:0) and Active Power Scale (bits 7:6).
    pub apws: u8,
}

impl PowerStateDescriptor {
    /// Flags bit 0: MP is in units of 0.0001 W (cleared: 0.01 W).
    pub const FLAGS_MXPS: u8 = 1 << 0;
    /// Flags bit 1: a non-operational state (no I/O is processed in it).
    pub const FLAGS_NOPS: u8 = 1 << 1;

    /// A power scale field (IPS, or APS in APWS): bits 7:6, 0 = not reported, 1 = 0.0001 W, 2 = 0.01 W.
    pub fn scale(field: u8) -> u8 {
        field >> 6
    }

    /// Parse the descriptor at `off` of `b`; the caller guarantees 32 bytes there.
    pub fn parse(b: &[u8], off: usize) -> Self {
        PowerStateDescriptor {
            mp: le16(b, off),
            flags: b[off + 3],
            enlat: le32(b, off + 4),
            exlat: le32(b, off + 8),
            rrt: b[off + 12],
            rrl: b[off + 13],
            rwt: b[off + 14],
            rwl: b[off + 15],
            idlp: le16(b, off + 16),
            ips: b[off + 18],
            actp: le16(b, off + 20),
            apws: b[off + 22],
        }
    }

    /// Encode at `off` of `b` (reserved bytes left as they are); the caller guarantees 32 bytes there.
    pub fn encode(&self, b: &mut [u8], off: usize) {
        put16(b, off, self.mp);
        b[off + 3] = self.flags;
        put32(b, off + 4, self.enlat);
        put32(b, off + 8, self.exlat);
        b[off + 12] = self.rrt;
        b[off + 13] = self.rrl;
        b[off + 14] = self.rwt;
        b[off + 15] = self.rwl;
        put16(b, off + 16, self.idlp);
        b[off + 18] = self.ips;
        put16(b, off + 20, self.actp);
        b[off + 22] = self.apws;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_state_descriptor_layout() {
        // Offsets from Base 2.0 Figure 276 / Linux struct nvme_id_power_state.
        let psd = PowerStateDescriptor {
            mp: 0x0201,
            flags: 0x03,
            enlat: 0x0706_0504,
            exlat: 0x0b0a_0908,
            rrt: 0x0c,
            rrl: 0x0d,
            rwt: 0x0e,
            rwl: 0x0f,
            idlp: 0x1110,
            ips: 0x80,
            actp: 0x1514,
            apws: 0x42,
        };
        let mut b = [0u8; 40];
        psd.encode(&mut b, 4);
        assert_eq!(&b[4..8], &[0x01, 0x02, 0x00, 0x03]);
        assert_eq!(&b[8..20], &[0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f]);
        assert_eq!(&b[20..24], &[0x10, 0x11, 0x80, 0x00]);
        assert_eq!(&b[24..27], &[0x14, 0x15, 0x42]);
        assert!(b[27..].iter().all(|&c| c == 0));
        assert_eq!(PowerStateDescriptor::parse(&b, 4), psd);
        assert_eq!(PowerStateDescriptor::scale(psd.ips), 2);
        assert_eq!(PowerStateDescriptor::scale(psd.apws), 1);
    }
}
