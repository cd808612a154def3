//! Fabrics Connect, the only command a queue takes before it is connected: it creates a controller (admin queue)
//! or attaches the queue to a live one (I/O queue), answering refusals with the Connect status and the offset of
//! the offending field.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::fabrics::connect::{
    connect_error_response, data_offset, sqe_offset, Connect, ConnectData, ConnectResponse, InvalidParameter,
    CNTLID_DYNAMIC,
};
use nvmf_common::fabrics::nqn::DISCOVERY_NQN;
use nvmf_common::nvme::opcode::{fctype, FABRICS};
use nvmf_common::nvme::{Status, SubmissionQueueEntry};

use super::{Association, Plan, Queue, QueueError, QueueKind, QueueState, SlotId, SlotState, Step};
use crate::backend::IoEngine;
use crate::controller::association::{Controller, IoQueueRefusal, QueueEntry};
use crate::controller::io::{self, DataSource, Direction};
use crate::controller::subsystem::RegisterRefusal;
use crate::controller::target::ConnectLimit;
use crate::controller::Stalled;

/// Bytes of Connect data.
pub(super) const CONNECT_DATA_LEN: u32 = 1024;

/// Outcome of the Connect checks: the status and dword 0 to answer with.
type ConnectResult = Result<u32, (Status, u32)>;

fn invalid_parameter(p: InvalidParameter) -> (Status, u32) {
    (Status::CONNECT_INVALID_PARAMETERS.with_dnr(), p.to_dw0())
}

impl Queue {
    /// Until a Connect completes, and then until the queue is authenticated when its host must authenticate: when the
    /// queue ends if that has not happened (the target's connect timeout after the queue's creation). Bounds what a
    /// peer that connects and stalls holds: its transport connection, and any Connect whose data it never sends.
    pub fn connect_deadline(&self) -> Option<Instant> {
        (matches!(self.state, QueueState::AwaitingConnect) || self.auth.pending())
            .then(|| self.created + Duration::from_millis(u64::from(self.target.params().connect_timeout_ms)))
    }

    /// End the queue (counted, logged) if its connect deadline has passed.
    pub(super) fn check_connect_deadline(&mut self, engine: &mut IoEngine, now: Instant) -> Result<(), QueueError> {
        if self.connect_deadline().is_some_and(|deadline| now >= deadline) {
            let timeout_ms = self.target.params().connect_timeout_ms;
            tracing::debug!(
                timeout_ms,
                port_id = self.transport.port_id,
                authenticating = self.auth.pending(),
                "no Connect (or authentication) in time: connection ended"
            );
            self.target.count_timeout(Stalled::Connect);
            self.disconnect(engine);
            return Err(QueueError::ConnectTimeout { timeout_ms });
        }
        Ok(())
    }

    pub(super) fn unconnected_command(
        &mut self,
        engine: &mut IoEngine,
        id: SlotId,
        sqe: &SubmissionQueueEntry,
        in_capsule: &[u8],
    ) -> Step {
        if sqe.opcode != FABRICS || sqe.fctype() != fctype::CONNECT {
            return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
        }
        // One Connect per queue: a second while the first's data is still coming would connect the queue twice.
        if self.slots.iter().any(|s| s.plan == Plan::Connect && s.state != SlotState::Free) {
            return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
        }
        if let Err(status) = io::check_flags(sqe) {
            return self.respond_err(engine, id, status, 0);
        }
        if let Err(e) = Connect::from_sqe(sqe) {
            let (status, dw0) = connect_error_response(&e);
            return self.respond_err(engine, id, status, dw0);
        }
        match io::data_source(sqe, self.transport.trtype, Direction::ToController, in_capsule.len()) {
            Err(status) => self.respond_err(engine, id, status, 0),
            Ok((DataSource::InCapsule { offset }, len)) => {
                // Connect::from_sqe checked the length is 1024; data_source that it lies within the capsule.
                let data = in_capsule.get(offset..offset + len as usize).unwrap_or_default();
                self.finish_connect(engine, id, sqe, data)
            }
            Ok((DataSource::Transport, _)) => {
                self.slot(id).plan = Plan::Connect;
                self.fetch_data(engine, id, CONNECT_DATA_LEN)
            }
        }
    }

