//! The aggregate of one partition's readings in one time window and one block of sequence
//! numbers, how readings are folded into it, and how blocks merge back into a window. Pure code.
//!
//! Why blocks: a batch's writes must cost in proportion to the batch, not to the window. A window
//! of one partition holds ~6,250 homes at the reference scale; rewriting all of them for every
//! batch of 100 readings made the app 60× write-amplified. A block holds the readings whose
//! sequence numbers fall in one run of [`SEQUENCE_BLOCK`] (as the archive does), so a batch
//! rewrites one or two bounded blocks, a replayed reading always lands in the block that already
//! has it, and readers merge a window's blocks ([`WindowAggregate::merge`]).
//!
//! Delivery is at-least-once: a batch can be replayed after a crash or a rebalance, possibly to
//! another instance, and two instances can briefly process the same events. So each aggregate
//! records which sequence numbers of its partition it has already applied ([`AppliedRanges`],
//! a short list of closed ranges) and skips them: folding the same batch twice — or two
//! overlapping batches in any order — counts every event exactly once. The blob's ETag makes
//! concurrent writers retry on the latest version (see `aggregator.rs`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::sensor::{AlarmKind, Reading, SensorKind};

pub const WINDOW_SCHEMA: &str = "hubhost.window.v2";
/// Sequence numbers per block (the archive uses the same blocks).
pub const SEQUENCE_BLOCK: i64 = 1000;
/// The block of readings that came without a sequence number (hand-made requests): they cannot
/// be recognised as replays, so they need no block of their own.
pub const UNSEQUENCED_BLOCK: &str = "unsequenced";
/// Alarms kept per home and window (the count keeps counting past it).
pub const MAX_ALARMS_KEPT: usize = 20;

/// Sorted, disjoint, non-adjacent closed ranges of sequence numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedRanges(Vec<(i64, i64)>);

impl AppliedRanges {
    pub fn contains(&self, seq: i64) -> bool {
        let i = self.0.partition_point(|&(_, hi)| hi < seq);
        self.0.get(i).is_some_and(|&(lo, _)| lo <= seq)
    }

    /// Adds `[lo, hi]`, merging with overlapping or adjacent ranges.
    pub fn insert(&mut self, lo: i64, hi: i64) {
        let (mut lo, mut hi) = (lo.min(hi), lo.max(hi));
        let start = self.0.partition_point(|&(_, h)| h < lo.saturating_sub(1));
        let mut end = start;
        while end < self.0.len() && self.0[end].0 <= hi.saturating_add(1) {
            lo = lo.min(self.0[end].0);
            hi = hi.max(self.0[end].1);
            end += 1;
        }
        self.0.splice(start..end, [(lo, hi)]);
    }

    pub fn ranges(&self) -> &[(i64, i64)] {
        &self.0
    }

