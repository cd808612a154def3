//! Connection admission: the most transport connections (NVMe/TCP connections, NVMe/RDMA queue pairs) one listener
//! (`[[listener]] max_connections`) and one peer address (`[target] max_connections_per_address`) may hold at once.
//! Peer addresses count as one within their prefix (`[target] address_prefix_v4`, `address_prefix_v6`: /32 and /64 by
//! default), for a host that owns a /64 has more addresses than any cap.
//!
//! Listener threads ask before handing a new connection to a reactor; a refused one is closed (TCP) or rejected
//! (RDMA CM) at once and counted (`nvmf_target_rejected_connections_total{reason}`). An admitted connection carries
//! an [`Admitted`] ticket for its whole life: dropping the ticket (with the connection, on whatever reactor) gives
//! its place back. Pre-Connect deadlines bound how long a place is held by a peer that never connects; these caps
//! bound how many places such peers can hold meanwhile. A mutex guards the counts: taken twice per connection, never
//! per command.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::controller::authentication::address_prefix;

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its listener holds `[[listener]] max_connections` connections.
    Listener,
    /// Its peer address (prefix) holds `[target] max_connections_per_address` connections.
    Address,
}

impl Refusal {
    /// Every reason, in label order.
    pub const ALL: [Refusal; 2] = [Refusal::Listener, Refusal::Address];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Listener => "listener_limit",
            Refusal::Address => "address_limit",
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    listeners: HashMap<u16, u32>,
    addresses: HashMap<IpAddr, u32>,
}

/// The live connections by listener and peer address, shared by every listener thread and reactor.
#[derive(Debug)]
pub struct Admission {
    per_address: u32,
    /// Prefix lengths under which addresses count as one.
    prefix_v4: u8,
    prefix_v6: u8,
    counts: Mutex<Counts>,
    rejected: [AtomicU64; Refusal::ALL.len()],
}

/// A connection's place, given back when dropped.
#[derive(Debug)]
pub struct Admitted {
    admission: Arc<Admission>,
    port_id: u16,
    address: IpAddr,
}

impl Admission {
    /// Admission with at most `per_address` connections from the addresses of one IPv4 `/prefix_v4` or IPv6
    /// `/prefix_v6`.
    pub fn new(per_address: u32, prefix_v4: u8, prefix_v6: u8) -> Arc<Self> {
        Arc::new(Admission {
            per_address,
            prefix_v4,
            prefix_v6,
            counts: Mutex::default(),
            rejected: Default::default(),
        })
    }

    /// The address `peer` counts as (the authentication attempts' rate keys addresses the same way).
    fn prefix_of(&self, peer: IpAddr) -> IpAddr {
        address_prefix(peer, self.prefix_v4, self.prefix_v6)
    }

    /// A place for a connection from `peer` on listener `port_id`, which holds at most `listener_max`; or why not
    /// (counted; the first refusal and every power of two after it are logged, so a flood cannot flood the log).
    pub fn admit(self: &Arc<Self>, port_id: u16, listener_max: u32, peer: IpAddr) -> Result<Admitted, Refusal> {
        let address = self.prefix_of(peer);
        let refusal = {
            let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
            let on_listener = counts.listeners.get(&port_id).copied().unwrap_or(0);
            let from_address = counts.addresses.get(&address).copied().unwrap_or(0);
            if on_listener >= listener_max {
                Refusal::Listener
            } else if from_address >= self.per_address {
                Refusal::Address
            } else {
                *counts.listeners.entry(port_id).or_default() += 1;
                *counts.addresses.entry(address).or_default() += 1;
                return Ok(Admitted { admission: Arc::clone(self), port_id, address });
            }
        };
        let n = self.rejected[refusal as usize].fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            let limit = match refusal {
                Refusal::Listener => listener_max,
                Refusal::Address => self.per_address,
            };
            tracing::warn!(traddr = %peer, port_id, reason = refusal.label(), limit, refused = n, "connection refused");
        }
        Err(refusal)
    }

    /// Connections refused so far for `reason`.
    pub fn rejected(&self, reason: Refusal) -> u64 {
        self.rejected[reason as usize].load(Ordering::Relaxed)
    }

    /// Connections admitted now on listener `port_id`.
    pub fn on_listener(&self, port_id: u16) -> u32 {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).listeners.get(&port_id).copied().unwrap_or(0)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut counts = self.admission.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.listeners.get_mut(&self.port_id) {
            *n -= 1;
            if *n == 0 {
                counts.listeners.remove(&self.port_id);
            }
        }
        if let Some(n) = counts.addresses.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                counts.addresses.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_per_listener_and_per_address_and_places_come_back_on_drop() {
        let admission = Admission::new(2, 32, 64);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let first = admission.admit(1, 3, a).unwrap();
        let _second = admission.admit(1, 3, "::ffff:192.0.2.1".parse().unwrap()).unwrap();
        assert_eq!(admission.admit(2, 3, a).unwrap_err(), Refusal::Address, "the same address, mapped or not");
        let _third = admission.admit(1, 3, b).unwrap();
        assert_eq!(admission.admit(1, 3, "192.0.2.3".parse().unwrap()).unwrap_err(), Refusal::Listener);
        assert_eq!((admission.rejected(Refusal::Address), admission.rejected(Refusal::Listener)), (1, 1));
        drop(first);
        assert_eq!(admission.on_listener(1), 2);
        let _again = admission.admit(1, 3, a).unwrap();
        assert_eq!(admission.on_listener(1), 3);
    }

    #[test]
    fn addresses_count_as_one_within_their_prefix() {
        let admission = Admission::new(2, 24, 64);
        let held = ["2001:db8::1", "2001:db8::ffff:2"].map(|a| admission.admit(1, 100, a.parse().unwrap()));
        assert!(held.iter().all(Result::is_ok));
        // Any other address of the /64 is the same peer; the next /64 is another.
        assert_eq!(admission.admit(1, 100, "2001:db8::1:2:3:4".parse().unwrap()).unwrap_err(), Refusal::Address);
        assert!(admission.admit(1, 100, "2001:db8:0:1::1".parse().unwrap()).is_ok());
        let _v4 = ["198.51.100.7", "198.51.100.200"].map(|a| admission.admit(1, 100, a.parse().unwrap()).unwrap());
        assert_eq!(admission.admit(1, 100, "198.51.100.9".parse().unwrap()).unwrap_err(), Refusal::Address);
        assert!(admission.admit(1, 100, "198.51.101.9".parse().unwrap()).is_ok());
        // Full-length prefixes: each address alone.
        let exact = Admission::new(1, 32, 128);
        let _a = exact.admit(1, 100, "2001:db8::1".parse().unwrap()).unwrap();
        assert!(exact.admit(1, 100, "2001:db8::2".parse().unwrap()).is_ok());
    }
}
