//! The controller-to-host PDUs a connection sends, framed into its [`SendQueue`]: ICResp (with the
//! negotiation that decides it), R2T, C2HData (split, with data digests), CapsuleResp and C2HTermReq.
//!
//! Pure framing: the bytes come from `nvmf_common::transport::tcp` encoders, data stays in its buffer
//! (only its digest is computed here, which needs the bytes). Runs on the connection's reactor thread.

use nvmf_common::nvme::cqe::CompletionQueueEntry;
use nvmf_common::transport::tcp::pdu::PFV_1_0;
use nvmf_common::transport::tcp::{
    C2hData, CapsuleResponse, DataDigest, DigestTypes, Direction, FatalErrorStatus, Framing, IcReq, IcResp, Pdu, R2t,
    TermReq,
};
use nvmf_common::wire::WireError;

use super::config::TcpTransportConfig;
use super::send::SendQueue;

/// The outcome of ICReq/ICResp negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Negotiated {
    /// The ICResp to send.
    pub icresp: IcResp,
    /// The framing of every later PDU: digests both sides enabled, the host's HPDA for our C2HData, CPDA 0
    /// (we accept data at any 4-byte alignment).
    pub framing: Framing,
    /// The host's MAXR2T (0's based).
    pub maxr2t: u32,
}

/// Answer an ICReq (its PFV and HPDA were validated by the decoder): enable each digest the host asks for
/// if the port allows it.
pub(crate) fn negotiate(icreq: &IcReq, config: &TcpTransportConfig) -> Negotiated {
    let dgst = DigestTypes {
        hdgst_enable: icreq.dgst.hdgst_enable && config.header_digest,
        ddgst_enable: icreq.dgst.ddgst_enable && config.data_digest,
    };
    let icresp = IcResp { pfv: PFV_1_0, cpda: 0, dgst, maxh2cdata: config.maxh2cdata };
    let framing = Framing { hdgst: dgst.hdgst_enable, ddgst: dgst.ddgst_enable, hpda: icreq.hpda, cpda: 0 };
    Negotiated { icresp, framing, maxr2t: icreq.maxr2t }
}

/// Queue a PDU without data.
pub(crate) fn queue_pdu<B: Copy, S: Copy>(
    send: &mut SendQueue<B, S>,
    pdu: &Pdu,
    framing: &Framing,
) -> Result<(), WireError> {
    send.push_header(pdu, 0, framing).map(|_| ())
}

/// Queue an R2T.
pub(crate) fn queue_r2t<B: Copy, S: Copy>(
    send: &mut SendQueue<B, S>,
    r2t: R2t,
    framing: &Framing,
) -> Result<(), WireError> {
    queue_pdu(send, &Pdu::R2t(r2t), framing)
}

/// Queue a CapsuleResp carrying `cqe`.
pub(crate) fn queue_response<B: Copy, S: Copy>(
    send: &mut SendQueue<B, S>,
    cqe: CompletionQueueEntry,
    framing: &Framing,
) -> Result<(), WireError> {
    queue_pdu(send, &Pdu::CapsuleResponse(CapsuleResponse { cqe }), framing)
}

/// Queue `data` (the first `data.len()` bytes of `buffer`) for command `cccid` as C2HData PDUs of at most
/// `max_pdu` bytes, LAST_PDU on the final one and SUCCESS too when `success` (the caller then sends no
/// CapsuleResp). Data digests, when negotiated, are computed here over each PDU's slice.
pub(crate) fn queue_c2h_data<B: Copy, S: Copy>(
    send: &mut SendQueue<B, S>,
    cccid: u16,
    buffer: B,
    data: &[u8],
    max_pdu: u32,
    success: bool,
    framing: &Framing,
) -> Result<(), WireError> {
    let step = usize::try_from(max_pdu.max(1)).unwrap_or(usize::MAX);
    let mut offset = 0usize;
    while offset < data.len() {
        let len = step.min(data.len() - offset);
        let last = offset + len == data.len();
        let datao = u32::try_from(offset).map_err(|_| too_long(offset))?;
        let datal = u32::try_from(len).map_err(|_| too_long(len))?;
        let pdu = Pdu::C2hData(C2hData { cccid, datao, datal, last_pdu: last, success: last && success });
        let layout = send.push_header(&pdu, len, framing)?;
        send.push_data(buffer, offset, len);
        if layout.ddgst {
            let mut d = DataDigest::new();
            d.update(&data[offset..offset + len]);
            send.push_bytes(&d.to_bytes());
        }
        offset += len;
    }
    Ok(())
}

fn too_long(len: usize) -> WireError {
    WireError::invalid("C2HData", "DATAL", u64::try_from(len).unwrap_or(u64::MAX), "at most u32::MAX")
}

