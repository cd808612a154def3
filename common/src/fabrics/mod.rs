//! NVMe over Fabrics commands and structures (NVMe-oF 1.1): Connect and its 1024-byte data, Property
//! Get/Set with the controller properties, Disconnect, NQN validation, the discovery log, in-band
//! authentication (DH-HMAC-CHAP, [`auth`]) and the pre-shared keys of NVMe/TCP's TLS ([`tls`]).
#![forbid(unsafe_code)]

pub mod auth;
pub mod connect;
pub mod disconnect;
pub mod discovery;
pub mod nqn;
pub mod property;
pub mod tls;
