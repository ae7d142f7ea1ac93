//! A rehearsal's faults, decided before it starts: a seed and the kinds asked for give the same
//! faults at the same points every time (pure). A point is the number of events handed to the
//! function so far (redeliveries too), across every instance: the clock a fault plan runs on,
//! since wall-clock times move with the machine's speed and invocations with batching.

use std::time::Duration;

use serde::Serialize;

/// What may be asked for (`--faults`): each names what Azure does to a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// The handler process killed mid-invocation (an instance recycled, an out-of-memory kill).
    KillHandler,
    /// A second instance joins, takes its share of the partitions, and leaves again (scale-out
    /// and scale-in).
    ScaleOut,
    /// An owner frozen past its ownership (a long pause) while another instance takes its
    /// partitions, then resumed: it finishes the batch it had.
    Freeze,
    /// An output binding failing for a few seconds (a throttled send, a blob write answered 503).
    OutputFailure,
    /// The hub ending the receive links (ServerBusy, or a stolen link); clients reconnect.
    Detach,
    /// The checkpoint store unavailable for a few seconds.
    StoreOutage,
    /// Offsets as a geo-replicated namespace hands them out (opaque `OffsetString`, `Offset` -1).
    GeoOffsets,
    /// Partitions added to the trigger's event hub while the function runs (Premium and
    /// Dedicated tiers): new keys' events go to partitions nobody owns yet. Simulated only.
    AddPartitions,
    /// The trigger's event hub deleted and created again under its name: its partitions start
    /// empty, numbered from 0, while the checkpoints stay ahead of them. Simulated only.
    RecreateHub,
}

impl FaultKind {
    pub const ALL: [FaultKind; 9] = [
        FaultKind::KillHandler,
        FaultKind::ScaleOut,
        FaultKind::Freeze,
        FaultKind::OutputFailure,
        FaultKind::Detach,
        FaultKind::StoreOutage,
        FaultKind::GeoOffsets,
        FaultKind::AddPartitions,
        FaultKind::RecreateHub,
    ];

    /// Every kind but geo-replication offsets, which change what a function is handed rather
    /// than how often, and the two changes to the event hub itself (added partitions, the hub
    /// recreated), which are operations a team schedules: a rehearsal with them is a question
    /// of its own.
    pub const DEFAULT: [FaultKind; 6] = [
        FaultKind::KillHandler,
        FaultKind::ScaleOut,
        FaultKind::Freeze,
        FaultKind::OutputFailure,
        FaultKind::Detach,
        FaultKind::StoreOutage,
    ];

    /// Whether one `hubhost emulate` instance can carry it out alone (scale-out needs a second
    /// instance, detach the hub: both are `hubhost rehearse`'s).
    pub fn on_one_instance(self) -> bool {
        !matches!(self, FaultKind::ScaleOut | FaultKind::Detach) && !self.simulated_only()
    }

    /// Whether only the simulated rehearsal can carry it out: the local hub neither adds
    /// partitions to a running event hub nor deletes one.
    pub fn simulated_only(self) -> bool {
        matches!(self, FaultKind::AddPartitions | FaultKind::RecreateHub)
    }

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillHandler => "kill-handler",
            FaultKind::ScaleOut => "scale-out",
            FaultKind::Freeze => "freeze",
            FaultKind::OutputFailure => "output-failure",
            FaultKind::Detach => "detach",
            FaultKind::StoreOutage => "store-outage",
            FaultKind::GeoOffsets => "geo-offsets",
            FaultKind::AddPartitions => "add-partitions",
            FaultKind::RecreateHub => "recreate-hub",
        }
    }

    /// A `--faults` list: names separated by commas; `all` and `default` as shorthands.
    pub fn parse_list(text: &str) -> Result<Vec<FaultKind>, String> {
        let mut kinds = Vec::new();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "all" => kinds.extend(FaultKind::ALL),
                "default" => kinds.extend(FaultKind::DEFAULT),
                _ => kinds.push(
                    FaultKind::ALL
                        .into_iter()
                        .find(|k| k.name() == name)
                        .ok_or_else(|| {
                            format!(
                                "unknown fault `{name}` (known: {}, all, default)",
                                FaultKind::ALL.map(FaultKind::name).join(", ")
                            )
                        })?,
                ),
            }
        }
        kinds.dedup();
        Ok(kinds)
    }
}

