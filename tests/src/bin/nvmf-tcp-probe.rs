//! `nvmf-tcp-probe ADDR:PORT SUBNQN`: connect to an NVMe/TCP target as a minimal host (admin queue + one I/O
//! queue), identify it, write a pattern to the first namespace, read it back and compare, then disconnect, printing
//! each step. Used by `scripts/quickstart` until `nvmf-host` lands, and handy against any target (ours, nvmet, SPDK).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Instant;

use nvmf_common::fabrics::property::{Capabilities, ControllerConfiguration, ControllerStatus, Property, PropertySize};
use nvmf_common::nvme::identify::{cns, Identify, IdentifyController, IdentifyNamespace};
use nvmf_common::nvme::io::{Read, Write};
use nvmf_common::nvme::SubmissionQueueEntry;
use nvmf_tests::nvme_tcp_client::{ClientError, ClientOptions, TcpTestClient};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(addr), Some(subnqn)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: nvmf-tcp-probe ADDR:PORT SUBNQN");
        return ExitCode::from(2);
    };
    let addr: SocketAddr = match addr.parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("nvmf-tcp-probe: {addr}: {e}");
            return ExitCode::from(2);
        }
    };
    match probe(addr, subnqn) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvmf-tcp-probe: {e}");
            ExitCode::FAILURE
        }
    }
}

fn check(what: &str, c: &nvmf_tests::nvme_tcp_client::Completion) -> Result<(), ClientError> {
    if c.cqe.status.is_success() {
        Ok(())
    } else {
        Err(ClientError::Protocol(format!("{what} failed: {}", c.cqe.status)))
    }
}

fn probe(addr: SocketAddr, subnqn: &str) -> Result<(), ClientError> {
    let started = Instant::now();
    let mut admin = TcpTestClient::connect(addr, ClientOptions::default())?;
    let c = admin.fabrics_connect(subnqn, 0, 31, 0xFFFF, 30_000)?;
    check("admin Connect", &c)?;
    let cntlid = u16::try_from(c.cqe.dw0 & 0xffff).unwrap_or(0);
    println!("probe: connected to {subnqn} at tcp://{addr}, controller {cntlid}");

    let cap = admin.property_get(Property::Cap.offset(), PropertySize::Eight)?;
    check("Property Get CAP", &cap)?;
    let cap = Capabilities::from_u64(cap.cqe.result64());
    let cc = ControllerConfiguration { en: true, iosqes: 6, iocqes: 4, ..ControllerConfiguration::default() };
    check("Property Set CC", &admin.property_set(Property::Cc.offset(), PropertySize::Four, cc.to_u32().into())?)?;
    let deadline = Instant::now() + std::time::Duration::from_millis(u64::from(cap.timeout_ms()).max(1000));
    loop {
        let csts = admin.property_get(Property::Csts.offset(), PropertySize::Four)?;
        check("Property Get CSTS", &csts)?;
        let csts = ControllerStatus::from_u32(csts.cqe.dw0).map_err(ClientError::Wire)?;
        if csts.rdy {
            break;
        }
        if Instant::now() > deadline {
            return Err(ClientError::Protocol("CSTS.RDY did not follow CC.EN within CAP.TO".into()));
        }
    }

    let id = admin.command(Identify::new(cns::CONTROLLER, 0).to_sqe(), None, 4096)?;
    check("Identify Controller", &id)?;
    let ctrl = IdentifyController::parse(&id.data).map_err(ClientError::Wire)?;
    println!(
        "probe: controller: model {:?}, serial {:?}, firmware {:?}, {} namespace(s) max, MDTS {}, IOCCSZ {}",
        ctrl.mn.trim_end(),
        ctrl.sn.trim_end(),
        ctrl.fr.trim_end(),
        ctrl.nn,
        ctrl.mdts,
        ctrl.ioccsz
    );
    let id = admin.command(Identify::new(cns::NAMESPACE, 1).to_sqe(), None, 4096)?;
    check("Identify Namespace 1", &id)?;
    let ns = IdentifyNamespace::parse(&id.data).map_err(ClientError::Wire)?;
    let block = ns.lba_data_size().map_err(ClientError::Wire)?;
    println!("probe: namespace 1: {} blocks of {block} bytes ({} MiB)", ns.nsze, (ns.nsze * u64::from(block)) >> 20);

    let mut io = TcpTestClient::connect(addr, ClientOptions::default())?;
    io.in_capsule_limit = usize::try_from(ctrl.ioccsz.saturating_sub(4) * 16).unwrap_or(0);
    check("I/O queue Connect", &io.fabrics_connect(subnqn, 1, 127, cntlid, 0)?)?;
    let len: usize = 1 << 20;
    let blocks = u32::try_from(len).unwrap_or(0) / block;
    let pattern: Vec<u8> = (0..len).map(|i| u8::try_from((i * 7 + i / 4096) % 251).unwrap_or(0)).collect();
    let nlb = u16::try_from(blocks - 1).map_err(|_| ClientError::Protocol("block size too small".into()))?;
    let write: SubmissionQueueEntry = Write { nsid: 1, slba: 0, nlb, ..Write::default() }.to_sqe();
    let t = Instant::now();
    let w = io.command(write, Some(&pattern), 0)?;
    check("Write", &w)?;
    let write_time = t.elapsed();
    let t = Instant::now();
    let r = io.command(Read { nsid: 1, slba: 0, nlb, ..Read::default() }.to_sqe(), None, len)?;
    check("Read", &r)?;
    let read_time = t.elapsed();
    if r.data != pattern {
        return Err(ClientError::Protocol("read-back data differs from what was written".into()));
    }
    println!(
        "probe: wrote 1 MiB at LBA 0 in {write_time:.2?} ({} R2T), read it back in {read_time:.2?}: identical",
        w.r2ts
    );
    let shn = ControllerConfiguration { shn: nvmf_common::fabrics::property::ShutdownNotification::Normal, ..cc };
    check("Property Set CC.SHN", &admin.property_set(Property::Cc.offset(), PropertySize::Four, shn.to_u32().into())?)?;
    println!("probe: shut the controller down and disconnected ({:.2?} in all)", started.elapsed());
    Ok(())
}
