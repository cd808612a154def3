//! The host configuration file as written: every key optional where the schema gives a default, values kept as
//! typed so validation can say precisely what is wrong. Unknown keys are rejected (`deny_unknown_fields`) with
//! the parser's list of the keys allowed there.

use serde::Deserialize;

use crate::secret::RawSecret;
use crate::target::{RawLogging, RawMetrics, Transport};

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHostConfig {
    #[serde(default)]
    pub host: Option<RawHost>,
    #[serde(default)]
    pub metrics: Option<RawMetrics>,
    #[serde(default)]
    pub logging: Option<RawLogging>,
    #[serde(default, rename = "controller")]
    pub controllers: Vec<RawController>,
}

/// `[host]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHost {
    #[serde(default)]
    pub hostnqn: Option<String>,
    #[serde(default)]
    pub hostid: Option<String>,
    #[serde(default)]
    pub state_dir: Option<String>,
    #[serde(default)]
    pub control_socket: Option<String>,
    #[serde(default)]
    pub poll: Option<String>,
    #[serde(default)]
    pub poll_window_us: Option<i64>,
    #[serde(default)]
    pub cpus: Option<Vec<i64>>,
}

/// `[[controller]]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawController {
    #[serde(default)]
    pub transport: Option<Transport>,
    pub address: String,
    #[serde(default)]
    pub port: Option<i64>,
    pub nqn: String,
    #[serde(default)]
    pub nr_io_queues: Option<i64>,
    #[serde(default)]
    pub queue_size: Option<i64>,
    #[serde(default)]
    pub keep_alive_tmo: Option<i64>,
    #[serde(default)]
    pub reconnect_delay: Option<i64>,
    #[serde(default)]
    pub ctrl_loss_tmo: Option<i64>,
    #[serde(default)]
    pub fast_io_fail_tmo: Option<i64>,
    #[serde(default)]
    pub iopolicy: Option<String>,
    #[serde(default)]
    pub path_retries: Option<i64>,
    #[serde(default)]
    pub hdr_digest: Option<bool>,
    #[serde(default)]
    pub data_digest: Option<bool>,
    #[serde(default)]
    pub disable_sqflow: Option<bool>,
    #[serde(default)]
    pub host_iface: Option<String>,
    #[serde(default)]
    pub dhchap_secret: Option<RawSecret>,
    #[serde(default)]
    pub dhchap_secret_file: Option<String>,
    #[serde(default)]
    pub dhchap_ctrl_secret: Option<RawSecret>,
    #[serde(default)]
    pub dhchap_ctrl_secret_file: Option<String>,
    #[serde(default)]
    pub tls: Option<bool>,
    #[serde(default)]
    pub tls_key: Option<RawSecret>,
    #[serde(default)]
    pub tls_key_file: Option<String>,
    #[serde(default)]
    pub tls_identity_version: Option<i64>,
    #[serde(default)]
    pub tls_compat: Option<bool>,
    #[serde(default)]
    pub concat: Option<bool>,
    #[serde(default, rename = "export")]
    pub exports: Vec<RawExport>,
    #[serde(default, rename = "path")]
    pub paths: Vec<RawPath>,
}

/// `[[controller.path]]`: another address of the same subsystem (multipath).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPath {
    pub address: String,
    #[serde(default)]
    pub port: Option<i64>,
}

/// `[[controller.export]]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawExport {
    pub nsid: i64,
    #[serde(default)]
    pub nbd: Option<String>,
    #[serde(default)]
    pub ublk: Option<bool>,
}
