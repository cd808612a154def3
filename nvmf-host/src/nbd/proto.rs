//! The NBD wire format (fixed newstyle handshake, simple replies): magic numbers, option and command codes,
//! the parsers for what a client sends and the encoders for what the server answers.
//!
//! Pure functions over byte slices: no I/O, no allocation except the option replies of the handshake. Every
//! length and offset a client sends is checked here ([`check_request`]) before anything is submitted. It uses
//! nothing of the crate but [`BlockOp`]: the NBD fuzz target compiles the two files in.

use crate::block::BlockOp;

/// `NBDMAGIC`: the first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: after `NBDMAGIC`, and before every option the client sends.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of every transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

/// Bytes of a transmission request header.
pub const REQUEST_LEN: usize = 28;
/// Bytes of a simple reply header.
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Bytes of an option header after `IHAVEOPT` (option, length).
pub const OPTION_HEADER_LEN: usize = 16;

/// Handshake flags (server, 16 bits).
pub mod handshake {
    /// `NBD_FLAG_FIXED_NEWSTYLE`.
    pub const FIXED_NEWSTYLE: u16 = 1 << 0;
    /// `NBD_FLAG_NO_ZEROES`.
    pub const NO_ZEROES: u16 = 1 << 1;
}

/// Client flags (32 bits).
pub mod client {
    /// `NBD_FLAG_C_FIXED_NEWSTYLE`.
    pub const FIXED_NEWSTYLE: u32 = 1 << 0;
    /// `NBD_FLAG_C_NO_ZEROES`.
    pub const NO_ZEROES: u32 = 1 << 1;
}

/// Transmission flags (16 bits).
pub mod transmission {
    /// `NBD_FLAG_HAS_FLAGS`: always set.
    pub const HAS_FLAGS: u16 = 1 << 0;
    /// `NBD_FLAG_READ_ONLY`.
    pub const READ_ONLY: u16 = 1 << 1;
    /// `NBD_FLAG_SEND_FLUSH`.
    pub const SEND_FLUSH: u16 = 1 << 2;
    /// `NBD_FLAG_SEND_FUA`.
    pub const SEND_FUA: u16 = 1 << 3;
    /// `NBD_FLAG_SEND_TRIM`.
    pub const SEND_TRIM: u16 = 1 << 5;
    /// `NBD_FLAG_SEND_WRITE_ZEROES`.
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    /// `NBD_FLAG_CAN_MULTI_CONN`.
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
}

/// Option codes.
pub mod opt {
    /// `NBD_OPT_EXPORT_NAME`.
    pub const EXPORT_NAME: u32 = 1;
    /// `NBD_OPT_ABORT`.
    pub const ABORT: u32 = 2;
    /// `NBD_OPT_LIST`.
    pub const LIST: u32 = 3;
    /// `NBD_OPT_INFO`.
    pub const INFO: u32 = 6;
    /// `NBD_OPT_GO`.
    pub const GO: u32 = 7;
    /// `NBD_OPT_STRUCTURED_REPLY` (refused: simple replies only).
    pub const STRUCTURED_REPLY: u32 = 8;
}

/// Option reply types.
pub mod rep {
    /// `NBD_REP_ACK`.
    pub const ACK: u32 = 1;
    /// `NBD_REP_SERVER`.
    pub const SERVER: u32 = 2;
    /// `NBD_REP_INFO`.
    pub const INFO: u32 = 3;
    /// `NBD_REP_ERR_UNSUP`.
    pub const ERR_UNSUP: u32 = (1 << 31) + 1;
    /// `NBD_REP_ERR_INVALID`.
    pub const ERR_INVALID: u32 = (1 << 31) + 3;
    /// `NBD_REP_ERR_UNKNOWN`.
    pub const ERR_UNKNOWN: u32 = (1 << 31) + 6;
    /// `NBD_REP_ERR_TOO_BIG`.
    pub const ERR_TOO_BIG: u32 = (1 << 31) + 9;
}

/// Information types of `NBD_REP_INFO`.
pub mod info {
    /// `NBD_INFO_EXPORT`: size and transmission flags.
    pub const EXPORT: u16 = 0;
    /// `NBD_INFO_NAME`.
    pub const NAME: u16 = 1;
    /// `NBD_INFO_BLOCK_SIZE`: minimum, preferred, maximum payload.
    pub const BLOCK_SIZE: u16 = 3;
}

