//! The reference app: a home-security company's 100,000 homes, whose sensors report every minute.
//!
//! Two functions consume the same event hub on two consumer groups:
//! - `SensorAggregator` (`aggregator`): consolidates readings per home and time window into
//!   blob storage, notes where each home reports (`directory`) and sets poison events aside
//!   (`deadletter`);
//! - `RawArchive` ([`archive`]): keeps the raw events.
//!
//! Data flow: [`sensor`] (schema, validation, alarm rules) → [`aggregate`] (pure fold with
//! replay protection) → `versioned` (read-modify-write under ETags) → storage, at the names
//! [`layout`] gives. State lives in blob storage, never only in process memory.

pub mod aggregate;
pub(crate) mod aggregator;
pub mod archive;
pub mod dashboard;
pub(crate) mod deadletter;
pub(crate) mod directory;
pub mod fleet;
pub mod handler;
pub mod layout;
pub mod retrying;
pub mod sensor;
pub mod serve;
pub(crate) mod versioned;

use serde::Serialize;

use hubhost_functions::batch::TriggerBatch;
use hubhost_storage::{SharedStore, StoreError};

pub const AGGREGATOR_FUNCTION: &str = "SensorAggregator";
pub const ARCHIVE_FUNCTION: &str = "RawArchive";

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Storage(#[from] StoreError),
    #[error("blob '{name}' holds unreadable state ({reason}); inspect or delete it")]
    CorruptState { name: String, reason: String },
    #[error(transparent)]
    BadName(#[from] layout::BadName),
    #[error("gave up on blob '{name}' after {attempts} writes lost to concurrent writers")]
    Contention { name: String, attempts: u32 },
}

/// What one invocation did; returned to the host as the `ReturnValue`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct BatchReport {
    pub events: u64,
    /// Events folded in (aggregator) or archived (archive) for the first time.
    pub applied: u64,
    /// Events already folded in or archived by an earlier delivery.
    pub replayed: u64,
    #[serde(rename = "deadLettered")]
    pub dead_lettered: u64,
    #[serde(rename = "withoutSequenceNumber")]
    pub without_sequence_number: u64,
    pub windows: u64,
    pub homes: u64,
    /// The batch's alarms, forwarded through the `alarms` output (not part of the report).
    #[serde(skip)]
    pub alarms: Vec<AlarmEvent>,
    /// When the event hub took in each reading folded in for the first time (not part of the
    /// report): the app's latency is measured from these to the moment the blocks are written.
    #[serde(skip)]
    pub applied_enqueued: Vec<chrono::DateTime<chrono::Utc>>,
}

/// One alarm as it is forwarded to the `alarms` event hub: which home, which sensor, what and
/// when, and where the reading came from (so that a receiver can drop duplicates).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlarmEvent {
    pub home_id: String,
    pub sensor_id: String,
    pub kind: sensor::AlarmKind,
    /// The reading's time (RFC 3339).
    pub ts: chrono::DateTime<chrono::Utc>,
    pub partition_id: String,
    pub sequence_number: Option<i64>,
    /// When the event hub took the reading in: how long an alarm takes to reach the page is
    /// measured from here (`bench latency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueued: Option<chrono::DateTime<chrono::Utc>>,
}

/// Which of the app's functions a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppFunction {
    Aggregate,
    Archive,
}

impl AppFunction {
    pub fn for_name(name: &str) -> Option<Self> {
        if name.eq_ignore_ascii_case(AGGREGATOR_FUNCTION) {
            Some(AppFunction::Aggregate)
        } else if name.eq_ignore_ascii_case(ARCHIVE_FUNCTION) {
            Some(AppFunction::Archive)
        } else {
            None
        }
    }
}

pub struct App {
    aggregator: aggregator::Aggregator,
    archiver: archive::Archiver,
}

impl App {
    pub fn new(store: SharedStore, container: &str, window_seconds: u32) -> Self {
        App {
            aggregator: aggregator::Aggregator::new(store.clone(), container, window_seconds),
            archiver: archive::Archiver::new(store, container, window_seconds),
        }
    }

    pub async fn process(
        &self,
        function: AppFunction,
        batch: &TriggerBatch,
    ) -> Result<BatchReport, AppError> {
        match function {
            AppFunction::Aggregate => self.aggregator.process(batch).await,
            AppFunction::Archive => self.archiver.process(batch).await,
        }
    }

    /// Writes what is kept behind the batches (the home directory); call before exiting.
    pub async fn flush(&self) -> Result<(), AppError> {
        self.aggregator.flush().await
    }
}
