//! The scale controller's decisions for Event Hubs functions, as pure functions.
//!
//! Two layers, as in Azure:
//! - **the extension** says how many instances one function wants. With target-based scaling
//!   (the default since Functions runtime 4.19) that is `EventHubsTargetScaler`:
//!   ⌈unprocessed events ÷ concurrency⌉, concurrency being `targetUnprocessedEventThreshold`,
//!   else `maxEventBatchSize`; rounded *up* to a count that spreads the partitions evenly
//!   (one of ⌈P ÷ c⌉ for c = 1..P, or 0) and so never above the partition count; and a smaller
//!   answer is held back while the last larger one is younger than 180 s. The older
//!   incremental `EventHubsScaleMonitor` votes out, in or none from the last samples instead
//!   ([`scale_monitor_vote`], behind `--scale-monitor`).
//! - **the platform** turns the functions' wishes into an instance count: scale-out requests
//!   of several functions are summed and win over scale-in, with at most four instances added
//!   per step; with only scale-in requests the largest remaining target is kept (no function
//!   is left below its own target); never above the app's instance limit.
//!
//! Read from Azure/azure-sdk-for-net `sdk/eventhub/Microsoft.Azure.WebJobs.Extensions.EventHubs`
//! (`Listeners/EventHubsTargetScaler.cs`, `EventHubsScaleMonitor.cs` and their tests, which are
//! ported below) and learn.microsoft.com `azure-functions/functions-target-based-scaling`;
//! docs/scaling.md explains them. Time is passed in, so every rule is tested without waiting.

use std::time::Duration;

/// A scale-in is ignored while the last scale-up is younger than this
/// (`ThrottleScaleDownIntervalInSeconds`).
pub const SCALE_IN_HOLD: Duration = Duration::from_secs(180);
/// Instances the platform adds at most per decision with target-based scaling.
pub const MAX_ADDED_PER_STEP: u32 = 4;
/// Samples the scale monitor needs before voting on load.
pub const MONITOR_SAMPLES: usize = 5;

/// Events one instance should carry: the platform's per-instance concurrency when it sends
/// one, else `targetUnprocessedEventThreshold`, else `maxEventBatchSize`. `None` when all are
/// missing or zero (the extension throws).
pub fn desired_concurrency(
    instance_concurrency: Option<u32>,
    target_unprocessed_event_threshold: Option<u32>,
    max_event_batch_size: u32,
) -> Option<u32> {
    instance_concurrency
        .or(target_unprocessed_event_threshold.filter(|t| *t > 0))
        .or(Some(max_event_batch_size))
        .filter(|c| *c >= 1)
}

/// The instance counts that spread `partitions` evenly: 0 and ⌈P ÷ c⌉ for c = 1..P, sorted.
pub fn valid_worker_counts(partitions: u32) -> Vec<u32> {
    let mut counts: Vec<u32> = (1..=partitions).map(|c| partitions.div_ceil(c)).collect();
    counts.push(0);
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// The first of `sorted` at or above `desired`, or the largest when `desired` is above all.
pub fn valid_worker_count(desired: u64, sorted: &[u32]) -> u32 {
    sorted
        .iter()
        .copied()
        .find(|c| u64::from(*c) >= desired)
        .or(sorted.last().copied())
        .unwrap_or(0)
}

/// ⌈unprocessed ÷ concurrency⌉; a negative backlog counts as none.
pub fn desired_workers(unprocessed_events: i64, concurrency: u32) -> u64 {
    u64::try_from(unprocessed_events)
        .unwrap_or(0)
        .div_ceil(u64::from(concurrency.max(1)))
}

/// What one function's target scaler asks for, before the hold.
pub fn target_workers(unprocessed_events: i64, partitions: u32, concurrency: u32) -> u32 {
    valid_worker_count(
        desired_workers(unprocessed_events, concurrency),
        &valid_worker_counts(partitions),
    )
}

/// The hold: a smaller target than `previous` is replaced by `previous` while the last
/// scale-up happened less than `hold` ago (`since_scale_up`; `None`: never).
pub fn hold_scale_in(
    current: u32,
    previous: u32,
    since_scale_up: Option<Duration>,
    hold: Duration,
) -> u32 {
    match since_scale_up {
        Some(age) if current < previous && age < hold => previous,
        _ => current,
    }
}

/// Why a target came out as it did, for the decision log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetDecision {
    /// ⌈unprocessed ÷ concurrency⌉, before rounding to an even spread.
    pub desired: u64,
    /// `desired` rounded up to an even spread of the partitions: what the function wants now.
    pub wanted: u32,
    /// The answer: `wanted`, unless a scale-in is held back by [`SCALE_IN_HOLD`] and the
    /// previous target stays.
    pub target: u32,
}