/// Command types.
pub mod cmd {
    /// `NBD_CMD_READ`.
    pub const READ: u16 = 0;
    /// `NBD_CMD_WRITE`.
    pub const WRITE: u16 = 1;
    /// `NBD_CMD_DISC`.
    pub const DISC: u16 = 2;
    /// `NBD_CMD_FLUSH`.
    pub const FLUSH: u16 = 3;
    /// `NBD_CMD_TRIM`.
    pub const TRIM: u16 = 4;
    /// `NBD_CMD_WRITE_ZEROES`.
    pub const WRITE_ZEROES: u16 = 6;
}

/// Command flags.
pub mod cmd_flag {
    /// `NBD_CMD_FLAG_FUA`: valid on every command once `SEND_FUA` is advertised.
    pub const FUA: u16 = 1 << 0;
    /// `NBD_CMD_FLAG_NO_HOLE`: Write Zeroes only.
    pub const NO_HOLE: u16 = 1 << 1;
}

/// NBD error values (the `error` field of a reply).
pub mod errno {
    /// `NBD_EPERM`: write to a read-only export.
    pub const EPERM: u32 = 1;
    /// `NBD_EIO`: the NVMe command failed.
    pub const EIO: u32 = 5;
    /// `NBD_EINVAL`: unaligned, out of range (read/trim), too long, unknown command or flag.
    pub const EINVAL: u32 = 22;
    /// `NBD_ENOSPC`: write or write zeroes beyond the end.
    pub const ENOSPC: u32 = 28;
}

/// A client message that breaks the protocol so that the session cannot go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// A magic number is wrong: the stream is out of step.
    #[error("bad {what} magic {got:#x}")]
    BadMagic {
        /// Which magic.
        what: &'static str,
        /// What arrived.
        got: u64,
    },
    /// The client set flags this server does not know or did not advertise.
    #[error("unknown client flags {0:#x}")]
    ClientFlags(u32),
}

fn be_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

/// The server's greeting: `NBDMAGIC`, `IHAVEOPT`, handshake flags (fixed newstyle, no zeroes).
pub fn greeting() -> [u8; 18] {
    let mut g = [0; 18];
    g[..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    g[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    g[16..].copy_from_slice(&(handshake::FIXED_NEWSTYLE | handshake::NO_ZEROES).to_be_bytes());
    g
}

/// The client flags; whether the client asked for no zeroes after `NBD_OPT_EXPORT_NAME`.
pub fn parse_client_flags(b: [u8; 4]) -> Result<bool, ProtoError> {
    let flags = u32::from_be_bytes(b);
    if flags & !(client::FIXED_NEWSTYLE | client::NO_ZEROES) != 0 {
        return Err(ProtoError::ClientFlags(flags));
    }
    Ok(flags & client::NO_ZEROES != 0)
}

/// An option header: which option and how many data bytes follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    /// The option code.
    pub option: u32,
    /// Bytes of option data that follow.
    pub length: u32,
}

/// Parse `IHAVEOPT`, option, length.
pub fn parse_option_header(b: &[u8; OPTION_HEADER_LEN]) -> Result<OptionHeader, ProtoError> {
    let magic = be_u64(b, 0);
    if magic != IHAVEOPT {
        return Err(ProtoError::BadMagic { what: "option", got: magic });
    }
    Ok(OptionHeader { option: be_u32(b, 8), length: be_u32(b, 12) })
}

/// The data of `NBD_OPT_INFO` / `NBD_OPT_GO`: export name and the information types asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest<'a> {
    /// The export name (bytes as sent).
    pub name: &'a [u8],
    /// Information types requested.
    pub requests: Vec<u16>,
}

/// Parse `NBD_OPT_INFO`/`NBD_OPT_GO` data; `None` if the lengths inside do not add up.
pub fn parse_info_request(data: &[u8]) -> Option<InfoRequest<'_>> {
    let name_len = usize::try_from(u32::from_be_bytes(data.get(..4)?.try_into().ok()?)).ok()?;
    let name = data.get(4..4usize.checked_add(name_len)?)?;
    let rest = &data[4 + name_len..];
    let count = usize::from(u16::from_be_bytes(rest.get(..2)?.try_into().ok()?));
    let list = rest.get(2..)?;
    if list.len() != count * 2 {
        return None;
    }
    Some(InfoRequest { name, requests: list.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect() })
}

