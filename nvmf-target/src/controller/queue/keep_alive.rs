//! Keep Alive: the admin queue's timer (KATO after the last command on any of the controller's queues) and the
//! I/O queues' arrival reports that push it back (Traffic Based Keep Alive).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Association, Queue, QueueError, QueueKind, QueueState};
use crate::backend::IoEngine;
use crate::controller::association::{Controller, TRAFFIC_GRANULARITY};

impl Queue {
    /// When the keep-alive timer expires if no command arrives (admin queue with a KATO): KATO after the last
    /// command on any of the controller's queues (Traffic Based Keep Alive, as Identify reports). The reactor
    /// `poll`s the queue then (the queue's only timer).
    pub fn keep_alive_deadline(&self) -> Option<Instant> {
        match &self.state {
            QueueState::Connected(Association { controller, kind: QueueKind::Admin, .. }) => {
                let kato = controller.kato_ms();
                if kato == 0 {
                    return None;
                }
                self.keep_alive_start(controller).map(|t| t + Duration::from_millis(u64::from(kato)))
            }
            _ => None,
        }
    }

    /// An I/O queue's command arrived at `arrival`: tell the controller's keep-alive timer, at most every
    /// [`TRAFFIC_GRANULARITY`] (one shared write per interval, not per command).
    pub(super) fn publish_traffic(&mut self, arrival: Instant) {
        let QueueState::Connected(Association { controller, kind: QueueKind::Io(_), .. }) = &self.state else {
            return;
        };
        if self.traffic_published.is_none_or(|p| arrival.saturating_duration_since(p) >= TRAFFIC_GRANULARITY) {
            self.traffic_published = Some(arrival);
            controller.note_io_traffic(arrival);
        }
    }

    /// Where the keep-alive timer runs from: the later of this (admin) queue's last command and the I/O traffic
    /// the controller's queues published (`None` before either).
    fn keep_alive_start(&self, controller: &Controller) -> Option<Instant> {
        self.last_activity.max(controller.io_traffic())
    }

    pub(super) fn check_keep_alive(
        &mut self,
        engine: &mut IoEngine,
        controller: &Arc<Controller>,
        now: Instant,
    ) -> Result<(), QueueError> {
        self.last_activity.get_or_insert(now);
        let last = self.keep_alive_start(controller).unwrap_or(now);
        let kato_ms = controller.kato_ms();
        if kato_ms > 0 && now.saturating_duration_since(last) >= Duration::from_millis(u64::from(kato_ms)) {
            let cntlid = controller.cntlid();
            tracing::warn!(cntlid, kato_ms, hostnqn = %controller.hostnqn(), "keep alive timeout expired");
            controller.keep_alive_expired();
            self.disconnect(engine);
            return Err(QueueError::KeepAliveExpired { cntlid, kato_ms });
        }
        Ok(())
    }
}
