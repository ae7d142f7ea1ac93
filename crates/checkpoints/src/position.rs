//! Where a partition's reading starts: a pure decision from the current checkpoint, the legacy
//! one and the configured initial position — the same order the Functions extension uses.
//!
//! 1. a current checkpoint: after its offset if it has one, else after its sequence number
//!    (both exclusive: the checkpointed event itself was processed);
//! 2. else a legacy checkpoint: after its offset;
//! 3. else the initial position (`host.json` `initialOffsetOptions`): start, end, or the first
//!    event enqueued at or after a time.

use chrono::{DateTime, Utc};

use crate::{Checkpoint, LegacyCheckpoint};

/// Where to start when a partition has no checkpoint at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialPosition {
    /// The oldest retained event (`fromStart`, the host's default).
    #[default]
    Earliest,
    /// Only events enqueued after the reader opens (`fromEnd`).
    Latest,
    /// The first event enqueued at or after this time (`fromEnqueuedTime`).
    EnqueuedTime(DateTime<Utc>),
}

/// The position a partition reader opens at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPosition {
    Earliest,
    Latest,
    EnqueuedTime(DateTime<Utc>),
    /// The event after the one with this offset.
    AfterOffset(String),
    /// The event after the one with this sequence number.
    AfterSequenceNumber(i64),
}

/// Which record decided the start position; reported in logs and by `checkpoints list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PositionSource {
    Checkpoint,
    LegacyCheckpoint,
    Initial,
}

/// Where a reader starts, which record said so, and the sequence number of the event just
/// before the start when a checkpoint records it (a reader opened after an offset has
/// nothing to deliver up to that event: a pump uses it to tell a quiet receiver from a stalled
/// one before anything arrived).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub position: StartPosition,
    pub source: PositionSource,
    pub after_sequence_number: Option<i64>,
}

pub fn start_position(
    current: Option<&Checkpoint>,
    legacy: Option<&LegacyCheckpoint>,
    initial: InitialPosition,
) -> Start {
    if let Some(cp) = current {
        let checkpointed = |position| Start {
            position,
            source: PositionSource::Checkpoint,
            after_sequence_number: cp.sequence_number,
        };
        if let Some(offset) = &cp.offset {
            return checkpointed(StartPosition::AfterOffset(offset.clone()));
        }
        if let Some(seq) = cp.sequence_number {
            return checkpointed(StartPosition::AfterSequenceNumber(seq));
        }
    }
    if let Some(lg) = legacy {
        return Start {
            position: StartPosition::AfterOffset(lg.offset.clone()),
            source: PositionSource::LegacyCheckpoint,
            after_sequence_number: Some(lg.sequence_number),
        };
    }
    let position = match initial {
        InitialPosition::Earliest => StartPosition::Earliest,
        InitialPosition::Latest => StartPosition::Latest,
        InitialPosition::EnqueuedTime(t) => StartPosition::EnqueuedTime(t),
    };
    Start {
        position,
        source: PositionSource::Initial,
        after_sequence_number: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(offset: Option<&str>, seq: Option<i64>) -> Checkpoint {
        Checkpoint {
            partition_id: "0".into(),
            offset: offset.map(str::to_string),
            sequence_number: seq,
            last_modified: None,
        }
    }

    fn legacy(offset: &str) -> LegacyCheckpoint {
        LegacyCheckpoint {
            partition_id: "0".into(),
            owner: None,
            epoch: None,
            offset: offset.into(),
            sequence_number: 9,
        }
    }

    fn start(position: StartPosition, source: PositionSource, after: Option<i64>) -> Start {
        Start {
            position,
            source,
            after_sequence_number: after,
        }
    }

    #[test]
    fn the_current_checkpoint_wins_and_prefers_the_offset() {
        let lg = legacy("1");
        assert_eq!(
            start_position(
                Some(&cp(Some("42"), Some(7))),
                Some(&lg),
                InitialPosition::Latest
            ),
            start(
                StartPosition::AfterOffset("42".into()),
                PositionSource::Checkpoint,
                Some(7)
            )
        );
        assert_eq!(
            start_position(Some(&cp(None, Some(7))), Some(&lg), InitialPosition::Latest),
            start(
                StartPosition::AfterSequenceNumber(7),
                PositionSource::Checkpoint,
                Some(7)
            )
        );
    }

    #[test]
    fn an_empty_current_checkpoint_falls_back_to_legacy_then_initial() {
        let lg = legacy("100");
        assert_eq!(
            start_position(Some(&cp(None, None)), Some(&lg), InitialPosition::Latest),
            start(
                StartPosition::AfterOffset("100".into()),
                PositionSource::LegacyCheckpoint,
                Some(9)
            )
        );
        let t = DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            start_position(None, None, InitialPosition::EnqueuedTime(t)),
            start(
                StartPosition::EnqueuedTime(t),
                PositionSource::Initial,
                None
            )
        );
        assert_eq!(
            start_position(None, None, InitialPosition::default()).position,
            StartPosition::Earliest
        );
    }
}
