//! Buffer budgets: how much of a reactor's [`BufferPool`](super::BufferPool) one holder (a queue) may take, and how
//! much all anonymous holders together may take.
//!
//! A peer that passed no host check (a queue before its Connect completed, or a discovery controller, which any
//! peer may open) is *anonymous*. Without budgets, a few hundred such peers that each start a transfer and stall
//! (Connect data asked for by R2T and never sent; discovery log reads behind a zero TCP window) hold every buffer
//! of a reactor, and every host on it waits. So each holder may take at most its share of each size class, and
//! anonymous holders together at most theirs; what a budget refuses waits for the holder's own releases, never for
//! other holders. Shares are percentages of a class's count, at least one buffer each.

/// Most size classes a pool may have (the engine uses two: small and large).
pub const MAX_CLASSES: usize = 4;

/// Which limit refused a buffer the pool had (`nvmf_target_buffer_budget_waits_total{budget}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetLimit {
    /// The holder's own share (`queue_buffer_percent`), or the one buffer of a queue before Connect.
    Queue,
    /// The share of all anonymous holders together (`anonymous_buffer_percent`).
    Anonymous,
}

impl BudgetLimit {
    /// Every limit, in label order.
    pub const ALL: [BudgetLimit; 2] = [BudgetLimit::Queue, BudgetLimit::Anonymous];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            BudgetLimit::Queue => "queue",
            BudgetLimit::Anonymous => "anonymous",
        }
    }
}

/// Why [`IoEngine::alloc_within`](super::IoEngine::alloc_within) gave no buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocRefusal {
    /// Every class that fits is empty: wait for any release.
    Exhausted,
    /// A budget refused: wait for this holder's (or the anonymous holders') releases.
    Budget(BudgetLimit),
    /// No buffer of the pool can hold the length.
    TooLarge,
}

/// One holder's buffers by size class and the shares it may take. Accounting only: the pool enforces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferBudget {
    /// Buffers held, by class.
    pub(super) held: [u16; MAX_CLASSES],
    /// Of `held`, those counted against the anonymous share (taken while anonymous).
    pub(super) anonymous_held: [u16; MAX_CLASSES],
    /// Most buffers held in all classes together (a queue before Connect needs one, for its Connect data).
    pub(super) max_total: u16,
    /// The holder's share of each class, percent.
    pub(super) queue_percent: u8,
    /// The anonymous holders' share of each class, percent; `None` once the holder is admitted.
    pub(super) anonymous_percent: Option<u8>,
}

impl BufferBudget {
    /// The budget of an anonymous holder: at most `max_total` buffers, `queue_percent` of each class, and counted
    /// against the anonymous holders' `anonymous_percent`.
    pub fn anonymous(max_total: u16, queue_percent: u8, anonymous_percent: u8) -> Self {
        BufferBudget {
            held: [0; MAX_CLASSES],
            anonymous_held: [0; MAX_CLASSES],
            max_total,
            queue_percent,
            anonymous_percent: Some(anonymous_percent),
        }
    }

    /// From now on: at most `max_total` buffers and `queue_percent` of each class, anonymous under
    /// `anonymous_percent` or, with `None`, admitted. Buffers already held keep the accounting they were taken
    /// under.
    pub fn set_limits(&mut self, max_total: u16, queue_percent: u8, anonymous_percent: Option<u8>) {
        self.max_total = max_total;
        self.queue_percent = queue_percent;
        self.anonymous_percent = anonymous_percent;
    }

    /// Whether the holder counts against the anonymous share.
    pub fn is_anonymous(&self) -> bool {
        self.anonymous_percent.is_some()
    }

    /// Buffers held in all classes.
    pub fn held(&self) -> u16 {
        self.held.iter().sum()
    }
}

/// `percent` of `count`, at least one.
pub(super) fn share(count: usize, percent: u8) -> usize {
    (count * usize::from(percent) / 100).max(1)
}