    pub(super) fn finish_connect(
        &mut self,
        engine: &mut IoEngine,
        id: SlotId,
        sqe: &SubmissionQueueEntry,
        data: &[u8],
    ) -> Step {
        if !matches!(self.state, QueueState::AwaitingConnect) {
            return self.respond_err(engine, id, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0);
        }
        let result = match Connect::from_sqe(sqe) {
            Ok(connect) => self.connect(&connect, data),
            Err(e) => Err(connect_error_response(&e)),
        };
        match result {
            Ok(dw0) => self.respond_ok(engine, id, dw0, 0, None),
            Err((status, dw0)) => {
                // One line per host and interval: a peer that keeps connecting cannot flood the log (the reasons
                // are at debug level).
                let names = ConnectData::parse(data).ok();
                let (hostnqn, subnqn) = names.as_ref().map_or(("", ""), |d| (d.hostnqn.as_str(), d.subnqn.as_str()));
                if let Some(suppressed) = self.target.refused_connects().admit(hostnqn, engine.clock().turn()) {
                    let qid = sqe.cdw10 >> 16;
                    tracing::info!(%status, dw0, qid, hostnqn, subnqn, suppressed, "Connect refused");
                }
                self.respond_err(engine, id, status, dw0)
            }
        }
    }

    fn connect(&mut self, connect: &Connect, data: &[u8]) -> ConnectResult {
        let data = ConnectData::parse(data).map_err(|e| connect_error_response(&e))?;
        let hostnqn = data.hostnqn.as_str();
        let Some(subsystem) = self.target.subsystem(data.subnqn.as_str()) else {
            tracing::debug!(subnqn = data.subnqn.as_str(), hostnqn = hostnqn, "Connect to an unknown subsystem");
            return Err(invalid_parameter(InvalidParameter::in_data(data_offset::SUBNQN)));
        };
        if let Some(channel) = &self.transport.secure_channel {
            // A TLS connection speaks for the host and subsystem its PSK was derived for (the discovery subsystem
            // may be reached with any of the host's keys).
            if channel.hostnqn != hostnqn {
                tracing::debug!(
                    hostnqn,
                    tls_hostnqn = channel.hostnqn.as_str(),
                    "Connect from another host than TLS's"
                );
                return Err((
                    Status::CONNECT_INVALID_HOST.with_dnr(),
                    InvalidParameter::in_data(data_offset::HOSTNQN).to_dw0(),
                ));
            }
            if channel.subnqn != subsystem.nqn() && channel.subnqn != DISCOVERY_NQN {
                tracing::debug!(
                    subnqn = subsystem.nqn(),
                    tls_subnqn = channel.subnqn.as_str(),
                    "Connect to another subsystem than TLS's"
                );
                return Err(invalid_parameter(InvalidParameter::in_data(data_offset::SUBNQN)));
            }
        }
        let keys = subsystem.host_keys(hostnqn);
        if keys.is_none() && subsystem.auth_required() {
            tracing::debug!(
                subnqn = subsystem.nqn(),
                hostnqn = hostnqn,
                "Connect from a host with no key refused: \
                the subsystem requires authentication"
            );
            return Err((
                Status::CONNECT_INVALID_HOST.with_dnr(),
                InvalidParameter::in_data(data_offset::HOSTNQN).to_dw0(),
            ));
        }
        // A connection secured with a generated PSK was made by a host that authenticated (secure channel
        // concatenation): its queues are not asked again, as nvmet asks no queue secured with TLS.
        let generated = self.transport.secure_channel.as_ref().is_some_and(|c| c.generated);
        let atr = keys.is_some() && !generated;
        if !subsystem.host_allowed(hostnqn) {
            tracing::debug!(subnqn = subsystem.nqn(), hostnqn = hostnqn, "Connect from a host not allowed");
            return Err((
                Status::CONNECT_INVALID_HOST.with_dnr(),
                InvalidParameter::in_data(data_offset::HOSTNQN).to_dw0(),
            ));
        }
        if subsystem.host_id_refused(hostnqn, &data.hostid) {
            tracing::debug!(subnqn = subsystem.nqn(), hostnqn, "Connect refused: the host ID is bound to another host");
            self.target.count_connect_limit(ConnectLimit::HostId);
            return Err((
                Status::CONNECT_INVALID_HOST.with_dnr(),
                InvalidParameter::in_data(data_offset::HOSTID).to_dw0(),
            ));
        }
        let params = self.target.params();
        if connect.queue_entries() > params.max_queue_entries {
            return Err(invalid_parameter(InvalidParameter::in_command(sqe_offset::SQSIZE)));
        }
        if connect.is_admin() {
            if data.cntlid != CNTLID_DYNAMIC {
                return Err(invalid_parameter(InvalidParameter::in_data(data_offset::CNTLID)));
            }
            if connect.kato > params.kato_max_ms {
                return Err(invalid_parameter(InvalidParameter::in_command(sqe_offset::KATO)));
            }
            // Any peer may open a discovery controller: one that goes silent must not hold its place for long.
            if subsystem.is_discovery() && connect.kato > params.discovery_kato_max_ms {
                self.target.count_connect_limit(ConnectLimit::DiscoveryKato);
                return Err(invalid_parameter(InvalidParameter::in_command(sqe_offset::KATO)));
            }
            // A discovery controller whose host asked for no keep-alive still ends when its host vanishes, as
            // Linux nvmet does (`nvme discover` connects with KATO 0).
            let kato = match connect.kato {
                0 if subsystem.is_discovery() => params.discovery_kato_max_ms,
                kato => self
                    .target
                    .kato_with_minimum(kato)
                    .ok_or_else(|| invalid_parameter(InvalidParameter::in_command(sqe_offset::KATO)))?,
            };
            let registered = subsystem.register_controller(hostnqn, params.max_controllers_per_host, |cntlid| {
                let controller =
                    Controller::new(cntlid, Arc::clone(&subsystem), hostnqn, data.hostid, kato, params, true);
                Arc::new(controller.on_port(self.transport.port_id))
            });
            let controller = match registered {
                Ok(controller) => controller,
                Err(RegisterRefusal::NoCntlid) => return Err((Status::CONNECT_CONTROLLER_BUSY, 0)),
                Err(RegisterRefusal::HostLimit) => {
                    // Without DNR: the host may retry once one of its controllers ended.
                    tracing::debug!(
                        subnqn = subsystem.nqn(),
                        hostnqn,
                        limit = params.max_controllers_per_host,
                        "Connect refused: the host has max_controllers_per_host controllers here"
                    );
                    self.target.count_connect_limit(ConnectLimit::ControllersPerHost);
                    return Err((Status::CONNECT_CONTROLLER_BUSY, 0));
                }
            };
            controller.attach_admin_queue(self.queue_entry(0, connect.sqsize));
            let cntlid = controller.cntlid();
            tracing::info!(
                cntlid,
                subnqn = subsystem.nqn(),
                hostnqn = hostnqn,
                kato_ms = kato,
                "admin queue connected"
            );
            let association =
                Association { controller, kind: QueueKind::Admin, sqsize: connect.sqsize, epoch: 0, attached: true };
            self.establish(association, atr);
            return Ok(ConnectResponse { cntlid, atr, ascr: false }.to_dw0());
        }
        if subsystem.is_discovery() {
            return Err(invalid_parameter(InvalidParameter::in_command(sqe_offset::QID)));
        }
        // A controller of another host, or of this host NQN with another host ID, answers like a CNTLID that
        // does not exist: a peer cannot learn which controllers a host NQN has (Linux nvmet likewise).
        let owned = |c: &Arc<Controller>| c.hostnqn() == hostnqn && c.hostid() == data.hostid;
        let Some(controller) = subsystem.controller(data.cntlid).filter(owned) else {
            tracing::debug!(
                cntlid = data.cntlid,
                hostnqn = hostnqn,
                "I/O queue Connect for no controller of this host"
            );
            return Err(invalid_parameter(InvalidParameter::in_data(data_offset::CNTLID)));
        };
        // A queue that must authenticate takes its QID once it has (`Queue::authenticated`): until then a peer that
        // knows the host NQN, host ID and CNTLID but not the key holds nothing the real host's queue needs.
        let admitted = match atr {
            true => controller.admit_io_queue(connect.qid),
            false => controller.attach_io_queue(self.queue_entry(connect.qid, connect.sqsize), None),
        };
        let epoch = match admitted {
            Ok(epoch) => epoch,
            Err(IoQueueRefusal::QidAboveGranted(granted)) => {
                tracing::debug!(qid = connect.qid, granted, "I/O queue beyond the queues granted");
                return Err(invalid_parameter(InvalidParameter::in_command(sqe_offset::QID)));
            }
            Err(refusal) => {
                tracing::debug!(qid = connect.qid, ?refusal, "I/O queue Connect refused");
                return Err((Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0));
            }
        };
        let cntlid = controller.cntlid();
        tracing::debug!(cntlid, qid = connect.qid, sqsize = connect.sqsize, "I/O queue connected");
        let association =
            Association { controller, kind: QueueKind::Io(connect.qid), sqsize: connect.sqsize, epoch, attached: !atr };
        self.establish(association, atr);
        Ok(ConnectResponse { cntlid, atr, ascr: false }.to_dw0())
    }

    /// What the controller keeps of this queue once connected as `qid`.
    pub(super) fn queue_entry(&self, qid: u16, sqsize: u16) -> QueueEntry {
        QueueEntry {
            qid,
            epoch: 0,
            counters: Arc::clone(self.counters.counters()),
            notifier: self.notifier.clone(),
            sqsize,
            trtype: self.transport.trtype,
            peer: self.transport.peer_address,
            connected_at: std::time::SystemTime::now(),
        }
    }
}
