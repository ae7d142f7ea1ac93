//! Deterministic simulation of the load balancer: many instances, a fake clock, a fake
//! ownership store with write delays (so claims race and lose with 412s) and transient
//! failures, random joins, graceful leaves and crashes — seeded and reproducible.
//!
//! Invariants checked after every membership change:
//! - the pool converges to a ±1 balance with every partition owned by a live instance, within a
//!   bound (crashes: ownership expiry + one cycle + slack);
//! - a scale-out moves exactly as many partitions as balance requires (the newcomer's share);
//! - with steady membership no ownership ever changes (10 simulated minutes);
//! - no partition stays unowned longer than its owner's expiry plus one cycle.
//!
//! `SIM_DEBUG=1` prints every change of owner with its time, to replay a failing seed.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use hubhost::checkpoint::{OwnershipClaim, PartitionOwnership};
use hubhost::processor::balancer::{BalancerSettings, plan};
use hubhost::storage::ETag;

/// splitmix64: small, seeded, reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

#[derive(Clone)]
struct Record {
    owner: String,
    version: u64,
    modified_ms: u64,
}

/// The fake ownership store: ETag = version, conditional writes as Azure does them.
#[derive(Default)]
struct FakeStore {
    records: BTreeMap<String, Record>,
    next_version: u64,
    /// (time, partition, new owner) for every change of owner.
    changes: Vec<(u64, String, String)>,
}

fn at(ms: u64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(1_700_000_000_000 + ms as i64)
        .unwrap()
}

impl FakeStore {
    fn list(&self) -> Vec<PartitionOwnership> {
        self.records
            .iter()
            .map(|(p, r)| PartitionOwnership {
                partition_id: p.clone(),
                owner_id: r.owner.clone(),
                etag: ETag::new(r.version.to_string()),
                last_modified: at(r.modified_ms),
            })
            .collect()
    }

