//! The target configuration file as written: every key optional where the schema gives a default, values kept
//! as typed in the file so that validation can say precisely what is wrong. Unknown keys are rejected
//! (`deny_unknown_fields`) with the parser's list of the keys allowed there.
//!
//! The same types, filled in completely, are what [`super::TargetConfig`]'s `Display` serializes, so the printed
//! effective configuration reads back as itself.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::{LogFormat, Transport};
use crate::secret::RawSecret;

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTargetConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<RawLimits>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<RawDiscovery>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reactors: Option<RawReactors>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<RawMetrics>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<RawLogging>,
    #[serde(default, rename = "listener", skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<RawListener>,
    #[serde(default, rename = "subsystem", skip_serializing_if = "Vec::is_empty")]
    pub subsystems: Vec<RawSubsystem>,
}

/// `[target]`: controller limits shared by every subsystem.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mdts: Option<RawSize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_io_queues: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive_granularity_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive_max_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive_min_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_timeout_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_buffer_percent: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anonymous_buffer_percent: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections_per_address: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_prefix_v4: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_prefix_v6: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_controllers_per_host: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_registrants: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_dhgroups: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_threads: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_queue_depth: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_threads: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_queue_depth: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_attempts_per_second: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_keepalive_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_send_backlog: Option<RawSize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceph_mon_timeout_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceph_osd_timeout_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
}

/// `[[listener]]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawListener {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_capsule_data_size: Option<RawSize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ana_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ana_group_states: Option<RawGroupStates>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<RawTcp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma: Option<RawRdma>,
}

/// `[listener.rdma]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRdma {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_with_invalidate: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub srq: Option<bool>,
}

/// `[listener.tcp]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTcp {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_digest: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_digest: Option<bool>,
}

/// `[[subsystem]]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSubsystem {
    pub nqn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_any_host: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cntlid_min: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cntlid_max: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_namespaces: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_required: Option<bool>,
    #[serde(default, rename = "host", skip_serializing_if = "Vec::is_empty")]
    pub host_keys: Vec<RawHostKeys>,
    #[serde(default, rename = "namespace", skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<RawNamespace>,
}

/// `[[subsystem.host]]`: a host and its DH-HMAC-CHAP keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHostKeys {
    pub nqn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_key: Option<RawSecret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_key_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_ctrl_key: Option<RawSecret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_ctrl_key_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_hashes: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_dhgroups: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<RawSecret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key_compat: Option<bool>,
}

/// `[[subsystem.namespace]]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNamespace {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsid: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<RawSize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null: Option<RawSize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rbd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceph_conf: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceph_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffered_io: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nguid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eui64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ana_group: Option<i64>,
}

/// `[discovery]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDiscovery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_required: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive_max_ms: Option<i64>,
}

/// `[reactors]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReactors {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discard_queue_depth: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_window_us: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_io: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_zero_copy_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
}

/// `[metrics]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMetrics {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
}

/// `[logging]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLogging {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<LogFormat>,
}

/// `[[listener]] ana_group_states` as written: (ANA group ID as a key, state name) in file order, so that the
/// first bad entry in the file is the one reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RawGroupStates(pub Vec<(String, String)>);

impl Serialize for RawGroupStates {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(group, state)| (group, state)))
    }
}

impl<'de> Deserialize<'de> for RawGroupStates {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct GroupStatesVisitor;
        impl<'de> Visitor<'de> for GroupStatesVisitor {
            type Value = RawGroupStates;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<RawGroupStates, A::Error> {
                let mut entries = Vec::new();
                while let Some((group, state)) = map.next_entry::<String, String>()? {
                    entries.push((group, state));
                }
                Ok(RawGroupStates(entries))
            }
        }
        deserializer.deserialize_map(GroupStatesVisitor)
    }
}

/// A size as written: a string with a unit (`"1GiB"`) or a TOML integer of bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RawSize {
    Text(String),
    Bytes(i64),
}

impl Serialize for RawSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RawSize::Text(text) => serializer.serialize_str(text),
            RawSize::Bytes(bytes) => serializer.serialize_i64(*bytes),
        }
    }
}

impl<'de> Deserialize<'de> for RawSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SizeVisitor;
        impl Visitor<'_> for SizeVisitor {
            type Value = RawSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size: a string such as \"1GiB\" or an integer number of bytes")
            }
            fn visit_i64<E: de::Error>(self, bytes: i64) -> Result<RawSize, E> {
                Ok(RawSize::Bytes(bytes))
            }
            fn visit_u64<E: de::Error>(self, bytes: u64) -> Result<RawSize, E> {
                i64::try_from(bytes).map(RawSize::Bytes).map_err(|_| E::custom("size does not fit in 63 bits"))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<RawSize, E> {
                Ok(RawSize::Text(text.to_owned()))
            }
        }
        deserializer.deserialize_any(SizeVisitor)
    }
}
