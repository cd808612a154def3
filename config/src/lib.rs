//! nvmf-config: the configuration schema of the nvmf-rs daemons, with validation whose errors say where (file,
//! line, column, key path), what is wrong and what is allowed.
//!
//! - [`target`]: the target's TOML file ([`TargetConfig::from_file`]) and its validated model; `Display` prints
//!   the effective configuration (every default written out) for `nvmf-target --check`.
//! - [`quickstart`]: the `nvmf-target` quick-start flags (`--listen`, `--namespace`, `--nqn`, `--allow-host`,
//!   `--metrics`; a clap `Args` the binary flattens) turned into a [`TargetConfig`] by the same validation.
//! - [`ids`]: namespace UUID/NGUID/EUI-64 and serial numbers: parsing, and the documented stable derivation from
//!   (subsystem NQN, NSID) used when they are not configured.
//! - [`reference`](mod@reference): the Markdown configuration reference (`docs/config-reference.md`), generated
//!   from the annotated examples and checked key by key against the schema.
//! - [`PollMode`]: how a data-path thread waits for work (`poll` in both files).
//! - [`size`]: size strings (`"1GiB"`, `"4K"`, `"10GB"`).
//! - [`error`]: [`ConfigError`], and the key paths and problems validation reports.
//!
//! Everything here runs once on the control plane at start-up (or reload); nothing blocks but reading the file.
//!
//! The host's configuration (issue 6) joins as a sibling module with its own file and `HostConfig::from_file`,
//! reusing `error`, `size`, `ids` and the span index that places errors; the two daemons read separate files,
//! so neither schema carries the other's keys.
#![deny(missing_docs)]

mod document;
pub mod error;
pub mod host;
pub mod ids;
mod poll;
pub mod quickstart;
pub mod reference;
pub mod secret;
pub mod size;
pub mod target;

pub use error::ConfigError;
pub use poll::PollMode;
pub use quickstart::{NamespaceSpec, QuickStart};
pub use target::TargetConfig;
