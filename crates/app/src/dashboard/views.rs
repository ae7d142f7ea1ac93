//! What the page shows, as pure functions of what the app and the processor wrote: window blocks
//! (`app::aggregate`), ownership and checkpoint records, and the hub's partition ends. No I/O
//! here — `dashboard::sources` reads, these decide — so every figure on the page is tested
//! without a browser or a store.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use crate::aggregate::{Alarm, SensorState, WindowAggregate};
use crate::sensor::{AlarmKind, SensorKind};
use hubhost_checkpoints::Checkpoint;
use hubhost_checkpoints::backlog::unprocessed_events;
use hubhost_eventhubs::PartitionEnd;

/// How far back the views look.
pub const HISTORY_MINUTES: i64 = 60;
/// An alarm this recent counts as active.
pub const ACTIVE_ALARM_MINUTES: i64 = 10;
/// Rows of alarms a view lists at most.
pub const MAX_ALARM_ROWS: usize = 50;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetMinute {
    pub start: DateTime<Utc>,
    pub events: u64,
    /// Distinct homes that reported in the minute.
    pub homes: u64,
    pub alarms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HomeAlarm {
    pub home: String,
    #[serde(flatten)]
    pub alarm: Alarm,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetView {
    pub hub: String,
    /// Oldest first, one entry per minute that has data.
    pub minutes: Vec<FleetMinute>,
    pub events_last_hour: u64,
    /// Homes that reported in the latest minute with data.
    pub homes_reporting: u64,
    pub alarms_by_type: BTreeMap<AlarmKind, u64>,
    /// Homes with an alarm at most [`ACTIVE_ALARM_MINUTES`] old: each one's most urgent such
    /// alarm (its latest of that kind); the most urgent kinds first ([`AlarmKind::urgency`]: fire
    /// and CO, glass breaks, intrusions), newest first within a kind. At the reference fleet's
    /// rate, intrusions alone would push a glass break off the list within a second.
    pub active_alarms: Vec<HomeAlarm>,
    pub homes_with_active_alarms: u64,
}

/// What the fleet view needs of one window block: its counts, and its alarms while one of them
/// can still be active — not its homes' readings. A poll at the reference load covers some
/// 48,000 blocks of 125 homes each; the page keeps these instead of the blocks, and each block
/// is summarised once per version. The homes a block names go to [`HomesSeen`], not here.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockSummary {
    pub window_start: DateTime<Utc>,
    pub events: u64,
    /// The block's alarms by kind ([`AlarmKind::ALL`]'s order).
    pub alarm_counts: [u64; AlarmKind::ALL.len()],
    /// The homes with alarms, with their alarms; empty once no alarm of the block can be active
    /// ([`BlockSummary::without_alarm_details`]).
    pub alarms: Vec<(String, Vec<Alarm>)>,
}

impl BlockSummary {
    pub fn of(block: &WindowAggregate) -> Self {
        let mut alarm_counts = [0; AlarmKind::ALL.len()];
        let mut alarms = Vec::new();
        for (home, activity) in &block.homes {
            if activity.alarms.is_empty() {
                continue;
            }
            for alarm in &activity.alarms {
                alarm_counts[alarm.kind.index()] += 1;
            }
            alarms.push((home.clone(), activity.alarms.clone()));
        }
        BlockSummary {
            window_start: block.window_start,
            events: block.events,
            alarm_counts,
            alarms,
        }
    }

    /// The same counts without the alarms themselves: what an hour-old block costs the page.
    /// The fleet view lists only alarms at most [`ACTIVE_ALARM_MINUTES`] old, and a block holds
    /// readings of its window alone, so once the window has ended that long ago its alarms are
    /// counted and never listed again.
    pub fn without_alarm_details(&self) -> Self {
        BlockSummary {
            window_start: self.window_start,
            events: self.events,
            alarm_counts: self.alarm_counts,
            alarms: Vec::new(),
        }
    }

    /// One summary standing for all the blocks of the window starting at `window_start`: their
    /// events and alarm counts added up, without alarm details. What a window costs the page
    /// once its blocks stopped changing and none of its alarms can be active: the fleet view
    /// adds blocks up per window anyway, so the view is the same.
    pub fn merged<'a>(
        window_start: DateTime<Utc>,
        blocks: impl IntoIterator<Item = &'a BlockSummary>,
    ) -> Self {
        let mut merged = BlockSummary {
            window_start,
            events: 0,
            alarm_counts: [0; AlarmKind::ALL.len()],
            alarms: Vec::new(),
        };
        for block in blocks {
            merged.events += block.events;
            for (total, n) in merged.alarm_counts.iter_mut().zip(block.alarm_counts) {
                *total += n;
            }
        }
        merged
    }
}

