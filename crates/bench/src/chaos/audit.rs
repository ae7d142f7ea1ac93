//! What a chaos run checks, as pure functions of what was observed from outside the pool: the
//! checkpoint writes seen while it ran, how long each partition went without a running owner,
//! and at the end the hub's events against the app's aggregates, archive and dead letters.
//! The runner (`mod.rs`) only gathers the observations.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use chrono::{DateTime, Utc};

use hubhost_app::aggregate::window_start;
use hubhost_app::sensor::parse_reading;

/// A consumer group and a partition.
pub type PartitionKey = (String, String);

/// A checkpoint seen lower than one seen before it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Backwards {
    pub consumer_group: String,
    pub partition: String,
    pub from: i64,
    pub to: i64,
    /// Seconds into the run.
    pub at: f64,
}

/// Every checkpoint value observed, per partition; a checkpoint must never move back.
#[derive(Debug, Default)]
pub struct CheckpointLog {
    last: BTreeMap<PartitionKey, i64>,
    /// Changes of value observed (each at least one checkpoint write).
    pub writes: u64,
    pub backwards: Vec<Backwards>,
}

impl CheckpointLog {
    pub fn observe(&mut self, key: &PartitionKey, sequence: i64, at: f64) {
        match self.last.insert(key.clone(), sequence) {
            Some(before) if sequence < before => self.backwards.push(Backwards {
                consumer_group: key.0.clone(),
                partition: key.1.clone(),
                from: before,
                to: sequence,
                at,
            }),
            Some(before) if sequence == before => {}
            _ => self.writes += 1,
        }
    }

    pub fn get(&self, key: &PartitionKey) -> Option<i64> {
        self.last.get(key).copied()
    }
}

/// How long each partition went without a running owner: none, or one that is dead or frozen.
/// Time while the store itself was down is excused (no owner can renew then): an interval
/// counts from the later of its start and the end of the outage.
#[derive(Debug, Default)]
pub struct Coverage {
    since: BTreeMap<PartitionKey, f64>,
    /// The longest interval seen, in seconds, and when it ended.
    pub longest: f64,
    pub longest_at: f64,
    /// Intervals longer than the limit: (partition, seconds, ended at).
    pub over_limit: Vec<(PartitionKey, f64, f64)>,
}

impl Coverage {
    /// One observation at `at`: `served` says whether the partition has a running owner.
    /// `excused`: the store is down now.
    pub fn observe(
        &mut self,
        key: &PartitionKey,
        served: bool,
        excused: bool,
        at: f64,
        limit: f64,
    ) {
        if served {
            if let Some(start) = self.since.remove(key) {
                self.close(key, at - start, at, limit);
            }
        } else if excused {
            self.since.insert(key.clone(), at);
        } else {
            self.since.entry(key.clone()).or_insert(at);
        }
    }

    /// The store is back at `at`: nothing could be claimed while it was away, so an interval
    /// without owner open now counts from here. (A poll running while the store returns
    /// ends after it, and by then the store's records have expired: without this, the
    /// outage's tail would be charged to the pool.)
    pub fn store_back(&mut self, at: f64) {
        for start in self.since.values_mut() {
            *start = start.max(at);
        }
    }

    /// The partitions `keys` can be claimed again from `at` (a frozen writer that held their
    /// ownership blobs' locks resumed): an interval without owner counts from there.
    pub fn unblocked(&mut self, keys: &BTreeSet<PartitionKey>, at: f64) {
        for (key, start) in self.since.iter_mut() {
            if keys.contains(key) {
                *start = start.max(at);
            }
        }
    }

    /// Ends the run: intervals still open count up to `at`.
    pub fn finish(&mut self, at: f64, limit: f64) {
        for (key, start) in std::mem::take(&mut self.since) {
            self.close(&key, at - start, at, limit);
        }
    }