impl TargetDecision {
    /// A scale-in held back: the answer is not what the function wants now.
    pub fn held(&self) -> bool {
        self.target != self.wanted
    }
}

/// One function's target scaler: the target formula with the memory the hold needs.
#[derive(Debug, Clone)]
pub struct TargetScaler {
    pub concurrency: u32,
    pub hold: Duration,
    last_target: u32,
    /// When (on the caller's clock) the target last went up.
    last_scale_up: Option<Duration>,
}

impl TargetScaler {
    pub fn new(concurrency: u32, hold: Duration) -> Self {
        TargetScaler {
            concurrency,
            hold,
            last_target: 0,
            last_scale_up: None,
        }
    }

    /// The target at time `now` (any monotonic clock, the same at every call).
    pub fn decide(
        &mut self,
        now: Duration,
        unprocessed_events: i64,
        partitions: u32,
    ) -> TargetDecision {
        let desired = desired_workers(unprocessed_events, self.concurrency);
        let wanted = valid_worker_count(desired, &valid_worker_counts(partitions));
        let since = self.last_scale_up.map(|t| now.saturating_sub(t));
        let target = hold_scale_in(wanted, self.last_target, since, self.hold);
        if target > self.last_target {
            self.last_scale_up = Some(now);
        }
        self.last_target = target;
        TargetDecision {
            desired,
            wanted,
            target,
        }
    }
}

/// The incremental scale monitor's vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vote {
    ScaleOut,
    ScaleIn,
    None,
}

/// One sample of the scale monitor: the backlog and the partition count at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorSample {
    pub unprocessed_events: i64,
    pub partitions: u32,
}

/// `EventHubsScaleMonitor`'s vote for `workers` instances, from samples oldest first, with
/// the reason it gives.
pub fn scale_monitor_vote(workers: u32, samples: &[MonitorSample]) -> (Vote, &'static str) {
    let Some(latest) = samples.last() else {
        return (Vote::None, "no samples");
    };
    if latest.partitions > 0 && latest.partitions < workers {
        return (Vote::ScaleIn, "more instances than partitions");
    }
    if samples.len() < MONITOR_SAMPLES {
        return (Vote::None, "fewer than 5 samples");
    }
    if latest.unprocessed_events > i64::from(workers) * 1000 {
        return (
            Vote::ScaleOut,
            "more than 1,000 unprocessed events per instance",
        );
    }
    if samples.iter().all(|s| s.unprocessed_events == 0) {
        return (Vote::ScaleIn, "idle");
    }
    let last = &samples[samples.len() - MONITOR_SAMPLES..];
    let rising = last
        .windows(2)
        .all(|w| w[0].unprocessed_events < w[1].unprocessed_events);
    if samples[0].unprocessed_events > 0 && rising {
        return (Vote::ScaleOut, "unprocessed events rising");
    }
    if last
        .windows(2)
        .all(|w| w[0].unprocessed_events > w[1].unprocessed_events)
    {
        return (Vote::ScaleIn, "unprocessed events falling");
    }
    (Vote::None, "steady")
}

/// The incremental model's next count: one instance more or less per vote, as that model adds
/// or removes at most one worker at a time.
pub fn incremental_step(current: u32, vote: Vote) -> u32 {
    match vote {
        Vote::ScaleOut => current + 1,
        Vote::ScaleIn => current.saturating_sub(1),
        Vote::None => current,
    }
}

