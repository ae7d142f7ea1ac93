//! Faults injected into one emulated instance, on demand: the switches a rehearsal
//! (`hubhost rehearse`, the test kit's rehearsals) turns, consulted where Azure's own faults
//! land — the handler killed mid-invocation, an output binding failing, the checkpoint store
//! unavailable, the whole instance frozen (a long GC pause, a VM paused by the platform), and
//! geo-replicated namespaces' offsets.
//!
//! The emulated host never turns a switch itself; without a [`FaultSwitch`] every check is a
//! no-op. When a fault fires is the rehearsal's decision (a seeded plan); this module only
//! carries it out and counts the events handed to the function, the clock those plans run on.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::{Notify, watch};

use hubhost_storage::{
    Blob, BlobProperties, BlobStore, Condition, Metadata, SharedStore, StoreError, WriteOutcome,
};
use hubhost_trigger::batch::EventRecord;

/// Per `Function/partition`, the last sequence number answered (shared by a rehearsal's
/// instances).
pub type Answered = Arc<Mutex<std::collections::BTreeMap<String, i64>>>;

/// The switches of one instance. Cheap to share (`Arc`).
pub struct FaultSwitch {
    /// Events handed to the function (redeliveries too), counted across every instance sharing
    /// this sender: the clock a rehearsal's faults run on, which batching does not move.
    events: Arc<watch::Sender<u64>>,
    /// Per function and partition (`Function/3`), the last sequence number of a batch the
    /// function answered and whose outputs were carried out, across instances.
    answered: Answered,
    failing_outputs: Mutex<HashMap<String, Instant>>,
    store_down_until: Mutex<Option<Instant>>,
    frozen_until: Mutex<Option<Instant>>,
    geo_offsets: AtomicBool,
    kill_handler: Notify,
    verdicts: Verdicts,
}

/// The batches given up after their failures (shared by a rehearsal's instances, so that one
/// that left still counts).
pub type GivenUpLog = Arc<Mutex<Vec<GivenUp>>>;

/// What a rehearsal's instances record for its verdict, shared by them all (an instance that
/// left still counts).
#[derive(Debug, Clone, Default)]
pub struct Verdicts {
    /// The batches given up after their failures: lost on Azure.
    pub given_up: GivenUpLog,
    /// Answers that set outputs function.json does not declare, as the emulated host says
    /// them (naming the declared ones): dropped on Azure without a sign.
    pub undeclared_outputs: Arc<Mutex<Vec<String>>>,
}

/// A batch the function failed, its retry policy spent (or none), that the host then moved
/// past: on Azure its events are never delivered again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GivenUp {
    pub function: String,
    pub partition: String,
    pub first_sequence: Option<i64>,
    pub last_sequence: Option<i64>,
    /// How many events the batch held.
    pub events: usize,
    /// Invocations that failed, the first included.
    pub attempts: u32,
    /// The policy's `maxRetryCount`; `None` without a retry policy.
    pub max_retry_count: Option<i64>,
    /// Why the last attempt failed.
    pub error: String,
}

impl GivenUp {
    /// `lost on Azure: 100 inputs after 3 failed attempts; policy maxRetryCount 2`, and where.
    pub fn describe(&self) -> String {
        let policy = match self.max_retry_count {
            Some(n) => format!("policy maxRetryCount {n}"),
            None => "no retry policy".to_string(),
        };
        let sequences = match (self.first_sequence, self.last_sequence) {
            (Some(first), Some(last)) => format!(", sequence numbers {first}..={last}"),
            _ => String::new(),
        };
        format!(
            "lost on Azure: {} input{} after {} failed attempt{}; {policy} ({}, partition {}{sequences}): {}",
            self.events,
            if self.events == 1 { "" } else { "s" },
            self.attempts,
            if self.attempts == 1 { "" } else { "s" },
            self.function,
            self.partition,
            self.error
        )
    }
}

impl std::fmt::Debug for FaultSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultSwitch")
            .field("events", &*self.events.borrow())
            .finish_non_exhaustive()
    }
}

