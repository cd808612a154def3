//! The Commands Supported and Effects log page (LID 05h; Base 2.0 Figures 210–211, Linux `struct
//! nvme_effects_log`).

use crate::wire::{fixed, fixed_mut, le32, WireError};

const EFFECTS: &str = "CommandsSupportedAndEffects";

/// Size of the Commands Supported and Effects log.
pub const COMMANDS_SUPPORTED_AND_EFFECTS_SIZE: usize = 4096;

/// Commands Supported and Effects log (Base 2.0 Figures 210–211, Linux `struct nvme_effects_log`),
/// 4096 bytes: one Commands Supported and Effects dword per admin opcode (ACS, bytes 1023:0), then one
/// per I/O opcode (IOCS, bytes 2047:1024); the rest is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandsSupportedAndEffects {
    /// Admin Command Supported entries, indexed by opcode.
    pub acs: [u32; 256],
    /// I/O Command Supported entries, indexed by opcode.
    pub iocs: [u32; 256],
}

impl Default for CommandsSupportedAndEffects {
    fn default() -> Self {
        CommandsSupportedAndEffects { acs: [0; 256], iocs: [0; 256] }
    }
}

impl CommandsSupportedAndEffects {
    /// Bit 0: Command Supported (CSUPP).
    pub const CSUPP: u32 = 1 << 0;
    /// Bit 1: Logical Block Content Change (LBCC).
    pub const LBCC: u32 = 1 << 1;
    /// Bit 2: Namespace Capability Change (NCC).
    pub const NCC: u32 = 1 << 2;
    /// Bit 3: Namespace Inventory Change (NIC).
    pub const NIC: u32 = 1 << 3;
    /// Bit 4: Controller Capability Change (CCC).
    pub const CCC: u32 = 1 << 4;
    /// Bits 18:16: Command Submission and Execution (CSE).
    pub const CSE_MASK: u32 = 0x7 << 16;
    /// Shift of the CSE field.
    pub const CSE_SHIFT: u32 = 16;
    /// CSE 0: no restriction.
    pub const CSE_NO_RESTRICTION: u8 = 0;
    /// CSE 1: no other command to the same namespace while this one is outstanding.
    pub const CSE_SAME_NAMESPACE: u8 = 1;
    /// CSE 2: no other command to any namespace while this one is outstanding.
    pub const CSE_ANY_NAMESPACE: u8 = 2;
    /// Bit 19: UUID Selection Supported (USS).
    pub const USS: u32 = 1 << 19;

    /// The CSE field (bits 18:16) of an effects dword.
    pub fn cse(effects: u32) -> u8 {
        // Masked to 3 bits.
        ((effects & Self::CSE_MASK) >> Self::CSE_SHIFT).to_le_bytes()[0]
    }

    /// `flags` with the CSE field set to `cse` (only its low 3 bits are used).
    pub fn with_cse(flags: u32, cse: u8) -> u32 {
        (flags & !Self::CSE_MASK) | ((u32::from(cse) << Self::CSE_SHIFT) & Self::CSE_MASK)
    }

    /// The effects dword of admin `opcode`.
    pub fn admin(&self, opcode: u8) -> u32 {
        self.acs[usize::from(opcode)]
    }

    /// Set the effects dword of admin `opcode`.
    pub fn set_admin(&mut self, opcode: u8, effects: u32) {
        self.acs[usize::from(opcode)] = effects;
    }

    /// The effects dword of I/O `opcode`.
    pub fn io(&self, opcode: u8) -> u32 {
        self.iocs[usize::from(opcode)]
    }

    /// Set the effects dword of I/O `opcode`.
    pub fn set_io(&mut self, opcode: u8, effects: u32) {
        self.iocs[usize::from(opcode)] = effects;
    }

    /// Encode into the first 4096 bytes of `buf` (reserved bytes zeroed).
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<COMMANDS_SUPPORTED_AND_EFFECTS_SIZE>(buf, EFFECTS)?;
        b.fill(0);
        for (chunk, v) in b.chunks_exact_mut(4).zip(self.acs.iter().chain(self.iocs.iter())) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }

    /// The log as 4096 bytes.
    pub fn to_bytes(&self) -> [u8; COMMANDS_SUPPORTED_AND_EFFECTS_SIZE] {
        let mut b = [0u8; COMMANDS_SUPPORTED_AND_EFFECTS_SIZE];
        // A 4096-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }

    /// Parse the first 4096 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<COMMANDS_SUPPORTED_AND_EFFECTS_SIZE>(buf, EFFECTS)?;
        let mut log = Self::default();
        for (i, v) in log.acs.iter_mut().chain(log.iocs.iter_mut()).enumerate() {
            *v = le32(b, 4 * i);
        }
        Ok(log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::opcode;

    use proptest::prelude::*;

    #[test]
    fn commands_supported_and_effects_layout() {
        // Linux struct nvme_effects_log: acs[256] then iocs[256]; NVME_CMD_EFFECTS_CSE_MASK GENMASK(18, 16).
        let mut log = CommandsSupportedAndEffects::default();
        log.set_admin(opcode::admin::IDENTIFY, CommandsSupportedAndEffects::CSUPP);
        log.set_admin(0xff, 0xa1b2_c3d4);
        log.set_io(
            opcode::io::WRITE,
            CommandsSupportedAndEffects::with_cse(
                CommandsSupportedAndEffects::CSUPP | CommandsSupportedAndEffects::LBCC,
                CommandsSupportedAndEffects::CSE_SAME_NAMESPACE,
            ),
        );
        let b = log.to_bytes();
        assert_eq!(le32(&b, 4 * 0x06), 1);
        assert_eq!(le32(&b, 1020), 0xa1b2_c3d4);
        assert_eq!(le32(&b, 1024 + 4), 0x0001_0003);
        assert!(b[2048..].iter().all(|&c| c == 0));
        let back = CommandsSupportedAndEffects::parse(&b).unwrap();
        assert_eq!(back, log);
        assert_eq!(CommandsSupportedAndEffects::cse(back.io(opcode::io::WRITE)), 1);
        assert_eq!(back.admin(opcode::admin::IDENTIFY), CommandsSupportedAndEffects::CSUPP);
        assert_eq!(back.io(opcode::io::READ), 0);
        assert_eq!(
            [
                CommandsSupportedAndEffects::LBCC,
                CommandsSupportedAndEffects::NCC,
                CommandsSupportedAndEffects::NIC,
                CommandsSupportedAndEffects::CCC
            ],
            [2, 4, 8, 16]
        );
        assert!(CommandsSupportedAndEffects::parse(&b[..4095]).is_err());
    }

    proptest! {
        #[test]
        fn effects_round_trip(bytes in proptest::collection::vec(any::<u8>(), 4096)) {
            let log = CommandsSupportedAndEffects::parse(&bytes).unwrap();
            prop_assert_eq!(&log.to_bytes()[..2048], &bytes[..2048]);
            prop_assert_eq!(CommandsSupportedAndEffects::parse(&log.to_bytes()).unwrap(), log);
        }
    }
}