/// One fault as it is carried out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "fault", rename_all = "kebab-case")]
pub enum Fault {
    KillHandler,
    InstanceJoins,
    InstanceLeaves,
    Freeze {
        #[serde(rename = "ms")]
        millis: u64,
    },
    OutputFails {
        output: String,
        #[serde(rename = "ms")]
        millis: u64,
    },
    Detach {
        server_busy: bool,
    },
    StoreDown {
        #[serde(rename = "ms")]
        millis: u64,
    },
    GeoOffsets,
    AddPartitions {
        added: u32,
    },
    RecreateHub,
}

impl Fault {
    pub fn duration(&self) -> Option<Duration> {
        match self {
            Fault::Freeze { millis }
            | Fault::StoreDown { millis }
            | Fault::OutputFails { millis, .. } => Some(Duration::from_millis(*millis)),
            _ => None,
        }
    }
}

/// A fault and the count of events handed out at which it fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Scheduled {
    pub at_event: u64,
    #[serde(flatten)]
    pub fault: Fault,
}

/// How long ownership lasts without renewal in a rehearsal (host.json's
/// `partitionOwnershipExpirationInterval`, and the expiry instances give each other): short, so
/// that a frozen or departed owner's partitions move within seconds.
pub const OWNERSHIP_EXPIRY: Duration = Duration::from_secs(3);

/// The faults of a rehearsal of `inputs` events: `count` faults drawn from `kinds` in turn
/// (at least one of each), at points between 5% and 60% of the inputs, in order. Freezes fall
/// while a second instance is up, so that one takes over; `outputs` are the output bindings an
/// output failure may pick.
pub fn schedule(
    seed: u64,
    kinds: &[FaultKind],
    count: usize,
    inputs: usize,
    outputs: &[String],
) -> Vec<Scheduled> {
    let mut rng = SplitMix(seed);
    let inputs = inputs.max(20) as u64;
    let (low, high) = (inputs / 20, inputs * 6 / 10);
    let point = |rng: &mut SplitMix| low + rng.below(high - low + 1);
    let mut plan = Vec::new();
    let point_kinds: Vec<FaultKind> = kinds
        .iter()
        .copied()
        .filter(|k| !matches!(k, FaultKind::GeoOffsets | FaultKind::ScaleOut))
        .collect();
    if kinds.contains(&FaultKind::GeoOffsets) {
        plan.push(Scheduled {
            at_event: 0,
            fault: Fault::GeoOffsets,
        });
    }
    let scale = kinds.contains(&FaultKind::ScaleOut);
    let rounds = count.max(point_kinds.len() + usize::from(scale));
    for i in 0..rounds {
        let Some(kind) = (!point_kinds.is_empty()).then(|| point_kinds[i % point_kinds.len()])
        else {
            break;
        };
        let fault = match kind {
            FaultKind::KillHandler => Fault::KillHandler,
            FaultKind::Freeze => Fault::Freeze {
                millis: OWNERSHIP_EXPIRY.as_millis() as u64 * 2 + rng.below(2000),
            },
            FaultKind::OutputFailure => match outputs {
                [] => continue,
                _ => Fault::OutputFails {
                    output: outputs[rng.below(outputs.len() as u64) as usize].clone(),
                    millis: 1000 + rng.below(3000),
                },
            },
            FaultKind::Detach => Fault::Detach {
                server_busy: rng.below(2) == 0,
            },
            FaultKind::StoreOutage => Fault::StoreDown {
                millis: 1500 + rng.below(3000),
            },
            // As teams raise a count: by a quarter, a half, or doubling 16.
            FaultKind::AddPartitions => Fault::AddPartitions {
                added: [4, 8, 16][rng.below(3) as usize],
            },
            FaultKind::RecreateHub => Fault::RecreateHub,
            FaultKind::ScaleOut | FaultKind::GeoOffsets => unreachable!("filtered above"),
        };
        plan.push(Scheduled {
            at_event: point(&mut rng),
            fault,
        });
    }
    // A second instance for the freezes to hand partitions to, and for scale-out itself: it
    // joins before the first freeze and leaves after the last one.
    let freezes: Vec<u64> = plan
        .iter()
        .filter(|s| matches!(s.fault, Fault::Freeze { .. }))
        .map(|s| s.at_event)
        .collect();
    if scale || !freezes.is_empty() {
        let join = freezes
            .iter()
            .min()
            .map(|first| first.saturating_sub(inputs / 20).max(1))
            .unwrap_or_else(|| point(&mut rng));
        let leave = freezes
            .iter()
            .max()
            .map(|last| last + inputs / 10)
            .unwrap_or_else(|| join + inputs / 5)
            .max(join + 1);
        plan.push(Scheduled {
            at_event: join,
            fault: Fault::InstanceJoins,
        });
        plan.push(Scheduled {
            at_event: leave,
            fault: Fault::InstanceLeaves,
        });
    }
    plan.sort_by_key(|s| s.at_event);
    plan
}

