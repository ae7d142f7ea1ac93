//! How many events of a consumer group are still to be processed: per partition, the events
//! enqueued after its checkpoint.
//!
//! This is the number the Functions scale controller scales Event Hubs functions on, and the
//! rules are the Event Hubs extension's (`EventHubMetricsProvider`, Azure/azure-sdk-for-net,
//! `sdk/eventhub/Microsoft.Azure.WebJobs.Extensions.EventHubs/src/Listeners`), including its
//! edge cases, so that `hubhost emulate --scale` and the operations view count what Azure
//! counts: an empty partition has nothing to do; a partition without a checkpoint whose only
//! event is its first has one; and a checkpoint *ahead* of the partition end read a moment
//! earlier (the two are read separately, and a busy partition moves in between) counts as
//! nothing left, never as a negative number. docs/scaling.md has the whole story.

use crate::Checkpoint;
use hubhost_eventhubs::PartitionEnd;

/// Events of one partition not processed yet, given its end as the hub reported it and the
/// consumer group's checkpoint for it.
pub fn unprocessed_events(end: &PartitionEnd, checkpoint: Option<&Checkpoint>) -> i64 {
    let checkpointed = checkpoint.and_then(|c| c.sequence_number);
    let last = end.last_sequence_number;
    // The extension looks further only when the partition has events and they are not all
    // checkpointed, or when there is no checkpoint at all.
    let worth_counting =
        (last != -1 && last != checkpointed.unwrap_or(-1)) || (checkpoint.is_none() && last >= 0);
    if !worth_counting || end.is_empty {
        return 0;
    }
    if checkpoint.is_none() && last == end.beginning_sequence_number {
        // The partition's first event: the checkpoint has not been written yet.
        return 1;
    }
    // Without a sequence number, everything from the beginning is still to do.
    let start = checkpointed.unwrap_or(end.beginning_sequence_number - 1);
    if last > start {
        return last - start;
    }
    // The extension's wrap-around formula, with its overflow: it is meant for sequence numbers
    // that wrapped past i64::MAX, but whenever the checkpoint is ahead of the end (read a
    // moment ago) the sum overflows to a negative number, which counts as nothing.
    let wrapped = (i64::MAX - last).wrapping_add(start);
    wrapped.max(0)
}

/// The consumer group's backlog: the sum over `ends` of each partition's unprocessed events,
/// matched with `checkpoints` by partition id.
pub fn total_unprocessed(ends: &[PartitionEnd], checkpoints: &[Checkpoint]) -> i64 {
    ends.iter()
        .map(|end| {
            let checkpoint = checkpoints
                .iter()
                .find(|c| c.partition_id == end.partition_id);
            unprocessed_events(end, checkpoint)
        })
        .fold(0i64, i64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(id: &str, beginning: i64, last: i64) -> PartitionEnd {
        PartitionEnd {
            partition_id: id.into(),
            beginning_sequence_number: beginning,
            last_sequence_number: last,
            last_offset: String::new(),
            last_enqueued_time: None,
            is_empty: false,
        }
    }

    fn at(id: &str, sequence_number: i64) -> Checkpoint {
        Checkpoint::new(id, Some("0".into()), sequence_number)
    }

    /// The extension's `CreateTriggerMetrics_ReturnsExpectedResult`, step by step.
    #[test]
    fn one_partition_as_the_extension_counts_it() {
        // Checkpoint at the end: nothing to do.
        assert_eq!(unprocessed_events(&end("0", 0, 0), Some(&at("0", 0))), 0);
        // The partition got its first event and has no checkpoint.
        assert_eq!(unprocessed_events(&end("0", 0, 0), None), 1);
        // Nobody has read it yet: everything from the beginning.
        assert_eq!(unprocessed_events(&end("0", 5, 10), None), 6);
        // A checkpoint ahead of the partition end read earlier: nothing, not -1.
        assert_eq!(unprocessed_events(&end("0", 0, 10), Some(&at("0", 11))), 0);
    }

    /// `CreateTriggerMetrics_MultiplePartitions_ReturnsExpectedResult`.
    #[test]
    fn partitions_are_summed_and_an_invalid_one_counts_nothing() {
        let ends = |lasts: [i64; 3]| -> Vec<PartitionEnd> {
            ["1", "2", "3"]
                .iter()
                .zip(lasts)
                .map(|(id, last)| end(id, 0, last))
                .collect()
        };
        let checkpoints = |seqs: [i64; 3]| -> Vec<Checkpoint> {
            ["1", "2", "3"]
                .iter()
                .zip(seqs)
                .map(|(id, s)| at(id, s))
                .collect()
        };
        assert_eq!(
            total_unprocessed(&ends([0, 0, 0]), &checkpoints([0, 0, 0])),
            0
        );
        assert_eq!(
            total_unprocessed(&ends([12, 13, 14]), &checkpoints([2, 3, 4])),
            30
        );
        assert_eq!(
            total_unprocessed(&ends([12, 13, 1]), &checkpoints([2, 3, 4])),
            20
        );
    }

    /// `CreateTriggerMetrics_DifferentCheckpointFormats_ReturnsExpectedResult`: (no checkpoint,
    /// checkpoint sequence number, beginning, last, expected).
    #[test]
    fn the_checkpoint_formats_of_each_extension_version() {
        let cases: [(bool, i64, i64, i64, i64); 12] = [
            (false, 0, -1, -1, 0),
            (true, 0, -1, -1, 0),
            (false, 0, 0, 0, 0),
            (true, 0, 0, 0, 1),
            (false, 0, 0, 1, 1),
            (false, 0, 0, 1, 1),
            (false, 0, 0, 1, 1),
            (false, 0, 0, 2, 2),
            (false, 1, 0, 2, 1),
            (false, 1, 0, 3, 2),
            (false, 0, 0, 0, 0),
            (false, 1, 0, 1, 0),
        ];
        for (none, seq, beginning, last, expected) in cases {
            let checkpoint = (!none).then(|| at("0", seq));
            assert_eq!(
                unprocessed_events(&end("0", beginning, last), checkpoint.as_ref()),
                expected,
                "checkpoint {checkpoint:?}, beginning {beginning}, last {last}"
            );
        }
    }

    #[test]
    fn an_empty_partition_or_one_without_a_sequence_number() {
        let mut empty = end("0", 7, 9);
        empty.is_empty = true;
        assert_eq!(unprocessed_events(&empty, None), 0);
        // A checkpoint that holds only an offset (a legacy lease) counts from the beginning.
        let offset_only = Checkpoint {
            partition_id: "0".into(),
            offset: Some("42".into()),
            sequence_number: None,
            last_modified: None,
        };
        assert_eq!(unprocessed_events(&end("0", 3, 9), Some(&offset_only)), 7);
    }

    #[test]
    fn a_checkpoint_past_the_end_overflows_to_nothing_as_in_the_extension() {
        // The extension's wrap-around sum overflows here, and a negative count is 0.
        let checkpoint = at("0", i64::MAX - 10);
        assert_eq!(unprocessed_events(&end("0", 0, 4), Some(&checkpoint)), 0);
        assert_eq!(unprocessed_events(&end("0", 0, 4), Some(&at("0", 5))), 0);
        // The sum of huge backlogs saturates instead of overflowing.
        let ends = [end("0", 0, i64::MAX - 1), end("1", 0, i64::MAX - 1)];
        assert_eq!(total_unprocessed(&ends, &[]), i64::MAX);
    }
}