impl FaultSwitch {
    /// Switches for one instance; `events` is shared by every instance of a rehearsal so that
    /// "after the k-th event" means the same point whichever instance hands it out.
    pub fn new(
        events: Arc<watch::Sender<u64>>,
        answered: Answered,
        verdicts: Verdicts,
    ) -> Arc<Self> {
        Arc::new(FaultSwitch {
            events,
            answered,
            failing_outputs: Mutex::default(),
            store_down_until: Mutex::default(),
            frozen_until: Mutex::default(),
            geo_offsets: AtomicBool::new(false),
            kill_handler: Notify::new(),
            verdicts,
        })
    }

    /// Carrying out output `name` fails for `period`, as a throttled send or a blob write
    /// answered 503 does.
    pub fn fail_output_for(&self, name: &str, period: Duration) {
        let until = Instant::now() + period;
        let mut failing = self.failing_outputs.lock().expect("faults lock");
        let entry = failing.entry(name.to_string()).or_insert(until);
        *entry = (*entry).max(until);
    }

    /// Every checkpoint store request fails as unavailable for `period`.
    pub fn store_down_for(&self, period: Duration) {
        *self.store_down_until.lock().expect("faults lock") = Some(Instant::now() + period);
    }

    /// The instance stops for `period`: no store request, invocation or output proceeds until
    /// it ends; what was under way resumes then, as a paused process does.
    pub fn freeze_for(&self, period: Duration) {
        *self.frozen_until.lock().expect("faults lock") = Some(Instant::now() + period);
    }

    /// Offsets handed to the function become opaque strings, as a geo-replicated namespace's
    /// are (`OffsetString`; `Offset` is then -1).
    pub fn set_geo_offsets(&self, on: bool) {
        self.geo_offsets.store(on, Ordering::Relaxed);
    }

    /// Kills the custom handler at once (SIGKILL), whatever it is doing; the host restarts it
    /// and delivers the batch it was given again.
    pub fn kill_handler(&self) {
        self.kill_handler.notify_one();
    }

    /// The batches given up so far, by every instance sharing this log, in order.
    pub fn given_up(&self) -> Vec<GivenUp> {
        self.verdicts.given_up.lock().expect("not poisoned").clone()
    }

    /// Records a batch the host moved past after its failures (see [`GivenUp`]): done with,
    /// as a batch that succeeded is.
    pub fn batch_given_up(&self, given_up: GivenUp) {
        self.batch_succeeded(
            &given_up.function,
            &given_up.partition,
            given_up.last_sequence,
        );
        self.verdicts
            .given_up
            .lock()
            .expect("not poisoned")
            .push(given_up);
    }

    /// Records an answer that set outputs its function.json does not declare (`message` names
    /// them and the declared ones).
    pub fn undeclared_output(&self, message: String) {
        self.verdicts
            .undeclared_outputs
            .lock()
            .expect("not poisoned")
            .push(message);
    }

    /// Resolves when [`Self::kill_handler`] was called (the run loop waits on it).
    pub async fn kill_requested(&self) {
        self.kill_handler.notified().await
    }

    /// An invocation of `events` events starts: held while the instance is frozen, then counted.
    pub async fn invocation_starts(&self, events: usize) {
        self.wait_while_frozen().await;
        self.events.send_modify(|n| *n += events as u64);
    }

    /// A batch of `function` on `partition` through `last` succeeded (its outputs carried out),
    /// or was given up: the function is done with it.
    pub fn batch_succeeded(&self, function: &str, partition: &str, last: Option<i64>) {
        if let Some(last) = last {
            let mut answered = self.answered.lock().expect("answered lock");
            let entry = answered
                .entry(format!("{function}/{partition}"))
                .or_insert(last);
            *entry = (*entry).max(last);
        }
    }

    /// Waits while the instance is frozen.
    pub async fn wait_while_frozen(&self) {
        loop {
            let until = *self.frozen_until.lock().expect("faults lock");
            match until {
                Some(until) if until > Instant::now() => {
                    tokio::time::sleep_until(until).await;
                }
                _ => return,
            }
        }
    }

    /// Whether output `name` fails this time (an injected 503 Server Busy).
    pub fn output_failing(&self, name: &str) -> bool {
        let failing = self.failing_outputs.lock().expect("faults lock");
        failing
            .get(name)
            .is_some_and(|until| *until > Instant::now())
    }