/// The platform's next instance count from the functions' targets: scale-out requests are
/// summed and win, adding at most [`MAX_ADDED_PER_STEP`]; with only scale-in requests the
/// largest target is kept; never above `max_instances`.
pub fn platform_step(current: u32, targets: &[u32], max_instances: u32) -> u32 {
    let wanted_more: u32 = targets.iter().map(|t| t.saturating_sub(current)).sum();
    let next = if wanted_more > 0 {
        current + wanted_more.min(MAX_ADDED_PER_STEP)
    } else {
        targets.iter().copied().max().unwrap_or(0)
    };
    next.min(max_instances)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: Duration = SCALE_IN_HOLD;

    /// `ThrottleScaleDownIfNecessaryInternal_ReturnsExpected`.
    #[test]
    fn a_scale_in_waits_180_s_after_the_last_scale_up() {
        for (current, previous, seconds, expected) in [
            (10, 9, 100, 10),
            (9, 10, 100, 10),
            (9, 10, 179, 10),
            (9, 10, 180, 9),
            (9, 10, 181, 9),
        ] {
            let since = Some(Duration::from_secs(seconds));
            assert_eq!(
                hold_scale_in(current, previous, since, HOLD),
                expected,
                "{current} after {previous}, {seconds} s since the scale-up"
            );
        }
        // Never scaled up: nothing to hold.
        assert_eq!(hold_scale_in(0, 3, None, HOLD), 0);
    }

    /// `GetScaleResultInternal_ReturnsExpected` (concurrency 10).
    #[test]
    fn the_target_is_events_over_concurrency_spread_evenly() {
        for (events, partitions, expected) in [
            (10, 10, 1),
            (20, 10, 2),
            (30, 10, 3),
            (60, 10, 10),
            (70, 10, 10),
            (150, 10, 10),
        ] {
            assert_eq!(
                target_workers(events, partitions, 10),
                expected,
                "{events} events on {partitions} partitions"
            );
        }
        assert_eq!(target_workers(0, 16, 100), 0);
        assert_eq!(target_workers(-5, 16, 100), 0);
        assert_eq!(target_workers(1_000_000, 16, 100), 16);
        assert_eq!(target_workers(550, 16, 100), 6);
    }

    /// `GetDesiredConcurrencyInternal_ReturnsExpected`.
    #[test]
    fn concurrency_comes_from_the_platform_then_the_threshold_then_the_batch_size() {
        assert_eq!(desired_concurrency(Some(10), Some(30), 20), Some(10));
        assert_eq!(desired_concurrency(None, Some(30), 20), Some(30));
        assert_eq!(desired_concurrency(None, None, 20), Some(20));
        assert_eq!(desired_concurrency(None, None, 100), Some(100));
        assert_eq!(desired_concurrency(None, Some(0), 100), Some(100));
        assert_eq!(desired_concurrency(None, None, 0), None);
    }

    /// `TestGetSortedValidWorkerCountsForPartitionCount`.
    #[test]
    fn valid_counts_spread_the_partitions_evenly() {
        assert_eq!(valid_worker_counts(10), [0, 1, 2, 3, 4, 5, 10]);
        assert_eq!(valid_worker_counts(1), [0, 1]);
        assert_eq!(valid_worker_counts(5), [0, 1, 2, 3, 5]);
        assert_eq!(valid_worker_counts(20), [0, 1, 2, 3, 4, 5, 7, 10, 20]);
        assert_eq!(
            valid_worker_counts(32),
            [0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 16, 32]
        );
        assert_eq!(valid_worker_counts(0), [0]);
    }

    /// `GetSortedValidWorkerCountsForPartitionCount_ReturnsExpected`.
    #[test]
    fn a_desired_count_rounds_up_to_the_next_valid_one() {
        let sorted = [1, 4, 10, 20];
        for (desired, expected) in [(2, 4), (21, 20), (0, 1), (10, 10), (2_147_483_650, 20)] {
            assert_eq!(valid_worker_count(desired, &sorted), expected, "{desired}");
        }
        assert_eq!(valid_worker_count(2_147_483_650, &[1]), 1);
        assert_eq!(valid_worker_count(3, &[]), 0);
    }

    #[test]
    fn the_scaler_remembers_its_last_scale_up_for_the_hold() {
        let mut scaler = TargetScaler::new(100, HOLD);
        let at = Duration::from_secs;
        assert_eq!(scaler.decide(at(0), 1_000_000, 16).target, 16);
        // The backlog is gone a minute later: held at 16.
        let d = scaler.decide(at(60), 0, 16);
        assert_eq!((d.desired, d.target, d.held()), (0, 16, true));
        assert!(scaler.decide(at(179), 0, 16).held());
        // 180 s after the scale-up, the scale-in goes through.
        let d = scaler.decide(at(180), 0, 16);
        assert_eq!((d.target, d.held()), (0, false));
        // A scale-up is never held.
        assert_eq!(scaler.decide(at(181), 350, 16).target, 4);
        assert_eq!(scaler.decide(at(200), 150, 16).target, 4);
    }

    fn samples(counts: &[i64], partitions: u32) -> Vec<MonitorSample> {
        counts
            .iter()
            .map(|c| MonitorSample {
                unprocessed_events: *c,
                partitions,
            })
            .collect()
    }

    /// `EventHubsScaleMonitorTests.GetScaleStatus_*`.
    #[test]
    fn the_scale_monitor_votes_as_the_extension() {
        assert_eq!(scale_monitor_vote(1, &[]).0, Vote::None);
        let rising = [2500, 2505, 2612, 2700, 2810, 2900];
        // More instances than partitions: in, whatever the load.
        assert_eq!(
            scale_monitor_vote(17, &samples(&rising, 16)),
            (Vote::ScaleIn, "more instances than partitions")
        );
        assert_eq!(
            scale_monitor_vote(1, &samples(&rising, 0)),
            (
                Vote::ScaleOut,
                "more than 1,000 unprocessed events per instance"
            )
        );
        assert_eq!(
            scale_monitor_vote(3, &samples(&[0; 6], 0)),
            (Vote::ScaleIn, "idle")
        );
        assert_eq!(
            scale_monitor_vote(1, &samples(&[10, 20, 40, 80, 100, 150], 0)),
            (Vote::ScaleOut, "unprocessed events rising")
        );
        assert_eq!(
            scale_monitor_vote(1, &samples(&[150, 100, 80, 40, 20, 10], 0)),
            (Vote::ScaleIn, "unprocessed events falling")
        );
        assert_eq!(
            scale_monitor_vote(2, &samples(&[1500, 1600, 1400, 1300, 1700, 1600], 0)),
            (Vote::None, "steady")
        );
        assert_eq!(
            scale_monitor_vote(1, &samples(&[5000; 4], 16)),
            (Vote::None, "fewer than 5 samples")
        );
        assert_eq!(incremental_step(2, Vote::ScaleOut), 3);
        assert_eq!(incremental_step(0, Vote::ScaleIn), 0);
    }

    #[test]
    fn the_platform_adds_at_most_four_and_sums_scale_out_requests() {
        assert_eq!(platform_step(0, &[16], 100), 4);
        assert_eq!(platform_step(4, &[16], 100), 8);
        assert_eq!(platform_step(14, &[16], 100), 16);
        // Two functions wanting one more each: two more.
        assert_eq!(platform_step(3, &[4, 4], 100), 5);
        // Scale-out wins over scale-in.
        assert_eq!(platform_step(3, &[1, 5], 100), 5);
        // Only scale-in: the largest target stays.
        assert_eq!(platform_step(8, &[2, 4], 100), 4);
        assert_eq!(platform_step(8, &[0], 100), 0);
        // The app's limit.
        assert_eq!(platform_step(2, &[16], 3), 3);
        assert_eq!(platform_step(2, &[], 3), 0);
    }

    /// A deterministic run of the whole loop: a backlog of 1,000,000 events on 16 partitions,
    /// each instance draining 5,000 events per 10 s step. The pool grows by four per step to
    /// the partition count, drains, holds 180 s after its last scale-up, then goes to zero.
    #[test]
    fn a_backlog_is_drained_then_the_pool_scales_to_zero_after_the_hold() {
        let mut scaler = TargetScaler::new(100, HOLD);
        let (mut backlog, mut instances) = (1_000_000i64, 0u32);
        let mut counts = Vec::new();
        let mut drained_at = None;
        for step in 0..100u64 {
            let now = Duration::from_secs(step * 10);
            let decision = scaler.decide(now, backlog, 16);
            instances = platform_step(instances, &[decision.target], 200);
            counts.push(instances);
            backlog = (backlog - i64::from(instances) * 5_000).max(0);
            if backlog == 0 && drained_at.is_none() {
                drained_at = Some(step);
            }
        }
        assert_eq!(&counts[..5], [4, 8, 12, 16, 16]);
        assert!(counts.iter().all(|c| *c <= 16));
        let drained = drained_at.expect("drained") as usize;
        // The target went up once, at step 0 (the platform then took four steps to reach
        // it): held at 16 until 180 s after that, then straight to zero.
        let last_full = counts.iter().rposition(|c| *c == 16).unwrap();
        assert_eq!(last_full, 17, "{counts:?}");
        assert!(drained < last_full);
        assert!(
            counts[last_full + 1..].iter().all(|c| *c == 0),
            "{counts:?}"
        );
    }
}
