//! The simulated fleet: the design documents' home-security company, whose homes' sensors each
//! report once a minute. Deterministic for a seed, so tests and benchmarks can regenerate exactly
//! what they sent.
//!
//! `hubhost demo` plays the host without an event hub, so it spreads homes over partitions by a
//! hash of the home id ([`Fleet::partition_of`]); `hubhost simulate` sends through an event hub,
//! whose own partition-key hash places them.

use chrono::{DateTime, Duration, Utc};

use crate::layout::fnv1a;
use crate::sensor::SensorKind;
use hubhost_functions::batch::EventRecord;

/// The sensors every simulated home has.
pub const SENSORS: [(&str, SensorKind); 8] = [
    ("front-door", SensorKind::Door),
    ("back-door", SensorKind::Door),
    ("living-window", SensorKind::Window),
    ("bedroom-window", SensorKind::Window),
    ("hall-motion", SensorKind::Motion),
    ("living-glass", SensorKind::GlassBreak),
    ("kitchen-smoke", SensorKind::Smoke),
    ("hall-co", SensorKind::Co),
];

/// SplitMix64: tiny, fast, good enough for simulated sensors.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[derive(Debug, Clone)]
pub struct Fleet {
    pub homes: u32,
    pub partitions: u32,
    pub seed: u64,
}

impl Fleet {
    pub fn home_id(i: u32) -> String {
        format!("home-{i:06}")
    }

    pub fn partition_of(&self, home_id: &str) -> u32 {
        (fnv1a(home_id) % u64::from(self.partitions.max(1))) as u32
    }

    /// The homes whose events land on `partition`, in id order.
    pub fn homes_in(&self, partition: u32) -> Vec<String> {
        (0..self.homes)
            .map(Fleet::home_id)
            .filter(|h| self.partition_of(h) == partition)
            .collect()
    }

    /// Whether a home's alarm system is armed during the hour `t` falls in.
    fn armed(&self, home_id: &str, t: DateTime<Utc>) -> bool {
        let mut rng = Rng::new(self.seed ^ fnv1a(home_id) ^ (t.timestamp() / 3600) as u64);
        rng.unit() < 0.4
    }

    /// Milliseconds into each minute at which `home_id` reports: homes report in id order,
    /// evenly spread over the minute (0 for an id that is not the fleet's).
    pub fn slot_ms(&self, home_id: &str) -> i64 {
        let index: u64 = home_id
            .strip_prefix("home-")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        (index.min(u64::from(self.homes)) * 60_000 / u64::from(self.homes.max(1))) as i64
    }

    /// The JSON body (~250 bytes) of `sensor`'s reading in `home_id` for the minute starting at
    /// `minute`.
    pub fn reading(&self, home_id: &str, sensor: usize, minute: DateTime<Utc>) -> String {
        let (sensor_id, kind) = SENSORS[sensor % SENSORS.len()];
        let mut rng = Rng::new(
            self.seed ^ fnv1a(home_id).rotate_left(sensor as u32 * 7) ^ minute.timestamp() as u64,
        );
        let chance = rng.unit();
        let (state, value) = match kind {
            SensorKind::Door => (if chance < 0.03 { "open" } else { "closed" }, None),
            SensorKind::Window => (if chance < 0.02 { "open" } else { "closed" }, None),
            SensorKind::Motion => (if chance < 0.15 { "motion" } else { "clear" }, None),
            SensorKind::GlassBreak => (if chance < 0.0002 { "break" } else { "ok" }, None),
            SensorKind::Smoke => (if chance < 0.0001 { "alarm" } else { "ok" }, None),
            SensorKind::Co => {
                let ppm = if chance < 0.0001 {
                    90.0 + rng.below(60) as f64
                } else {
                    1.0 + rng.below(12) as f64
                };
                (if ppm >= 70.0 { "alarm" } else { "ok" }, Some(ppm))
            }
        };
        // Stamped when the home reports: its slot in the minute, as the simulator sends it
        // (`simulate::Schedule`), plus up to a second between its sensors. A real sensor's
        // time is close to its send time; spreading the readings of one send over the whole
        // minute made every batch span two windows, and so write two window blocks.
        let offset = (self.slot_ms(home_id) + rng.below(1_000) as i64).min(59_999);
        let ts = minute + Duration::milliseconds(offset);
        format!(
            r#"{{"homeId":"{home_id}","sensorId":"{sensor_id}","type":"{}","state":"{state}","armed":{},"value":{},"battery":{},"rssi":-{},"firmware":"2.4.{}","model":"HS-{}200","installer":"northwind-security","ts":"{}"}}"#,
            kind.as_str(),
            self.armed(home_id, minute),
            value
                .map(|v: f64| v.to_string())
                .unwrap_or_else(|| "null".into()),
            40 + rng.below(60),
            40 + rng.below(50),
            rng.below(9),
            kind.as_str().to_ascii_uppercase(),
            ts.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
        )
    }
}

