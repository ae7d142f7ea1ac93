//! The load-balancing decision: a pure function of (every ownership record, the clock, my id,
//! the partition ids, settings) → which partitions to renew, take and steal this cycle.
//!
//! The rules, and the SDK behaviour they answer (docs/load-balancing.md):
//! - **Fair share**: `min = partitions / owners`, `max = min + 1` if there is a remainder, where
//!   owners are the instances with an active (owned and unexpired) record, plus me — foreign
//!   owners (the Functions host, the SDK processors) included, so every peer computes the same
//!   shares and nobody steals back what another took.
//! - **Each owner is judged by its own expiry.** hubhost writes the expiry it renews within
//!   beside `ownerid` (`vouched_expiry`); a record without one belongs to a foreign owner and
//!   stays active for `foreign_ownership_expiry` (3 minutes: the longest default among the
//!   host and the SDKs), so hubhost never takes a partition from a live foreign owner that
//!   renews on its own, slower clock. Among hubhost instances takeover stays fast.
//! - **Orphans first, all at once**: partitions unowned, relinquished or expired are taken up to
//!   my `min` (my `max` if no other owner is below its `min`) in one cycle — takeover after a crash is one cycle after expiry, not one partition
//!   per cycle (.NET/Java take ~150 s; users asked for faster, azure-sdk-for-net#31941, #11989).
//!   While a foreign owner is active, the partitions of a hubhost instance that died are taken
//!   beyond `max` too: the foreign peers still see them owned until their own expiry, so
//!   nobody else would read them for minutes; the slower peers take their share back later
//!   by stealing from the owner above `max`.
//! - **Steal slowly**: at most one partition per cycle, and only from an owner above `max` (or at
//!   `max` while I am below `min`), so every steal reduces imbalance and a scale-out moves no
//!   more partitions than balance requires; the caller re-runs quickly while unbalanced, so the
//!   damping costs little time (Python#28338 and Go#22487 describe the thrashing this avoids).
//! - **Renew everything I own every cycle**, in the same batch of ETag-conditional writes.
//! - **Stable preferences**: among equal candidates, each instance prefers partitions by a hash
//!   of (its id, partition) — rendezvous hashing — so instances starting together reach for
//!   different orphans instead of colliding on the same ones, and no randomness is needed.
//!
//! Steady membership therefore changes no ownership: a balanced pool has no orphans, and nobody
//! is above `max` or below `min`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};

use hubhost_checkpoints::{FOREIGN_OWNERSHIP_EXPIRY, OwnershipClaim, PartitionOwnership};

#[derive(Debug, Clone, PartialEq)]
pub struct BalancerSettings {
    /// Time between cycles once balanced (jittered ×0.8–1.3).
    pub update_interval: Duration,
    /// Time between cycles while unbalanced (jittered likewise).
    pub unbalanced_interval: Duration,
    /// An ownership not renewed for this long is abandoned. At least 3× `update_interval`, so
    /// that a slow cycle or two does not let live ownerships expire (azure-sdk-for-rust#3851).
    /// Written into every claim, so other hubhost instances judge this one by it.
    pub ownership_expiry: Duration,
    /// How long the ownership of an owner that vouched for no expiry (the Functions host, the
    /// SDK processors) stays active without renewal.
    pub foreign_ownership_expiry: Duration,
}

impl Default for BalancerSettings {
    /// Takeover after a crash within expiry + one cycle: 6 s + ≤1.95 s. The expiry spans three
    /// to five jittered cycles, so one or two failed renewals do not lose a partition.
    fn default() -> Self {
        BalancerSettings {
            update_interval: Duration::from_millis(1500),
            unbalanced_interval: Duration::from_millis(250),
            ownership_expiry: Duration::from_secs(6),
            foreign_ownership_expiry: FOREIGN_OWNERSHIP_EXPIRY,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SettingsError {
    #[error(
        "the ownership expiry ({expiry:?}) must be at least 3 times the load-balancing interval ({interval:?}); \
         otherwise live owners expire between renewals and partitions bounce between instances"
    )]
    ExpiryTooShort {
        expiry: Duration,
        interval: Duration,
    },
    #[error("the load-balancing interval must be more than zero")]
    ZeroInterval,
    #[error(
        "the foreign ownership expiry ({foreign:?}) is shorter than hubhost's own ({own:?}); \
         foreign owners renew on slower clocks, never faster"
    )]
    ForeignExpiryTooShort { foreign: Duration, own: Duration },
}

