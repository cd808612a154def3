//! Choosing a path for a command from what each path is like now ([`Candidate`]): pure, so the policy is
//! tested without controllers.

use nvmf_common::nvme::log_page::AnaState;

use crate::controller::IoPolicy;

/// A path as the choice sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Candidate {
    /// Its controller is live (and has I/O queues).
    pub(super) live: bool,
    /// The namespace's ANA state through it (`None`: not reported, as good as optimized).
    pub(super) ana: Option<AnaState>,
    /// It may serve I/O later (reconnecting, inaccessible, changing) if it does not now.
    pub(super) may_return: bool,
    /// Commands outstanding on the queue the command would go to.
    pub(super) outstanding: u64,
}

impl Candidate {
    /// No path.
    pub(super) const NONE: Candidate = Candidate { live: false, ana: None, may_return: false, outstanding: 0 };

    /// This candidate, not usable now but possibly later (a path whose connection just refused a command).
    pub(super) const fn may_return(self) -> Candidate {
        Candidate { live: false, may_return: true, ..self }
    }

    /// 0 for optimized (or no ANA), 1 for non-optimized; `None` when it cannot serve I/O now.
    fn tier(&self) -> Option<u8> {
        if !self.live {
            return None;
        }
        match self.ana {
            None | Some(AnaState::Optimized) => Some(0),
            Some(AnaState::NonOptimized) => Some(1),
            Some(_) => None,
        }
    }
}

/// What to do with a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Choice {
    /// Send it on this path.
    Path(usize),
    /// No path serves I/O now, but one may again.
    Wait,
    /// No path serves I/O and none can again.
    None,
}

/// The path for a command among `candidates` under `policy`; `start` rotates round-robin (a counter the
/// caller bumps per command).
pub(super) fn choose(candidates: &[Candidate], policy: IoPolicy, start: usize) -> Choice {
    let Some(best) = candidates.iter().filter_map(Candidate::tier).min() else {
        return if candidates.iter().any(|c| c.may_return) { Choice::Wait } else { Choice::None };
    };
    let n = candidates.len();
    let in_best = |i: &usize| candidates[*i].tier() == Some(best);
    let chosen = match policy {
        IoPolicy::RoundRobin => (0..n).map(|k| (start + k) % n).find(in_best),
        IoPolicy::QueueDepth => {
            (0..n).map(|k| (start + k) % n).filter(in_best).min_by_key(|&i| candidates[i].outstanding)
        }
    };
    chosen.map_or(Choice::None, Choice::Path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(ana: Option<AnaState>, outstanding: u64) -> Candidate {
        Candidate { live: true, ana, may_return: true, outstanding }
    }

    const OPT: Option<AnaState> = Some(AnaState::Optimized);
    const NON: Option<AnaState> = Some(AnaState::NonOptimized);
    const INACC: Option<AnaState> = Some(AnaState::Inaccessible);

    #[test]
    fn optimized_paths_first_then_non_optimized_never_inaccessible() {
        let c = [path(NON, 0), path(OPT, 0), path(INACC, 0)];
        for start in 0..6 {
            assert_eq!(choose(&c, IoPolicy::RoundRobin, start), Choice::Path(1));
        }
        let c = [path(INACC, 0), path(NON, 0)];
        assert_eq!(choose(&c, IoPolicy::RoundRobin, 0), Choice::Path(1));
        // Not reporting ANA counts as optimized.
        let c = [path(NON, 0), path(None, 0)];
        assert_eq!(choose(&c, IoPolicy::QueueDepth, 0), Choice::Path(1));
    }

    #[test]
    fn round_robin_alternates_and_queue_depth_takes_the_emptiest() {
        let c = [path(OPT, 5), path(OPT, 1), path(NON, 0)];
        let picks: Vec<Choice> = (0..4).map(|s| choose(&c, IoPolicy::RoundRobin, s)).collect();
        assert_eq!(picks, [Choice::Path(0), Choice::Path(1), Choice::Path(0), Choice::Path(0)]);
        for start in 0..3 {
            assert_eq!(choose(&c, IoPolicy::QueueDepth, start), Choice::Path(1));
        }
    }

    #[test]
    fn waits_while_a_path_may_return_and_gives_up_when_none_can() {
        let reconnecting = Candidate { live: false, ana: OPT, may_return: true, outstanding: 0 };
        let failed = Candidate { live: false, ana: OPT, may_return: false, outstanding: 0 };
        let lost = Candidate { live: true, ana: Some(AnaState::PersistentLoss), may_return: false, outstanding: 0 };
        assert_eq!(choose(&[failed, reconnecting], IoPolicy::RoundRobin, 0), Choice::Wait);
        assert_eq!(choose(&[path(INACC, 0)], IoPolicy::RoundRobin, 0), Choice::Wait);
        assert_eq!(choose(&[failed, lost], IoPolicy::RoundRobin, 0), Choice::None);
        assert_eq!(choose(&[], IoPolicy::RoundRobin, 0), Choice::None);
        assert_eq!(choose(&[Candidate::NONE.may_return()], IoPolicy::RoundRobin, 0), Choice::Wait);
    }

    #[test]
    fn policies_parse_by_linux_name() {
        assert_eq!("queue-depth".parse::<IoPolicy>(), Ok(IoPolicy::QueueDepth));
        assert_eq!(IoPolicy::RoundRobin.to_string().parse::<IoPolicy>(), Ok(IoPolicy::RoundRobin));
        assert!("numa".parse::<IoPolicy>().is_err());
    }
}