/// The distinct homes seen per window, kept as blocks are read: a block only ever gains
/// readings, so a window's homes only grow, and a new version of a block adds its homes
/// without the old version's being taken out.
///
/// A window's set of homes (100,000 at the reference load, about 2 MiB) is needed only while
/// its blocks change. [`HomesSeen::settle`] keeps just the count of a window quiet for a while;
/// when a block of a settled window changes after all (a partition catching up on old
/// readings), the page counts that window again from all its blocks
/// ([`HomesSeen::replace`]). So an hour of history costs a few open windows, not sixty.
#[derive(Debug, Default)]
pub struct HomesSeen {
    by_window: BTreeMap<DateTime<Utc>, WindowHomes>,
}

#[derive(Debug)]
enum WindowHomes {
    /// Still changing: the homes, and when a block of the window last brought any.
    Open {
        homes: std::collections::HashSet<u64>,
        changed: DateTime<Utc>,
    },
    /// Quiet: only the count is kept.
    Settled(u64),
}

impl HomesSeen {
    /// Adds the homes (hashed with [`crate::layout::fnv1a`]) of blocks of the window starting
    /// at `window_start`, read at `now`. Returns `false`, adding nothing, if the window is
    /// settled: it has only a count, so it must be counted again whole
    /// ([`HomesSeen::replace`]).
    #[must_use]
    pub fn add(
        &mut self,
        window_start: DateTime<Utc>,
        homes: impl IntoIterator<Item = u64>,
        now: DateTime<Utc>,
    ) -> bool {
        let entry = self
            .by_window
            .entry(window_start)
            .or_insert_with(|| WindowHomes::Open {
                homes: Default::default(),
                changed: now,
            });
        match entry {
            WindowHomes::Open {
                homes: seen,
                changed,
            } => {
                seen.extend(homes);
                *changed = now;
                true
            }
            WindowHomes::Settled(_) => false,
        }
    }

    /// A window's homes, all of them, counted again from all its blocks: the window is open
    /// again, changed at `now`.
    pub fn replace(
        &mut self,
        window_start: DateTime<Utc>,
        homes: std::collections::HashSet<u64>,
        now: DateTime<Utc>,
    ) {
        self.by_window.insert(
            window_start,
            WindowHomes::Open {
                homes,
                changed: now,
            },
        );
    }

    pub fn is_settled(&self, window_start: DateTime<Utc>) -> bool {
        matches!(
            self.by_window.get(&window_start),
            Some(WindowHomes::Settled(_))
        )
    }

    pub fn count(&self, window_start: DateTime<Utc>) -> u64 {
        match self.by_window.get(&window_start) {
            Some(WindowHomes::Open { homes, .. }) => homes.len() as u64,
            Some(WindowHomes::Settled(count)) => *count,
            None => 0,
        }
    }

    /// Keeps only the count of each window no block of which brought homes in the last `quiet`.
    pub fn settle(&mut self, now: DateTime<Utc>, quiet: Duration) {
        for window in self.by_window.values_mut() {
            if let WindowHomes::Open { homes, changed } = window
                && now - *changed >= quiet
            {
                *window = WindowHomes::Settled(homes.len() as u64);
            }
        }
    }

    /// How many windows keep their homes (the rest keep a count).
    pub fn open_windows(&self) -> usize {
        self.by_window
            .values()
            .filter(|w| matches!(w, WindowHomes::Open { .. }))
            .count()
    }