    /// Applies a claim if its ETag is current; `false` is the 412 (or 409) of a lost race.
    fn claim(&mut self, c: &OwnershipClaim, now_ms: u64) -> bool {
        let current = self.records.get(&c.partition_id);
        let ok = match (&c.etag, current) {
            (None, None) => true,
            (Some(e), Some(r)) => e.as_str() == r.version.to_string(),
            _ => false,
        };
        if ok {
            self.next_version += 1;
            let previous = current.map(|r| r.owner.clone());
            if previous.as_deref() != Some(c.owner_id.as_str()) {
                if std::env::var("SIM_DEBUG").is_ok() {
                    eprintln!(
                        "{now_ms}: {} {:?} -> {} (prev modified {:?})",
                        c.partition_id,
                        previous,
                        c.owner_id,
                        current.map(|r| r.modified_ms)
                    );
                }
                self.changes
                    .push((now_ms, c.partition_id.clone(), c.owner_id.clone()));
            }
            self.records.insert(
                c.partition_id.clone(),
                Record {
                    owner: c.owner_id.clone(),
                    version: self.next_version,
                    modified_ms: now_ms,
                },
            );
        }
        ok
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Action {
    /// List and decide.
    Cycle,
    /// The writes of the cycle decided at `decided` land now.
    Apply(Vec<(String, String, Option<String>)>, bool),
}

/// (time, sequence for ties, instance, incarnation, action), earliest first.
type Scheduled = (u64, u64, String, u32, Action);

struct Instance {
    alive: bool,
    /// Bumped on crash/leave so that events already queued for the old incarnation are ignored.
    incarnation: u32,
    owned: BTreeSet<String>,
}

struct Sim {
    rng: Rng,
    settings: BalancerSettings,
    partitions: Vec<String>,
    store: FakeStore,
    now: u64,
    queue: BinaryHeap<std::cmp::Reverse<Scheduled>>,
    seq: u64,
    instances: BTreeMap<String, Instance>,
    transient_failure_rate: f64,
}

impl Sim {
    fn new(seed: u64, partitions: usize) -> Sim {
        Sim {
            rng: Rng(seed),
            settings: BalancerSettings::default(),
            partitions: (0..partitions).map(|p| p.to_string()).collect(),
            store: FakeStore::default(),
            now: 0,
            queue: BinaryHeap::new(),
            seq: 0,
            instances: BTreeMap::new(),
            transient_failure_rate: 0.01,
        }
    }

    fn schedule(&mut self, delay_ms: u64, id: &str, action: Action) {
        let inc = self.instances[id].incarnation;
        self.seq += 1;
        self.queue.push(std::cmp::Reverse((
            self.now + delay_ms,
            self.seq,
            id.to_string(),
            inc,
            action,
        )));
    }

    fn join(&mut self, id: &str) {
        let inc = self.instances.get(id).map_or(0, |i| i.incarnation + 1);
        self.instances.insert(
            id.to_string(),
            Instance {
                alive: true,
                incarnation: inc,
                owned: BTreeSet::new(),
            },
        );
        let start = self.rng.range(0, 500);
        self.schedule(start, id, Action::Cycle);
    }

    fn crash(&mut self, id: &str) {
        let i = self.instances.get_mut(id).unwrap();
        i.alive = false;
        i.incarnation += 1;
        i.owned.clear();
    }

    /// Graceful stop: relinquish what the store says it owns, under the current ETags.
    fn leave(&mut self, id: &str) {
        let records = self.store.list();
        for o in records.iter().filter(|o| o.owner_id == id) {
            let c = OwnershipClaim {
                partition_id: o.partition_id.clone(),
                owner_id: String::new(),
                etag: Some(o.etag.clone()),
            };
            self.store.claim(&c, self.now);
        }
        self.crash(id);
    }

    fn run_until(&mut self, until: u64) {
        while let Some(std::cmp::Reverse((t, ..))) = self.queue.peek() {
            if *t > until {
                break;
            }
            let std::cmp::Reverse((t, _, id, inc, action)) = self.queue.pop().unwrap();
            self.now = t;
            let Some(inst) = self.instances.get(&id) else {
                continue;
            };
            if !inst.alive || inst.incarnation != inc {
                continue;
            }
            match action {
                Action::Cycle => {
                    let p = plan(
                        &self.store.list(),
                        &self.partitions,
                        &id,
                        at(self.now),
                        &self.settings,
                    );
                    let writes = p
                        .claims
                        .iter()
                        .map(|c| {
                            (
                                c.partition_id.clone(),
                                c.owner_id.clone(),
                                c.etag.as_ref().map(|e| e.to_string()),
                            )
                        })
                        .collect();
                    let delay = self.rng.range(5, 300);
                    self.schedule(delay, &id, Action::Apply(writes, p.balanced));
                }
                Action::Apply(writes, balanced) => {
                    let mut owned = BTreeSet::new();
                    for (p, owner, etag) in writes {
                        if self.rng.unit() < self.transient_failure_rate {
                            // Storage hiccup: the write did not happen; the next cycle retries.
                            if self.instances[&id].owned.contains(&p) {
                                owned.insert(p);
                            }
                            continue;
                        }
                        let c = OwnershipClaim {
                            partition_id: p.clone(),
                            owner_id: owner,
                            etag: etag.map(ETag::new),
                        };
                        if self.store.claim(&c, self.now) {
                            owned.insert(p);
                        }
                    }
                    self.instances.get_mut(&id).unwrap().owned = owned;
                    let jitter = self.rng.unit();
                    let wait = self.settings.next_wait(balanced, jitter).as_millis() as u64;
                    self.schedule(wait, &id, Action::Cycle);
                }
            }
        }
        self.now = until;
    }

    fn alive(&self) -> Vec<String> {
        self.instances
            .iter()
            .filter(|(_, i)| i.alive)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Every partition actively owned by a live instance, and counts within ±1.
    fn balanced(&self) -> bool {
        let expiry = self.settings.ownership_expiry.as_millis() as u64;
        let alive = self.alive();
        let mut counts: BTreeMap<&str, usize> = alive.iter().map(|a| (a.as_str(), 0)).collect();
        for p in &self.partitions {
            match self.store.records.get(p) {
                Some(r) if self.now - r.modified_ms < expiry => {
                    match counts.get_mut(r.owner.as_str()) {
                        Some(n) => *n += 1,
                        None => return false,
                    }
                }
                _ => return false,
            }
        }
        let lo = counts.values().min().copied().unwrap_or(0);
        let hi = counts.values().max().copied().unwrap_or(0);
        hi - lo <= 1
    }

    /// Runs until balanced (checking every 50 ms) or `limit` passes; returns the time taken.
    fn settle(&mut self, limit: Duration) -> Option<u64> {
        let start = self.now;
        let limit = limit.as_millis() as u64;
        while self.now - start <= limit {
            if self.balanced() {
                return Some(self.now - start);
            }
            self.run_until(self.now + 50);
        }
        None
    }
}

#[test]
fn a_pool_grows_and_shrinks_with_minimal_moves_and_no_churn() {
    let mut sim = Sim::new(7, 16);
    sim.transient_failure_rate = 0.0;
    sim.join("i0");
    assert!(sim.settle(Duration::from_secs(10)).is_some());
    for (n, id) in [(2, "i1"), (3, "i2"), (4, "i3")] {
        let before = sim.store.changes.len();
        sim.join(id);
        let took = sim.settle(Duration::from_secs(20));
        assert!(took.is_some(), "{n} instances never balanced");
        // Let any in-flight cycle land, then count the moves.
        sim.run_until(sim.now + 3_000);
        let moves = sim.store.changes.len() - before;
        assert_eq!(moves, 16 / n, "growing to {n} moved {moves} partitions");
    }
    let before = sim.store.changes.len();
    sim.run_until(sim.now + 600_000);
    assert_eq!(
        sim.store.changes.len(),
        before,
        "ownership changed with steady membership"
    );
    assert!(sim.balanced());
    // Shrinking gracefully: the leaver's partitions move, and only those.
    for id in ["i3", "i2", "i1"] {
        let held = sim.store.records.values().filter(|r| r.owner == id).count();
        let before = sim.store.changes.len();
        sim.leave(id);
        let took = sim
            .settle(Duration::from_secs(10))
            .expect("balanced after a leave");
        assert!(took <= 3_000, "graceful handoff took {took} ms");
        sim.run_until(sim.now + 3_000);
        let moves = sim.store.changes.len() - before;
        // `held` relinquishments plus `held` takes.
        assert_eq!(moves, 2 * held, "leave of {id}");
    }
}

#[test]
fn a_crashed_instances_partitions_are_taken_within_expiry_plus_one_cycle() {
    let mut sim = Sim::new(11, 16);
    sim.transient_failure_rate = 0.0;
    for id in ["a", "b", "c"] {
        sim.join(id);
    }
    assert!(sim.settle(Duration::from_secs(20)).is_some());
    sim.run_until(sim.now + 10_000);
    let orphaned: Vec<String> = sim
        .store
        .records
        .iter()
        .filter(|(_, r)| r.owner == "b")
        .map(|(p, _)| p.clone())
        .collect();
    let last_renewal = sim
        .store
        .records
        .values()
        .filter(|r| r.owner == "b")
        .map(|r| r.modified_ms)
        .max()
        .unwrap();
    sim.crash("b");
    let took = sim.settle(Duration::from_secs(30)).expect("takeover");
    let since_renewal = sim.now - last_renewal;
    let bound = sim.settings.ownership_expiry.as_millis() as u64
        + (sim.settings.update_interval.as_millis() as u64) * 13 / 10
        + 300 // one write delay
        + 50; // the settle check's granularity
    assert!(
        since_renewal <= bound,
        "partitions {orphaned:?} were orphaned {since_renewal} ms after the last renewal (bound {bound}, settle {took})"
    );
}

#[test]
fn random_joins_leaves_and_crashes_always_settle() {
    let mut worst_settle = 0;
    let mut checked = 0;
    for seed in 0..40u64 {
        let mut sim = Sim::new(seed, 16);
        let first = 1 + (seed % 3) as usize;
        let mut next_id = 0;
        for _ in 0..first {
            sim.join(&format!("n{next_id}"));
            next_id += 1;
        }
        assert!(
            sim.settle(Duration::from_secs(20)).is_some(),
            "seed {seed}: start"
        );
        for step in 0..12 {
            let alive = sim.alive();
            let changes_before = sim.store.changes.len();
            // What a join must move at the least: the newcomer's minimum share, or all the
            // partitions above the new maximum, whichever is more.
            let required_for_join = {
                let k = alive.len() + 1;
                let (min, max) = (16 / k, 16 / k + usize::from(!16usize.is_multiple_of(k)));
                let excess: usize = alive
                    .iter()
                    .map(|a| {
                        let held = sim.store.records.values().filter(|r| &r.owner == a).count();
                        held.saturating_sub(max)
                    })
                    .sum();
                min.max(excess)
            };
            let roll = sim.rng.range(0, 3);
            let what = match roll {
                0 if alive.len() < 8 => {
                    let id = format!("n{next_id}");
                    next_id += 1;
                    sim.join(&id);
                    "join"
                }
                1 if alive.len() > 1 => {
                    let id = alive[sim.rng.range(0, alive.len() as u64) as usize].clone();
                    sim.leave(&id);
                    "leave"
                }
                _ if alive.len() > 1 => {
                    let id = alive[sim.rng.range(0, alive.len() as u64) as usize].clone();
                    sim.crash(&id);
                    "crash"
                }
                _ => {
                    let id = format!("n{next_id}");
                    next_id += 1;
                    sim.join(&id);
                    "join"
                }
            };
            // Bound: expiry (for crashes) + a cycle + steals one per quick cycle.
            let took = sim.settle(Duration::from_secs(25)).unwrap_or_else(|| {
                panic!("seed {seed} step {step} ({what}): not balanced after 25 s")
            });
            worst_settle = worst_settle.max(took);
            checked += 1;
            sim.run_until(sim.now + 3_000);
            if what == "join" {
                let moves = sim.store.changes.len() - changes_before;
                assert_eq!(
                    moves, required_for_join,
                    "seed {seed} step {step}: a join moved {moves} partitions"
                );
            }
            // Steady membership between changes: no ownership moves (transient storage
            // failures included — a missed renewal is retried long before expiry).
            sim.run_until(sim.now + 3_000);
            let before = sim.store.changes.len();
            sim.run_until(sim.now + 60_000);
            assert_eq!(
                sim.store.changes.len(),
                before,
                "seed {seed} step {step} (after a {what}): churn with steady membership: {:?}; alive {:?}; history {:?}; settled in {took} ms",
                &sim.store.changes[before..],
                sim.alive(),
                {
                    let p = sim
                        .store
                        .changes
                        .last()
                        .map(|c| c.1.clone())
                        .unwrap_or_default();
                    sim.store
                        .changes
                        .iter()
                        .filter(|c| c.1 == p)
                        .collect::<Vec<_>>()
                }
            );
        }
    }
    eprintln!("{checked} membership changes settled; worst {worst_settle} ms");
    assert!(worst_settle < 25_000);
}