    fn store_down(&self) -> bool {
        self.store_down_until
            .lock()
            .expect("faults lock")
            .is_some_and(|until| until > Instant::now())
    }

    /// The events as the function is handed them: with geo-replication offsets on, each offset
    /// an opaque string.
    pub fn offsets_for_function(&self, events: &[EventRecord]) -> Option<Vec<EventRecord>> {
        if !self.geo_offsets.load(Ordering::Relaxed) {
            return None;
        }
        Some(
            events
                .iter()
                .map(|e| EventRecord {
                    offset: Some(geo_offset(e.sequence_number.unwrap_or_default())),
                    ..e.clone()
                })
                .collect(),
        )
    }
}

/// An offset as a geo-replicated namespace might hand it out: text that is not a number.
pub fn geo_offset(sequence_number: i64) -> String {
    format!("g1:{sequence_number}:0")
}

/// A store whose requests pass through an instance's switches: refused while the store is
/// down, held while the instance is frozen.
pub struct FaultyStore {
    inner: SharedStore,
    faults: Arc<FaultSwitch>,
}

impl FaultyStore {
    pub fn wrap(inner: SharedStore, faults: Arc<FaultSwitch>) -> SharedStore {
        Arc::new(FaultyStore { inner, faults })
    }

    async fn enter(&self) -> Result<(), StoreError> {
        self.faults.wait_while_frozen().await;
        if self.faults.store_down() {
            return Err(StoreError::Unavailable(
                "injected outage (the storage account answered 503)".into(),
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl BlobStore for FaultyStore {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    async fn ensure_container(&self, container: &str) -> Result<(), StoreError> {
        self.enter().await?;
        self.inner.ensure_container(container).await
    }

    async fn get(&self, container: &str, name: &str) -> Result<Option<Blob>, StoreError> {
        self.enter().await?;
        self.inner.get(container, name).await
    }

    async fn put(
        &self,
        container: &str,
        name: &str,
        data: Bytes,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<WriteOutcome, StoreError> {
        self.enter().await?;
        self.inner
            .put(container, name, data, metadata, condition)
            .await
    }

    async fn set_metadata(
        &self,
        container: &str,
        name: &str,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<WriteOutcome, StoreError> {
        self.enter().await?;
        self.inner
            .set_metadata(container, name, metadata, condition)
            .await
    }

    async fn list(&self, container: &str, prefix: &str) -> Result<Vec<BlobProperties>, StoreError> {
        self.enter().await?;
        self.inner.list(container, prefix).await
    }

    async fn delete(&self, container: &str, name: &str) -> Result<(), StoreError> {
        self.enter().await?;
        self.inner.delete(container, name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_fails_for_its_period_only() {
        let faults = FaultSwitch::new(
            Arc::new(watch::channel(0).0),
            Answered::default(),
            Verdicts::default(),
        );
        faults.fail_output_for("alarms", Duration::from_millis(200));
        assert!(faults.output_failing("alarms"));
        assert!(!faults.output_failing("other"));
        assert!(faults.output_failing("alarms"));
        std::thread::sleep(Duration::from_millis(250));
        assert!(!faults.output_failing("alarms"));
    }

    #[test]
    fn geo_offsets_are_not_numbers() {
        let offset = geo_offset(42);
        assert!(offset.parse::<i64>().is_err());
        assert!(offset.contains("42"));
    }

    #[tokio::test]
    async fn a_store_refuses_while_down_and_waits_while_frozen() {
        let faults = FaultSwitch::new(
            Arc::new(watch::channel(0).0),
            Answered::default(),
            Verdicts::default(),
        );
        let store = FaultyStore::wrap(
            Arc::new(hubhost_storage::memory::MemoryStore::default()),
            faults.clone(),
        );
        store.ensure_container("box").await.unwrap();
        faults.store_down_for(Duration::from_secs(60));
        let refused = store.get("box", "b").await.unwrap_err();
        assert!(refused.is_transient(), "{refused}");
        *faults.store_down_until.lock().unwrap() = None;
        faults.freeze_for(Duration::from_millis(300));
        let started = Instant::now();
        assert!(store.get("box", "b").await.unwrap().is_none());
        assert!(started.elapsed() >= Duration::from_millis(250));
    }
}
