//! What `hubhost checkpoints list|reset|migrate` do, as library functions that return reports
//! (the CLI's `commands/checkpoints.rs` only parses flags, confirms, and prints).

use chrono::{DateTime, Utc};
use hubhost_eventhubs::{EventHubTarget, EventHubsError, PartitionEnd};
use serde::Serialize;

use crate::{
    Checkpoint, CheckpointError, CheckpointStore, ConsumerGroupKey, LegacyCheckpoint,
    PartitionOwnership, names,
};

/// One partition as `checkpoints list` shows it. The first five fields are the documented
/// machine interface; the rest say where the values come from.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PartitionStatus {
    pub partition_id: String,
    /// The current owner; `None` if never owned or relinquished.
    pub owner_id: Option<String>,
    pub offset: Option<String>,
    pub sequence_number: Option<i64>,
    /// When the checkpoint was written.
    pub last_modified: Option<DateTime<Utc>>,
    /// When the owner last renewed its claim.
    pub ownership_last_modified: Option<DateTime<Utc>>,
    /// `checkpoint` (current format), `legacy` (v3/v4 blob, no current checkpoint), or `None`.
    pub source: Option<&'static str>,
    /// Why this partition's checkpoint cannot be used, if it cannot.
    pub problem: Option<String>,
}

impl PartitionStatus {
    fn new(partition_id: &str) -> Self {
        PartitionStatus {
            partition_id: partition_id.to_string(),
            owner_id: None,
            offset: None,
            sequence_number: None,
            last_modified: None,
            ownership_last_modified: None,
            source: None,
            problem: None,
        }
    }
}

/// Ownership, checkpoint and legacy checkpoint of every partition that has any of them.
pub async fn status(
    store: &CheckpointStore,
    key: &ConsumerGroupKey,
) -> Result<Vec<PartitionStatus>, CheckpointError> {
    let ownerships = store.list_ownership(key).await?;
    let checkpoints = store.list_checkpoints(key).await?;
    let legacy = store.list_legacy(key).await?;
    let mut rows: Vec<PartitionStatus> = Vec::new();
    fn row<'a>(rows: &'a mut Vec<PartitionStatus>, id: &str) -> &'a mut PartitionStatus {
        match rows.iter().position(|r| r.partition_id == id) {
            Some(i) => &mut rows[i],
            None => {
                rows.push(PartitionStatus::new(id));
                rows.last_mut().expect("just pushed")
            }
        }
    }
    for o in &ownerships {
        let r = row(&mut rows, &o.partition_id);
        r.owner_id = Some(o.owner_id.clone()).filter(|s| !s.is_empty());
        r.ownership_last_modified = Some(o.last_modified);
    }
    for lg in &legacy.items {
        let r = row(&mut rows, &lg.partition_id);
        r.offset = Some(lg.offset.clone());
        r.sequence_number = Some(lg.sequence_number);
        r.source = Some("legacy");
    }
    for cp in &checkpoints.items {
        let r = row(&mut rows, &cp.partition_id);
        r.offset = cp.offset.clone();
        r.sequence_number = cp.sequence_number;
        r.last_modified = cp.last_modified;
        r.source = Some("checkpoint");
    }
    for problem in checkpoints.problems.iter().chain(&legacy.problems) {
        let (CheckpointError::BadCheckpoint { blob, .. }
        | CheckpointError::BadLegacyCheckpoint { blob, .. }) = problem
        else {
            continue;
        };
        let id = names::partition_of(blob).to_string();
        let r = row(&mut rows, &id);
        // A bad current checkpoint blocks its partition even if a legacy one exists.
        if matches!(problem, CheckpointError::BadCheckpoint { .. }) || r.source.is_none() {
            r.problem = Some(problem.to_string());
        }
    }
    rows.sort_by(|a, b| partition_order(&a.partition_id, &b.partition_id));
    Ok(rows)
}

/// Numeric partition ids in numeric order (2 before 10), others after, by name.
pub fn partition_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        _ => a.cmp(b),
    }
}

/// Which partitions a reset applies to: those named, or `0..count`, or every partition the
/// store knows (has an ownership, a checkpoint or a legacy checkpoint).
pub enum PartitionSelection {
    Named(Vec<String>),
    Count(u32),
    Known,
}

pub async fn select_partitions(
    store: &CheckpointStore,
    key: &ConsumerGroupKey,
    selection: PartitionSelection,
) -> Result<Vec<String>, CheckpointError> {
    let mut ids = match selection {
        PartitionSelection::Named(ids) => ids,
        PartitionSelection::Count(n) => (0..n).map(|i| i.to_string()).collect(),
        PartitionSelection::Known => status(store, key)
            .await?
            .into_iter()
            .map(|r| r.partition_id)
            .collect(),
    };
    for id in &ids {
        names::validate_part("partition id", id)?;
    }
    ids.sort_by(|a, b| partition_order(a, b));
    ids.dedup();
    Ok(ids)
}

