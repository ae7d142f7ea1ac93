//! A `PartitionPump` reads one owned partition and hands its events, batch by batch, to a
//! [`BatchHandler`]; then it checkpoints. One pump per owned partition, one batch in flight
//! per pump, pumps in parallel — the ordering guarantee of an Event Hubs trigger.
//!
//! - **Start**: the partition's checkpoint, else its legacy checkpoint, else the configured
//!   initial position (`hubhost_checkpoints::position`).
//! - **Fencing**: the receiver opens with owner level 0, as the Functions host's processor
//!   does; the next owner's receiver (same level) detaches ours with `amqp:link:stolen`, so a
//!   stale owner stops reading even before it notices its ownership is gone.
//! - **Checkpoints** after every `batch_checkpoint_frequency`-th batch, whether the function
//!   succeeded or failed it (the host's rule; `checkpoint_on_success` keeps a failed batch and
//!   delivers it again), and once more on a graceful stop. Never a batch the function did not
//!   process ([`BatchOutcome::NotProcessed`]: the handler gave no answer, or the pump stopped
//!   during its retries) — it is delivered again, or left to the next owner. Never after
//!   ownership was lost: the new owner's checkpoints are the ones that count. And never
//!   back: a write replaces only the version this pump wrote last, and a stored checkpoint
//!   at or past ours is left alone (`CheckpointStore::advance_checkpoint`), so a stale owner
//!   that has not noticed yet cannot undo the new owner's progress.
//! - **Recovery**: a failed receive reopens on a fresh connection, after the last event
//!   handed out, not after the last checkpoint — so a connection blip duplicates nothing.
//!   Every SDK call is bounded in time: the Rust SDK 0.16 can stall opening a receiver on a
//!   fresh connection (see `eventhubs::EventHubTarget::partition_ends`). Receiving cannot be
//!   bounded that way (a partition may be quiet for hours), and the SDK reattaches a dropped
//!   link inside its receive, where the same stall can strike; so a receiver that delivered
//!   nothing for [`STALL_CHECK_AFTER`] is checked against the hub's partition end, and
//!   reopened if the hub holds events it should have delivered ([`receiver_stalled`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use azure_core_amqp::message::AmqpMessageBody;
use azure_messaging_eventhubs::models::ReceivedEventData;
use futures::StreamExt;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Consumer, PartitionBatch};
use crate::source::{PartitionReceiver, ReceiveError};
use hubhost_checkpoints::{Checkpoint, CheckpointAdvance, Start, StartPosition};
use hubhost_trigger::batch::{EventRecord, PartitionContext};

/// Waits between attempts to (re)open, doubling up to the maximum.
const RETRY_MIN: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(10);
/// Waits between deliveries of a batch the handler gave no answer for, doubling from
/// `RETRY_MIN`: short, because the emulated host restarts a handler in about a second.
const REDELIVERY_MAX: Duration = Duration::from_secs(2);
/// A receiver that delivered nothing for this long is checked for a stall.
const STALL_CHECK_AFTER: Duration = Duration::from_secs(20);
/// How old the partition ends a stall check uses may be (the pumps of a consumer share them).
const ENDS_MAX_AGE: Duration = Duration::from_secs(5);

