//! Fuzz target: the NBD export's parsers and request check (`nvmf_host::nbd::proto`, with the `BlockOp` it
//! decodes into from `nvmf_host::block`), compiled in from their source files because the host crate pulls in the
//! RDMA build the fuzz workspace avoids. Nothing may panic, and every request the check accepts must lie inside the
//! export and within the advertised payload.
#![no_main]

#[path = "../../nvmf-host/src/block/op.rs"]
mod block;
#[expect(dead_code, reason = "only the parsers are driven here")]
#[path = "../../nvmf-host/src/nbd/proto.rs"]
mod proto;

use block::BlockOp;
use proto::{check_request, Action, Geometry, RequestHeader, OPTION_HEADER_LEN, REQUEST_LEN};

fn u32_at(d: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(d[at..at + 4].try_into().unwrap())
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(h) = data.get(..OPTION_HEADER_LEN) {
        let _ = proto::parse_option_header(h.try_into().unwrap());
    }
    let _ = proto::parse_info_request(data);
    if data.len() < REQUEST_LEN + 13 {
        return;
    }
    // The header with a valid magic, so the check always runs.
    let mut header: [u8; REQUEST_LEN] = data[..REQUEST_LEN].try_into().unwrap();
    header[..4].copy_from_slice(&proto::REQUEST_MAGIC.to_be_bytes());
    let h = RequestHeader::parse(&header).unwrap();
    let rest = &data[REQUEST_LEN..];
    let g = Geometry {
        block_size: 512 << (rest[0] % 8),
        blocks: u64::from(u32_at(rest, 1)) | (u64::from(rest[0] >> 3) << 32),
        max_payload: u32_at(rest, 5).clamp(4096, 32 << 20),
        read_only: rest[9] & 1 != 0,
        trim: rest[9] & 2 != 0,
        write_zeroes: rest[9] & 4 != 0,
    };
    let bs = u64::from(g.block_size);
    let inside = |slba: u64, blocks: u64| {
        assert!(blocks > 0);
        assert_eq!(blocks * bs, u64::from(h.length), "{h:?}");
        assert_eq!(slba * bs, h.offset, "{h:?}");
        assert!(slba + blocks <= g.blocks, "{h:?} {g:?}");
    };
    match check_request(&h, &g) {
        Ok(Action::Block(BlockOp::Read { slba, blocks })) => {
            assert!(h.length <= g.max_payload);
            inside(slba, blocks);
        }
        Ok(Action::Block(BlockOp::Write { slba, blocks, .. })) => {
            assert!(h.length <= g.max_payload && !g.read_only);
            inside(slba, blocks);
        }
        Ok(Action::Block(BlockOp::Deallocate { slba, blocks, .. })) => {
            assert!(g.trim && !g.read_only);
            inside(slba, blocks);
        }
        Ok(Action::Block(BlockOp::WriteZeroes { slba, blocks, .. })) => {
            assert!(g.write_zeroes && !g.read_only);
            inside(slba, blocks);
        }
        Ok(Action::Nothing) => assert_eq!(h.length, 0),
        Ok(Action::Block(BlockOp::Flush)) => assert_eq!((h.offset, h.length), (0, 0)),
        Ok(Action::Disconnect) | Err(_) => {}
    }
});
