//! The time and the ids as the host code reads them: the wall clock and random UUIDs, or a
//! simulation's virtual clock and numbered ids.
//!
//! Everything in hubhost that decides by the time of day (ownership expiry compared with a
//! blob's last-modified time, a checkpoint's or a blob's timestamp, an event's enqueued time)
//! asks [`now`] rather than `chrono::Utc::now()`, and waits with `tokio::time`. Outside a
//! simulation the two are the same. Inside one, a thread runs a current-thread tokio runtime
//! whose clock is paused ([`Simulated::enter`]): `tokio::time` then advances only when every
//! task waits, straight to the next timer, and [`now`] is the simulation's start plus the
//! virtual time elapsed — so ownership expiry, retry intervals and `maxWaitTime` cost nothing,
//! and a run depends on its seed, not on the machine's speed.
//!
//! Ids the host makes up (an invocation's id, a `{rand-guid}` in a blob path) come from
//! [`uuid()`]: random, or in a simulation numbered in the order they are asked for, so that a
//! run's trace and outputs are the same every time.
//!
//! The simulated clock is per thread: a simulation and the real host can share a process.

use std::cell::Cell;

use chrono::{DateTime, Utc};

thread_local! {
    /// The simulation running on this thread: its start as wall time and as tokio's instant.
    static SIMULATED: Cell<Option<(DateTime<Utc>, tokio::time::Instant)>> = const { Cell::new(None) };
    /// The ids a simulation on this thread has handed out.
    static IDS: Cell<u64> = const { Cell::new(0) };
}

/// A new id: a random (version 4) UUID, or on a simulation's thread the next of its numbered
/// ones (still shaped as version 4).
pub fn uuid() -> uuid::Uuid {
    if SIMULATED.get().is_none() {
        return uuid::Uuid::new_v4();
    }
    let n = IDS.get() + 1;
    IDS.set(n);
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(b"simulate");
    bytes[8..].copy_from_slice(&n.to_be_bytes());
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// The current time: the wall clock, or on a simulation's thread the simulation's.
pub fn now() -> DateTime<Utc> {
    match SIMULATED.get() {
        Some((epoch, started)) => {
            let elapsed = tokio::time::Instant::now().saturating_duration_since(started);
            epoch + chrono::Duration::from_std(elapsed).unwrap_or_default()
        }
        None => Utc::now(),
    }
}

/// Whether this thread runs a simulation (some edges, a process or a socket, have no place in
/// one and say so).
pub fn is_simulated() -> bool {
    SIMULATED.get().is_some()
}

/// A simulation's clock on this thread, until dropped.
pub struct Simulated {
    previous: Option<(DateTime<Utc>, tokio::time::Instant)>,
}

impl Simulated {
    /// Makes [`now`] read `epoch` plus the tokio time elapsed from here, on this thread. Call
    /// it inside a current-thread runtime whose clock is paused (`start_paused(true)`), so
    /// that tokio's time is virtual too.
    pub fn enter(epoch: DateTime<Utc>) -> Self {
        let previous = SIMULATED.replace(Some((epoch, tokio::time::Instant::now())));
        IDS.set(0);
        Simulated { previous }
    }
}

impl Drop for Simulated {
    fn drop(&mut self) {
        SIMULATED.set(self.previous);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_simulated_clock_moves_with_tokio_time_only() {
        let epoch = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let clock = Simulated::enter(epoch);
        assert!(is_simulated());
        assert_eq!(now(), epoch);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(now(), epoch + chrono::Duration::hours(1));
        drop(clock);
        assert!(!is_simulated());
        assert!(
            now() > epoch + chrono::Duration::days(300),
            "the wall clock again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_simulation_numbers_its_ids_from_the_start_every_time() {
        let run = || {
            let _clock = Simulated::enter(Utc::now());
            [uuid(), uuid()]
        };
        let first = run();
        assert_eq!(first, run());
        assert_ne!(first[0], first[1]);
        assert_eq!(first[0].get_version_num(), 4);
        assert_ne!(uuid(), uuid(), "random outside a simulation");
    }

    #[test]
    fn outside_a_simulation_it_is_the_wall_clock() {
        let before = Utc::now();
        let read = now();
        assert!(read >= before && read <= Utc::now());
    }
}