/// Moves the partitions back to the start of their retained events: writes the "before the
/// first event" checkpoint (offset -1), which the Functions host, the SDKs and hubhost all
/// read as "start from the beginning".
pub async fn reset_to_start(
    store: &CheckpointStore,
    key: &ConsumerGroupKey,
    partitions: &[String],
) -> Result<Vec<Checkpoint>, CheckpointError> {
    let checkpoints: Vec<Checkpoint> = partitions.iter().map(Checkpoint::at_start).collect();
    write_checkpoints(store, key, &checkpoints).await?;
    Ok(checkpoints)
}

/// Writes the given checkpoints (a reset to the end or to a time computes them from the event
/// hub first).
pub async fn write_checkpoints(
    store: &CheckpointStore,
    key: &ConsumerGroupKey,
    checkpoints: &[Checkpoint],
) -> Result<(), CheckpointError> {
    store.ensure_container().await?;
    for cp in checkpoints {
        store.update_checkpoint(key, cp).await?;
    }
    Ok(())
}

/// What `migrate` did for one legacy checkpoint.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStep {
    pub partition_id: String,
    pub offset: String,
    pub sequence_number: i64,
    /// `migrated`, or `kept` when a current checkpoint already existed (it is newer: the
    /// current format is the one being written).
    pub action: &'static str,
}

#[derive(Debug, Default, Serialize)]
pub struct MigrationReport {
    pub steps: Vec<MigrationStep>,
    /// Legacy blobs that could not be read, with the reason.
    pub problems: Vec<String>,
}

/// Writes a current checkpoint from each legacy one, for partitions that have no current
/// checkpoint yet. Legacy blobs are neither changed nor deleted.
pub async fn migrate(
    store: &CheckpointStore,
    key: &ConsumerGroupKey,
    dry_run: bool,
) -> Result<MigrationReport, CheckpointError> {
    let legacy = store.list_legacy(key).await?;
    let current = store.list_checkpoints(key).await?;
    let has_current = |id: &str| {
        current.items.iter().any(|c| c.partition_id == id)
            || current.problems.iter().any(|p| {
                matches!(p, CheckpointError::BadCheckpoint { blob, .. } if names::partition_of(blob) == id)
            })
    };
    let mut report = MigrationReport {
        problems: legacy.problems.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    };
    let mut items: Vec<&LegacyCheckpoint> = legacy.items.iter().collect();
    items.sort_by(|a, b| partition_order(&a.partition_id, &b.partition_id));
    for lg in items {
        let action = if has_current(&lg.partition_id) {
            "kept"
        } else {
            if !dry_run {
                let cp = Checkpoint::new(
                    lg.partition_id.clone(),
                    Some(lg.offset.clone()),
                    lg.sequence_number,
                );
                store.update_checkpoint(key, &cp).await?;
            }
            "migrated"
        };
        report.steps.push(MigrationStep {
            partition_id: lg.partition_id.clone(),
            offset: lg.offset.clone(),
            sequence_number: lg.sequence_number,
            action,
        });
    }
    Ok(report)
}

/// Owner ids holding an unexpired claim on one of `partitions` — a reset under a running
/// consumer is overwritten by its next checkpoint, so the CLI warns about them.
pub fn active_owners<'a>(
    ownerships: &'a [PartitionOwnership],
    partitions: &[String],
    now: DateTime<Utc>,
    foreign_expiry: std::time::Duration,
) -> Vec<&'a PartitionOwnership> {
    ownerships
        .iter()
        .filter(|o| partitions.contains(&o.partition_id) && o.is_live(now, foreign_expiry))
        .collect()
}

/// Where `checkpoints reset --to` moves partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTo {
    /// The oldest retained event.
    Start,
    /// After the last event: only events sent from now on.
    End,
    /// The first event enqueued at or after this time.
    Time(DateTime<Utc>),
}

/// A reset target that is neither `start`, `end` nor an RFC 3339 time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--to {text:?}: expected start, end or an RFC 3339 time ({source})")]
pub struct BadResetTarget {
    pub text: String,
    pub source: chrono::ParseError,
}

impl ResetTo {
    /// `start`, `end`, or an RFC 3339 time.
    pub fn parse(text: &str) -> Result<Self, BadResetTarget> {
        match text {
            "start" => Ok(ResetTo::Start),
            "end" => Ok(ResetTo::End),
            time => DateTime::parse_from_rfc3339(time)
                .map(|t| ResetTo::Time(t.with_timezone(&Utc)))
                .map_err(|source| BadResetTarget {
                    text: time.to_string(),
                    source,
                }),
        }
    }

    /// Whether the event hub must say where its partitions end.
    pub fn needs_partition_ends(self) -> bool {
        self != ResetTo::Start
    }