    fn close(&mut self, key: &PartitionKey, seconds: f64, at: f64, limit: f64) {
        if seconds > self.longest {
            self.longest = seconds;
            self.longest_at = at;
        }
        if seconds > limit {
            self.over_limit.push((key.clone(), seconds, at));
        }
    }
}

/// The inodes of the files process `pid` holds an advisory `flock` on, from the text of
/// `/proc/locks` (lines such as `1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF`; a lock
/// others wait for is listed again behind `->`, which is left out).
pub fn flocked_inodes(proc_locks: &str, pid: u32) -> BTreeSet<u64> {
    proc_locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(1) == Some(&"->") || fields.get(1) != Some(&"FLOCK") {
                return None;
            }
            (fields.get(4)?.parse::<u32>().ok()? == pid)
                .then(|| fields.get(5)?.rsplit(':').next()?.parse::<u64>().ok())
                .flatten()
        })
        .collect()
}

/// One event as the hub holds it at the end.
#[derive(Debug, Clone)]
pub struct HubEvent {
    pub partition: String,
    pub sequence: i64,
    pub enqueued: Option<DateTime<Utc>>,
    pub body: Vec<u8>,
}

/// A window block's readings per home, as the app stores it (one entry per home and block).
#[derive(Debug, Clone)]
pub struct AggregatedHomes {
    pub partition: String,
    pub window: DateTime<Utc>,
    pub homes: Vec<(String, u64)>,
}

/// What the app wrote, read back from its store.
#[derive(Debug, Default)]
pub struct AppState {
    pub aggregates: Vec<AggregatedHomes>,
    /// Partition → sequence numbers archived.
    pub archived: BTreeMap<String, BTreeSet<i64>>,
    /// (partition, sequence number) of every dead letter.
    pub dead_letters: BTreeSet<(String, i64)>,
}

/// The end-of-run verdict on the data; every count but `events`, `readings` and `poison`
/// must be 0.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
pub struct DataVerdict {
    pub events: u64,
    pub readings: u64,
    pub poison: u64,
    /// Acknowledged to the producer, yet not in the hub.
    pub acknowledged_not_stored: u64,
    /// Readings missing from the aggregates (per home and window).
    pub readings_not_applied: u64,
    /// Readings counted more than once, summed over homes and windows.
    pub readings_applied_twice: u64,
    pub archive_missing: u64,
    pub poison_not_dead_lettered: u64,
    pub dead_letters_not_poison: u64,
}

