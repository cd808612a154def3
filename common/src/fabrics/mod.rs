//! NVMe over Fabrics commands and structures (NVMe-oF 1.1): Connect and its 1024-byte data, Property
//! Get/Set with the controller properties, Disconnect, NQN validation and the discovery log.
#![forbid(unsafe_code)]

pub mod connect;
pub mod disconnect;
pub mod discovery;
pub mod nqn;
pub mod property;
