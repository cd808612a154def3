//! What the controller counts target-wide: Connects refused by a limit, DH-HMAC-CHAP transactions and the pool that
//! runs their DH work, host KATOs below the minimum, reservation conflicts and registrant-limit refusals.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{counter, counters_by, single_counter};
use crate::controller::{ConnectLimit, KatoMinimum, Target};

/// `nvmf_target_refused_connects{reason}`.
pub(super) fn refused_connects(encoder: &mut DescriptorEncoder<'_>, target: &Target) -> fmt::Result {
    counters_by(
        encoder,
        "nvmf_target_refused_connects",
        "Fabrics Connects refused by a limit: max_controllers_per_host, [discovery] keep_alive_max_ms, a host ID \
         bound to another host.",
        "reason",
        ConnectLimit::ALL.map(|limit| (limit.label(), target.connect_limit_refusals(limit))),
    )
}

/// `nvmf_target_auth{result,hash,dhgroup}`.
pub(super) fn auth(encoder: &mut DescriptorEncoder<'_>, target: &Target) -> fmt::Result {
    let mut m = encoder.encode_descriptor(
        "nvmf_target_auth",
        "DH-HMAC-CHAP transactions (in-band authentication of a queue) by result (success, failure), hash and \
         DH group (\"none\" for a failure before they were chosen).",
        None,
        MetricType::Counter,
    )?;
    for (success, hash, group, n) in target.auth_counters().snapshot() {
        let result = if success { "success" } else { "failure" };
        let hash = hash.map_or("none", |h| h.name());
        let group = group.map_or("none", |g| g.name());
        counter(&mut m, &[("result", result), ("hash", hash), ("dhgroup", group)], n)?;
    }
    Ok(())
}

/// `nvmf_target_auth_dh_steps`, `nvmf_target_auth_queue_full`, `nvmf_target_auth_rate_limited`.
pub(super) fn auth_pool(encoder: &mut DescriptorEncoder<'_>, target: &Target) -> fmt::Result {
    let pool = target.auth_pool().counters();
    let families = [
        (
            "nvmf_target_auth_dh_steps",
            "DH-HMAC-CHAP steps with Diffie-Hellman work (a key pair, a shared secret) run by the authentication \
             pool ([target] auth_threads), off the reactors.",
            pool.ran(),
        ),
        (
            "nvmf_target_auth_queue_full",
            "Times a DH-HMAC-CHAP step waited (its command retries) because the authentication pool had [target] \
             auth_queue_depth steps queued.",
            pool.queue_full(),
        ),
        (
            "nvmf_target_auth_rate_limited",
            "AUTH_Negotiates failed (AUTH_Failure1) because their peer address prefix was over [target] \
             auth_attempts_per_second.",
            target.auth_attempts().refused(),
        ),
    ];
    families.into_iter().try_for_each(|(name, help, n)| single_counter(encoder, name, help, n))
}

/// `nvmf_target_keep_alive_minimum{outcome}`.
pub(super) fn keep_alive_minimum(encoder: &mut DescriptorEncoder<'_>, target: &Target) -> fmt::Result {
    counters_by(
        encoder,
        "nvmf_target_keep_alive_minimum",
        "Host KATOs (Connect or Set Features) below [target] keep_alive_min_ms: raised to it, or refused (KATO 0).",
        "outcome",
        KatoMinimum::ALL.map(|outcome| (outcome.label(), target.kato_minimum(outcome))),
    )
}

/// `nvmf_target_reservation_conflicts`, `nvmf_target_reservation_registrant_limit` and the state pool's
/// `nvmf_target_reservation_writes`, `nvmf_target_reservation_write_queue_full`.
pub(super) fn reservations(encoder: &mut DescriptorEncoder<'_>, target: &Target) -> fmt::Result {
    let writes = target.state_pool().counters();
    let families = [
        (
            "nvmf_target_reservation_conflicts",
            "Commands failed with Reservation Conflict: I/O commands against a namespace's reservation, and \
             reservation commands the reservation state refused.",
            target.reservation_conflicts(),
        ),
        (
            "nvmf_target_reservation_registrant_limit",
            "Reservation Registers refused with Insufficient Capacity: the namespace had max_registrants registrants.",
            target.registrant_limit_refusals(),
        ),
        (
            "nvmf_target_reservation_writes",
            "Reservation state files written (Persist Through Power Loss) by the state pool, off the reactors.",
            writes.ran(),
        ),
        (
            "nvmf_target_reservation_write_queue_full",
            "Times a reservation command waited (it retries) because the state pool had 64 writes queued.",
            writes.queue_full(),
        ),
    ];
    families.into_iter().try_for_each(|(name, help, n)| single_counter(encoder, name, help, n))
}
