//! A small blocking NVMe/TCP host for integration tests: one TCP connection = one queue, commands issued one at a
//! time, every PDU built and checked with `nvmf-common`. It does what a real host does on the wire (ICReq, in-capsule
//! data, R2T → H2CData, C2HData collection, digests) and also lets a test send raw or malformed bytes, so target
//! tests can assert statuses, TermReqs and that a broken connection leaves others running. Not for production use:
//! it allocates freely and has no reconnect logic.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use nvmf_common::fabrics::auth::command::AuthenticationCommand;
use nvmf_common::fabrics::connect::{Connect, ConnectData};
use nvmf_common::fabrics::nqn::Nqn;
use nvmf_common::fabrics::property::{PropertyGet, PropertySet, PropertySize};
use nvmf_common::nvme::sgl::SglSubtype;
use nvmf_common::nvme::{CompletionQueueEntry, SglDescriptor, SubmissionQueueEntry};
use nvmf_common::transport::tcp::{
    C2hData, CapsuleCommand, DecoderConfig, DigestTypes, Direction, Framing, H2cData, IcReq, Pdu, PduDecoder, R2t,
};

/// Errors of the test client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Socket error.
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    /// The target sent something that does not decode.
    #[error("undecodable PDU from the target: {0}")]
    Pdu(#[from] nvmf_common::transport::tcp::PduError),
    /// A structure could not be encoded.
    #[error("encoding: {0}")]
    Wire(#[from] nvmf_common::WireError),
    /// The target broke the protocol (unexpected PDU, wrong CID …).
    #[error("protocol: {0}")]
    Protocol(String),
    /// The target ended the connection with a C2HTermReq.
    #[error("target sent C2HTermReq: fes {fes:?} fei {fei}")]
    TermReq {
        /// Fatal error status.
        fes: nvmf_common::transport::tcp::FatalErrorStatus,
        /// Fatal error information.
        fei: u32,
    },
    /// The connection closed.
    #[error("connection closed by the target")]
    Closed,
}

/// Connection options.
#[derive(Debug, Clone, Copy)]
pub struct ClientOptions {
    /// Ask for header digests.
    pub hdgst: bool,
    /// Ask for data digests.
    pub ddgst: bool,
    /// Read timeout for every socket read.
    pub timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions { hdgst: false, ddgst: false, timeout: Duration::from_secs(10) }
    }
}

/// The result of one command.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The completion queue entry (synthesised for a C2HData with the SUCCESS flag).
    pub cqe: CompletionQueueEntry,
    /// Data the controller sent (C2HData), `read_len` bytes long (zero where nothing arrived).
    pub data: Vec<u8>,
    /// Number of R2Ts the target sent for this command.
    pub r2ts: usize,
}

/// One NVMe/TCP queue to a target.
#[derive(Debug)]
pub struct TcpTestClient {
    stream: TcpStream,
    decoder: PduDecoder,
    framing: Framing,
    /// MAXH2CDATA from ICResp.
    pub maxh2cdata: u32,
    /// In-capsule data limit used for writes (set from Identify IOCCSZ by the test; 0 = never in-capsule).
    pub in_capsule_limit: usize,
    next_cid: u16,
    rx: Vec<u8>,
    rx_start: usize,
}

/// A host NQN for tests.
pub const TEST_HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0c4bd7c4-79d0-4f1c-b0a9-6c1d2f0e5a11";
/// A host ID for tests.
pub const TEST_HOSTID: [u8; 16] = *b"nvmf-rs-test-hid";

impl TcpTestClient {
    /// Open a TCP connection and exchange ICReq/ICResp.
    pub fn connect(addr: SocketAddr, options: ClientOptions) -> Result<Self, ClientError> {
        let mut client = Self::connect_without_icreq(addr, options)?;
        client.initialize(options)?;
        Ok(client)
    }

    /// Open a TCP connection and send nothing (for tests of what a target does with PDUs before ICReq).
    pub fn connect_without_icreq(addr: SocketAddr, options: ClientOptions) -> Result<Self, ClientError> {
        Self::from_stream(TcpStream::connect_timeout(&addr, options.timeout)?, options)
    }

