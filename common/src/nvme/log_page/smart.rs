//! The SMART / Health Information log page (LID 02h; Base 2.0 Figure 207, Linux `struct nvme_smart_log`).

use crate::wire::{fixed, fixed_mut, le128, le16, le32, put128, put16, put32, WireError};

const SMART: &str = "SmartLog";

/// Size of the SMART / Health Information log.
pub const SMART_LOG_SIZE: usize = 512;

/// SMART / Health Information log (Base 2.0 Figure 207, Linux `struct nvme_smart_log`), 512 bytes.
/// Temperatures are in Kelvin; the 16-byte counters are little-endian `u128`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SmartLog {
    /// Critical Warning (byte 0), see `CRITICAL_WARNING_*`.
    pub critical_warning: u8,
    /// Composite Temperature in Kelvin (bytes 2:1).
    pub composite_temperature: u16,
    /// Available Spare, percent (byte 3).
    pub available_spare: u8,
    /// Available Spare Threshold, percent (byte 4).
    pub available_spare_threshold: u8,
    /// Percentage Used (byte 5).
    pub percentage_used: u8,
    /// Endurance Group Critical Warning Summary (byte 6).
    pub endurance_group_critical_warning_summary: u8,
    /// Data Units Read, in thousands of 512-byte units (bytes 47:32).
    pub data_units_read: u128,
    /// Data Units Written, in thousands of 512-byte units (bytes 63:48).
    pub data_units_written: u128,
    /// Host Read Commands (bytes 79:64).
    pub host_read_commands: u128,
    /// Host Write Commands (bytes 95:80).
    pub host_write_commands: u128,
    /// Controller Busy Time in minutes (bytes 111:96).
    pub controller_busy_time: u128,
    /// Power Cycles (bytes 127:112).
    pub power_cycles: u128,
    /// Power On Hours (bytes 143:128).
    pub power_on_hours: u128,
    /// Unsafe Shutdowns (bytes 159:144).
    pub unsafe_shutdowns: u128,
    /// Media and Data Integrity Errors (bytes 175:160).
    pub media_errors: u128,
    /// Number of Error Information Log Entries (bytes 191:176).
    pub number_of_error_log_entries: u128,
    /// Warning Composite Temperature Time in minutes (bytes 195:192).
    pub warning_temperature_time: u32,
    /// Critical Composite Temperature Time in minutes (bytes 199:196).
    pub critical_temperature_time: u32,
    /// Temperature Sensors 1–8 in Kelvin (bytes 215:200); 0 = not implemented.
    pub temperature_sensors: [u16; 8],
    /// Thermal Management Temperature 1 Transition Count (bytes 219:216).
    pub thermal_management_1_transitions: u32,
    /// Thermal Management Temperature 2 Transition Count (bytes 223:220).
    pub thermal_management_2_transitions: u32,
    /// Total Time For Thermal Management Temperature 1 in seconds (bytes 227:224).
    pub thermal_management_1_time: u32,
    /// Total Time For Thermal Management Temperature 2 in seconds (bytes 231:228).
    pub thermal_management_2_time: u32,
}

impl SmartLog {
    /// Critical Warning bit 0: available spare below threshold.
    pub const CRITICAL_WARNING_SPARE: u8 = 1 << 0;
    /// Critical Warning bit 1: temperature beyond a threshold.
    pub const CRITICAL_WARNING_TEMPERATURE: u8 = 1 << 1;
    /// Critical Warning bit 2: NVM subsystem reliability degraded.
    pub const CRITICAL_WARNING_RELIABILITY: u8 = 1 << 2;
    /// Critical Warning bit 3: media placed in read-only mode.
    pub const CRITICAL_WARNING_READ_ONLY: u8 = 1 << 3;
    /// Critical Warning bit 4: volatile memory backup device failed.
    pub const CRITICAL_WARNING_VOLATILE_MEMORY_BACKUP: u8 = 1 << 4;
    /// Critical Warning bit 5: Persistent Memory Region read-only or unreliable.
    pub const CRITICAL_WARNING_PMR_READ_ONLY: u8 = 1 << 5;

