//! [`BareAdmin`]: an NVMe/RDMA association for tests and tools that drive bare I/O queues — a [`Controller`]
//! connected over RDMA with no I/O queues of its own (its bring-up, keep-alive and namespace scan are the only
//! ones the host has) and I/O queues connected to it as bare [`RdmaQueue`]s polled by their owner.
//!
//! Runs on the caller's thread (the controller's own threads aside); every command waits at most the I/O
//! timeout of the [`ConnectOptions`].

use std::net::SocketAddr;

use nvmf_common::fabrics::property::{Capabilities, Property};

use super::{RdmaQueue, RdmaQueueOptions};
use crate::controller::{ConnectOptions, Controller, NamespaceInfo, Transport};
use crate::error::HostError;

/// An enabled controller's admin side and what bring-up learnt (see the module docs).
#[derive(Debug)]
pub struct BareAdmin {
    ctrl: Controller,
    /// The controller ID granted by Connect.
    pub cntlid: u16,
    /// CAP.
    pub cap: Capabilities,
    /// Largest transfer (MDTS), `None` when unlimited.
    pub max_transfer: Option<u32>,
    /// In-capsule data bytes an I/O command may carry (IOCCSZ * 16 - 64).
    pub in_capsule_data: u32,
    /// Number of namespaces (NN).
    pub nn: u32,
    /// Whether I/O queues connected from now on bind a memory window per command (when the device has them;
    /// default true). False gives the fallback: one region per slot and direction, keyed for the queue's life.
    pub memory_windows: bool,
}

impl BareAdmin {
    /// Connect over NVMe/RDMA (whatever `options.transport` says) with no I/O queues and enable the
    /// controller ([`Controller::connect`]).
    pub fn connect(addr: SocketAddr, subnqn: &str, options: &ConnectOptions) -> Result<Self, HostError> {
        let options = ConnectOptions { transport: Transport::Rdma, nr_io_queues: 0, ..options.clone() };
        let ctrl = Controller::connect(addr, subnqn, options)?;
        let info = ctrl.info();
        Ok(BareAdmin {
            cntlid: info.cntlid,
            cap: info.cap,
            max_transfer: info.max_transfer,
            in_capsule_data: info.in_capsule_data,
            nn: info.nn,
            memory_windows: true,
            ctrl,
        })
    }

    /// The controller: admin commands ([`Controller::admin_command`]), namespaces.
    pub fn controller(&self) -> &Controller {
        &self.ctrl
    }

    /// Property Get.
    pub fn property_get(&self, p: Property) -> Result<u64, HostError> {
        self.ctrl.property_get(p)
    }

    /// The active namespaces.
    pub fn namespaces(&self) -> Result<Vec<NamespaceInfo>, HostError> {
        self.ctrl.namespaces()
    }

    /// Set Features Number of Queues: ask for `count` I/O queue pairs; returns how many are granted.
    pub fn set_io_queues(&self, count: u16) -> Result<u16, HostError> {
        self.ctrl.request_io_queues(count)
    }

    /// Connect I/O queue `qid` of this association as a bare queue of `depth` commands (SQSIZE `depth`).
    pub fn connect_io_queue<T: Default + Send>(&self, qid: u16, depth: u16) -> Result<RdmaQueue<T>, HostError> {
        let o = self.ctrl.options();
        let qopts = RdmaQueueOptions {
            qid,
            depth,
            in_capsule_limit: self.in_capsule_data,
            cntlid: self.cntlid,
            memory_windows: self.memory_windows,
            connect_timeout: o.connect_timeout,
            command_timeout: o.io_timeout,
        };
        let mut queue = RdmaQueue::connect(self.ctrl.addr(), &qopts)?;
        self.ctrl.fabrics_connect(&mut queue, depth)?;
        Ok(queue)
    }

    /// Shut the controller down (CC.SHN) and disconnect.
    pub fn close(self) {
        if let Err(e) = self.ctrl.disconnect() {
            tracing::warn!(error = %e, "disconnecting the bare admin's controller");
        }
    }
}
