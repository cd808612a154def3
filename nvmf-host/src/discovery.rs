//! [`discover`]: read a discovery controller's Discovery Log Page (NVMe-oF 1.1 §5.3) into owned records.
//!
//! Runs on the caller's thread (blocking, each command bounded by the connect options' I/O timeout). The
//! association is non-persistent like `nvme discover`'s: KATO 0, admin queue only, shut down when done.

use std::net::SocketAddr;

use nvmf_common::fabrics::discovery::{
    log_page_len, AddressFamily, DiscoveryLogHeader, DiscoveryLogPage, SubsystemType, TransportType, Tsas, HEADER_SIZE,
};
use nvmf_common::fabrics::nqn::DISCOVERY_NQN;
use nvmf_common::nvme::log_page::{lid, GetLogPage};

use crate::controller::{ConnectOptions, Controller};
use crate::error::HostError;
use crate::queue::DataDirection;

/// How often the page is re-read when its generation counter changes under us.
const GENCTR_RETRIES: usize = 10;

/// One Discovery Log Page entry, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryRecord {
    /// Transport Type.
    pub trtype: TransportType,
    /// Address Family.
    pub adrfam: AddressFamily,
    /// Subsystem Type.
    pub subtype: SubsystemType,
    /// Transport Requirements.
    pub treq: u8,
    /// Port ID.
    pub portid: u16,
    /// Controller ID.
    pub cntlid: u16,
    /// Admin Max SQ Size.
    pub asqsz: u16,
    /// Entry Flags.
    pub eflags: u16,
    /// Transport Service Identifier.
    pub trsvcid: String,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Transport Address.
    pub traddr: String,
    /// Transport Specific Address Subtype.
    pub tsas: Tsas,
}

/// A Discovery Log Page, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryLog {
    /// Generation Counter.
    pub genctr: u64,
    /// The records.
    pub records: Vec<DiscoveryRecord>,
}

fn get_log(ctrl: &Controller, len: usize) -> Result<Vec<u8>, HostError> {
    // Read in pieces no larger than MDTS (Log Page Offset advances by bytes).
    let chunk = ctrl.info().max_transfer.map_or(len, |m| usize::try_from(m).unwrap_or(len).max(HEADER_SIZE));
    let mut page = Vec::with_capacity(len);
    while page.len() < len {
        let n = chunk.min(len - page.len());
        let mut cmd = GetLogPage::new(lid::DISCOVERY, 0, n as u64)
            .map_err(|e| HostError::Wire { context: "Get Log Page (Discovery)", error: e })?;
        cmd.lpo = page.len() as u64;
        let reply =
            ctrl.admin_command("Get Log Page (Discovery)", cmd.to_sqe(), DataDirection::ControllerToHost, vec![0; n])?;
        page.extend_from_slice(&reply.data);
    }
    Ok(page)
}

/// Read the log page of a connected discovery controller: header, then the whole page, again until the
/// generation counter is the same before and after.
pub fn read_log(ctrl: &Controller) -> Result<DiscoveryLog, HostError> {
    let wire = |e| HostError::Wire { context: "Discovery Log Page", error: e };
    for _ in 0..GENCTR_RETRIES {
        let header = DiscoveryLogHeader::parse(&get_log(ctrl, HEADER_SIZE)?).map_err(wire)?;
        let entries = usize::try_from(header.numrec).unwrap_or(usize::MAX);
        let len = log_page_len(entries)
            .filter(|&l| l <= 64 << 20)
            .ok_or_else(|| HostError::Controller(format!("Discovery Log Page claims {} records", header.numrec)))?;
        let buf = get_log(ctrl, len)?;
        let page = DiscoveryLogPage::parse(&buf).map_err(wire)?;
        let again = DiscoveryLogHeader::parse(&get_log(ctrl, HEADER_SIZE)?).map_err(wire)?;
        if page.header.genctr != header.genctr || again.genctr != header.genctr {
            continue;
        }
        let mut records = Vec::with_capacity(page.entries_present());
        for e in page.entries() {
            let e = e.map_err(wire)?;
            records.push(DiscoveryRecord {
                trtype: e.trtype,
                adrfam: e.adrfam,
                subtype: e.subtype,
                treq: e.treq,
                portid: e.portid,
                cntlid: e.cntlid,
                asqsz: e.asqsz,
                eflags: e.eflags,
                trsvcid: e.trsvcid.to_string(),
                subnqn: e.subnqn.to_string(),
                traddr: e.traddr.to_string(),
                tsas: e.tsas,
            });
        }
        return Ok(DiscoveryLog { genctr: page.header.genctr, records });
    }
    Err(HostError::Controller(format!("Discovery Log Page generation counter kept changing ({GENCTR_RETRIES} reads)")))
}

/// Connect to the discovery subsystem at `addr`, read its log page, disconnect.
pub fn discover(addr: SocketAddr, mut options: ConnectOptions) -> Result<DiscoveryLog, HostError> {
    options.nr_io_queues = 0;
    options.keep_alive_tmo = std::time::Duration::ZERO;
    let ctrl = Controller::connect(addr, DISCOVERY_NQN, options)?;
    let log = read_log(&ctrl);
    let disconnected = ctrl.disconnect();
    let log = log?;
    if let Err(e) = disconnected {
        tracing::warn!(error = %e, "disconnect from the discovery controller failed");
    }
    Ok(log)
}