/// Queue a C2HTermReq with `fes`/`fei` and the offending PDU header (at most 128 bytes of it).
pub(crate) fn queue_term_req<B: Copy, S: Copy>(
    send: &mut SendQueue<B, S>,
    fes: FatalErrorStatus,
    fei: u32,
    offending_header: &[u8],
) -> Result<(), WireError> {
    let data = TermReq::error_data(offending_header);
    let pdu = Pdu::TermReq(TermReq { direction: Direction::ControllerToHost, fes, fei });
    // TermReqs never carry digests (they may report a digest error).
    send.push_header(&pdu, data.len(), &Framing::default())?;
    send.push_bytes(data);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::send::Flush;
    use nvmf_common::nvme::status::Status;
    use nvmf_common::transport::tcp::{DecoderConfig, PduDecoder};

    /// Flush `send` and decode what it wrote as a host would.
    fn host_view(send: &mut SendQueue<usize, u16>, bufs: &[Vec<u8>], framing: Framing) -> Vec<(Pdu, Vec<u8>)> {
        let mut wire = Vec::new();
        let mut done = vec![];
        assert_eq!(send.flush(&mut wire, |b| &bufs[b][..], &mut done).unwrap(), Flush::Drained);
        let mut d =
            PduDecoder::new(DecoderConfig { framing, receive: Direction::ControllerToHost, max_data_len: 1 << 24 });
        let mut at = 0;
        let mut out = vec![];
        while at < wire.len() {
            let f = d.feed(&wire[at..]);
            at += f.consumed;
            let p = f.result.unwrap().unwrap();
            out.push((p.pdu, p.data.to_vec()));
        }
        out
    }

    #[test]
    fn negotiation_grants_only_allowed_digests() {
        let req = IcReq { pfv: 0, hpda: 3, dgst: DigestTypes { hdgst_enable: true, ddgst_enable: true }, maxr2t: 0 };
        let n = negotiate(&req, &TcpTransportConfig::default());
        assert_eq!(n.icresp.dgst, req.dgst);
        assert_eq!(n.framing, Framing { hdgst: true, ddgst: true, hpda: 3, cpda: 0 });
        assert_eq!((n.icresp.cpda, n.icresp.maxh2cdata, n.maxr2t), (0, 128 * 1024, 0));
        let cfg = TcpTransportConfig { data_digest: false, ..Default::default() };
        let n = negotiate(&req, &cfg);
        assert_eq!(n.icresp.dgst, DigestTypes { hdgst_enable: true, ddgst_enable: false });
        let none = IcReq { dgst: DigestTypes::default(), ..req };
        assert_eq!(negotiate(&none, &TcpTransportConfig::default()).icresp.dgst, DigestTypes::default());
    }

    #[test]
    fn c2h_data_is_split_with_digests_and_alignment() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7).to_le_bytes()[0]).collect();
        for framing in [
            Framing::default(),
            Framing { hdgst: true, ddgst: true, hpda: 0, cpda: 0 },
            Framing { hdgst: true, ddgst: true, hpda: 31, cpda: 0 },
        ] {
            for (max, success) in [(4096, false), (4096, true), (1 << 20, true), (1, false)] {
                let data = if max == 1 { data[..10].to_vec() } else { data.clone() };
                let mut send: SendQueue<usize, u16> = SendQueue::new();
                queue_c2h_data(&mut send, 0x77, 0usize, &data, max, success, &framing).unwrap();
                let pdus = host_view(&mut send, std::slice::from_ref(&data), framing);
                let n = data.len().div_ceil(max as usize);
                assert_eq!(pdus.len(), n);
                let mut joined = vec![];
                for (i, (p, d)) in pdus.iter().enumerate() {
                    let Pdu::C2hData(c) = p else { panic!("{p:?}") };
                    assert_eq!((c.cccid, c.datao as usize), (0x77, joined.len()));
                    assert_eq!(c.last_pdu, i == n - 1);
                    assert_eq!(c.success, success && i == n - 1);
                    joined.extend_from_slice(d);
                }
                assert_eq!(joined, data);
            }
        }
    }

    #[test]
    fn hpda_pads_c2h_data() {
        let framing = Framing { hdgst: false, ddgst: false, hpda: 31, cpda: 0 };
        let mut send: SendQueue<usize, u16> = SendQueue::new();
        let bufs = [vec![1u8; 10]];
        queue_c2h_data(&mut send, 1, 0usize, &bufs[0], 4096, false, &framing).unwrap();
        let mut wire = Vec::new();
        send.flush(&mut wire, |b| &bufs[b][..], &mut vec![]).unwrap();
        assert_eq!(wire[3], 128, "PDO aligned to (HPDA + 1) * 4");
        assert_eq!(&wire[128..], &bufs[0][..]);
    }

    #[test]
    fn responses_r2ts_and_term_req_decode() {
        let framing = Framing { hdgst: true, ddgst: true, hpda: 0, cpda: 0 };
        let mut send: SendQueue<usize, u16> = SendQueue::new();
        let cqe = CompletionQueueEntry::new(9, Status::TRANSIENT_TRANSPORT_ERROR);
        queue_response(&mut send, cqe, &framing).unwrap();
        let r2t = R2t { cccid: 9, ttag: 2, r2to: 0, r2tl: 65536 };
        queue_r2t(&mut send, r2t, &framing).unwrap();
        queue_term_req(&mut send, FatalErrorStatus::PduSequenceError, 0, &[0xEE; 200]).unwrap();
        let pdus = host_view(&mut send, &[], framing);
        assert_eq!(pdus[0].0, Pdu::CapsuleResponse(CapsuleResponse { cqe }));
        assert_eq!(pdus[1].0, Pdu::R2t(r2t));
        assert_eq!(
            pdus[2].0,
            Pdu::TermReq(TermReq {
                direction: Direction::ControllerToHost,
                fes: FatalErrorStatus::PduSequenceError,
                fei: 0
            })
        );
        assert_eq!(pdus[2].1, vec![0xEE; 128]);
    }
}