/// An option reply: magic, option, reply type, length, data.
pub fn option_reply(option: u32, reply: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(20 + data.len());
    v.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&reply.to_be_bytes());
    // Handshake replies are short (names ≤ 4096 bytes, fixed-size info): the length always fits.
    v.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// `NBD_INFO_EXPORT` payload: type, size, transmission flags.
pub fn info_export(size: u64, flags: u16) -> [u8; 12] {
    let mut b = [0; 12];
    b[..2].copy_from_slice(&info::EXPORT.to_be_bytes());
    b[2..10].copy_from_slice(&size.to_be_bytes());
    b[10..].copy_from_slice(&flags.to_be_bytes());
    b
}

/// `NBD_INFO_BLOCK_SIZE` payload: type, minimum, preferred, maximum payload.
pub fn info_block_size(minimum: u32, preferred: u32, maximum: u32) -> [u8; 14] {
    let mut b = [0; 14];
    b[..2].copy_from_slice(&info::BLOCK_SIZE.to_be_bytes());
    b[2..6].copy_from_slice(&minimum.to_be_bytes());
    b[6..10].copy_from_slice(&preferred.to_be_bytes());
    b[10..].copy_from_slice(&maximum.to_be_bytes());
    b
}

/// `NBD_REP_SERVER` payload for `NBD_OPT_LIST`: name length and name.
pub fn rep_server(name: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + name.len());
    v.extend_from_slice(&u32::try_from(name.len()).unwrap_or(u32::MAX).to_be_bytes());
    v.extend_from_slice(name.as_bytes());
    v
}

/// A transmission request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Command flags.
    pub flags: u16,
    /// Command type.
    pub command: u16,
    /// The client's cookie (handle), echoed in the reply.
    pub cookie: u64,
    /// Byte offset.
    pub offset: u64,
    /// Byte length.
    pub length: u32,
}

impl RequestHeader {
    /// Parse the 28-byte header; a wrong magic means the stream is out of step.
    pub fn parse(b: &[u8; REQUEST_LEN]) -> Result<Self, ProtoError> {
        let magic = be_u32(b, 0);
        if magic != REQUEST_MAGIC {
            return Err(ProtoError::BadMagic { what: "request", got: u64::from(magic) });
        }
        Ok(RequestHeader {
            flags: be_u16(b, 4),
            command: be_u16(b, 6),
            cookie: be_u64(b, 8),
            offset: be_u64(b, 16),
            length: be_u32(b, 24),
        })
    }

    /// Bytes of data that follow the header (writes only).
    pub fn payload_len(&self) -> u32 {
        if self.command == cmd::WRITE {
            self.length
        } else {
            0
        }
    }
}

/// A simple reply header.
pub fn simple_reply(error: u32, cookie: u64) -> [u8; SIMPLE_REPLY_LEN] {
    let mut b = [0; SIMPLE_REPLY_LEN];
    b[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// What the export is and supports: the bounds every request is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// The namespace's logical block size (the advertised minimum block size).
    pub block_size: u32,
    /// Size in logical blocks.
    pub blocks: u64,
    /// Largest read or write payload accepted.
    pub max_payload: u32,
    /// Writes, trims and write zeroes fail with `EPERM`.
    pub read_only: bool,
    /// The controller supports Dataset Management (trim).
    pub trim: bool,
    /// The controller supports Write Zeroes.
    pub write_zeroes: bool,
}

impl Geometry {
    /// The export size in bytes.
    pub fn size(&self) -> u64 {
        self.blocks.saturating_mul(u64::from(self.block_size))
    }

    /// Transmission flags to advertise.
    pub fn transmission_flags(&self) -> u16 {
        use transmission::*;
        // One controller (and namespace) behind every connection: a Flush covers writes completed on any
        // of them, so multi-conn is safe.
        let mut f = HAS_FLAGS | SEND_FLUSH | SEND_FUA | CAN_MULTI_CONN;
        if self.read_only {
            f |= READ_ONLY;
        }
        if self.trim {
            f |= SEND_TRIM;
        }
        if self.write_zeroes {
            f |= SEND_WRITE_ZEROES;
        }
        f
    }

    /// The byte range as whole blocks `(slba, blocks)`, or the error for a range that is unaligned or
    /// (with `past_end`) beyond the end.
    fn blocks_of(&self, offset: u64, length: u32, past_end: u32) -> Result<(u64, u64), u32> {
        let bs = u64::from(self.block_size);
        let len = u64::from(length);
        if offset % bs != 0 || len % bs != 0 {
            return Err(errno::EINVAL);
        }
        let (slba, blocks) = (offset / bs, len / bs);
        if slba.checked_add(blocks).is_none_or(|end| end > self.blocks) {
            return Err(past_end);
        }
        Ok((slba, blocks))
    }
}

/// What a valid request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A zero-length read, write, trim or write zeroes: succeed without touching the namespace.
    Nothing,
    /// An operation on the namespace, in logical blocks.
    Block(BlockOp),
    /// `NBD_CMD_DISC`: finish what is in flight, then close.
    Disconnect,
}

