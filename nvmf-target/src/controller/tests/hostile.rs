//! Arbitrary SQEs and in-capsule data on connected admin and I/O queues: the controller answers every one
//! (or holds it, for AERs) and never panics.

use super::*;
use proptest::prelude::*;

fn run_arbitrary(host: &mut Host, engine: &mut IoEngine, bytes: &[u8], in_capsule: &[u8]) -> bool {
    let sqe = SubmissionQueueEntry::parse(bytes).unwrap();
    let Ok(step) = host.queue.command(engine, &sqe, in_capsule) else { return false };
    let host_data = vec![0xA5u8; 1 << 20];
    let _ = host.drive(engine, step, &host_data);
    true
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn arbitrary_commands_never_panic(
        commands in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 64), proptest::collection::vec(any::<u8>(), 0..2048), any::<bool>()),
            1..24,
        ),
    ) {
        let mut a = associate(target());
        for (mut bytes, data, on_admin) in commands {
            // Steer most commands towards real opcodes, NSIDs and data pointers so that they get past the
            // first checks; the rest stays arbitrary.
            let pick = bytes[63];
            if pick & 0x80 == 0 {
                const OPCODES: [u8; 15] =
                    [0x02, 0x06, 0x09, 0x0A, 0x0C, 0x18, 0x08, 0x7F, 0x00, 0x01, 0x02, 0x05, 0x08, 0x09, 0x7F];
                bytes[0] = OPCODES[usize::from(pick) % OPCODES.len()];
                bytes[1] = 0x40;
                if bytes[0] == 0x7F {
                    bytes[4] = [0x00, 0x01, 0x04, 0x08, 0x05][usize::from(bytes[5]) % 5];
                } else if pick & 0x40 == 0 {
                    let nsid: u32 = [0, 1, 2, 0xFFFF_FFFF][usize::from(bytes[5]) % 4];
                    bytes[4..8].copy_from_slice(&nsid.to_le_bytes());
                }
                let len = u32::from(u16::from_le_bytes([bytes[9], bytes[10]])) * 4;
                let sgl = if pick & 0x20 == 0 {
                    transport_data(len)
                } else {
                    SglDescriptor::DataBlock {
                        address: u64::from(bytes[11] & 0x3),
                        length: u32::try_from(data.len()).unwrap(),
                        subtype: SglSubtype::Offset,
                    }
                };
                bytes[24..40].copy_from_slice(&sgl.to_bytes().unwrap());
                // Small transfers: NLB and NR from one byte.
                if bytes[0] != 0x7F && bytes[0] != 0x06 && bytes[0] != 0x02 {
                    let nlb = u16::from(bytes[12] & 0x7);
                    bytes[48..50].copy_from_slice(&nlb.to_le_bytes());
                }
            }
            let host = if on_admin { &mut a.admin } else { &mut a.io };
            if !run_arbitrary(host, &mut a.engine, &bytes, &data) {
                break;
            }
        }
    }
}
