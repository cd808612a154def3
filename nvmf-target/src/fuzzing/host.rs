//! [`Host`]: the host's end of one fuzzed connection. It writes the fuzzer's bytes to the target as they are,
//! reads everything the target sends back and decodes it with the host-side `PduDecoder`, panicking on a PDU no
//! host could decode: whatever the input, the target must only ever send well-formed PDUs.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;

use nvmf_common::nvme::cqe::CompletionQueueEntry;
use nvmf_common::transport::tcp::{DecoderConfig, Direction, Framing, Pdu, PduDecoder};

/// The largest data of one PDU the host accepts from the target (far above anything the target sends).
const MAX_C2H_DATA: u32 = 1 << 24;

/// The host's side of a connection (see the module docs).
#[derive(Debug)]
pub(super) struct Host {
    socket: UnixStream,
    /// Bytes written by the fuzzer that the socket has not taken yet.
    out: Vec<u8>,
    /// Decodes the host's own first PDU: the hpda of its ICReq sets the alignment of the target's data PDUs.
    icreq: Option<PduDecoder>,
    hpda: u8,
    decoder: PduDecoder,
    /// The host reads what the target sends (off: the target's output backs up).
    pub(super) reading: bool,
    /// The host shut its sending side.
    write_closed: bool,
    /// The target closed the connection (end of stream).
    pub(super) eof: bool,
    /// Responses received, in order.
    pub(super) responses: Vec<CompletionQueueEntry>,
    buf: Vec<u8>,
}

impl Host {
    /// The host end of a connected socket pair.
    pub(super) fn new(socket: UnixStream) -> Self {
        Host {
            socket,
            out: Vec::new(),
            icreq: Some(PduDecoder::new(DecoderConfig::new(Direction::HostToController, 0))),
            hpda: 0,
            decoder: PduDecoder::new(DecoderConfig::new(Direction::ControllerToHost, MAX_C2H_DATA)),
            reading: true,
            write_closed: false,
            eof: false,
            responses: Vec::new(),
            buf: vec![0; 64 << 10],
        }
    }

    /// Queue `bytes` for the target.
    pub(super) fn send(&mut self, bytes: &[u8]) {
        if self.write_closed {
            return;
        }
        if let Some(decoder) = self.icreq.as_mut() {
            let mut at = 0;
            while at < bytes.len() {
                let feed = decoder.feed(&bytes[at..]);
                at += feed.consumed;
                match feed.result {
                    Ok(None) if feed.consumed > 0 => {}
                    Ok(Some(received)) => {
                        if let Pdu::IcReq(icreq) = received.pdu {
                            self.hpda = icreq.hpda;
                        }
                        self.icreq = None;
                        break;
                    }
                    Ok(None) | Err(_) => {
                        self.icreq = None;
                        break;
                    }
                }
            }
        }
        self.out.extend_from_slice(bytes);
    }

    /// Write what the socket takes of the queued bytes.
    pub(super) fn flush(&mut self) {
        while !self.out.is_empty() {
            match self.socket.write(&self.out) {
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Full (WouldBlock) or closed by the target: the rest waits or is lost.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.out.clear();
                    return;
                }
            }
        }
    }

    /// Shut the sending side once the queued bytes are written (the target then reads end of stream).
    pub(super) fn close_write(&mut self) {
        self.write_closed = true;
        self.out.clear();
        let _ = self.socket.shutdown(Shutdown::Write);
    }

    /// Read and decode everything the target sent, if reading.
    pub(super) fn receive(&mut self) {
        while self.reading && !self.eof {
            let n = match self.socket.read(&mut self.buf) {
                Ok(0) => {
                    self.eof = true;
                    return;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.eof = true;
                    return;
                }
            };
            let mut at = 0;
            while at < n {
                let feed = self.decoder.feed(&self.buf[at..n]);
                at += feed.consumed;
                match feed.result {
                    Ok(None) => {}
                    Ok(Some(received)) => match received.pdu {
                        Pdu::IcResp(r) => self.decoder.set_framing(Framing {
                            hdgst: r.dgst.hdgst_enable,
                            ddgst: r.dgst.ddgst_enable,
                            hpda: self.hpda,
                            cpda: r.cpda,
                        }),
                        Pdu::CapsuleResponse(r) => self.responses.push(r.cqe),
                        _ => {}
                    },
                    Err(e) => panic!("the target sent a PDU the host cannot decode: {e}"),
                }
            }
        }
    }
}