/// A small seeded generator (SplitMix64): the same seed, the same sequence, on every platform.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..n` for a fault plan (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outputs() -> Vec<String> {
        vec!["alarms".into(), "poison".into()]
    }

    #[test]
    fn the_same_seed_gives_the_same_plan_and_another_seed_another() {
        let a = schedule(7, &FaultKind::DEFAULT, 12, 400, &outputs());
        assert_eq!(a, schedule(7, &FaultKind::DEFAULT, 12, 400, &outputs()));
        assert_ne!(a, schedule(8, &FaultKind::DEFAULT, 12, 400, &outputs()));
    }

    #[test]
    fn every_kind_asked_for_is_in_the_plan_and_in_order() {
        let plan = schedule(1, &FaultKind::ALL, 0, 400, &outputs());
        let has = |f: fn(&Fault) -> bool| plan.iter().any(|s| f(&s.fault));
        assert!(has(|f| matches!(f, Fault::KillHandler)));
        assert!(has(|f| matches!(f, Fault::Freeze { .. })));
        assert!(has(|f| matches!(f, Fault::OutputFails { .. })));
        assert!(has(|f| matches!(f, Fault::Detach { .. })));
        assert!(has(|f| matches!(f, Fault::StoreDown { .. })));
        assert!(has(|f| matches!(f, Fault::GeoOffsets)));
        assert!(has(
            |f| matches!(f, Fault::AddPartitions { added } if *added >= 4)
        ));
        assert!(has(|f| matches!(f, Fault::RecreateHub)));
        assert!(plan.windows(2).all(|w| w[0].at_event <= w[1].at_event));
        assert!(plan.iter().all(|s| s.at_event <= 240 + 40));
    }

    #[test]
    fn freezes_fall_while_a_second_instance_is_up() {
        for seed in 0..200 {
            let plan = schedule(seed, &[FaultKind::Freeze], 5, 300, &outputs());
            let join = plan
                .iter()
                .find(|s| s.fault == Fault::InstanceJoins)
                .unwrap();
            let leave = plan
                .iter()
                .find(|s| s.fault == Fault::InstanceLeaves)
                .unwrap();
            for freeze in plan
                .iter()
                .filter(|s| matches!(s.fault, Fault::Freeze { .. }))
            {
                assert!(join.at_event < freeze.at_event, "seed {seed}: {plan:?}");
                assert!(freeze.at_event < leave.at_event, "seed {seed}: {plan:?}");
                assert!(freeze.fault.duration().unwrap() > OWNERSHIP_EXPIRY);
            }
        }
    }

    #[test]
    fn a_hundred_faults_when_asked() {
        let plan = schedule(3, &FaultKind::DEFAULT, 100, 2000, &outputs());
        assert!(plan.len() >= 100, "{}", plan.len());
    }

    #[test]
    fn fault_lists_parse_and_unknown_names_are_named() {
        assert_eq!(
            FaultKind::parse_list("freeze, kill-handler").unwrap(),
            [FaultKind::Freeze, FaultKind::KillHandler]
        );
        assert_eq!(FaultKind::parse_list("all").unwrap(), FaultKind::ALL);
        let error = FaultKind::parse_list("freeze,meteor").unwrap_err();
        assert!(
            error.contains("meteor") && error.contains("store-outage"),
            "{error}"
        );
    }
}