    /// Forgets the windows before `oldest`.
    pub fn retain_from(&mut self, oldest: DateTime<Utc>) {
        self.by_window = self.by_window.split_off(&oldest);
    }
}

/// The homes a block names, hashed as [`HomesSeen`] keeps them.
pub fn homes_of(block: &WindowAggregate) -> impl Iterator<Item = u64> + '_ {
    block.homes.keys().map(|h| crate::layout::fnv1a(h))
}

/// The fleet over the last hour, from the summaries of every window block of the hub in that
/// hour and the homes seen per window.
pub fn fleet_view(
    hub: &str,
    blocks: &[Arc<BlockSummary>],
    homes: &HomesSeen,
    now: DateTime<Utc>,
) -> FleetView {
    let since = now - Duration::minutes(HISTORY_MINUTES);
    let active_since = now - Duration::minutes(ACTIVE_ALARM_MINUTES);
    let mut minutes: BTreeMap<DateTime<Utc>, (u64, u64)> = BTreeMap::new();
    let mut by_kind = [0u64; AlarmKind::ALL.len()];
    let mut latest_alarm: BTreeMap<&str, &Alarm> = BTreeMap::new();
    for block in blocks.iter().filter(|b| b.window_start >= since) {
        let minute = minutes.entry(block.window_start).or_default();
        minute.0 += block.events;
        for (total, n) in by_kind.iter_mut().zip(block.alarm_counts) {
            *total += n;
            minute.1 += n;
        }
        for (home, alarms) in &block.alarms {
            for alarm in alarms {
                // A home's most urgent active alarm, its latest of that kind.
                let shown_first = latest_alarm
                    .get(home.as_str())
                    .is_none_or(|a| (alarm.kind.urgency(), a.ts) < (a.kind.urgency(), alarm.ts));
                if alarm.ts >= active_since && shown_first {
                    latest_alarm.insert(home, alarm);
                }
            }
        }
    }
    let alarms_by_type: BTreeMap<AlarmKind, u64> = AlarmKind::ALL
        .into_iter()
        .zip(by_kind)
        .filter(|(_, n)| *n > 0)
        .collect();
    let mut active_alarms: Vec<HomeAlarm> = latest_alarm
        .into_iter()
        .map(|(home, alarm)| HomeAlarm {
            home: home.to_string(),
            alarm: alarm.clone(),
        })
        .collect();
    active_alarms.sort_by(|a, b| {
        (a.alarm.kind.urgency(), b.alarm.ts, &a.home).cmp(&(
            b.alarm.kind.urgency(),
            a.alarm.ts,
            &b.home,
        ))
    });
    let homes_with_active_alarms = active_alarms.len() as u64;
    active_alarms.truncate(MAX_ALARM_ROWS);
    let minutes: Vec<FleetMinute> = minutes
        .into_iter()
        .map(|(start, (events, alarms))| FleetMinute {
            start,
            events,
            homes: homes.count(start),
            alarms,
        })
        .collect();
    FleetView {
        hub: hub.to_string(),
        events_last_hour: minutes.iter().map(|m| m.events).sum(),
        homes_reporting: minutes.last().map_or(0, |m| m.homes),
        minutes,
        alarms_by_type,
        active_alarms,
        homes_with_active_alarms,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HomeMinute {
    pub start: DateTime<Utc>,
    pub events: u64,
    pub counts: BTreeMap<SensorKind, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HomeView {
    pub home: String,
    /// The partition its events arrive on (from the home directory); `None`: unknown home.
    pub partition: Option<String>,
    /// Oldest first, one entry per minute the home reported in.
    pub minutes: Vec<HomeMinute>,
    /// Latest reading of each sensor, by reading time.
    pub sensors: BTreeMap<String, SensorState>,
    /// Newest first, at most [`MAX_ALARM_ROWS`].
    pub alarms: Vec<Alarm>,
}

/// One home over the last hour, from the window blocks of its partition.
pub fn home_view(
    home: &str,
    partition: Option<&str>,
    blocks: &[Arc<WindowAggregate>],
    now: DateTime<Utc>,
) -> HomeView {
    let since = now - Duration::minutes(HISTORY_MINUTES);
    let mut minutes: BTreeMap<DateTime<Utc>, HomeMinute> = BTreeMap::new();
    let mut sensors: BTreeMap<String, SensorState> = BTreeMap::new();
    let mut alarms: Vec<Alarm> = Vec::new();
    let relevant = blocks
        .iter()
        .filter(|b| b.window_start >= since && partition.is_some_and(|p| p == b.partition));
    for block in relevant {
        let Some(activity) = block.homes.get(home) else {
            continue;
        };
        let minute = minutes
            .entry(block.window_start)
            .or_insert_with(|| HomeMinute {
                start: block.window_start,
                events: 0,
                counts: BTreeMap::new(),
            });
        minute.events += activity.events;
        for (kind, n) in &activity.counts {
            *minute.counts.entry(*kind).or_insert(0) += n;
        }
        for (id, state) in &activity.sensors {
            if sensors.get(id).is_none_or(|s| s.ts < state.ts) {
                sensors.insert(id.clone(), state.clone());
            }
        }
        alarms.extend(activity.alarms.iter().cloned());
    }
    alarms.sort_by(|a, b| b.ts.cmp(&a.ts).then(a.sensor_id.cmp(&b.sensor_id)));
    alarms.dedup();
    alarms.truncate(MAX_ALARM_ROWS);
    HomeView {
        home: home.to_string(),
        partition: partition.map(str::to_string),
        minutes: minutes.into_values().collect(),
        sensors,
        alarms,
    }
}

/// One partition as the processor and the hub see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionRow {
    pub partition: String,
    /// The current owner; `None` when unowned, relinquished or expired.
    pub owner: Option<String>,
    pub checkpoint: Option<i64>,
    pub last_enqueued: Option<i64>,
    /// Events enqueued but not checkpointed yet, counted as the scale controller counts them
    /// (`hubhost_checkpoints::backlog`): never negative, though the checkpoint is read after
    /// the partition's end and may be ahead of it.
    pub lag: Option<i64>,
    /// Checkpoint progress since the previous sample.
    pub events_per_second: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceRow {
    pub owner: String,
    pub partitions: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationsView {
    pub hub: String,
    pub consumer_group: String,
    pub partitions: Vec<PartitionRow>,
    pub instances: Vec<InstanceRow>,
    pub total_lag: i64,
    /// The backlog and the instance count at the page's recent polls, oldest first.
    pub history: Vec<OperationsPoint>,
    /// The scale controller's recent decisions (`hubhost emulate --scale`), oldest first;
    /// empty when none runs on this consumer group. Shown as the controller wrote them: the
    /// page reads `at`, `unprocessedEvents`, `instances`, `target` and `reason`.
    pub scale: Vec<serde_json::Value>,
    /// The batches this handler's functions are failing and being retried, the
    /// longest-failing first.
    pub retrying: Vec<crate::retrying::RetryingBatch>,
}

/// The backlog and the number of owning instances at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationsPoint {
    pub at: DateTime<Utc>,
    pub unprocessed_events: i64,
    pub instances: u32,
}

/// What the operations view is computed from, read at one moment.
#[derive(Debug, Clone, Default)]
pub struct OperationsSample {
    pub at: Option<DateTime<Utc>>,
    /// partition → (owner, whether the ownership is still active).
    pub owners: BTreeMap<String, (String, bool)>,
    /// partition → checkpointed sequence number.
    pub checkpoints: BTreeMap<String, i64>,
    /// partition → its ends as the hub last reported them.
    pub ends: BTreeMap<String, PartitionEnd>,
}

/// Partitions sorted numerically where they are numbers (`2` before `10`).
fn partition_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

pub fn operations_view(
    hub: &str,
    consumer_group: &str,
    now: &OperationsSample,
    previous: Option<&OperationsSample>,
) -> OperationsView {
    let mut ids: Vec<&String> = now
        .ends
        .keys()
        .chain(now.owners.keys())
        .chain(now.checkpoints.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    ids.sort_by(|a, b| partition_order(a, b));
    let seconds = match (now.at, previous.and_then(|p| p.at)) {
        (Some(t), Some(p)) if t > p => Some((t - p).num_milliseconds() as f64 / 1000.0),
        _ => None,
    };
    let mut instances: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let partitions: Vec<PartitionRow> = ids
        .into_iter()
        .map(|id| {
            let owner = now
                .owners
                .get(id)
                .filter(|(owner, active)| *active && !owner.is_empty())
                .map(|(owner, _)| owner.clone());
            if let Some(owner) = &owner {
                instances.entry(owner.clone()).or_default().push(id.clone());
            }
            let checkpoint = now.checkpoints.get(id).copied();
            let end = now.ends.get(id);
            let last_enqueued = end.map(|e| e.last_sequence_number);
            let lag = end.map(|e| {
                let checkpoint = checkpoint.map(|seq| Checkpoint::new(id.clone(), None, seq));
                unprocessed_events(e, checkpoint.as_ref())
            });
            let events_per_second = match (seconds, checkpoint, previous) {
                (Some(s), Some(c), Some(p)) => p.checkpoints.get(id).map(|before| {
                    let moved = (c - before).max(0) as f64;
                    (moved / s * 10.0).round() / 10.0
                }),
                _ => None,
            };
            PartitionRow {
                partition: id.clone(),
                owner,
                checkpoint,
                last_enqueued,
                lag,
                events_per_second,
            }
        })
        .collect();
    OperationsView {
        hub: hub.to_string(),
        consumer_group: consumer_group.to_string(),
        total_lag: partitions.iter().filter_map(|p| p.lag).sum(),
        partitions,
        instances: instances
            .into_iter()
            .map(|(owner, partitions)| InstanceRow { owner, partitions })
            .collect(),
        history: Vec::new(),
        scale: Vec::new(),
        retrying: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::HomeWindow;

    fn at(minute: u32, second: u32) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(&format!("2026-11-23T10:{minute:02}:{second:02}Z"))
            .unwrap()
            .with_timezone(&Utc)
    }

    fn alarm(kind: AlarmKind, sensor: &str, ts: DateTime<Utc>) -> Alarm {
        Alarm {
            kind,
            sensor_id: sensor.into(),
            ts,
            seq: None,
            enqueued: None,
        }
    }

    fn sensor(kind: SensorKind, state: &str, ts: DateTime<Utc>) -> SensorState {
        SensorState {
            kind,
            state: state.into(),
            value: None,
            ts,
            seq: None,
        }
    }

    /// A block of `partition` in the window starting at `minute`, with (home, events, alarms).
    fn block(
        partition: &str,
        minute: u32,
        homes: &[(&str, u64, Vec<Alarm>)],
    ) -> Arc<WindowAggregate> {
        let mut agg = WindowAggregate::new("sensors", partition, at(minute, 0), 60, "0");
        for (home, events, alarms) in homes {
            agg.events += events;
            agg.homes.insert(
                home.to_string(),
                HomeWindow {
                    events: *events,
                    counts: [(SensorKind::Motion, *events)].into(),
                    sensors: [(
                        "hall-motion".to_string(),
                        sensor(SensorKind::Motion, "motion", at(minute, *events as u32)),
                    )]
                    .into(),
                    alarm_count: alarms.len() as u64,
                    alarms: alarms.clone(),
                },
            );
        }
        Arc::new(agg)
    }

    /// The fleet view of these blocks, summarised as the page summarises them.
    fn fleet_of(blocks: &[Arc<WindowAggregate>], now: DateTime<Utc>) -> FleetView {
        let summaries: Vec<Arc<BlockSummary>> = blocks
            .iter()
            .map(|b| Arc::new(BlockSummary::of(b)))
            .collect();
        let mut homes = HomesSeen::default();
        for b in blocks {
            assert!(homes.add(b.window_start, homes_of(b), now));
        }
        fleet_view("sensors", &summaries, &homes, now)
    }

    #[test]
    fn a_new_version_of_a_block_adds_its_homes_without_counting_the_old_ones_twice() {
        let first = block("0", 1, &[("h1", 3, vec![])]);
        let second = block("0", 1, &[("h1", 4, vec![]), ("h2", 1, vec![])]);
        let other = block("0", 2, &[("h1", 1, vec![])]);
        let mut homes = HomesSeen::default();
        for b in [&first, &second, &other] {
            assert!(homes.add(b.window_start, homes_of(b), at(3, 0)));
        }
        assert_eq!(homes.count(at(1, 0)), 2);
        assert_eq!(homes.count(at(2, 0)), 1);
        homes.retain_from(at(2, 0));
        assert_eq!(homes.count(at(1, 0)), 0);
        assert_eq!(homes.count(at(2, 0)), 1);
    }

    #[test]
    fn a_quiet_window_keeps_its_count_and_is_counted_again_whole_when_it_changes() {
        let first = block("0", 1, &[("h1", 3, vec![]), ("h2", 1, vec![])]);
        let late = block("0", 2, &[("h3", 1, vec![])]);
        let mut homes = HomesSeen::default();
        assert!(homes.add(at(1, 0), homes_of(&first), at(2, 0)));
        assert!(homes.add(at(2, 0), homes_of(&late), at(2, 30)));
        homes.settle(at(3, 0), Duration::minutes(1));
        assert!(homes.is_settled(at(1, 0)), "quiet for a minute");
        assert!(!homes.is_settled(at(2, 0)), "changed 30 s ago");
        assert_eq!(homes.open_windows(), 1);
        assert_eq!(homes.count(at(1, 0)), 2, "the count outlives the set");

        // A block of the settled window gains h1 again and h4: a settled window takes no homes
        // one by one; it is counted again from every block.
        let grown = block("0", 1, &[("h1", 1, vec![]), ("h4", 1, vec![])]);
        assert!(!homes.add(at(1, 0), homes_of(&grown), at(3, 10)));
        assert_eq!(homes.count(at(1, 0)), 2);
        let whole = homes_of(&first).chain(homes_of(&grown)).collect();
        homes.replace(at(1, 0), whole, at(3, 10));
        assert_eq!(homes.count(at(1, 0)), 3);
        homes.settle(at(3, 40), Duration::minutes(1));
        assert!(!homes.is_settled(at(1, 0)), "changed 30 s ago");
        homes.settle(at(4, 10), Duration::minutes(1));
        assert!(homes.is_settled(at(1, 0)));
        assert_eq!(homes.count(at(1, 0)), 3);
        assert_eq!(homes.open_windows(), 0);
    }

    #[test]
    fn a_block_without_alarm_details_counts_the_same() {
        let b = block(
            "0",
            1,
            &[
                (
                    "h1",
                    2,
                    vec![alarm(AlarmKind::Smoke, "kitchen-smoke", at(1, 5))],
                ),
                (
                    "h2",
                    2,
                    vec![
                        alarm(AlarmKind::Intrusion, "front-door", at(1, 6)),
                        alarm(AlarmKind::Intrusion, "back-door", at(1, 7)),
                    ],
                ),
            ],
        );
        let full = BlockSummary::of(&b);
        let counted = full.without_alarm_details();
        assert!(counted.alarms.is_empty());
        let mut homes = HomesSeen::default();
        assert!(homes.add(b.window_start, homes_of(&b), at(1, 10)));
        // Eleven minutes on, neither alarm is active: the two summaries give the same view.
        let now = at(12, 10);
        let with_details = fleet_view("sensors", &[Arc::new(full)], &homes, now);
        let without = fleet_view("sensors", &[Arc::new(counted)], &homes, now);
        assert_eq!(with_details, without);
        assert_eq!(
            without.alarms_by_type,
            [(AlarmKind::Intrusion, 2), (AlarmKind::Smoke, 1)].into()
        );
        assert_eq!(without.minutes[0].alarms, 3);
        assert_eq!(without.minutes[0].homes, 2);

        // The window's blocks merged into one summary: the same view again.
        let other = block(
            "1",
            1,
            &[(
                "h3",
                1,
                vec![alarm(AlarmKind::Smoke, "hall-smoke", at(1, 8))],
            )],
        );
        assert!(homes.add(b.window_start, homes_of(&other), at(1, 10)));
        let both = [BlockSummary::of(&b), BlockSummary::of(&other)];
        let separate: Vec<_> = both.iter().cloned().map(Arc::new).collect();
        let merged = BlockSummary::merged(b.window_start, &both);
        assert!(merged.alarms.is_empty());
        assert_eq!(merged.events, 5);
        let merged_view = fleet_view("sensors", &[Arc::new(merged)], &homes, now);
        assert_eq!(fleet_view("sensors", &separate, &homes, now), merged_view);
        assert_eq!(merged_view.minutes[0].alarms, 4);
        assert_eq!(merged_view.events_last_hour, 5);
    }

    #[test]
    fn the_fleet_counts_events_homes_and_active_alarms_per_minute() {
        let blocks = vec![
            block("0", 1, &[("h1", 3, vec![]), ("h2", 2, vec![])]),
            // A second block of the same partition and minute: h1 again is one home.
            block("0", 1, &[("h1", 1, vec![])]),
            block(
                "1",
                2,
                &[(
                    "h3",
                    4,
                    vec![alarm(AlarmKind::Smoke, "kitchen-smoke", at(2, 5))],
                )],
            ),
            // Too old to show: 61 minutes before `now`.
            block("1", 0, &[("h9", 7, vec![])]),
        ];
        let view = fleet_of(&blocks[..3], at(5, 0));
        assert_eq!(
            view.minutes,
            vec![
                FleetMinute {
                    start: at(1, 0),
                    events: 6,
                    homes: 2,
                    alarms: 0
                },
                FleetMinute {
                    start: at(2, 0),
                    events: 4,
                    homes: 1,
                    alarms: 1
                },
            ]
        );
        assert_eq!(view.events_last_hour, 10);
        assert_eq!(view.homes_reporting, 1);
        assert_eq!(view.alarms_by_type, [(AlarmKind::Smoke, 1)].into());
        assert_eq!(view.homes_with_active_alarms, 1);
        assert_eq!(view.active_alarms[0].home, "h3");
        // An hour later nothing is shown; ten minutes later the alarm is no longer active.
        assert!(
            fleet_of(&blocks, at(2, 0) + Duration::minutes(61))
                .minutes
                .is_empty()
        );
        let later = fleet_of(&blocks, at(2, 5) + Duration::minutes(11));
        assert_eq!(later.homes_with_active_alarms, 0);
        assert_eq!(later.alarms_by_type, [(AlarmKind::Smoke, 1)].into());
    }

    #[test]
    fn fire_co_and_glass_breaks_come_before_newer_intrusions() {
        let intrusion = |home: &str, second| {
            (
                home.to_string(),
                1,
                vec![alarm(AlarmKind::Intrusion, "front-door", at(4, second))],
            )
        };
        let mut homes: Vec<(String, u64, Vec<Alarm>)> = (0..MAX_ALARM_ROWS as u32 + 5)
            .map(|i| intrusion(&format!("i{i:03}"), 30))
            .collect();
        homes.push((
            "glass".into(),
            1,
            vec![alarm(AlarmKind::GlassBreak, "living-glass", at(4, 1))],
        ));
        // A home with smoke and, later, an intrusion shows its smoke alarm.
        homes.push((
            "fire".into(),
            2,
            vec![
                alarm(AlarmKind::Smoke, "kitchen-smoke", at(3, 0)),
                alarm(AlarmKind::Intrusion, "back-door", at(4, 50)),
            ],
        ));
        let rows: Vec<(&str, u64, Vec<Alarm>)> = homes
            .iter()
            .map(|(h, n, a)| (h.as_str(), *n, a.clone()))
            .collect();
        let view = fleet_of(&[block("0", 4, &rows)], at(5, 0));
        assert_eq!(view.homes_with_active_alarms, MAX_ALARM_ROWS as u64 + 7);
        assert_eq!(view.active_alarms.len(), MAX_ALARM_ROWS);
        let first: Vec<(&str, AlarmKind)> = view.active_alarms[..3]
            .iter()
            .map(|a| (a.home.as_str(), a.alarm.kind))
            .collect();
        assert_eq!(
            first,
            [
                ("fire", AlarmKind::Smoke),
                ("glass", AlarmKind::GlassBreak),
                ("i000", AlarmKind::Intrusion)
            ]
        );
    }

    #[test]
    fn a_home_shows_its_minutes_latest_sensor_states_and_alarms_newest_first() {
        let glass = alarm(AlarmKind::GlassBreak, "living-glass", at(3, 10));
        let intrusion = alarm(AlarmKind::Intrusion, "front-door", at(4, 20));
        let blocks = vec![
            block("2", 3, &[("h1", 2, vec![glass.clone()]), ("h2", 1, vec![])]),
            block("2", 4, &[("h1", 5, vec![intrusion.clone()])]),
            // The same home id in another partition's block is not this home's data.
            block("3", 4, &[("h1", 9, vec![])]),
        ];
        let view = home_view("h1", Some("2"), &blocks, at(10, 0));
        assert_eq!(view.minutes.len(), 2);
        assert_eq!((view.minutes[0].events, view.minutes[1].events), (2, 5));
        assert_eq!(view.minutes[1].counts[&SensorKind::Motion], 5);
        assert_eq!(view.sensors["hall-motion"].ts, at(4, 5));
        assert_eq!(view.alarms, vec![intrusion, glass]);
        let unknown = home_view("nobody", None, &blocks, at(10, 0));
        assert!(unknown.minutes.is_empty() && unknown.partition.is_none());
    }

    #[test]
    fn operations_show_owners_lag_rates_and_instances() {
        let sample = |t: u32, cps: &[(&str, i64)]| OperationsSample {
            at: Some(at(0, t)),
            owners: [
                ("0".to_string(), ("a".to_string(), true)),
                ("1".to_string(), ("b".to_string(), false)),
                ("10".to_string(), ("a".to_string(), true)),
            ]
            .into(),
            checkpoints: cps.iter().map(|(p, s)| (p.to_string(), *s)).collect(),
            ends: [("0", 100), ("1", 50), ("2", -1), ("10", 7), ("11", 30)]
                .iter()
                .map(|(p, last)| {
                    let end = PartitionEnd {
                        partition_id: p.to_string(),
                        beginning_sequence_number: 0,
                        last_sequence_number: *last,
                        last_offset: String::new(),
                        last_enqueued_time: None,
                        is_empty: *last < 0,
                    };
                    (p.to_string(), end)
                })
                .collect(),
        };
        // Partition 11's checkpoint was read after its end and is ahead of it.
        let before = sample(0, &[("0", 40), ("1", 50)]);
        let now = sample(2, &[("0", 90), ("1", 50), ("11", 35)]);
        let view = operations_view("sensors", "$default", &now, Some(&before));
        let ids: Vec<&str> = view
            .partitions
            .iter()
            .map(|p| p.partition.as_str())
            .collect();
        assert_eq!(ids, ["0", "1", "2", "10", "11"]);
        let p0 = &view.partitions[0];
        assert_eq!(
            (p0.owner.as_deref(), p0.lag, p0.events_per_second),
            (Some("a"), Some(10), Some(25.0))
        );
        // Expired ownership shows no owner; no checkpoint means everything is lag.
        assert_eq!(view.partitions[1].owner, None);
        assert_eq!(view.partitions[2].lag, Some(0));
        assert_eq!(view.partitions[3].lag, Some(8));
        // Ahead of the end read earlier: nothing left, not -5.
        assert_eq!(view.partitions[4].lag, Some(0));
        assert_eq!(view.total_lag, 18);
        assert_eq!(
            view.instances,
            vec![InstanceRow {
                owner: "a".into(),
                partitions: vec!["0".into(), "10".into()]
            }]
        );
    }
}