    /// In words, for the confirmation and the report.
    pub fn describe(self) -> String {
        match self {
            ResetTo::Start => "the start of the event hub".to_string(),
            ResetTo::End => "the end of the event hub (only new events)".to_string(),
            ResetTo::Time(t) => format!("the first event enqueued at or after {t}"),
        }
    }
}

/// What resetting one partition takes, given where it ends.
#[derive(Debug, Clone, PartialEq)]
pub enum ResetStep {
    /// Write this checkpoint.
    Write(Checkpoint),
    /// Find the last event before this time first (the event hub is read for it).
    FindBefore(DateTime<Utc>),
}

/// The reset of partition `id` to `to`, where the partition's last event is `last` (sequence
/// number and offset; `None` for a partition that never had one).
pub fn reset_step(id: &str, last: Option<(i64, &str)>, to: ResetTo) -> ResetStep {
    match (to, last) {
        (ResetTo::Time(t), _) => ResetStep::FindBefore(t),
        (ResetTo::Start, _) | (ResetTo::End, None) => ResetStep::Write(Checkpoint::at_start(id)),
        (ResetTo::End, Some((sequence, offset))) => ResetStep::Write(Checkpoint::new(
            id.to_string(),
            Some(offset.to_string()),
            sequence,
        )),
    }
}

/// The checkpoint (last processed event) from which a consumer goes on with the first event
/// enqueued at or after `time`: the event before that one, the partition's last event when
/// none is that recent, or the start when all of them are.
pub async fn checkpoint_before(
    target: &EventHubTarget,
    consumer_group: &str,
    end: &PartitionEnd,
    time: chrono::DateTime<chrono::Utc>,
) -> Result<Checkpoint, EventHubsError> {
    use azure_messaging_eventhubs::StartLocation;
    let at_end = Checkpoint::new(
        end.partition_id.clone(),
        Some(end.last_offset.clone()),
        end.last_sequence_number,
    );
    if end.is_empty {
        return Ok(Checkpoint::at_start(end.partition_id.clone()));
    }
    if end.last_enqueued_time.is_some_and(|t| t < time) {
        return Ok(at_end);
    }
    let first = target
        .first_event(
            consumer_group,
            &end.partition_id,
            StartLocation::EnqueuedTime(time.into()),
        )
        .await?;
    let Some((sequence, _)) = first else {
        return Ok(at_end);
    };
    if sequence <= end.beginning_sequence_number {
        return Ok(Checkpoint::at_start(end.partition_id.clone()));
    }
    let before = target
        .first_event(
            consumer_group,
            &end.partition_id,
            StartLocation::SequenceNumber(sequence - 1),
        )
        .await?;
    match before {
        Some((seq, offset)) if seq == sequence - 1 => {
            Ok(Checkpoint::new(end.partition_id.clone(), Some(offset), seq))
        }
        // The event before was deleted by retention in the meantime: start from the oldest.
        _ => Ok(Checkpoint::at_start(end.partition_id.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_targets_parse_and_plan_per_partition() {
        assert_eq!(ResetTo::parse("start"), Ok(ResetTo::Start));
        assert_eq!(ResetTo::parse("end"), Ok(ResetTo::End));
        let t = ResetTo::parse("2026-11-23T10:00:00+01:00").unwrap();
        assert_eq!(t, ResetTo::Time("2026-11-23T09:00:00Z".parse().unwrap()));
        let bad = ResetTo::parse("yesterday").unwrap_err();
        assert_eq!(bad.text, "yesterday");
        assert!(bad.to_string().contains("RFC 3339"), "{bad}");
        assert!(!ResetTo::Start.needs_partition_ends() && ResetTo::End.needs_partition_ends());

        // The end of a partition with events: after its last one.
        assert_eq!(
            reset_step("3", Some((41, "9000")), ResetTo::End),
            ResetStep::Write(Checkpoint::new(
                "3".to_string(),
                Some("9000".to_string()),
                41
            ))
        );
        // An empty partition's end is its start.
        assert_eq!(
            reset_step("3", None, ResetTo::End),
            ResetStep::Write(Checkpoint::at_start("3"))
        );
        assert_eq!(
            reset_step("3", Some((41, "9000")), ResetTo::Start),
            ResetStep::Write(Checkpoint::at_start("3"))
        );
        let ResetTo::Time(when) = t else {
            unreachable!()
        };
        assert_eq!(
            reset_step("3", Some((41, "9000")), t),
            ResetStep::FindBefore(when)
        );
    }

    #[test]
    fn partitions_sort_numerically() {
        let mut ids = vec!["10", "2", "b", "0", "a"];
        ids.sort_by(|a, b| partition_order(a, b));
        assert_eq!(ids, ["0", "2", "10", "a", "b"]);
    }
}