    /// Encode into the first 512 bytes of `buf` (reserved bytes zeroed).
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let b = fixed_mut::<SMART_LOG_SIZE>(buf, SMART)?;
        b.fill(0);
        b[0] = self.critical_warning;
        put16(b, 1, self.composite_temperature);
        b[3] = self.available_spare;
        b[4] = self.available_spare_threshold;
        b[5] = self.percentage_used;
        b[6] = self.endurance_group_critical_warning_summary;
        for (i, v) in self.counters().into_iter().enumerate() {
            put128(b, 32 + 16 * i, v);
        }
        put32(b, 192, self.warning_temperature_time);
        put32(b, 196, self.critical_temperature_time);
        for (i, t) in self.temperature_sensors.iter().enumerate() {
            put16(b, 200 + 2 * i, *t);
        }
        put32(b, 216, self.thermal_management_1_transitions);
        put32(b, 220, self.thermal_management_2_transitions);
        put32(b, 224, self.thermal_management_1_time);
        put32(b, 228, self.thermal_management_2_time);
        Ok(())
    }

    /// The log as 512 bytes.
    pub fn to_bytes(&self) -> [u8; SMART_LOG_SIZE] {
        let mut b = [0u8; SMART_LOG_SIZE];
        // A 512-byte array always fits.
        let _ = self.encode(&mut b);
        b
    }

    /// Parse the first 512 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = fixed::<SMART_LOG_SIZE>(buf, SMART)?;
        let counter = |i: usize| le128(b, 32 + 16 * i);
        let mut temperature_sensors = [0u16; 8];
        for (i, t) in temperature_sensors.iter_mut().enumerate() {
            *t = le16(b, 200 + 2 * i);
        }
        Ok(SmartLog {
            critical_warning: b[0],
            composite_temperature: le16(b, 1),
            available_spare: b[3],
            available_spare_threshold: b[4],
            percentage_used: b[5],
            endurance_group_critical_warning_summary: b[6],
            data_units_read: counter(0),
            data_units_written: counter(1),
            host_read_commands: counter(2),
            host_write_commands: counter(3),
            controller_busy_time: counter(4),
            power_cycles: counter(5),
            power_on_hours: counter(6),
            unsafe_shutdowns: counter(7),
            media_errors: counter(8),
            number_of_error_log_entries: counter(9),
            warning_temperature_time: le32(b, 192),
            critical_temperature_time: le32(b, 196),
            temperature_sensors,
            thermal_management_1_transitions: le32(b, 216),
            thermal_management_2_transitions: le32(b, 220),
            thermal_management_1_time: le32(b, 224),
            thermal_management_2_time: le32(b, 228),
        })
    }

    /// The ten 16-byte counters in wire order (bytes 32..192).
    fn counters(&self) -> [u128; 10] {
        [
            self.data_units_read,
            self.data_units_written,
            self.host_read_commands,
            self.host_write_commands,
            self.controller_busy_time,
            self.power_cycles,
            self.power_on_hours,
            self.unsafe_shutdowns,
            self.media_errors,
            self.number_of_error_log_entries,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    #[test]
    fn smart_log_layout() {
        // Linux struct nvme_smart_log: counters from byte 32, warning_temp_time @192, temp_sensor @200.
        let mut s = SmartLog {
            critical_warning: SmartLog::CRITICAL_WARNING_TEMPERATURE,
            composite_temperature: 0x0201,
            available_spare: 3,
            available_spare_threshold: 4,
            percentage_used: 5,
            endurance_group_critical_warning_summary: 6,
            warning_temperature_time: 0xc3c2_c1c0,
            critical_temperature_time: 0xc7c6_c5c4,
            thermal_management_1_transitions: 0xdbda_d9d8,
            thermal_management_2_transitions: 0xdfde_dddc,
            thermal_management_1_time: 0xe3e2_e1e0,
            thermal_management_2_time: 0xe7e6_e5e4,
            ..Default::default()
        };
        for (i, t) in s.temperature_sensors.iter_mut().enumerate() {
            *t = 0xc9c8 + 0x0202 * u16::try_from(i).unwrap();
        }
        let counter = |first: u8| u128::from_le_bytes(std::array::from_fn(|k| first + u8::try_from(k).unwrap()));
        s.data_units_read = counter(0x20);
        s.data_units_written = counter(0x30);
        s.host_read_commands = counter(0x40);
        s.host_write_commands = counter(0x50);
        s.controller_busy_time = counter(0x60);
        s.power_cycles = counter(0x70);
        s.power_on_hours = counter(0x80);
        s.unsafe_shutdowns = counter(0x90);
        s.media_errors = counter(0xa0);
        s.number_of_error_log_entries = counter(0xb0);
        let b = s.to_bytes();
        assert_eq!(&b[..7], &[2, 1, 2, 3, 4, 5, 6]);
        assert!(b[7..32].iter().all(|&c| c == 0));
        // Each byte of 32..232 equals its own offset (the values above were chosen that way).
        for (off, &byte) in b.iter().enumerate().take(232).skip(32) {
            assert_eq!(usize::from(byte), off, "byte {off}");
        }
        assert!(b[232..].iter().all(|&c| c == 0));
        assert_eq!(SmartLog::parse(&b).unwrap(), s);
        assert!(SmartLog::parse(&b[..511]).is_err());
        assert!(s.encode(&mut [0u8; 511]).is_err());
    }

    proptest! {
        #[test]
        fn smart_round_trip(bytes in proptest::collection::vec(any::<u8>(), 500..520)) {
            if let Ok(s) = SmartLog::parse(&bytes) {
                prop_assert_eq!(SmartLog::parse(&s.to_bytes()).unwrap(), s);
                prop_assert_eq!(&s.to_bytes()[32..232], &bytes[32..232]);
            }
        }
    }
}