/// Check a request against the export and say what it asks for, or the NBD error to answer it with (the
/// spec's choices: `EINVAL` for unaligned, oversized, unknown or out-of-range reads and trims, `ENOSPC` for
/// writes past the end, `EPERM` for writes to a read-only export).
pub fn check_request(h: &RequestHeader, g: &Geometry) -> Result<Action, u32> {
    use cmd_flag::{FUA, NO_HOLE};
    let allowed = match h.command {
        cmd::WRITE_ZEROES => FUA | NO_HOLE,
        cmd::READ | cmd::WRITE | cmd::FLUSH | cmd::TRIM => FUA,
        cmd::DISC => return Ok(Action::Disconnect),
        _ => return Err(errno::EINVAL),
    };
    if h.flags & !allowed != 0 {
        return Err(errno::EINVAL);
    }
    let fua = h.flags & FUA != 0;
    let writes = matches!(h.command, cmd::WRITE | cmd::TRIM | cmd::WRITE_ZEROES);
    if writes && g.read_only {
        return Err(errno::EPERM);
    }
    if (h.command == cmd::READ || h.command == cmd::WRITE) && h.length > g.max_payload {
        return Err(errno::EINVAL);
    }
    match h.command {
        cmd::FLUSH if h.offset != 0 || h.length != 0 => Err(errno::EINVAL),
        cmd::FLUSH => Ok(Action::Block(BlockOp::Flush)),
        cmd::TRIM if !g.trim => Err(errno::EINVAL),
        cmd::WRITE_ZEROES if !g.write_zeroes => Err(errno::EINVAL),
        command => {
            let past_end = if command == cmd::READ || command == cmd::TRIM { errno::EINVAL } else { errno::ENOSPC };
            let (slba, blocks) = g.blocks_of(h.offset, h.length, past_end)?;
            if blocks == 0 {
                return Ok(Action::Nothing);
            }
            Ok(Action::Block(match command {
                cmd::READ => BlockOp::Read { slba, blocks },
                cmd::WRITE => BlockOp::Write { slba, blocks, fua },
                cmd::TRIM => BlockOp::Deallocate { slba, blocks, fua },
                _ => BlockOp::WriteZeroes { slba, blocks, fua, deallocate: h.flags & NO_HOLE == 0 },
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(command: u16, flags: u16, offset: u64, length: u32) -> RequestHeader {
        RequestHeader { flags, command, cookie: 7, offset, length }
    }

    fn geometry() -> Geometry {
        Geometry {
            block_size: 512,
            blocks: 2048,
            max_payload: 1 << 20,
            read_only: false,
            trim: true,
            write_zeroes: true,
        }
    }

    #[test]
    fn greeting_is_nbdmagic_ihaveopt_and_fixed_newstyle_no_zeroes() {
        let g = greeting();
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(&g[16..], &[0, 3]);
    }

    #[test]
    fn client_flags_known_bits_only() {
        assert_eq!(parse_client_flags([0, 0, 0, 1]), Ok(false));
        assert_eq!(parse_client_flags([0, 0, 0, 3]), Ok(true));
        assert_eq!(parse_client_flags([0, 0, 0, 4]), Err(ProtoError::ClientFlags(4)));
        assert_eq!(parse_client_flags([0x80, 0, 0, 1]), Err(ProtoError::ClientFlags(0x8000_0001)));
    }

    #[test]
    fn option_header_needs_ihaveopt() {
        let mut b = [0u8; OPTION_HEADER_LEN];
        b[..8].copy_from_slice(b"IHAVEOPT");
        b[8..12].copy_from_slice(&opt::GO.to_be_bytes());
        b[12..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(parse_option_header(&b), Ok(OptionHeader { option: opt::GO, length: u32::MAX }));
        b[0] = b'X';
        assert!(matches!(parse_option_header(&b), Err(ProtoError::BadMagic { what: "option", .. })));
    }

    #[test]
    fn info_request_lengths_must_add_up() {
        let mut d = Vec::new();
        d.extend_from_slice(&3u32.to_be_bytes());
        d.extend_from_slice(b"abc");
        d.extend_from_slice(&2u16.to_be_bytes());
        d.extend_from_slice(&info::BLOCK_SIZE.to_be_bytes());
        d.extend_from_slice(&info::NAME.to_be_bytes());
        let r = parse_info_request(&d).unwrap();
        assert_eq!(r.name, b"abc");
        assert_eq!(r.requests, vec![info::BLOCK_SIZE, info::NAME]);
        // Name length beyond the data, a truncated list, trailing bytes, an absurd name length.
        assert_eq!(parse_info_request(&d[..d.len() - 1]), None);
        let mut long = d.clone();
        long.push(0);
        assert_eq!(parse_info_request(&long), None);
        let mut absurd = d.clone();
        absurd[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(parse_info_request(&absurd), None);
        assert_eq!(parse_info_request(&[0, 0]), None);
        // The minimal GO: empty name, no requests.
        assert_eq!(parse_info_request(&[0, 0, 0, 0, 0, 0]).unwrap().requests, Vec::<u16>::new());
    }

    #[test]
    fn request_header_round_trip_and_bad_magic() {
        let mut b = [0u8; REQUEST_LEN];
        b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&cmd_flag::FUA.to_be_bytes());
        b[6..8].copy_from_slice(&cmd::WRITE.to_be_bytes());
        b[8..16].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
        b[16..24].copy_from_slice(&4096u64.to_be_bytes());
        b[24..].copy_from_slice(&512u32.to_be_bytes());
        let h = RequestHeader::parse(&b).unwrap();
        assert_eq!(h, RequestHeader { cookie: 0x1122_3344_5566_7788, ..request(cmd::WRITE, cmd_flag::FUA, 4096, 512) });
        assert_eq!(h.payload_len(), 512);
        assert_eq!(request(cmd::READ, 0, 0, 512).payload_len(), 0);
        b[0] ^= 1;
        assert!(matches!(RequestHeader::parse(&b), Err(ProtoError::BadMagic { what: "request", .. })));
    }

    #[test]
    fn replies_encode_big_endian() {
        let r = simple_reply(errno::EINVAL, 0xabcd);
        assert_eq!(&r[..4], &[0x67, 0x44, 0x66, 0x98]);
        assert_eq!(&r[4..8], &[0, 0, 0, 22]);
        assert_eq!(&r[8..], &0xabcdu64.to_be_bytes());
        let o = option_reply(opt::GO, rep::ACK, &[]);
        assert_eq!(o.len(), 20);
        assert_eq!(&o[..8], &[0, 3, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9]);
        let e = info_export(1 << 20, transmission::HAS_FLAGS);
        assert_eq!(&e[2..10], &(1u64 << 20).to_be_bytes());
        let bs = info_block_size(512, 4096, 1 << 25);
        assert_eq!(&bs[..2], &[0, 3]);
        assert_eq!(&bs[10..], &(1u32 << 25).to_be_bytes());
    }

    #[test]
    fn valid_requests_map_to_blocks() {
        let g = geometry();
        assert_eq!(
            check_request(&request(cmd::READ, 0, 1024, 4096), &g),
            Ok(Action::Block(BlockOp::Read { slba: 2, blocks: 8 }))
        );
        assert_eq!(
            check_request(&request(cmd::WRITE, cmd_flag::FUA, 0, 512), &g),
            Ok(Action::Block(BlockOp::Write { slba: 0, blocks: 1, fua: true }))
        );
        // The very last block.
        assert_eq!(
            check_request(&request(cmd::WRITE, 0, 2047 * 512, 512), &g),
            Ok(Action::Block(BlockOp::Write { slba: 2047, blocks: 1, fua: false }))
        );
        assert_eq!(check_request(&request(cmd::FLUSH, 0, 0, 0), &g), Ok(Action::Block(BlockOp::Flush)));
        assert_eq!(
            check_request(&request(cmd::WRITE_ZEROES, cmd_flag::NO_HOLE, 0, 1 << 20), &g),
            Ok(Action::Block(BlockOp::WriteZeroes { slba: 0, blocks: 2048, fua: false, deallocate: false }))
        );
        // Trim and write zeroes have no payload: longer than the maximum payload is fine.
        let big = Geometry { blocks: 1 << 30, ..g };
        assert_eq!(
            check_request(&request(cmd::TRIM, 0, 0, 1 << 30), &big),
            Ok(Action::Block(BlockOp::Deallocate { slba: 0, blocks: 1 << 21, fua: false }))
        );
        assert_eq!(check_request(&request(cmd::READ, 0, 512, 0), &g), Ok(Action::Nothing));
        assert_eq!(check_request(&request(cmd::DISC, 0, 0, 0), &g), Ok(Action::Disconnect));
    }

    #[test]
    fn bad_requests_get_the_spec_errors() {
        let g = geometry();
        let end = 2048 * 512;
        for (h, want) in [
            (request(cmd::READ, 0, 100, 512), errno::EINVAL),
            (request(cmd::READ, 0, 0, 100), errno::EINVAL),
            (request(cmd::WRITE, 0, 512, 513), errno::EINVAL),
            (request(cmd::READ, 0, end, 512), errno::EINVAL),
            (request(cmd::TRIM, 0, end - 512, 1024), errno::EINVAL),
            (request(cmd::WRITE, 0, end, 512), errno::ENOSPC),
            (request(cmd::WRITE_ZEROES, 0, end - 512, 1024), errno::ENOSPC),
            (request(cmd::READ, 0, u64::MAX - 511, 512), errno::EINVAL),
            (request(cmd::WRITE, 0, u64::MAX - 511, 512), errno::ENOSPC),
            (request(cmd::READ, 0, 0, u32::MAX), errno::EINVAL),
            (request(cmd::WRITE, 0, 0, (1 << 20) + 512), errno::EINVAL),
            (request(cmd::FLUSH, 0, 512, 0), errno::EINVAL),
            (request(9, 0, 0, 0), errno::EINVAL),
            (request(cmd::READ, cmd_flag::NO_HOLE, 0, 512), errno::EINVAL),
            (request(cmd::WRITE_ZEROES, 1 << 4, 0, 512), errno::EINVAL),
            (request(cmd::READ, 1 << 2, 0, 512), errno::EINVAL),
        ] {
            assert_eq!(check_request(&h, &g), Err(want), "{h:?}");
        }
        let ro = Geometry { read_only: true, ..g };
        assert_eq!(check_request(&request(cmd::WRITE, 0, 0, 512), &ro), Err(errno::EPERM));
        assert_eq!(check_request(&request(cmd::TRIM, 0, 0, 512), &ro), Err(errno::EPERM));
        assert_eq!(
            check_request(&request(cmd::READ, 0, 0, 512), &ro),
            Ok(Action::Block(BlockOp::Read { slba: 0, blocks: 1 }))
        );
        let plain = Geometry { trim: false, write_zeroes: false, ..g };
        assert_eq!(check_request(&request(cmd::TRIM, 0, 0, 512), &plain), Err(errno::EINVAL));
        assert_eq!(check_request(&request(cmd::WRITE_ZEROES, 0, 0, 512), &plain), Err(errno::EINVAL));
    }

    #[test]
    fn flags_follow_the_geometry() {
        use transmission::*;
        let g = geometry();
        assert_eq!(
            g.transmission_flags(),
            HAS_FLAGS | SEND_FLUSH | SEND_FUA | SEND_TRIM | SEND_WRITE_ZEROES | CAN_MULTI_CONN
        );
        let ro = Geometry { read_only: true, trim: false, write_zeroes: false, ..g };
        assert_eq!(ro.transmission_flags(), HAS_FLAGS | SEND_FLUSH | SEND_FUA | CAN_MULTI_CONN | READ_ONLY);
        assert_eq!(g.size(), 1 << 20);
    }
}
