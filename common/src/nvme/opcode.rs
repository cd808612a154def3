//! Command opcodes (NVMe Base 2.0 Figure 28 admin, NVM Command Set 1.0 Figure 16 I/O, NVMe-oF 1.1
//! Figure 9 fabrics command types).

/// Admin command opcodes.
pub mod admin {
    /// Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Abort.
    pub const ABORT: u8 = 0x08;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0A;
    /// Asynchronous Event Request.
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    /// Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
}

/// NVM command set I/O opcodes.
pub mod io {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Compare.
    pub const COMPARE: u8 = 0x05;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management.
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    /// Reservation Register.
    pub const RESERVATION_REGISTER: u8 = 0x0D;
    /// Reservation Report.
    pub const RESERVATION_REPORT: u8 = 0x0E;
    /// Reservation Acquire.
    pub const RESERVATION_ACQUIRE: u8 = 0x11;
    /// Reservation Release.
    pub const RESERVATION_RELEASE: u8 = 0x15;
}

/// The opcode every fabrics command uses; the command type is in `fctype` (byte 4).
pub const FABRICS: u8 = 0x7F;

/// Fabrics command types (`fctype`, byte 4 of a fabrics SQE).
pub mod fctype {
    /// Property Set.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect.
    pub const CONNECT: u8 = 0x01;
    /// Property Get.
    pub const PROPERTY_GET: u8 = 0x04;
    /// Authentication Send.
    pub const AUTHENTICATION_SEND: u8 = 0x05;
    /// Authentication Receive.
    pub const AUTHENTICATION_RECEIVE: u8 = 0x06;
    /// Disconnect.
    pub const DISCONNECT: u8 = 0x08;
}

/// Data transfer direction encoded in an opcode's two low bits (NVMe Base 2.0 Figure 27).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataTransfer {
    /// No data.
    None,
    /// Host to controller.
    HostToController,
    /// Controller to host.
    ControllerToHost,
    /// Both directions (vendor specific use only).
    Bidirectional,
}

impl DataTransfer {
    /// The direction the opcode's bits 1:0 declare. For fabrics commands (opcode 0x7F) the direction is
    /// in `fctype` instead; pass that.
    pub fn of(opcode: u8) -> Self {
        match opcode & 0b11 {
            0b00 => DataTransfer::None,
            0b01 => DataTransfer::HostToController,
            0b10 => DataTransfer::ControllerToHost,
            _ => DataTransfer::Bidirectional,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direction_follows_low_bits() {
        assert_eq!(DataTransfer::of(io::WRITE), DataTransfer::HostToController);
        assert_eq!(DataTransfer::of(io::READ), DataTransfer::ControllerToHost);
        assert_eq!(DataTransfer::of(io::FLUSH), DataTransfer::None);
        assert_eq!(DataTransfer::of(admin::IDENTIFY), DataTransfer::ControllerToHost);
        assert_eq!(DataTransfer::of(admin::SET_FEATURES), DataTransfer::HostToController);
        assert_eq!(DataTransfer::of(fctype::CONNECT), DataTransfer::HostToController);
        assert_eq!(DataTransfer::of(fctype::PROPERTY_GET), DataTransfer::None);
    }
}