    /// The consecutive runs of a batch's sequence numbers (normally one).
    pub fn runs_of(seqs: impl IntoIterator<Item = i64>) -> Vec<(i64, i64)> {
        let mut seqs: Vec<i64> = seqs.into_iter().collect();
        seqs.sort_unstable();
        seqs.dedup();
        let mut runs: Vec<(i64, i64)> = Vec::new();
        for s in seqs {
            match runs.last_mut() {
                Some((_, hi)) if *hi + 1 == s => *hi = s,
                _ => runs.push((s, s)),
            }
        }
        runs
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SensorState {
    #[serde(rename = "type")]
    pub kind: SensorKind,
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub value: Option<f64>,
    #[serde(with = "millis_time")]
    pub ts: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub seq: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alarm {
    pub kind: AlarmKind,
    #[serde(rename = "sensorId")]
    pub sensor_id: String,
    #[serde(with = "millis_time")]
    pub ts: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub seq: Option<i64>,
    /// When the event hub took the reading in: how long it took to reach the page is measured
    /// from here (`bench latency`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub enqueued: Option<DateTime<Utc>>,
}

/// One home's activity in one window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HomeWindow {
    pub events: u64,
    /// Readings per sensor type.
    pub counts: BTreeMap<SensorKind, u64>,
    /// Latest reading per sensor, by reading time.
    pub sensors: BTreeMap<String, SensorState>,
    #[serde(rename = "alarmCount")]
    pub alarm_count: u64,
    /// The latest [`MAX_ALARMS_KEPT`] alarms, oldest first.
    pub alarms: Vec<Alarm>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowAggregate {
    pub schema: String,
    pub hub: String,
    pub partition: String,
    #[serde(rename = "windowStart")]
    pub window_start: DateTime<Utc>,
    #[serde(rename = "windowSeconds")]
    pub window_seconds: u32,
    /// Which block of sequence numbers this is ([`block_of`]); empty for a merged window.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub block: String,
    /// Sequence numbers of this partition already folded in.
    pub applied: AppliedRanges,
    pub events: u64,
    pub homes: BTreeMap<String, HomeWindow>,
}

/// How many readings of a batch were new and how many were replays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FoldOutcome {
    pub applied: u64,
    pub replayed: u64,
}

/// Reading times as `yyyy-mm-ddThh:mm:ss.mmmZ`, written without chrono's general formatter:
/// every aggregate write serializes one per sensor of every home in the window.
mod millis_time {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = *b"0000-00-00T00:00:00.000Z";
        hubhost_trigger::time::write_iso_seconds(&mut buf, t);
        let mut millis = t.timestamp_subsec_millis().min(999);
        for i in (20..23).rev() {
            buf[i] = b'0' + (millis % 10) as u8;
            millis /= 10;
        }
        s.serialize_str(std::str::from_utf8(&buf).expect("ASCII"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(d)?;
        hubhost_trigger::time::parse_host_time(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("not a time: {text}")))
    }
}

/// The block a sequence number belongs to, as it appears in blob names.
pub fn block_of(seq: Option<i64>) -> String {
    match seq {
        Some(s) => format!("{:010}", s.div_euclid(SEQUENCE_BLOCK)),
        None => UNSEQUENCED_BLOCK.to_string(),
    }
}

/// The part of a batch's sequence-number runs that falls in `block`.
pub fn runs_in_block(runs: &[(i64, i64)], block: &str) -> Vec<(i64, i64)> {
    let Ok(b) = block.parse::<i64>() else {
        return Vec::new();
    };
    let (lo, hi) = (b * SEQUENCE_BLOCK, b * SEQUENCE_BLOCK + SEQUENCE_BLOCK - 1);
    runs.iter()
        .filter(|&&(l, h)| l <= hi && h >= lo)
        .map(|&(l, h)| (l.max(lo), h.min(hi)))
        .collect()
}

/// The start of the window `t` falls in.
pub fn window_start(t: DateTime<Utc>, window_seconds: u32) -> DateTime<Utc> {
    let secs = t.timestamp();
    let w = i64::from(window_seconds.max(1));
    DateTime::from_timestamp(secs - secs.rem_euclid(w), 0).unwrap_or(t)
}

impl WindowAggregate {
    pub fn new(
        hub: &str,
        partition: &str,
        window_start: DateTime<Utc>,
        window_seconds: u32,
        block: &str,
    ) -> Self {
        WindowAggregate {
            schema: WINDOW_SCHEMA.to_string(),
            hub: hub.to_string(),
            partition: partition.to_string(),
            window_start,
            window_seconds,
            block: block.to_string(),
            applied: AppliedRanges::default(),
            events: 0,
            homes: BTreeMap::new(),
        }
    }

    /// Folds in this window's readings of one batch. `batch_runs` are the consecutive runs of
    /// *all* the batch's sequence numbers (readings of other windows and poison events
    /// included), recorded as applied afterwards. Readings without a sequence number cannot be
    /// recognised as replays and are always applied.
    pub fn fold(
        &mut self,
        batch_runs: &[(i64, i64)],
        readings: &[(Option<i64>, &Reading)],
    ) -> FoldOutcome {
        let mut outcome = FoldOutcome::default();
        for (seq, reading) in readings {
            if seq.is_some_and(|s| self.applied.contains(s)) {
                outcome.replayed += 1;
                continue;
            }
            self.apply_one(*seq, reading);
            outcome.applied += 1;
        }
        for &(lo, hi) in batch_runs {
            self.applied.insert(lo, hi);
        }
        outcome
    }

    /// Adds another block of the same window (readers: the page, the demo, the tests). Blocks
    /// hold disjoint readings, so counts add up; latest states and alarms keep their order by
    /// reading time. The result's `partition` and `block` say what was merged: a partition (or
    /// "*" for several) and no block.
    pub fn merge(&mut self, other: &WindowAggregate) {
        if self.partition != other.partition {
            self.partition = "*".to_string();
        }
        self.block.clear();
        for &(lo, hi) in other.applied.ranges() {
            self.applied.insert(lo, hi);
        }
        self.events += other.events;
        for (id, theirs) in &other.homes {
            let home = self.homes.entry(id.clone()).or_default();
            home.events += theirs.events;
            for (kind, n) in &theirs.counts {
                *home.counts.entry(*kind).or_default() += n;
            }
            for (sensor, state) in &theirs.sensors {
                let newer = home
                    .sensors
                    .get(sensor)
                    .is_none_or(|s| (s.ts, s.seq) <= (state.ts, state.seq));
                if newer {
                    home.sensors.insert(sensor.clone(), state.clone());
                }
            }
            home.alarm_count += theirs.alarm_count;
            home.alarms.extend(theirs.alarms.iter().cloned());
            home.alarms.sort_by_key(|a| (a.ts, a.seq));
            let excess = home.alarms.len().saturating_sub(MAX_ALARMS_KEPT);
            home.alarms.drain(..excess);
        }
    }

    fn apply_one(&mut self, seq: Option<i64>, r: &Reading) {
        self.events += 1;
        let home = self.homes.entry(r.home_id.clone()).or_default();
        home.events += 1;
        *home.counts.entry(r.kind).or_default() += 1;
        let newer = home
            .sensors
            .get(&r.sensor_id)
            .is_none_or(|s| (s.ts, s.seq) <= (r.time, seq));
        if newer {
            home.sensors.insert(
                r.sensor_id.clone(),
                SensorState {
                    kind: r.kind,
                    state: r.state.to_string(),
                    value: r.value,
                    ts: r.time,
                    seq,
                },
            );
        }
        if let Some(kind) = r.alarm() {
            home.alarm_count += 1;
            let alarm = Alarm {
                kind,
                sensor_id: r.sensor_id.clone(),
                ts: r.time,
                seq,
                enqueued: r.enqueued,
            };
            let at = home
                .alarms
                .partition_point(|a| (a.ts, a.seq) <= (alarm.ts, alarm.seq));
            home.alarms.insert(at, alarm);
            if home.alarms.len() > MAX_ALARMS_KEPT {
                home.alarms.remove(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sensor::parse_reading;

    #[test]
    fn applied_ranges_merge_and_answer() {
        let mut r = AppliedRanges::default();
        r.insert(10, 19);
        r.insert(30, 39);
        assert!(r.contains(10) && r.contains(19) && !r.contains(20) && !r.contains(9));
        r.insert(20, 29);
        assert_eq!(r.ranges(), &[(10, 39)]);
        r.insert(0, 5);
        r.insert(41, 45);
        assert_eq!(r.ranges(), &[(0, 5), (10, 39), (41, 45)]);
        r.insert(3, 50);
        assert_eq!(r.ranges(), &[(0, 50)]);
        assert_eq!(
            AppliedRanges::runs_of([5, 3, 4, 9, 10, 4]),
            vec![(3, 5), (9, 10)]
        );
    }

    /// Any interleaving of inserts gives the same set as inserting each number.
    #[test]
    fn applied_ranges_match_a_set_under_random_inserts() {
        let mut state = 0x2545F4914F6CDD1Du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as i64
        };
        for _ in 0..200 {
            let mut ranges = AppliedRanges::default();
            let mut set = std::collections::BTreeSet::new();
            for _ in 0..20 {
                let lo = next(100);
                let hi = lo + next(10);
                ranges.insert(lo, hi);
                set.extend(lo..=hi);
            }
            for s in -1..=111 {
                assert_eq!(
                    ranges.contains(s),
                    set.contains(&s),
                    "seq {s} in {ranges:?}"
                );
            }
            for w in ranges.ranges().windows(2) {
                assert!(w[0].1 + 1 < w[1].0, "ranges not normalised: {ranges:?}");
            }
        }
    }

    fn reading(home: &str, sensor: &str, kind: &str, state: &str, sec: u32) -> Reading {
        let json = format!(
            r#"{{"homeId":"{home}","sensorId":"{sensor}","type":"{kind}","state":"{state}","armed":true,"ts":"2026-11-22T13:30:{sec:02}Z"}}"#
        );
        parse_reading(json.as_bytes(), None).unwrap()
    }

    #[test]
    fn folding_the_same_batch_twice_counts_once() {
        let r1 = reading("h1", "door", "door", "open", 1);
        let r2 = reading("h1", "door", "door", "closed", 2);
        let r3 = reading("h2", "smoke", "smoke", "alarm", 3);
        let batch = [(Some(7), &r1), (Some(8), &r2), (Some(9), &r3)];
        let mut agg = WindowAggregate::new("sensors", "0", window_start(r1.time, 60), 60, "0");
        let first = agg.fold(&[(7, 9)], &batch);
        let snapshot = agg.clone();
        let second = agg.fold(&[(7, 9)], &batch);
        assert_eq!(
            first,
            FoldOutcome {
                applied: 3,
                replayed: 0
            }
        );
        assert_eq!(
            second,
            FoldOutcome {
                applied: 0,
                replayed: 3
            }
        );
        assert_eq!(agg, snapshot);
        assert_eq!(agg.events, 3);
        let h1 = &agg.homes["h1"];
        assert_eq!(h1.counts[&SensorKind::Door], 2);
        assert_eq!(h1.sensors["door"].state, "closed");
        assert_eq!(h1.alarm_count, 1, "door opened while armed");
        assert_eq!(agg.homes["h2"].alarms[0].kind, AlarmKind::Smoke);
    }

    #[test]
    fn latest_state_is_by_reading_time_not_arrival() {
        let late = reading("h1", "door", "door", "open", 50);
        let early = reading("h1", "door", "door", "closed", 10);
        let mut agg = WindowAggregate::new("sensors", "0", window_start(late.time, 60), 60, "0");
        agg.fold(&[(1, 2)], &[(Some(1), &late), (Some(2), &early)]);
        assert_eq!(agg.homes["h1"].sensors["door"].state, "open");
    }

    /// Folding a batch block by block and merging the blocks gives the window that folding it
    /// whole gives: the split is invisible to readers.
    #[test]
    fn blocks_merge_into_the_whole_window() {
        let mut readings = Vec::new();
        for i in 0..60u32 {
            let kind = ["door", "motion", "smoke", "window"][(i % 4) as usize];
            let state = ["open", "motion", "alarm", "closed"][(i % 4) as usize];
            let r = reading(
                &format!("h{}", i % 7),
                &format!("s{}", i % 5),
                kind,
                state,
                i % 60,
            );
            readings.push((Some(990 + i64::from(i)), r));
        }
        let start = window_start(readings[0].1.time, 60);
        let all: Vec<_> = readings.iter().map(|(s, r)| (*s, r)).collect();
        let runs = AppliedRanges::runs_of(all.iter().filter_map(|(s, _)| *s));
        let mut whole = WindowAggregate::new("sensors", "0", start, 60, "");
        whole.fold(&runs, &all);

        let mut merged = WindowAggregate::new("sensors", "0", start, 60, "");
        for block in ["0000000000", "0000000001"] {
            let mine: Vec<_> = all
                .iter()
                .filter(|(s, _)| block_of(*s) == block)
                .cloned()
                .collect();
            assert!(!mine.is_empty());
            let mut part = WindowAggregate::new("sensors", "0", start, 60, block);
            part.fold(&runs_in_block(&runs, block), &mine);
            merged.merge(&part);
        }
        assert_eq!(merged, whole);
        assert_eq!(runs_in_block(&runs, "0000000001"), vec![(1000, 1049)]);
        assert_eq!(runs_in_block(&runs, UNSEQUENCED_BLOCK), vec![]);
    }

    #[test]
    fn reading_times_round_trip_at_millisecond_precision() {
        let r = reading("h1", "door", "door", "open", 7);
        let state = SensorState {
            kind: r.kind,
            state: "open".into(),
            value: None,
            ts: r.time,
            seq: Some(1),
        };
        let json = serde_json::to_string(&state).unwrap();
        assert!(
            json.contains(r#""ts":"2026-11-22T13:30:07.000Z""#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<SensorState>(&json).unwrap(), state);
    }

    #[test]
    fn windows_align_to_their_size() {
        let t = DateTime::parse_from_rfc3339("2026-11-22T13:30:59.9Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            window_start(t, 60).to_rfc3339(),
            "2026-11-22T13:30:00+00:00"
        );
        assert_eq!(
            window_start(t, 300).to_rfc3339(),
            "2026-11-22T13:30:00+00:00"
        );
        assert_eq!(
            window_start(t, 3600).to_rfc3339(),
            "2026-11-22T13:00:00+00:00"
        );
    }
}