/// What the pump does with a batch: run the function (with its retries) and say whether it
/// succeeded. The pump decides about checkpoints.
#[async_trait::async_trait]
pub trait BatchHandler: Send + Sync + 'static {
    /// `stop` fires when the pump is asked to stop: finish or abandon retries promptly.
    async fn handle(&self, batch: &PartitionBatch, stop: &CancellationToken) -> BatchOutcome;

    /// The span the batch is processed in: every `handle` of it runs inside, and its
    /// checkpoint is a child (`checkpoint <hub>`). The handler decides what it is (the
    /// emulated host's `process <hub>`, linked to the producers); none by default.
    fn span(&self, _batch: &PartitionBatch) -> tracing::Span {
        tracing::Span::none()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum BatchOutcome {
    Succeeded,
    /// The function failed the batch (and every retry): the host's rule checkpoints it anyway
    /// unless `checkpoint_on_success` is set.
    Failed(String),
    /// The function did not process the batch: its handler gave no answer (down, restarting,
    /// died mid-request) or the retries were abandoned because the pump is stopping. Never
    /// checkpointed: the pump delivers it again, or, stopping, leaves it to the next owner.
    NotProcessed(String),
}

/// How a pump is told to stop.
#[derive(Clone, Default)]
pub struct PumpControl {
    token: CancellationToken,
    lost: Arc<AtomicBool>,
}

impl PumpControl {
    /// Shutdown: finish the batch in flight, checkpoint, stop.
    pub fn stop(&self) {
        self.token.cancel();
    }

    /// Ownership lost: finish the batch in flight, do not checkpoint, stop.
    pub fn ownership_lost(&self) {
        self.lost.store(true, Ordering::SeqCst);
        self.token.cancel();
    }

    fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

/// Why a pump ended.
#[derive(Debug, Clone, PartialEq)]
pub enum PumpExit {
    /// Asked to stop (shutdown or ownership lost).
    Stopped,
    /// Another reader opened the partition with an owner level at least ours.
    Stolen,
    /// The start position could not be decided (e.g. an unreadable checkpoint blob). The
    /// partition is not read rather than read from a guess.
    Failed(String),
}

pub struct PartitionPump {
    consumer: Arc<Consumer>,
    partition_id: String,
    control: PumpControl,
    context: PartitionContext,
    /// Batches handed out since the last checkpoint.
    unsaved_batches: u32,
    /// The last event handed out: where a reconnect resumes and what a checkpoint records.
    last: Option<(i64, Option<String>)>,
    /// The last event checkpointed.
    saved: Option<i64>,
    /// The checkpoint blob's ETag after this pump's last write: the next write replaces only
    /// that version (see `CheckpointStore::advance_checkpoint`).
    saved_etag: Option<hubhost_storage::ETag>,
}

impl PartitionPump {
    pub fn new(consumer: Arc<Consumer>, partition_id: String, control: PumpControl) -> Self {
        let context = PartitionContext {
            fully_qualified_namespace: Some(consumer.target.namespace.clone()),
            event_hub_name: Some(consumer.target.hub.clone()),
            consumer_group: Some(consumer.consumer_group().to_string()),
            partition_id: partition_id.clone(),
            is_checkpointing_after_invocation: Some(true),
        };
        PartitionPump {
            consumer,
            partition_id,
            control,
            context,
            unsaved_batches: 0,
            last: None,
            saved: None,
            saved_etag: None,
        }
    }

    pub async fn run(mut self) -> PumpExit {
        let stats = self.consumer.stats.clone();
        stats.pumps_running.fetch_add(1, Ordering::Relaxed);
        let exit = self.pump().await;
        if !self.control.is_lost() && exit != PumpExit::Stolen {
            self.checkpoint_if_unsaved().await;
        }
        stats.pumps_running.fetch_sub(1, Ordering::Relaxed);
        stats
            .progress
            .lock()
            .expect("progress lock")
            .remove(&self.partition_id);
        tracing::info!(partition = %self.partition_id, consumer_group = %self.consumer.consumer_group(), ?exit, "pump stopped");
        exit
    }

    async fn pump(&mut self) -> PumpExit {
        let initial = self.consumer.options.initial_position;
        let start = tokio::select! {
            biased;
            _ = self.control.token.cancelled() => return PumpExit::Stopped,
            start = self.consumer.store.start_position(&self.consumer.key, &self.partition_id, initial) => start,
        };
        let Start {
            mut position,
            source,
            mut after_sequence_number,
        } = match start {
            Ok(start) => start,
            Err(e) => {
                tracing::error!(partition = %self.partition_id, error = %e, "cannot decide where to start; the partition is not read");
                return PumpExit::Failed(e.to_string());
            }
        };
        tracing::info!(partition = %self.partition_id, consumer_group = %self.consumer.consumer_group(), ?position, ?source, "pump starting");
        let mut backoff = RETRY_MIN;
        loop {
            let opened = tokio::select! {
                biased;
                _ = self.control.token.cancelled() => return PumpExit::Stopped,
                opened = self.open(&position) => opened,
            };
            let receiver = match opened {
                Ok(receiver) => receiver,
                Err(e) => {
                    tracing::warn!(partition = %self.partition_id, error = %e, retry_in = ?backoff, "opening the partition failed");
                    if self.sleep_or_stop(backoff).await {
                        return PumpExit::Stopped;
                    }
                    backoff = (backoff * 2).min(RETRY_MAX);
                    continue;
                }
            };
            backoff = RETRY_MIN;
            let opened = OpenedReceiver {
                position: position.clone(),
                after_sequence_number,
                at: hubhost_clock::now(),
            };
            let ended = self.read(&*receiver, &opened).await;
            receiver.close().await;
            match ended {
                ReadEnd::Stopped => return PumpExit::Stopped,
                ReadEnd::Stolen => return PumpExit::Stolen,
                ReadEnd::Broken(e) => {
                    tracing::warn!(partition = %self.partition_id, error = %e, "receive failed; reopening after the last event handed out");
                    if let Some((seq, _)) = &self.last {
                        position = StartPosition::AfterSequenceNumber(*seq);
                        after_sequence_number = Some(*seq);
                    }
                    if self.sleep_or_stop(RETRY_MIN).await {
                        return PumpExit::Stopped;
                    }
                }
            }
        }
    }

    /// Sleeps unless asked to stop first; returns whether it was.
    async fn sleep_or_stop(&self, wait: Duration) -> bool {
        tokio::select! {
            biased;
            _ = self.control.token.cancelled() => true,
            _ = tokio::time::sleep(wait) => false,
        }
    }

    async fn open(&self, position: &StartPosition) -> Result<Box<dyn PartitionReceiver>, String> {
        // `prefetchCount` 0, the SDK's "no prefetch": credit for one batch at a time.
        let prefetch = match self.consumer.options.prefetch {
            0 => u32::try_from(self.consumer.options.max_batch_size).unwrap_or(u32::MAX),
            n => n,
        };
        self.consumer
            .events
            .open(
                self.consumer.consumer_group(),
                &self.partition_id,
                position,
                prefetch,
            )
            .await
    }

    /// Reads batches until asked to stop or the receiver fails.
    ///
    /// Receiving runs beside processing (two futures of this task): while the handler works
    /// on one batch, the next one gathers in a queue of up to `max` events, so a partition
    /// with a backlog gets full batches — the SDK's stream alone rarely says an event is
    /// ready without a wait, which left batches at a few dozen events.
    async fn read(&mut self, receiver: &dyn PartitionReceiver, opened: &OpenedReceiver) -> ReadEnd {
        let max = self.consumer.max_batch_size();
        let min = self.consumer.options.min_batch_size.min(max);
        let max_wait = self.consumer.options.max_wait_time;
        let (queue, mut arrived) = tokio::sync::mpsc::channel(max);
        let receiving = async move {
            let mut stream = receiver.events();
            loop {
                let next = stream.next().await.unwrap_or_else(|| Err(stream_ended()));
                let failed = next.is_err();
                if queue.send(next).await.is_err() || failed {
                    break;
                }
            }
            // Processing ends the read; receiving has nothing more to do.
            std::future::pending::<()>().await;
        };
        let processing = async {
            loop {
                let collected = tokio::select! {
                    biased;
                    _ = self.control.token.cancelled() => return ReadEnd::Stopped,
                    collected = collect_batch(&mut arrived, max, min, max_wait, STALL_CHECK_AFTER, stream_ended) => collected,
                };
                let (events, error) = collected;
                if events.is_empty() && error.is_none() {
                    // Nothing for a while: a quiet partition, or a receiver that stalled.
                    let ends = tokio::select! {
                        biased;
                        _ = self.control.token.cancelled() => return ReadEnd::Stopped,
                        ends = self.consumer.events.partition_ends(ENDS_MAX_AGE) => ends.ok(),
                    };
                    let end = ends
                        .into_iter()
                        .flatten()
                        .find(|e| e.partition_id == self.partition_id);
                    if let Some(end) = end
                        && receiver_stalled(self.last.as_ref().map(|l| l.0), opened, &end)
                    {
                        self.consumer
                            .stats
                            .stalled_receivers
                            .fetch_add(1, Ordering::Relaxed);
                        return ReadEnd::Broken(format!(
                            "nothing received for {STALL_CHECK_AFTER:?} while the partition holds events up to sequence number {}",
                            end.last_sequence_number
                        ));
                    }
                    continue;
                }
                let mut records: Vec<EventRecord> = events;
                // The SDK (0.16) reattaches a receiver whose connection dropped with the
                // position it was opened at, not after what it delivered: after a restart
                // of the event hub it delivers the partition again from there (`bench chaos`
                // saw 48..=440 a second time, and the checkpoint go back to 77). What this
                // pump has handed out already is not new — nor is an event this batch already
                // holds: a reattach within one batch's wait repeats events inside the batch
                // (a rehearsal's detached links showed a batch holding 90..=95 three times).
                let before = records.len();
                skip_repeated(&mut records, self.last.as_ref().map(|l| l.0));
                if records.len() < before {
                    tracing::debug!(partition = %self.partition_id, skipped = before - records.len(), last_handed_out = ?self.last.as_ref().map(|l| l.0), "the receiver delivered events again; skipped");
                }
                if !records.is_empty()
                    && let Some(end) = self.process(records).await
                {
                    return end;
                }
                if let Some(e) = error {
                    return match e {
                        ReceiveError::Stolen(_) => {
                            tracing::info!(partition = %self.partition_id, "another reader took the partition (link stolen)");
                            ReadEnd::Stolen
                        }
                        ReceiveError::Broken(why) => ReadEnd::Broken(why),
                    };
                }
                if self.control.token.is_cancelled() {
                    return ReadEnd::Stopped;
                }
            }
        };
        tokio::select! {
            biased;
            end = processing => end,
            _ = receiving => unreachable!("receiving never ends on its own"),
        }
    }

    /// Hands one batch to the handler and checkpoints as configured. `Some` ends reading.
    async fn process(&mut self, events: Vec<EventRecord>) -> Option<ReadEnd> {
        let stats = self.consumer.stats.clone();
        let last = events
            .last()
            .and_then(|e| e.sequence_number.map(|s| (s, e.offset.clone())));
        let first = events.first().and_then(|e| e.sequence_number);
        // The extension tells the function whether this batch is checkpointed after it
        // (`UpdateCheckpointContext`): with `batchCheckpointFrequency` N, every N-th batch.
        let frequency = self.consumer.options.batch_checkpoint_frequency;
        let mut context = self.context.clone();
        context.is_checkpointing_after_invocation = Some(
            self.consumer.options.enable_checkpointing
                && checkpoints_after(self.unsaved_batches, frequency),
        );
        let batch = PartitionBatch { context, events };
        let span = self.consumer.handler.span(&batch);
        let mut delay = RETRY_MIN;
        loop {
            let outcome = self
                .consumer
                .handler
                .handle(&batch, &self.control.token)
                .instrument(span.clone())
                .await;
            match outcome {
                BatchOutcome::Succeeded => {
                    stats.batches.fetch_add(1, Ordering::Relaxed);
                    stats
                        .events
                        .fetch_add(batch.events.len() as u64, Ordering::Relaxed);
                    break;
                }
                BatchOutcome::NotProcessed(reason) => {
                    // Nothing may be checkpointed that the function did not process: `last`
                    // stays at the previous batch, so a stop now checkpoints only up to there.
                    stats.undelivered_batches.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(partition = %self.partition_id, first_sequence = ?first, last_sequence = ?last.as_ref().map(|l| l.0), %reason, retry_in = ?delay, "batch not processed; delivering it again");
                    if self.control.token.is_cancelled() || self.sleep_or_stop(delay).await {
                        return Some(ReadEnd::Stopped);
                    }
                    delay = (delay * 2).min(REDELIVERY_MAX);
                }
                BatchOutcome::Failed(reason) => {
                    stats.failed_batches.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(partition = %self.partition_id, first_sequence = ?first, last_sequence = ?last.as_ref().map(|l| l.0), %reason, "batch failed");
                    if !self.consumer.options.checkpoint_on_success {
                        // The host's rule: a failed batch is checkpointed too; the function's
                        // own retry policy (already applied) was its second chance.
                        break;
                    }
                    // Deliver the same batch again until it succeeds or the pump stops.
                    if self.control.token.is_cancelled() || self.sleep_or_stop(delay).await {
                        return Some(ReadEnd::Stopped);
                    }
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        }
        if let Some((sequence, _)) = &last {
            stats
                .progress
                .lock()
                .expect("progress lock")
                .insert(self.partition_id.clone(), *sequence);
        }
        if last.is_some() {
            self.last = last;
        }
        let checkpoint_now = checkpoints_after(self.unsaved_batches, frequency);
        self.unsaved_batches += 1;
        if checkpoint_now && !self.control.is_lost() {
            let checkpoint_span = self.checkpoint_span(&span);
            self.checkpoint_if_unsaved()
                .instrument(checkpoint_span)
                .await;
        }
        None
    }

    /// A checkpoint's span, a child of the batch's; none when the batch has no span.
    fn checkpoint_span(&self, batch_span: &tracing::Span) -> tracing::Span {
        if batch_span.is_disabled() {
            return tracing::Span::none();
        }
        let hub = self.context.event_hub_name.as_deref().unwrap_or_default();
        tracing::info_span!(
            parent: batch_span,
            "checkpoint",
            "otel.name" = format!("checkpoint {hub}"),
            "otel.kind" = "client",
            "otel.status_code" = tracing::field::Empty,
            "messaging.system" = "eventhubs",
            "messaging.destination.name" = hub,
            "messaging.destination.partition.id" = self.partition_id.as_str(),
            "hubhost.checkpoint.sequence_number" = self.last.as_ref().map(|(seq, _)| *seq),
            "hubhost.checkpoint.written" = tracing::field::Empty,
        )
    }

    async fn checkpoint_if_unsaved(&mut self) {
        // `enableCheckpointing: false`: the extension writes none, at stop neither.
        if !self.consumer.options.enable_checkpointing {
            return;
        }
        let Some((seq, offset)) = self.last.clone() else {
            return;
        };
        // Never back, not even over this pump's own checkpoint.
        if self.saved.is_some_and(|saved| seq <= saved) {
            return;
        }
        let checkpoint = Checkpoint::new(self.partition_id.clone(), offset, seq);
        match self
            .consumer
            .store
            .advance_checkpoint(&self.consumer.key, &checkpoint, self.saved_etag.as_ref())
            .await
        {
            Ok(advance) => {
                self.saved = Some(seq);
                self.unsaved_batches = 0;
                match advance {
                    CheckpointAdvance::Written(etag) => self.saved_etag = Some(etag),
                    CheckpointAdvance::Unconditional => self.saved_etag = None,
                    CheckpointAdvance::Behind { stored } => {
                        // Another owner got further: this pump is likely stale, and its
                        // position must not replace theirs.
                        self.saved_etag = None;
                        tracing::Span::current().record("hubhost.checkpoint.written", false);
                        tracing::info!(partition = %self.partition_id, sequence = seq, stored, "a later checkpoint is stored; not moving it back");
                        return;
                    }
                }
                self.consumer
                    .stats
                    .checkpoints
                    .fetch_add(1, Ordering::Relaxed);
                tracing::Span::current().record("hubhost.checkpoint.written", true);
            }
            Err(e) => {
                tracing::Span::current().record("otel.status_code", "ERROR");
                // The next batch's checkpoint covers this one; a crash before it replays more.
                self.consumer
                    .stats
                    .storage_errors
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(partition = %self.partition_id, sequence = seq, error = %e, "checkpoint failed");
            }
        }
    }
}

enum ReadEnd {
    Stopped,
    Stolen,
    Broken(String),
}

/// A receiver as it was opened: where, what lies behind that position when a checkpoint says,
/// and when.
struct OpenedReceiver {
    position: StartPosition,
    after_sequence_number: Option<i64>,
    at: chrono::DateTime<chrono::Utc>,
}

/// Whether a receiver that delivered nothing for [`STALL_CHECK_AFTER`] has stalled: the hub
/// holds an event it should have delivered by now. That is an event after the last one handed
/// out; before the first, one after the checkpointed event it opened behind (or after the
/// partition's beginning, for `Earliest`); where a start is not known in sequence numbers
/// (`Latest`, a time), an event enqueued after the receiver opened, which lies after the start
/// whatever it was.
fn receiver_stalled(
    last_handed_out: Option<i64>,
    opened: &OpenedReceiver,
    end: &hubhost_eventhubs::PartitionEnd,
) -> bool {
    if end.is_empty || end.last_sequence_number < 0 {
        return false;
    }
    let delivered_up_to =
        last_handed_out
            .or(opened.after_sequence_number)
            .or((opened.position == StartPosition::Earliest)
                .then(|| end.beginning_sequence_number - 1));
    match delivered_up_to {
        Some(up_to) => end.last_sequence_number > up_to,
        None => end
            .last_enqueued_time
            .is_some_and(|t| t > opened.at + chrono::Duration::seconds(1)),
    }
}

/// The next batch from the queue of arrived events: waits for a first event, then takes what
/// has already arrived, up to `max`; below `min` it waits for more until `max_wait` has passed
/// since the first event. An error ends the batch; the events before it are returned with it.
/// Nothing at all within `idle`: an empty batch without error (the first wait is the only one
/// cut short, and it has taken nothing from the queue yet).
async fn collect_batch<T, E>(
    arrived: &mut tokio::sync::mpsc::Receiver<Result<T, E>>,
    max: usize,
    min: usize,
    max_wait: Duration,
    idle: Duration,
    ended: fn() -> E,
) -> (Vec<T>, Option<E>) {
    use tokio::sync::mpsc::error::TryRecvError;
    let mut events = Vec::new();
    match tokio::time::timeout(idle, arrived.recv()).await {
        Err(_) => return (events, None),
        Ok(Some(Ok(e))) => events.push(e),
        Ok(Some(Err(e))) => return (events, Some(e)),
        Ok(None) => return (events, Some(ended())),
    }
    let deadline = tokio::time::Instant::now() + max_wait;
    while events.len() < max {
        let next = match arrived.try_recv() {
            Ok(next) => Some(next),
            Err(TryRecvError::Disconnected) => None,
            Err(TryRecvError::Empty) if events.len() >= min => break,
            Err(TryRecvError::Empty) => {
                match tokio::time::timeout_at(deadline, arrived.recv()).await {
                    Ok(next) => next,
                    Err(_) => break,
                }
            }
        };
        match next {
            Some(Ok(e)) => events.push(e),
            Some(Err(e)) => return (events, Some(e)),
            None => return (events, Some(ended())),
        }
    }
    (events, None)
}

fn stream_ended() -> ReceiveError {
    ReceiveError::Broken("the receiver's stream ended".into())
}

/// Whether the batch after `unsaved` batches not yet checkpointed is checkpointed once it is
/// processed, with `batchCheckpointFrequency` `frequency`: every `frequency`-th batch (the
/// extension's `UpdateCheckpointContext`). What the pump does and what the batch's
/// `IsCheckpointingAfterInvocation` tells the function, from one rule.
fn checkpoints_after(unsaved: u32, frequency: u32) -> bool {
    unsaved.saturating_add(1) >= frequency
}

/// Keeps only events newer than `last` handed out and than every event before them in
/// `records`: sequence numbers strictly increase in what a batch hands out (pure).
fn skip_repeated(records: &mut Vec<EventRecord>, last: Option<i64>) {
    let mut newest = last;
    records.retain(|r| match r.sequence_number {
        None => true,
        Some(s) if newest.is_some_and(|n| s <= n) => false,
        Some(s) => {
            newest = Some(s);
            true
        }
    });
}

/// The SDK's event as the trigger's record.
///
/// Read from the received AMQP message itself: the SDK's `event_data()` would first copy the
/// body and the properties into an `EventData` of its own, only for this to copy them again
/// (a tenth of an instance's CPU at full speed went there). The body is what `event_data()`
/// gives: the one binary section, else nothing.
pub fn to_record(event: &ReceivedEventData) -> EventRecord {
    let message = event.raw_amqp_message();
    let body: &[u8] = match &message.body {
        AmqpMessageBody::Binary(sections) if sections.len() == 1 => &sections[0],
        _ => &[],
    };
    let properties: Map<String, Value> = message
        .application_properties
        .as_ref()
        .map(|props| {
            props
                .0
                .iter()
                .map(|(k, v)| (k.clone(), crate::amqp_json::application_property(v)))
                .collect()
        })
        .unwrap_or_default();
    EventRecord {
        body: bytes::Bytes::copy_from_slice(body),
        sequence_number: event.sequence_number(),
        offset: event.offset().clone(),
        enqueued_time: event.enqueued_time().map(chrono::DateTime::from),
        partition_key: event.partition_key().clone(),
        properties,
        system_properties: crate::amqp_json::system_properties(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    type Item = Result<u32, &'static str>;

    fn queue(items: &[Item]) -> (mpsc::Sender<Item>, mpsc::Receiver<Item>) {
        let (tx, rx) = mpsc::channel(64);
        for item in items {
            tx.try_send(*item).unwrap();
        }
        (tx, rx)
    }

    const NEVER: Duration = Duration::from_secs(3600);

    #[tokio::test]
    async fn a_batch_takes_what_has_arrived_up_to_the_maximum() {
        let (_tx, mut rx) = queue(&[Ok(1), Ok(2), Ok(3), Ok(4), Ok(5)]);
        let (batch, error) = collect_batch(&mut rx, 3, 1, NEVER, NEVER, || "ended").await;
        assert_eq!((batch, error), (vec![1, 2, 3], None));
        let (batch, error) = collect_batch(&mut rx, 3, 1, NEVER, NEVER, || "ended").await;
        assert_eq!((batch, error), (vec![4, 5], None));
    }

    #[tokio::test(start_paused = true)]
    async fn below_the_minimum_it_waits_until_the_maximum_wait() {
        let (tx, mut rx) = queue(&[Ok(1)]);
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            tx.send(Ok(2)).await.unwrap();
            tokio::time::sleep(Duration::from_secs(10)).await;
            tx.send(Ok(3)).await.unwrap();
        });
        let started = tokio::time::Instant::now();
        let (batch, error) =
            collect_batch(&mut rx, 10, 5, Duration::from_secs(5), NEVER, || "ended").await;
        assert_eq!((batch, error), (vec![1, 2], None));
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        late.abort();
    }

    #[tokio::test]
    async fn an_error_ends_the_batch_with_the_events_before_it() {
        let (_tx, mut rx) = queue(&[Ok(1), Ok(2), Err("stolen"), Ok(9)]);
        let (batch, error) = collect_batch(&mut rx, 10, 1, NEVER, NEVER, || "ended").await;
        assert_eq!((batch, error), (vec![1, 2], Some("stolen")));
        let (tx, mut rx) = queue(&[Ok(1)]);
        drop(tx);
        let (batch, error) = collect_batch(&mut rx, 10, 5, NEVER, NEVER, || "ended").await;
        assert_eq!((batch, error), (vec![1], Some("ended")));
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_within_the_idle_period_is_an_empty_batch_and_takes_nothing() {
        let (tx, mut rx) = queue(&[]);
        let started = tokio::time::Instant::now();
        let (batch, error) =
            collect_batch(&mut rx, 10, 1, NEVER, Duration::from_secs(20), || "ended").await;
        assert_eq!((batch, error), (vec![], None));
        assert_eq!(started.elapsed(), Duration::from_secs(20));
        tx.send(Ok(7)).await.unwrap();
        let (batch, error) =
            collect_batch(&mut rx, 10, 1, NEVER, Duration::from_secs(20), || "ended").await;
        assert_eq!((batch, error), (vec![7], None));
    }

    fn end(beginning: i64, last: i64) -> hubhost_eventhubs::PartitionEnd {
        hubhost_eventhubs::PartitionEnd {
            partition_id: "0".into(),
            beginning_sequence_number: beginning,
            last_sequence_number: last,
            last_offset: String::new(),
            last_enqueued_time: None,
            is_empty: last < 0,
        }
    }

    #[test]
    fn only_every_nth_batch_says_it_is_checkpointed_after_it() {
        let told = |frequency: u32| {
            let mut unsaved = 0;
            (0..6)
                .map(|_| {
                    let checkpointed = checkpoints_after(unsaved, frequency);
                    unsaved = if checkpointed { 0 } else { unsaved + 1 };
                    checkpointed
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(told(1), [true; 6]);
        assert_eq!(told(3), [false, false, true, false, false, true]);
    }

    #[test]
    fn a_batch_hands_out_each_event_once_and_in_order() {
        let record = |s: i64| EventRecord {
            body: bytes::Bytes::new(),
            sequence_number: Some(s),
            offset: None,
            enqueued_time: None,
            partition_key: None,
            properties: Default::default(),
            system_properties: Default::default(),
        };
        let mut records: Vec<EventRecord> = [88, 89, 90, 91, 90, 91, 92, 90, 91, 92, 93]
            .into_iter()
            .map(record)
            .collect();
        skip_repeated(&mut records, Some(89));
        let kept: Vec<i64> = records.iter().filter_map(|r| r.sequence_number).collect();
        assert_eq!(kept, [90, 91, 92, 93]);
        let mut fresh: Vec<EventRecord> = [0, 1, 1, 2].into_iter().map(record).collect();
        skip_repeated(&mut fresh, None);
        assert_eq!(fresh.len(), 3);
    }

    fn opened(position: StartPosition, after: Option<i64>) -> OpenedReceiver {
        OpenedReceiver {
            position,
            after_sequence_number: after,
            at: chrono::DateTime::parse_from_rfc3339("2026-11-25T08:00:00Z")
                .unwrap()
                .into(),
        }
    }

    #[test]
    fn a_receiver_is_stalled_only_if_the_hub_holds_what_it_should_have_delivered() {
        let after = |s| opened(StartPosition::AfterSequenceNumber(s), Some(s));
        // Handed out up to 41: the hub's end decides.
        assert!(receiver_stalled(Some(41), &after(10), &end(0, 42)));
        assert!(!receiver_stalled(Some(41), &after(10), &end(0, 41)));
        // Nothing handed out yet: from the position it opened at.
        assert!(receiver_stalled(None, &after(10), &end(0, 11)));
        assert!(!receiver_stalled(None, &after(10), &end(0, 10)));
        let earliest = opened(StartPosition::Earliest, None);
        assert!(receiver_stalled(None, &earliest, &end(5, 5)));
        assert!(!receiver_stalled(None, &earliest, &end(0, -1)));
        // Opened after a checkpoint's offset: its sequence number says what lies behind
        // (without it, an offset was never called stalled, and a receiver that stalled
        // reopening from a checkpoint after a hub restart stayed stalled).
        let from_offset = opened(StartPosition::AfterOffset("12".into()), Some(40));
        assert!(receiver_stalled(None, &from_offset, &end(0, 41)));
        assert!(!receiver_stalled(None, &from_offset, &end(0, 40)));
    }

    #[test]
    fn where_the_start_has_no_sequence_number_an_event_enqueued_since_it_opened_decides() {
        let latest = opened(StartPosition::Latest, None);
        let enqueued = |seconds_after_open: i64| {
            let mut e = end(0, 99);
            e.last_enqueued_time = Some(latest.at + chrono::Duration::seconds(seconds_after_open));
            e
        };
        assert!(!receiver_stalled(None, &latest, &end(0, 99)));
        assert!(!receiver_stalled(None, &latest, &enqueued(-30)));
        assert!(!receiver_stalled(None, &latest, &enqueued(1)));
        assert!(receiver_stalled(None, &latest, &enqueued(5)));
    }
}