impl DataVerdict {
    pub fn problems(&self) -> Vec<String> {
        [
            (
                self.acknowledged_not_stored,
                "acknowledged events not in the hub",
            ),
            (
                self.readings_not_applied,
                "readings missing from the aggregates",
            ),
            (self.readings_applied_twice, "readings counted twice"),
            (self.archive_missing, "events missing from the archive"),
            (
                self.poison_not_dead_lettered,
                "poison events without a dead letter",
            ),
            (
                self.dead_letters_not_poison,
                "dead letters of good readings",
            ),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect()
    }
}

/// A body's fingerprint, to match what the producer had acknowledged with what the hub holds.
pub fn fingerprint(body: &[u8]) -> u64 {
    hubhost_app::layout::fnv1a(&String::from_utf8_lossy(body))
}

/// Checks the app's data against every event the hub holds: each reading counted exactly once
/// in its home's window, each event archived, exactly the poison events dead-lettered, and
/// every acknowledged event stored.
pub fn judge_data(
    events: &[HubEvent],
    acknowledged: &HashSet<u64>,
    app: &AppState,
    window_seconds: u32,
) -> DataVerdict {
    let mut verdict = DataVerdict {
        events: events.len() as u64,
        ..Default::default()
    };
    let mut expected: BTreeMap<(String, DateTime<Utc>, String), i64> = BTreeMap::new();
    let mut poison = BTreeSet::new();
    let mut stored = HashSet::with_capacity(events.len());
    for e in events {
        stored.insert(fingerprint(&e.body));
        match parse_reading(&e.body, e.enqueued) {
            Ok(r) => {
                verdict.readings += 1;
                let window = window_start(r.time, window_seconds);
                *expected
                    .entry((e.partition.clone(), window, r.home_id))
                    .or_default() += 1;
            }
            Err(_) => {
                poison.insert((e.partition.clone(), e.sequence));
            }
        }
        if !app
            .archived
            .get(&e.partition)
            .is_some_and(|s| s.contains(&e.sequence))
        {
            verdict.archive_missing += 1;
        }
    }
    verdict.poison = poison.len() as u64;
    verdict.acknowledged_not_stored = acknowledged.difference(&stored).count() as u64;
    for a in &app.aggregates {
        for (home, n) in &a.homes {
            *expected
                .entry((a.partition.clone(), a.window, home.clone()))
                .or_default() -= *n as i64;
        }
    }
    for left in expected.values() {
        if *left > 0 {
            verdict.readings_not_applied += *left as u64;
        } else {
            verdict.readings_applied_twice += left.unsigned_abs();
        }
    }
    verdict.poison_not_dead_lettered = poison.difference(&app.dead_letters).count() as u64;
    verdict.dead_letters_not_poison = app.dead_letters.difference(&poison).count() as u64;
    verdict
}

/// Deliveries the functions answered, from the lines the emulated host logs for them
/// (`{function}: partition {p}, sequence numbers {a}..={b}: …`).
#[derive(Debug, Default)]
pub struct Deliveries {
    ranges: BTreeMap<(String, String), Vec<(i64, i64)>>,
}

impl Deliveries {
    /// Takes every delivery line of an instance's log.
    pub fn add_log(&mut self, log: &str) {
        for line in log.lines() {
            if let Some((function, partition, range)) = parse_delivery(line) {
                self.ranges
                    .entry((function, partition))
                    .or_default()
                    .push(range);
            }
        }
    }