#[cfg(test)]
mod tests {
    use super::super::BufferPool;
    use super::*;

    #[test]
    fn a_holder_takes_at_most_its_share_of_a_class_then_falls_back_to_the_next() {
        let mut pool = BufferPool::new(&[(4096, 4), (8192, 4)]).unwrap();
        let mut budget = BufferBudget::anonymous(u16::MAX, 50, 100);
        budget.set_limits(u16::MAX, 50, None);
        let ids: Vec<_> = (0..4).map(|_| pool.alloc_within(4096, &mut budget).unwrap()).collect();
        assert_eq!(budget.held, [2, 2, 0, 0], "two of each class: half of each");
        assert_eq!(pool.alloc_within(4096, &mut budget), Err(AllocRefusal::Budget(BudgetLimit::Queue)));
        // Another holder still finds the rest.
        let mut other = BufferBudget::anonymous(u16::MAX, 50, 100);
        other.set_limits(u16::MAX, 50, None);
        assert!(pool.alloc_within(4096, &mut other).is_ok());
        pool.release_within(ids[0], &mut budget);
        assert_eq!(budget.held(), 3);
        assert!(pool.alloc_within(4096, &mut budget).is_ok());
    }

    #[test]
    fn anonymous_holders_together_take_at_most_their_share() {
        let mut pool = BufferPool::new(&[(4096, 8)]).unwrap();
        let mut peers: Vec<_> = (0..4).map(|_| BufferBudget::anonymous(1, 100, 25)).collect();
        let a = pool.alloc_within(1024, &mut peers[0]).unwrap();
        assert_eq!(pool.alloc_within(1024, &mut peers[0]), Err(AllocRefusal::Budget(BudgetLimit::Queue)));
        let _b = pool.alloc_within(1024, &mut peers[1]).unwrap();
        assert_eq!(pool.alloc_within(1024, &mut peers[2]), Err(AllocRefusal::Budget(BudgetLimit::Anonymous)));
        // An admitted holder is not bound by the anonymous share.
        let mut host = BufferBudget::anonymous(u16::MAX, 100, 25);
        host.set_limits(u16::MAX, 100, None);
        let hosts: Vec<_> = (0..6).map(|_| pool.alloc_within(1024, &mut host).unwrap()).collect();
        assert_eq!(pool.alloc_within(1024, &mut host), Err(AllocRefusal::Exhausted));
        pool.release_within(a, &mut peers[0]);
        assert!(pool.alloc_within(1024, &mut peers[2]).is_ok());
        for id in hosts {
            pool.release_within(id, &mut host);
        }
        assert_eq!(host.held(), 0);
    }

    #[test]
    fn a_holder_admitted_while_holding_returns_its_anonymous_buffer_to_the_anonymous_share() {
        let mut pool = BufferPool::new(&[(4096, 4)]).unwrap();
        let mut queue = BufferBudget::anonymous(1, 100, 25);
        let connect_data = pool.alloc_within(1024, &mut queue).unwrap();
        queue.set_limits(u16::MAX, 100, None);
        let io = pool.alloc_within(4096, &mut queue).unwrap();
        let mut peer = BufferBudget::anonymous(1, 100, 25);
        assert_eq!(pool.alloc_within(1024, &mut peer), Err(AllocRefusal::Budget(BudgetLimit::Anonymous)));
        pool.release_within(connect_data, &mut queue);
        pool.release_within(io, &mut queue);
        assert!(pool.alloc_within(1024, &mut peer).is_ok());
        assert_eq!(queue.held(), 0);
    }

    #[test]
    fn lengths_no_class_holds_are_refused_as_too_large() {
        let mut pool = BufferPool::new(&[(4096, 1)]).unwrap();
        let mut budget = BufferBudget::anonymous(1, 100, 100);
        assert_eq!(pool.alloc_within(4097, &mut budget), Err(AllocRefusal::TooLarge));
        assert_eq!(budget.held(), 0);
    }
}