impl BalancerSettings {
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.update_interval.is_zero() || self.unbalanced_interval.is_zero() {
            return Err(SettingsError::ZeroInterval);
        }
        if self.ownership_expiry < self.update_interval * 3 {
            return Err(SettingsError::ExpiryTooShort {
                expiry: self.ownership_expiry,
                interval: self.update_interval,
            });
        }
        if self.foreign_ownership_expiry < self.ownership_expiry {
            return Err(SettingsError::ForeignExpiryTooShort {
                foreign: self.foreign_ownership_expiry,
                own: self.ownership_expiry,
            });
        }
        Ok(())
    }

    /// The wait before the next cycle; `jitter` in [0, 1) spreads instances apart.
    pub fn next_wait(&self, balanced: bool, jitter: f64) -> Duration {
        let base = if balanced {
            self.update_interval
        } else {
            self.unbalanced_interval
        };
        base.mul_f64(0.8 + 0.5 * jitter.clamp(0.0, 1.0))
    }
}

/// What one cycle should do.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Every write of the cycle: renewals, takes and steals, each with the ETag it presents.
    pub claims: Vec<OwnershipClaim>,
    pub renew: Vec<String>,
    /// Orphans: unowned, relinquished or expired.
    pub take: Vec<String>,
    /// (partition, owner it is taken from).
    pub steal: Vec<(String, String)>,
    /// My fair share: between `min` and `max` partitions.
    pub min: usize,
    pub max: usize,
    /// Whether, once these claims succeed, this instance has nothing more to do.
    pub balanced: bool,
}

/// Decides one cycle for `me`. `partitions` are the event hub's partition ids; records for
/// other ids are ignored.
pub fn plan(
    ownerships: &[PartitionOwnership],
    partitions: &[String],
    me: &str,
    now: DateTime<Utc>,
    settings: &BalancerSettings,
) -> Plan {
    let known: BTreeSet<&str> = partitions.iter().map(String::as_str).collect();
    let records: BTreeMap<&str, &PartitionOwnership> = ownerships
        .iter()
        .filter(|o| known.contains(o.partition_id.as_str()))
        .map(|o| (o.partition_id.as_str(), o))
        .collect();
    let active = |o: &PartitionOwnership| o.is_live(now, settings.foreign_ownership_expiry);

    // Who holds what (active records only); me included even with nothing.
    let mut holdings: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    holdings.insert(me, Vec::new());
    for (p, o) in &records {
        if active(o) {
            holdings.entry(o.owner_id.as_str()).or_default().push(p);
        }
    }
    let owners = holdings.len();
    let min = partitions.len() / owners;
    let max = min + usize::from(!partitions.len().is_multiple_of(owners));
    let mine = holdings[me].clone();

    let claim_of = |p: &str, owner: &str| OwnershipClaim {
        partition_id: p.to_string(),
        owner_id: owner.to_string(),
        etag: records.get(p).map(|o| o.etag.clone()),
        vouched_expiry: Some(settings.ownership_expiry),
    };
    let mut result = Plan {
        min,
        max,
        ..Default::default()
    };
    for p in &mine {
        result.renew.push(p.to_string());
        result.claims.push(claim_of(p, me));
    }

    // Orphans, most preferred first, up to my max.
    let mut orphans: Vec<&str> = partitions
        .iter()
        .map(String::as_str)
        .filter(|p| records.get(p).is_none_or(|o| !active(o)))
        .collect();
    orphans.sort_by_key(|p| std::cmp::Reverse(preference(me, p)));
    // Up to min while another owner is still below min (it needs the orphans more: taking
    // beyond min now would force a steal later, one move too many); else up to max.
    let others_below_min = holdings
        .iter()
        .any(|(owner, held)| *owner != me && held.len() < min);
    let room = if others_below_min {
        min.saturating_sub(mine.len())
    } else {
        max.saturating_sub(mine.len())
    };
    // A dead hubhost instance's partitions, beyond my share, while foreign owners (who still
    // count them owned until their own expiry) are the only others who could take them.
    let foreign_active = records
        .values()
        .any(|o| o.vouched_expiry.is_none() && active(o));
    let hidden_from_foreign = |p: &&str| {
        records.get(p).is_some_and(|o| {
            !o.owner_id.is_empty()
                && o.vouched_expiry.is_some()
                && o.is_active(now, settings.foreign_ownership_expiry)
        })
    };
    for (rank, p) in orphans.iter().enumerate() {
        if rank < room || (foreign_active && hidden_from_foreign(p)) {
            result.take.push(p.to_string());
            result.claims.push(claim_of(p, me));
        }
    }
    let will_own = mine.len() + result.take.len();

    // One steal, if still short: from the largest owner above max, or at max while I am
    // below min. Ties between owners go to the lexically first id, so all instances agree.
    if result.take.is_empty() && will_own < max {
        let victim = holdings
            .iter()
            .filter(|(owner, held)| {
                **owner != me && (held.len() > max || (held.len() == max && will_own < min))
            })
            .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(a.0)));
        if let Some((owner, held)) = victim {
            let p = held
                .iter()
                .max_by_key(|p| preference(me, p))
                .expect("an owner above its share holds partitions");
            result.steal.push((p.to_string(), owner.to_string()));
            result.claims.push(claim_of(p, me));
        }
    }
    let after = will_own + result.steal.len();
    result.balanced = result.take.is_empty() && result.steal.is_empty() && after >= min;
    result
}