    /// (events delivered, of them delivered again after a first answered delivery).
    pub fn counts(&self) -> (u64, u64) {
        let (mut delivered, mut again) = (0u64, 0u64);
        for ranges in self.ranges.values() {
            let mut seen: HashSet<i64> = HashSet::new();
            for &(a, b) in ranges {
                for s in a..=b {
                    delivered += 1;
                    if !seen.insert(s) {
                        again += 1;
                    }
                }
            }
        }
        (delivered, again)
    }
}

fn parse_delivery(line: &str) -> Option<(String, String, (i64, i64))> {
    let at = line.find(": partition ")?;
    let function = line[..at].rsplit([' ', '\t']).next()?.to_string();
    let rest = &line[at + ": partition ".len()..];
    let (partition, rest) = rest.split_once(", sequence numbers ")?;
    let range = rest.split(':').next()?;
    let (a, b) = range.split_once("..=")?;
    Some((
        function,
        partition.to_string(),
        (a.trim().parse().ok()?, b.trim().parse().ok()?),
    ))
}

/// The median and the largest of some seconds (0 for none).
pub fn median_and_max(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (median, v[n - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: &str) -> PartitionKey {
        ("$default".into(), p.into())
    }

    #[test]
    fn a_checkpoint_that_moves_back_is_caught() {
        let mut log = CheckpointLog::default();
        log.observe(&key("0"), 10, 1.0);
        log.observe(&key("0"), 10, 1.5);
        log.observe(&key("0"), 20, 2.0);
        log.observe(&key("1"), 5, 2.0);
        assert!(log.backwards.is_empty());
        assert_eq!(log.writes, 3);
        log.observe(&key("0"), 15, 3.0);
        assert_eq!(
            log.backwards,
            vec![Backwards {
                consumer_group: "$default".into(),
                partition: "0".into(),
                from: 20,
                to: 15,
                at: 3.0
            }]
        );
    }

    #[test]
    fn unserved_time_counts_from_the_end_of_a_store_outage() {
        let mut c = Coverage::default();
        let limit = 8.0;
        c.observe(&key("0"), true, false, 0.0, limit);
        c.observe(&key("0"), false, false, 1.0, limit);
        c.observe(&key("0"), true, false, 4.0, limit);
        assert_eq!(c.longest, 3.0);
        // Down from 10 s; the store is out from 10 to 40 s; served again at 45 s: 5 s count.
        c.observe(&key("0"), false, false, 10.0, limit);
        c.observe(&key("0"), false, true, 40.0, limit);
        c.observe(&key("0"), false, false, 41.0, limit);
        c.observe(&key("0"), true, false, 45.0, limit);
        assert_eq!(c.longest, 5.0);
        assert!(c.over_limit.is_empty());
        c.observe(&key("1"), false, false, 50.0, limit);
        c.finish(60.0, limit);
        assert_eq!(c.longest, 10.0);
        assert_eq!(c.over_limit, vec![(key("1"), 10.0, 60.0)]);
    }

    #[test]
    fn a_poll_that_outlasts_the_outage_does_not_charge_it_to_the_pool() {
        let mut c = Coverage::default();
        let limit = 8.0;
        c.observe(&key("0"), true, false, 0.0, limit);
        // The last excused poll at 44 s; the store is back at 50 s; the poll in flight then
        // answers at 51 s without owners; owners are back at 54 s: 4 s count, not 10.
        c.observe(&key("0"), false, true, 44.0, limit);
        c.store_back(50.0);
        c.observe(&key("0"), false, false, 51.0, limit);
        c.observe(&key("0"), true, false, 54.0, limit);
        assert_eq!(c.longest, 4.0);
        assert!(c.over_limit.is_empty());
        // An interval that began after the store returned keeps its start.
        c.observe(&key("0"), false, false, 60.0, limit);
        c.store_back(55.0);
        c.observe(&key("0"), true, false, 70.0, limit);
        assert_eq!(c.over_limit, vec![(key("0"), 10.0, 70.0)]);
    }

    fn reading(home: &str, minute: u32) -> Vec<u8> {
        format!(
            r#"{{"homeId":"{home}","sensorId":"front-door","type":"door","state":"closed","ts":"2026-11-24T10:{minute:02}:05Z"}}"#
        )
        .into_bytes()
    }

    fn event(p: &str, seq: i64, body: Vec<u8>) -> HubEvent {
        HubEvent {
            partition: p.into(),
            sequence: seq,
            enqueued: None,
            body,
        }
    }

    fn window(minute: u32) -> DateTime<Utc> {
        format!("2026-11-24T10:{minute:02}:00Z").parse().unwrap()
    }

    /// Three readings and one poison event on partition 0, all handled correctly.
    fn healthy() -> (Vec<HubEvent>, HashSet<u64>, AppState) {
        let events = vec![
            event("0", 0, reading("h1", 1)),
            event("0", 1, reading("h1", 1)),
            event("0", 2, b"not json".to_vec()),
            event("0", 3, reading("h2", 2)),
        ];
        let acknowledged = events.iter().map(|e| fingerprint(&e.body)).collect();
        let app = AppState {
            aggregates: vec![
                AggregatedHomes {
                    partition: "0".into(),
                    window: window(1),
                    homes: vec![("h1".into(), 2)],
                },
                AggregatedHomes {
                    partition: "0".into(),
                    window: window(2),
                    homes: vec![("h2".into(), 1)],
                },
            ],
            archived: [("0".to_string(), (0..4).collect())].into(),
            dead_letters: [("0".to_string(), 2)].into(),
        };
        (events, acknowledged, app)
    }

    #[test]
    fn a_healthy_run_has_no_problem() {
        let (events, acknowledged, app) = healthy();
        let v = judge_data(&events, &acknowledged, &app, 60);
        assert_eq!((v.events, v.readings, v.poison), (4, 3, 1));
        assert!(v.problems().is_empty(), "{v:?}");
    }

    #[test]
    fn every_kind_of_damage_is_counted() {
        let (events, mut acknowledged, mut app) = healthy();
        acknowledged.insert(fingerprint(b"lost by the hub"));
        app.aggregates[0].homes[0].1 = 3; // h1 counted one reading twice
        app.aggregates[1].homes.clear(); // h2's reading never applied
        app.archived.get_mut("0").unwrap().remove(&3);
        app.dead_letters = [("0".to_string(), 1)].into(); // a good reading set aside
        let v = judge_data(&events, &acknowledged, &app, 60);
        assert_eq!(v.acknowledged_not_stored, 1);
        assert_eq!(v.readings_applied_twice, 1);
        assert_eq!(v.readings_not_applied, 1);
        assert_eq!(v.archive_missing, 1);
        assert_eq!(v.poison_not_dead_lettered, 1);
        assert_eq!(v.dead_letters_not_poison, 1);
        assert_eq!(v.problems().len(), 6);
    }

    #[test]
    fn deliveries_count_what_was_answered_more_than_once() {
        let mut d = Deliveries::default();
        d.add_log(
            "2026-11-24T10:00:00Z DEBUG hubhost::function: SensorAggregator: partition 3, sequence numbers 0..=9: 10 events, 10 applied, 0 replayed, 0 dead-lettered function=SensorAggregator\n\
             unrelated line\n\
             x DEBUG hubhost::function: RawArchive: partition 3, sequence numbers 0..=9: 10 events\n",
        );
        d.add_log("y DEBUG hubhost::function: SensorAggregator: partition 3, sequence numbers 5..=14: 10 events");
        assert_eq!(d.counts(), (30, 5));
    }

    #[test]
    fn the_locks_a_process_holds_are_read_from_proc_locks() {
        let text = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 777 fd:01:1234567 0 EOF\n\
                    2: POSIX  ADVISORY  WRITE 4242 fd:01:99 0 EOF\n\
                    3: FLOCK  ADVISORY  WRITE 4242 00:2e:42 0 EOF\n\
                    4: FLOCK  ADVISORY  WRITE 5151 fd:01:7 0 EOF\n";
        assert_eq!(flocked_inodes(text, 4242), BTreeSet::from([1_234_567, 42]));
        assert_eq!(flocked_inodes(text, 777), BTreeSet::new());
        assert_eq!(flocked_inodes("garbage\n", 1), BTreeSet::new());
    }

    #[test]
    fn a_partition_blocked_by_a_frozen_writer_counts_from_its_resumption() {
        let mut c = Coverage::default();
        let limit = 8.0;
        let blocked = BTreeSet::from([key("9")]);
        c.observe(&key("9"), true, false, 0.0, limit);
        // Frozen at 1 s holding partition 9's lock: excused while frozen; resumed at 14 s.
        for at in [2.0, 6.0, 13.0] {
            c.observe(&key("9"), false, true, at, limit);
        }
        c.unblocked(&blocked, 14.0);
        c.observe(&key("9"), false, false, 15.0, limit);
        c.observe(&key("9"), true, false, 16.0, limit);
        assert_eq!(c.longest, 2.0);
        assert!(c.over_limit.is_empty());
        // Another partition is not excused by it.
        c.observe(&key("3"), false, false, 20.0, limit);
        c.unblocked(&blocked, 25.0);
        c.observe(&key("3"), true, false, 30.0, limit);
        assert_eq!(c.over_limit, vec![(key("3"), 10.0, 30.0)]);
    }

    #[test]
    fn median_and_max_of_seconds() {
        assert_eq!(median_and_max(&[]), (0.0, 0.0));
        assert_eq!(median_and_max(&[3.0, 1.0, 2.0]), (2.0, 3.0));
        assert_eq!(median_and_max(&[4.0, 1.0]), (2.5, 4.0));
    }
}