/// One partition's events in sequence order, as the event hub would hand them out: every home
/// of the partition, every sensor, minute after minute from `start`.
pub struct PartitionFeed {
    fleet: Fleet,
    pub partition: u32,
    homes: Vec<String>,
    start: DateTime<Utc>,
    next_seq: i64,
    minute: i64,
    home: usize,
    sensor: usize,
}

impl PartitionFeed {
    pub fn new(fleet: &Fleet, partition: u32, start: DateTime<Utc>) -> Self {
        PartitionFeed {
            homes: fleet.homes_in(partition),
            fleet: fleet.clone(),
            partition,
            start,
            next_seq: 0,
            minute: 0,
            home: 0,
            sensor: 0,
        }
    }

    /// Events one minute of the fleet produces on this partition.
    pub fn events_per_minute(&self) -> usize {
        self.homes.len() * SENSORS.len()
    }

    pub fn next_event(&mut self) -> Option<EventRecord> {
        if self.homes.is_empty() {
            return None;
        }
        let minute = self.start + Duration::minutes(self.minute);
        let home = &self.homes[self.home];
        let body = self.fleet.reading(home, self.sensor, minute);
        let seq = self.next_seq;
        let mut properties = serde_json::Map::new();
        properties.insert("source".into(), "hubhost-simulator".into());
        let event = EventRecord {
            enqueued_time: Some(minute + Duration::seconds(59)),
            body: bytes::Bytes::from(body),
            sequence_number: Some(seq),
            offset: Some((seq * 512).to_string()),
            partition_key: Some(home.clone()),
            properties,
            system_properties: Default::default(),
        };
        self.next_seq += 1;
        self.sensor += 1;
        if self.sensor == SENSORS.len() {
            self.sensor = 0;
            self.home += 1;
            if self.home == self.homes.len() {
                self.home = 0;
                self.minute += 1;
            }
        }
        Some(event)
    }

    /// Leaves `n` sequence numbers unused (for events injected by the caller).
    pub fn advance_sequence(&mut self, n: i64) {
        self.next_seq += n;
    }

    pub fn next_batch(&mut self, max: usize) -> Vec<EventRecord> {
        (0..max).map_while(|_| self.next_event()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sensor::parse_reading;

    #[test]
    fn readings_are_valid_deterministic_and_about_250_bytes() {
        let fleet = Fleet {
            homes: 100,
            partitions: 16,
            seed: 7,
        };
        let minute = DateTime::parse_from_rfc3339("2026-11-22T13:30:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut total = 0;
        for sensor in 0..SENSORS.len() {
            let body = fleet.reading("home-000001", sensor, minute);
            assert_eq!(body, fleet.reading("home-000001", sensor, minute));
            let r = parse_reading(body.as_bytes(), None).unwrap();
            assert_eq!(crate::aggregate::window_start(r.time, 60), minute);
            total += body.len();
        }
        let average = total / SENSORS.len();
        assert!(
            (200..300).contains(&average),
            "average body {average} bytes"
        );
        let all: usize = (0..16).map(|p| fleet.homes_in(p).len()).sum();
        assert_eq!(all, 100);
    }

    #[test]
    fn a_home_s_readings_are_stamped_within_a_second_of_its_slot_in_the_minute() {
        let fleet = Fleet {
            homes: 100,
            partitions: 16,
            seed: 7,
        };
        let minute: DateTime<Utc> = "2026-11-22T13:30:00Z".parse().unwrap();
        for (home, slot_ms) in [(0, 0), (50, 30_000), (99, 59_400)] {
            let id = Fleet::home_id(home);
            assert_eq!(fleet.slot_ms(&id), slot_ms);
            for sensor in 0..SENSORS.len() {
                let r = parse_reading(fleet.reading(&id, sensor, minute).as_bytes(), None).unwrap();
                let offset = (r.time - minute).num_milliseconds();
                assert!(
                    offset >= slot_ms && offset < (slot_ms + 1_000).min(60_000),
                    "{id} sensor {sensor}: {offset} ms"
                );
            }
        }
    }
}