    /// A client on `stream`, a connection opened elsewhere (e.g. from another source address); nothing sent yet.
    pub fn from_stream(stream: TcpStream, options: ClientOptions) -> Result<Self, ClientError> {
        stream.set_read_timeout(Some(options.timeout))?;
        stream.set_nodelay(true)?;
        Ok(TcpTestClient {
            stream,
            decoder: PduDecoder::new(DecoderConfig::new(Direction::ControllerToHost, 16 << 20)),
            framing: Framing::default(),
            maxh2cdata: 0,
            in_capsule_limit: 0,
            next_cid: 1,
            rx: vec![0; 1 << 20],
            rx_start: 0,
        })
    }

    /// Exchange ICReq/ICResp, asking for the digests in `options`.
    pub fn initialize(&mut self, options: ClientOptions) -> Result<(), ClientError> {
        let icreq = Pdu::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            dgst: DigestTypes { hdgst_enable: options.hdgst, ddgst_enable: options.ddgst },
            maxr2t: 0,
        });
        self.send_pdu(&icreq, &[])?;
        match self.recv_pdu()? {
            (Pdu::IcResp(resp), _) => {
                self.maxh2cdata = resp.maxh2cdata;
                self.framing =
                    Framing { hdgst: resp.dgst.hdgst_enable, ddgst: resp.dgst.ddgst_enable, hpda: 0, cpda: resp.cpda };
                self.decoder.set_framing(self.framing);
            }
            (other, _) => return Err(ClientError::Protocol(format!("expected ICResp, got {other:?}"))),
        }
        Ok(())
    }

    /// Change the timeout of every later socket read.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), ClientError> {
        self.stream.set_read_timeout(Some(timeout))?;
        Ok(())
    }

    /// The negotiated framing.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// Write raw bytes to the socket (for malformed-input tests).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.stream.write_all(bytes)?;
        Ok(())
    }

    /// Encode and send one PDU with `data`.
    pub fn send_pdu(&mut self, pdu: &Pdu, data: &[u8]) -> Result<(), ClientError> {
        let framing = if matches!(pdu, Pdu::IcReq(_)) { Framing::default() } else { self.framing };
        let bytes = pdu.to_bytes(data, &framing)?;
        self.send_raw(&bytes)
    }

    /// Receive one PDU and its data.
    pub fn recv_pdu(&mut self) -> Result<(Pdu, Vec<u8>), ClientError> {
        loop {
            if self.rx_start > 0 {
                let step = self.decoder.feed(&self.rx[..self.rx_start]);
                let consumed = step.consumed;
                let result = match step.result {
                    Ok(Some(p)) => Some((p.pdu, p.data.to_vec())),
                    Ok(None) => None,
                    Err(e) => return Err(e.into()),
                };
                self.rx.copy_within(consumed..self.rx_start, 0);
                self.rx_start -= consumed;
                if let Some((pdu, data)) = result {
                    if let Pdu::TermReq(t) = pdu {
                        return Err(ClientError::TermReq { fes: t.fes, fei: t.fei });
                    }
                    return Ok((pdu, data));
                }
            }
            let n = self.stream.read(&mut self.rx[self.rx_start..])?;
            if n == 0 {
                return Err(ClientError::Closed);
            }
            self.rx_start += n;
        }
    }

    /// A fresh command identifier.
    pub fn next_cid(&mut self) -> u16 {
        let cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1).max(1);
        cid
    }

    /// Issue `sqe` (its CID is replaced) with optional host data, expecting up to `read_len` bytes back. SGL1 is set
    /// here: in-capsule data block for writes up to `in_capsule_limit`, transport data block otherwise.
    pub fn command(
        &mut self,
        mut sqe: SubmissionQueueEntry,
        write: Option<&[u8]>,
        read_len: usize,
    ) -> Result<Completion, ClientError> {
        sqe.cid = self.next_cid();
        let write = write.unwrap_or(&[]);
        let in_capsule = self.set_data_sgl(&mut sqe, write, read_len)?;
        self.command_raw(sqe, in_capsule, write, read_len)
    }

    /// Set SGL1 of `sqe` for `write` (host data) or `read_len` bytes back: an in-capsule data block for host data up to
    /// the in-capsule limit, a transport data block otherwise. Returns the in-capsule data.
    fn set_data_sgl<'a>(
        &self,
        sqe: &mut SubmissionQueueEntry,
        write: &'a [u8],
        read_len: usize,
    ) -> Result<&'a [u8], ClientError> {
        let len = u32::try_from(write.len().max(read_len)).map_err(|_| ClientError::Protocol("too long".into()))?;
        let in_capsule = !write.is_empty() && write.len() <= self.in_capsule_limit;
        let sgl = if in_capsule {
            SglDescriptor::DataBlock { address: 0, length: len, subtype: SglSubtype::Offset }
        } else {
            SglDescriptor::TransportDataBlock { length: len, subtype: SglSubtype::TransportSpecific }
        };
        sqe.set_sgl1(&sgl)?;
        Ok(if in_capsule { write } else { &[] })
    }

    /// Issue `sqe` exactly as given (SGL included), with `in_capsule` data in the capsule and `r2t_data` served to
    /// R2Ts.
    pub fn command_raw(
        &mut self,
        sqe: SubmissionQueueEntry,
        in_capsule: &[u8],
        r2t_data: &[u8],
        read_len: usize,
    ) -> Result<Completion, ClientError> {
        self.send_pdu(&Pdu::CapsuleCommand(CapsuleCommand { sqe }), in_capsule)?;
        let mut data = vec![0u8; read_len];
        let mut r2ts = 0;
        loop {
            match self.recv_pdu()? {
                (Pdu::CapsuleResponse(resp), _) => {
                    if resp.cqe.cid != sqe.cid {
                        return Err(ClientError::Protocol(format!("response cid {} != {}", resp.cqe.cid, sqe.cid)));
                    }
                    return Ok(Completion { cqe: resp.cqe, data, r2ts });
                }
                (Pdu::C2hData(C2hData { cccid, datao, datal, last_pdu, success }), payload) => {
                    if cccid != sqe.cid {
                        return Err(ClientError::Protocol(format!("C2HData cccid {cccid} != {}", sqe.cid)));
                    }
                    let start = usize::try_from(datao).unwrap_or(usize::MAX);
                    let end = start.saturating_add(usize::try_from(datal).unwrap_or(usize::MAX));
                    let dst = data
                        .get_mut(start..end)
                        .ok_or_else(|| ClientError::Protocol(format!("C2HData {datao}+{datal} beyond {read_len}")))?;
                    dst.copy_from_slice(&payload);
                    if last_pdu && success {
                        let cqe = CompletionQueueEntry { cid: sqe.cid, ..Default::default() };
                        return Ok(Completion { cqe, data, r2ts });
                    }
                }
                (Pdu::R2t(r2t), _) => {
                    r2ts += 1;
                    if r2t.cccid != sqe.cid {
                        return Err(ClientError::Protocol(format!("R2T cccid {} != {}", r2t.cccid, sqe.cid)));
                    }
                    self.serve_r2t(&r2t, r2t_data)?;
                }
                (other, _) => return Err(ClientError::Protocol(format!("unexpected PDU {other:?}"))),
            }
        }
    }

    /// Send the H2CData PDUs an R2T asks for, from `data` (the command's whole host data).
    fn serve_r2t(&mut self, r2t: &R2t, data: &[u8]) -> Result<(), ClientError> {
        let R2t { cccid, ttag, r2to, r2tl } = *r2t;
        let start = usize::try_from(r2to).unwrap_or(usize::MAX);
        let end = start.saturating_add(usize::try_from(r2tl).unwrap_or(usize::MAX));
        let chunk =
            data.get(start..end).ok_or_else(|| ClientError::Protocol(format!("R2T {r2to}+{r2tl} beyond the write")))?;
        let max = usize::try_from(self.maxh2cdata.max(4096)).unwrap_or(4096);
        let pieces = chunk.chunks(max).count();
        for (i, piece) in chunk.chunks(max).enumerate() {
            let datao = r2to + u32::try_from(i * max).unwrap_or(u32::MAX);
            let datal = u32::try_from(piece.len()).unwrap_or(u32::MAX);
            let h2c = H2cData { cccid, ttag, datao, datal, last_pdu: i + 1 == pieces };
            self.send_pdu(&Pdu::H2cData(h2c), piece)?;
        }
        Ok(())
    }

    /// Issue `commands` (SQE and host data each; CIDs and SGL1 set as [`TcpTestClient::command`] does) back to back,
    /// before any answer: a fused operation's two commands, or a host keeping several in flight. Serves their R2Ts
    /// and returns their completions in the order of `commands`. Commands that return data are not supported.
    pub fn commands_together(
        &mut self,
        commands: &[(SubmissionQueueEntry, &[u8])],
    ) -> Result<Vec<Completion>, ClientError> {
        let mut cids = Vec::with_capacity(commands.len());
        for (sqe, data) in commands {
            let mut sqe = *sqe;
            sqe.cid = self.next_cid();
            cids.push(sqe.cid);
            let in_capsule = self.set_data_sgl(&mut sqe, data, 0)?;
            self.send_pdu(&Pdu::CapsuleCommand(CapsuleCommand { sqe }), in_capsule)?;
        }
        let index = |cid: u16| {
            cids.iter().position(|&c| c == cid).ok_or_else(|| ClientError::Protocol(format!("unknown cid {cid}")))
        };
        let mut done: Vec<Option<Completion>> = vec![None; commands.len()];
        while done.iter().any(Option::is_none) {
            match self.recv_pdu()? {
                (Pdu::CapsuleResponse(resp), _) => {
                    let i = index(resp.cqe.cid)?;
                    if done[i].replace(Completion { cqe: resp.cqe, data: Vec::new(), r2ts: 0 }).is_some() {
                        return Err(ClientError::Protocol(format!("cid {} answered twice", resp.cqe.cid)));
                    }
                }
                (Pdu::R2t(r2t), _) => {
                    let data = commands[index(r2t.cccid)?].1;
                    self.serve_r2t(&r2t, data)?;
                }
                (other, _) => return Err(ClientError::Protocol(format!("unexpected PDU {other:?}"))),
            }
        }
        Ok(done.into_iter().flatten().collect())
    }

    /// Fabrics Connect on this queue. `cntlid` 0xFFFF for the admin queue.
    pub fn fabrics_connect(
        &mut self,
        subnqn: &str,
        qid: u16,
        sqsize: u16,
        cntlid: u16,
        kato_ms: u32,
    ) -> Result<Completion, ClientError> {
        self.fabrics_connect_as(subnqn, qid, cntlid, TEST_HOSTNQN, TEST_HOSTID, (sqsize, kato_ms))
    }

    /// Fabrics Connect as host `hostnqn` with host ID `hostid`; `(sqsize, kato_ms)`.
    pub fn fabrics_connect_as(
        &mut self,
        subnqn: &str,
        qid: u16,
        cntlid: u16,
        hostnqn: &str,
        hostid: [u8; 16],
        (sqsize, kato_ms): (u16, u32),
    ) -> Result<Completion, ClientError> {
        let connect = Connect {
            qid,
            sqsize,
            cattr: 0,
            kato: kato_ms,
            sgl1: SglDescriptor::DataBlock { address: 0, length: 1024, subtype: SglSubtype::Offset },
        };
        let mut sqe = connect.to_sqe()?;
        sqe.cid = self.next_cid();
        let subnqn = Nqn::new(subnqn).map_err(|e| ClientError::Protocol(format!("subsystem NQN: {e}")))?;
        let hostnqn = Nqn::new(hostnqn).map_err(|e| ClientError::Protocol(format!("host NQN: {e}")))?;
        let data = ConnectData { hostid, cntlid, subnqn, hostnqn }.to_bytes();
        self.command_raw(sqe, &data, &[], 0)
    }

    /// Authentication Send (DH-HMAC-CHAP) of `message`.
    pub fn authentication_send(&mut self, message: &[u8]) -> Result<Completion, ClientError> {
        let len = u32::try_from(message.len()).map_err(|_| ClientError::Protocol("message too long".into()))?;
        self.command(AuthenticationCommand::send(len).to_sqe(), Some(message), 0)
    }

    /// Authentication Receive (DH-HMAC-CHAP) of 4 KiB, as the Linux host asks: the message is the data.
    pub fn authentication_receive(&mut self) -> Result<Completion, ClientError> {
        self.command(AuthenticationCommand::receive(4096).to_sqe(), None, 4096)
    }

    /// Property Get of a 4- or 8-byte property; returns the value.
    pub fn property_get(&mut self, offset: u32, size: PropertySize) -> Result<Completion, ClientError> {
        let sqe = PropertyGet { size, offset }.to_sqe();
        self.command_raw(sqe, &[], &[], 0)
    }

    /// Property Set.
    pub fn property_set(&mut self, offset: u32, size: PropertySize, value: u64) -> Result<Completion, ClientError> {
        let sqe = PropertySet { size, offset, value }.to_sqe();
        self.command_raw(sqe, &[], &[], 0)
    }
}
