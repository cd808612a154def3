//! The Discovery Log Page (log 70h) a discovery controller serves: for the port the host came through, one
//! "current discovery subsystem" entry and one entry per NVM subsystem the host may connect to.
//!
//! Built on each read on the admin queue of a discovery controller (control path; allocates).

use nvmf_common::fabrics::discovery::{
    eflags, log_page_len, treq, DiscoveryLogEntry, DiscoveryLogHeader, SubsystemType, ENTRY_SIZE, HEADER_SIZE,
};
use nvmf_common::fabrics::nqn::DISCOVERY_NQN;
use nvmf_common::WireError;

use super::target::{ListenerParams, Target, TransportInfo};

/// A wildcard listen address, which the host cannot connect to: report the connection's local address.
fn is_wildcard(traddr: &str) -> bool {
    matches!(traddr, "" | "0.0.0.0" | "::" | "[::]")
}

/// The complete Discovery Log Page for `hostnqn` connected through `transport`.
pub(crate) fn discovery_log_page(
    target: &Target,
    hostnqn: &str,
    transport: &TransportInfo,
) -> Result<Vec<u8>, WireError> {
    let params = target.params();
    let all = target.listeners();
    let mut listeners: Vec<&ListenerParams> = all.iter().filter(|l| l.port_id == transport.port_id).collect();
    if listeners.is_empty() {
        // A connection through a port the configuration does not list (tests, ad-hoc listeners): report all.
        listeners = all.iter().collect();
    }
    let subsystems: Vec<_> = target.subsystems().into_iter().filter(|s| s.host_allowed(hostnqn)).collect();
    let records = listeners.len() * (1 + subsystems.len());
    let len = log_page_len(records).unwrap_or(HEADER_SIZE);
    let mut page = vec![0u8; len];
    let local = transport.local_address.map(|a| a.to_string());
    let asqsz = u16::try_from(params.max_queue_entries).unwrap_or(u16::MAX);
    let mut offset = HEADER_SIZE;
    for listener in &listeners {
        let traddr = match &local {
            Some(addr) if is_wildcard(&listener.traddr) => addr.as_str(),
            _ => listener.traddr.as_str(),
        };
        let mut entry = DiscoveryLogEntry {
            trtype: listener.trtype,
            adrfam: listener.adrfam,
            subtype: SubsystemType::CurrentDiscovery,
            treq: listener.secure_channel | treq::DISABLE_SQFLOW,
            portid: listener.port_id,
            cntlid: nvmf_common::fabrics::connect::CNTLID_DYNAMIC,
            asqsz,
            eflags: eflags::EPCSD | eflags::DUPRETINFO,
            trsvcid: &listener.trsvcid,
            subnqn: DISCOVERY_NQN,
            traddr,
            tsas: listener.tsas,
        };
        entry.encode(&mut page[offset..offset + ENTRY_SIZE])?;
        offset += ENTRY_SIZE;
        for subsystem in &subsystems {
            entry.subtype = SubsystemType::Nvm;
            entry.eflags = 0;
            entry.subnqn = subsystem.nqn();
            entry.encode(&mut page[offset..offset + ENTRY_SIZE])?;
            offset += ENTRY_SIZE;
        }
    }
    let numrec = u64::try_from(records).unwrap_or(u64::MAX);
    DiscoveryLogHeader { genctr: target.discovery_genctr(), numrec }.encode(&mut page[..HEADER_SIZE])?;
    Ok(page)
}
