//! Which faults a chaos run injects, in which order and for how long: a pure function of the
//! seed, so that a run that found something can be repeated exactly (`--seed`).
//!
//! The kinds come in shuffled rounds of one of each, so every kind is drawn as often as the
//! others (±1) whatever the count, and consecutive faults still vary: a kind can follow itself
//! across two rounds, and faults land while the previous one's rebalancing is still going on.

use std::time::Duration;

use hubhost_app::fleet::Rng;

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum FaultKind {
    /// `kill -9` of an instance, started again (same id) after `hold`.
    KillInstance,
    /// `kill -9` of an instance's custom handler only; the emulated host restarts it.
    KillHandler,
    /// SIGSTOP of an instance and its handler for `hold` (longer than the ownership expiry),
    /// then SIGCONT: a zombie that wakes up believing it still owns its partitions.
    Freeze,
    /// `kill -9` of the event hub, started again on the same data after `hold`.
    KillHub,
    /// The checkpoint and app store unavailable for `hold` (Azurite stopped; a directory
    /// made read-only).
    StorageOutage,
    /// SIGTERM of an instance (it checkpoints and lets go), started again after `hold`.
    GracefulRestart,
}

impl FaultKind {
    pub const ALL: [FaultKind; 6] = [
        FaultKind::KillInstance,
        FaultKind::KillHandler,
        FaultKind::Freeze,
        FaultKind::KillHub,
        FaultKind::StorageOutage,
        FaultKind::GracefulRestart,
    ];

    /// The name in the report and in `--kinds`.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillInstance => "kill-instance",
            FaultKind::KillHandler => "kill-handler",
            FaultKind::Freeze => "freeze",
            FaultKind::KillHub => "kill-hub",
            FaultKind::StorageOutage => "storage-outage",
            FaultKind::GracefulRestart => "graceful-restart",
        }
    }

    pub fn parse(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether the fault takes an instance (so [`Fault::instance`] means something).
    pub fn hits_an_instance(self) -> bool {
        !matches!(self, FaultKind::KillHub | FaultKind::StorageOutage)
    }
}

/// One fault of the schedule.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Fault {
    pub kind: FaultKind,
    /// Which instance (an index into the pool), for the kinds that hit one.
    pub instance: usize,
    /// How long the fault lasts: the time down before a restart, frozen, or without storage.
    pub hold: Duration,
    /// The pause after the pool has recovered, before the next fault.
    pub pause: Duration,
}

/// The bounds the schedule draws from.
#[derive(Debug, Clone)]
pub struct FaultBounds {
    pub instances: usize,
    /// The pool's ownership expiry: a freeze lasts longer than it.
    pub expiry: Duration,
    /// Storage outages last between these.
    pub outage: (Duration, Duration),
    /// The kinds to draw from (all of them unless narrowed).
    pub kinds: Vec<FaultKind>,
}

/// `count` faults drawn from `seed`.
pub fn schedule(seed: u64, count: usize, bounds: &FaultBounds) -> Vec<Fault> {
    let mut rng = Rng::new(seed);
    let kinds = if bounds.kinds.is_empty() {
        FaultKind::ALL.to_vec()
    } else {
        bounds.kinds.clone()
    };
    let mut faults = Vec::with_capacity(count);
    while faults.len() < count {
        let mut round = kinds.clone();
        // Fisher–Yates with the seeded generator.
        for i in (1..round.len()).rev() {
            round.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for kind in round.into_iter().take(count - faults.len()) {
            let hold = match kind {
                // 0 s: the restart reclaims its own records; beyond the expiry: the others
                // take over first and the restart joins as a newcomer.
                FaultKind::KillInstance | FaultKind::GracefulRestart => {
                    between(&mut rng, 0, 10_000)
                }
                FaultKind::KillHandler => Duration::ZERO,
                FaultKind::Freeze => bounds.expiry + between(&mut rng, 1_000, 8_000),
                FaultKind::KillHub => between(&mut rng, 0, 5_000),
                FaultKind::StorageOutage => between(
                    &mut rng,
                    bounds.outage.0.as_millis() as u64,
                    bounds.outage.1.as_millis() as u64,
                ),
            };
            faults.push(Fault {
                kind,
                instance: rng.below(bounds.instances.max(1) as u64) as usize,
                hold,
                pause: between(&mut rng, 500, 3_000),
            });
        }
    }
    faults
}

/// Uniform in [lo, hi] milliseconds.
fn between(rng: &mut Rng, lo: u64, hi: u64) -> Duration {
    let (lo, hi) = (lo.min(hi), lo.max(hi));
    Duration::from_millis(lo + rng.below(hi - lo + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> FaultBounds {
        FaultBounds {
            instances: 3,
            expiry: Duration::from_secs(6),
            outage: (Duration::from_secs(10), Duration::from_secs(60)),
            kinds: Vec::new(),
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_faults_and_another_seed_others() {
        let a = schedule(7, 100, &bounds());
        assert_eq!(a, schedule(7, 100, &bounds()));
        assert_ne!(a, schedule(8, 100, &bounds()));
        assert_eq!(a.len(), 100);
    }

    #[test]
    fn every_kind_is_drawn_equally_often() {
        for count in [6, 20, 101] {
            let faults = schedule(3, count, &bounds());
            let counts: Vec<usize> = FaultKind::ALL
                .iter()
                .map(|k| faults.iter().filter(|f| f.kind == *k).count())
                .collect();
            let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(hi - lo <= 1, "{count} faults: {counts:?}");
        }
    }

    #[test]
    fn holds_stay_within_their_bounds() {
        let b = bounds();
        for f in schedule(11, 600, &b) {
            assert!(f.instance < b.instances);
            assert!(f.pause >= Duration::from_millis(500) && f.pause <= Duration::from_secs(3));
            match f.kind {
                FaultKind::Freeze => assert!(f.hold > b.expiry, "{f:?}"),
                FaultKind::StorageOutage => {
                    assert!(f.hold >= b.outage.0 && f.hold <= b.outage.1, "{f:?}")
                }
                FaultKind::KillHandler => assert_eq!(f.hold, Duration::ZERO),
                FaultKind::KillHub => assert!(f.hold <= Duration::from_secs(5)),
                FaultKind::KillInstance | FaultKind::GracefulRestart => {
                    assert!(f.hold <= Duration::from_secs(10))
                }
            }
        }
    }

    #[test]
    fn a_narrowed_schedule_draws_only_the_kinds_asked_for() {
        let b = FaultBounds {
            kinds: vec![FaultKind::Freeze, FaultKind::KillHub],
            ..bounds()
        };
        let faults = schedule(5, 9, &b);
        assert!(faults.iter().all(|f| b.kinds.contains(&f.kind)));
        assert_eq!(faults.len(), 9);
    }

    #[test]
    fn names_round_trip() {
        for k in FaultKind::ALL {
            assert_eq!(FaultKind::parse(k.name()), Some(k));
        }
        assert_eq!(FaultKind::parse("meteor"), None);
    }
}
