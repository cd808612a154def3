//! nvme-cli's inspection commands against one controller reached by address (`-t -a -s -n`, `-q`, `-I`): `id-ctrl`,
//! `id-ns`, `list-ns`, `smart-log`, `error-log`, `get-log`, `ns-rescan`, `list-subsys`. Each connects with no
//! I/O queue (they are all admin commands), runs on the caller's thread, prints as nvme-cli does ([`text`]) or
//! its JSON ([`json`]), and disconnects cleanly (CC.SHN) also when a command failed.
//!
//! Files: `commands` (each command's arguments and run), `fields` (the Identify fields both outputs list),
//! `json`, `text`, and this file: the options every command shares and the connection around a command.

pub mod commands;
pub mod fields;
pub mod json;
pub mod text;

use clap::Args;

use super::{connect_options, CliError, DhchapArgs, OutputFormat};
use crate::controller::Controller;
use crate::endpoint::Endpoint;

/// The controller to inspect (nvme-cli's connect options).
#[derive(Debug, Clone, Args)]
pub struct ControllerArgs {
    /// Where to connect.
    #[command(flatten)]
    pub endpoint: Endpoint,
    /// Subsystem NQN.
    #[arg(short = 'n', long = "nqn")]
    pub nqn: String,
    /// Host NQN (default: /etc/nvme/hostnqn or generated).
    #[arg(short = 'q', long = "hostnqn")]
    pub hostnqn: Option<String>,
    /// Host Identifier, a UUID (default: /etc/nvme/hostid or generated); reservations belong to it.
    #[arg(short = 'I', long = "hostid")]
    pub hostid: Option<uuid::Uuid>,
    /// DH-HMAC-CHAP secrets, for a controller that asks for authentication.
    #[command(flatten)]
    pub dhchap: DhchapArgs,
}

/// `-o/--output-format`.
#[derive(Debug, Clone, Copy, Args)]
pub struct Format {
    /// Output format.
    #[arg(short = 'o', long = "output-format", value_enum, default_value = "normal")]
    pub output_format: OutputFormat,
}

impl ControllerArgs {
    /// Connect with no I/O queue, run `f`, disconnect. `f`'s error wins over a failed disconnect.
    pub fn with_controller<T>(&self, f: impl FnOnce(&Controller) -> Result<T, CliError>) -> Result<T, CliError> {
        self.with_queues(0, f)
    }

    /// [`ControllerArgs::with_controller`] with one I/O queue, for I/O commands (reservations).
    pub fn with_io_controller<T>(&self, f: impl FnOnce(&Controller) -> Result<T, CliError>) -> Result<T, CliError> {
        self.with_queues(1, f)
    }

    fn with_queues<T>(
        &self,
        nr_io_queues: u16,
        f: impl FnOnce(&Controller) -> Result<T, CliError>,
    ) -> Result<T, CliError> {
        let addr = self.endpoint.resolve()?;
        let mut options = connect_options(self.hostnqn.as_ref());
        options.transport = self.endpoint.transport;
        options.nr_io_queues = nr_io_queues;
        if let Some(id) = self.hostid {
            options.hostid = *id.as_bytes();
        }
        self.dhchap.apply(&mut options)?;
        let ctrl = Controller::connect(addr, &self.nqn, options)?;
        let result = f(&ctrl);
        let closed = ctrl.disconnect();
        let value = result?;
        closed?;
        Ok(value)
    }
}

/// One controller as `list-subsys` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerView {
    /// The host's NQN.
    pub hostnqn: String,
    /// The host identifier, as a UUID.
    pub hostid: String,
    /// The subsystem NQN the controller reports (Identify Controller SUBNQN); also the subsystem's name, since
    /// no `nvme-subsysN` stands for it here.
    pub subnqn: String,
    /// The controller's name in the path list: no device stands for it here, so its controller ID
    /// (`cntlid=N`), which names it within its subsystem.
    pub name: String,
    /// `tcp` or `rdma`.
    pub transport: &'static str,
    /// As the kernel's sysfs `address`: `traddr=…,trsvcid=…`.
    pub address: String,
    /// `live`, `reconnecting`, `deleting` or `failed`.
    pub state: &'static str,
}

impl ControllerView {
    /// The view of `ctrl` now.
    pub fn of(ctrl: &Controller) -> Self {
        let o = ctrl.options();
        let addr = ctrl.addr();
        ControllerView {
            hostnqn: o.hostnqn.clone(),
            hostid: uuid::Uuid::from_bytes(o.hostid).to_string(),
            subnqn: ctrl.info().subnqn.clone(),
            name: format!("cntlid={}", ctrl.cntlid()),
            transport: ctrl.transport().name(),
            address: format!("traddr={},trsvcid={}", addr.ip(), addr.port()),
            state: ctrl.state().name(),
        }
    }
}