/// Rendezvous-hash score of (instance, partition): FNV-1a, 64 bits. Stable across processes
/// and versions, which matters: instances compare their preferences only implicitly.
fn preference(me: &str, partition: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in me.bytes().chain([0u8]).chain(partition.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // FNV's low bits mix poorly for short keys; finish like splitmix64.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hubhost_storage::ETag;

    fn parts(n: usize) -> Vec<String> {
        (0..n).map(|i| i.to_string()).collect()
    }

    /// A hubhost instance's record: it vouches for the default 6 s expiry.
    fn own(p: usize, owner: &str, age_s: i64, now: DateTime<Utc>) -> PartitionOwnership {
        PartitionOwnership {
            partition_id: p.to_string(),
            owner_id: owner.into(),
            etag: ETag::new(format!("e{p}")),
            last_modified: now - chrono::Duration::seconds(age_s),
            vouched_expiry: Some(BalancerSettings::default().ownership_expiry),
        }
    }

    /// A foreign owner's record (the Functions host, an SDK processor): no vouched expiry.
    fn foreign(p: usize, owner: &str, age_s: i64, now: DateTime<Utc>) -> PartitionOwnership {
        PartitionOwnership {
            vouched_expiry: None,
            ..own(p, owner, age_s, now)
        }
    }

    #[test]
    fn a_foreign_owner_keeps_its_partitions_until_the_foreign_expiry() {
        let now = Utc::now();
        let s = BalancerSettings::default();
        // The Functions host renewed 100 s ago (its interval is 30 s, a slow cycle or two):
        // long past hubhost's own 6 s, well within the 180 s a foreign owner gets.
        let mut records: Vec<_> = (0..8).map(|p| foreign(p, "host", 100, now)).collect();
        records.extend((8..16).map(|p| own(p, "h", 1, now)));
        let plan = plan(&records, &parts(16), "h", now, &s);
        assert!(plan.take.is_empty() && plan.steal.is_empty(), "{plan:?}");
        assert_eq!((plan.min, plan.max, plan.renew.len()), (8, 8, 8));
        assert!(plan.balanced);
        // Every claim vouches for hubhost's own expiry.
        assert!(
            plan.claims
                .iter()
                .all(|c| c.vouched_expiry == Some(s.ownership_expiry))
        );
        // Past the foreign expiry the partitions are orphans like any other.
        let records: Vec<_> = (0..8)
            .map(|p| foreign(p, "host", 181, now))
            .chain((8..16).map(|p| own(p, "h", 1, now)))
            .collect();
        let plan = super::plan(&records, &parts(16), "h", now, &s);
        assert_eq!(plan.take.len(), 8);
    }

    #[test]
    fn shares_count_foreign_owners_and_nobody_steals_in_a_balanced_mixed_pool() {
        let now = Utc::now();
        let s = BalancerSettings::default();
        // 6/5/5 between two hubhost instances and the Python SDK.
        let records: Vec<_> = (0..16)
            .map(|p| match p % 3 {
                0 => own(p, "h1", 1, now),
                1 => own(p, "h2", 1, now),
                _ => foreign(p, "python", 25, now),
            })
            .collect();
        for me in ["h1", "h2"] {
            let plan = plan(&records, &parts(16), me, now, &s);
            assert_eq!((plan.min, plan.max), (5, 6));
            assert!(plan.take.is_empty() && plan.steal.is_empty() && plan.balanced);
        }
        // A newcomer steals from the foreign owner when it holds the most, one per cycle.
        let records: Vec<_> = (0..16)
            .map(|p| {
                if p < 10 {
                    foreign(p, "python", 25, now)
                } else {
                    own(p, "h1", 1, now)
                }
            })
            .collect();
        let plan = plan(&records, &parts(16), "h2", now, &s);
        assert_eq!(plan.steal.len(), 1);
        assert_eq!(plan.steal[0].1, "python");
    }

    #[test]
    fn a_dead_instances_partitions_are_all_taken_at_once_beside_a_foreign_owner() {
        let now = Utc::now();
        let s = BalancerSettings::default();
        // h1 died 7 s ago holding 0..4; h2, the Python SDK and the host hold 4 each.
        let mut records: Vec<_> = (0..4).map(|p| own(p, "h1", 7, now)).collect();
        records.extend((4..8).map(|p| own(p, "h2", 1, now)));
        records.extend((8..12).map(|p| foreign(p, "python", 20, now)));
        records.extend((12..16).map(|p| foreign(p, "host", 20, now)));
        let plan = plan(&records, &parts(16), "h2", now, &s);
        // Its share is 5 or 6, but the foreign peers will not see these orphans for minutes.
        assert_eq!((plan.min, plan.max), (5, 6));
        let mut took = plan.take.clone();
        took.sort();
        assert_eq!(took, ["0", "1", "2", "3"]);
        // Without a foreign owner the share holds: the other hubhost instance takes the rest.
        let mut records: Vec<_> = (0..4).map(|p| own(p, "h1", 7, now)).collect();
        records.extend((4..10).map(|p| own(p, "h2", 1, now)));
        records.extend((10..16).map(|p| own(p, "h3", 1, now)));
        let plan = super::plan(&records, &parts(16), "h2", now, &s);
        assert_eq!(plan.take.len(), 2, "{plan:?}");
        // A vouched expiry cannot be made shorter than a second.
        let mut quick = own(0, "h1", 0, now);
        quick.vouched_expiry = Some(Duration::ZERO);
        let plan = super::plan(&[quick], &parts(1), "h2", now, &s);
        assert!(plan.take.is_empty() && plan.steal.is_empty(), "{plan:?}");
    }

    #[test]
    fn a_lone_instance_takes_every_orphan_in_one_cycle() {
        let now = Utc::now();
        let plan = plan(&[], &parts(16), "a", now, &BalancerSettings::default());
        assert_eq!(plan.take.len(), 16);
        assert_eq!((plan.min, plan.max), (16, 16));
        assert!(plan.claims.iter().all(|c| c.etag.is_none()));
        // Claims can lose races: balanced only once a cycle has nothing to take.
        assert!(!plan.balanced);
        let records: Vec<_> = (0..16).map(|p| own(p, "a", 0, now)).collect();
        let next = super::plan(&records, &parts(16), "a", now, &BalancerSettings::default());
        assert!(next.balanced && next.take.is_empty() && next.renew.len() == 16);
    }

    #[test]
    fn a_balanced_pool_only_renews() {
        let now = Utc::now();
        let owners = ["a", "b", "c"];
        let records: Vec<_> = (0..16).map(|p| own(p, owners[p % 3], 1, now)).collect();
        for me in owners {
            let plan = plan(&records, &parts(16), me, now, &BalancerSettings::default());
            assert!(
                plan.take.is_empty() && plan.steal.is_empty(),
                "{me}: {plan:?}"
            );
            assert!(plan.balanced);
            assert_eq!(plan.renew.len(), if me == "a" { 6 } else { 5 });
            assert!(plan.claims.iter().all(|c| c.etag.is_some()));
        }
    }

    #[test]
    fn a_newcomer_steals_one_at_a_time_from_the_largest_owner() {
        let now = Utc::now();
        let records: Vec<_> = (0..16)
            .map(|p| own(p, if p < 10 { "a" } else { "b" }, 1, now))
            .collect();
        let plan = plan(&records, &parts(16), "c", now, &BalancerSettings::default());
        assert_eq!((plan.min, plan.max), (5, 6));
        assert_eq!(plan.steal.len(), 1);
        assert_eq!(plan.steal[0].1, "a");
        assert!(!plan.balanced);
        // The claim presents the victim's ETag, so a concurrent renewal by `a` wins the race.
        let stolen = &plan.steal[0].0;
        let claim = plan
            .claims
            .iter()
            .find(|c| &c.partition_id == stolen)
            .unwrap();
        assert_eq!(claim.etag, Some(ETag::new(format!("e{stolen}"))));
    }

    #[test]
    fn expired_and_relinquished_partitions_are_orphans() {
        let now = Utc::now();
        let s = BalancerSettings::default();
        let mut records: Vec<_> = (0..8).map(|p| own(p, "a", 1, now)).collect();
        records.extend((8..12).map(|p| own(p, "dead", 7, now)));
        records.extend((12..16).map(|p| own(p, "", 1, now)));
        let plan = plan(&records, &parts(16), "b", now, &s);
        assert_eq!((plan.min, plan.max), (8, 8));
        let mut took = plan.take.clone();
        took.sort_by_key(|p| p.parse::<u32>().unwrap());
        assert_eq!(took, parts(16)[8..].to_vec());
        assert!(plan.steal.is_empty());
    }

    #[test]
    fn no_steal_from_an_owner_at_max_when_i_am_at_min() {
        let now = Utc::now();
        // 6, 5, 5: the instances at 5 must not take from the one at 6.
        let owners = ["a", "b", "c"];
        let records: Vec<_> = (0..16).map(|p| own(p, owners[p % 3], 1, now)).collect();
        let plan = plan(&records, &parts(16), "b", now, &BalancerSettings::default());
        assert!(plan.steal.is_empty());
    }

    #[test]
    fn instances_prefer_different_orphans() {
        let now = Utc::now();
        let s = BalancerSettings::default();
        // Two instances see each other (one record each) and 14 orphans.
        let records = vec![own(0, "a", 1, now), own(1, "b", 1, now)];
        let pa = plan(&records, &parts(16), "a", now, &s);
        let pb = plan(&records, &parts(16), "b", now, &s);
        let overlap = pa.take.iter().filter(|p| pb.take.contains(p)).count();
        assert!(
            overlap < 7,
            "{overlap} of 7 collide: {:?} {:?}",
            pa.take,
            pb.take
        );
    }

    #[test]
    fn settings_are_validated() {
        let mut s = BalancerSettings::default();
        s.validate().unwrap();
        s.ownership_expiry = Duration::from_secs(4);
        assert!(matches!(
            s.validate(),
            Err(SettingsError::ExpiryTooShort { .. })
        ));
        let s = BalancerSettings {
            foreign_ownership_expiry: Duration::from_secs(5),
            ..BalancerSettings::default()
        };
        assert!(matches!(
            s.validate(),
            Err(SettingsError::ForeignExpiryTooShort { .. })
        ));
        let w = BalancerSettings::default().next_wait(true, 0.99);
        assert!(w <= Duration::from_millis(1950) && w >= Duration::from_millis(1200));
    }
}
