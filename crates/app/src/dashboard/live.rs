//! Alarms pushed to the open pages as they are raised: `GET /api/dashboard/alarms`, a stream of
//! server-sent events fed by the `alarms` event hub, which `SensorAggregator` forwards every
//! alarm to. A window block shows an alarm only once a page polls for it; the hub has it the
//! moment the function's output is sent.
//!
//! The page polls its views every second as well, so a browser or a proxy that cannot keep the
//! stream open shows the same alarms at its next poll. Under the Functions host a forwarded
//! response (`enableForwardingHttpRequest`) reaches the browser only once it is complete; only
//! `enableProxyingHttpRequest` passes a stream through as it is written.
//!
//! One reader per handler, however many pages listen: while at least one does, it reads every
//! partition of the alarms hub from the moment it started (by enqueued time, less a margin for
//! the clocks: the SDK attaches a receiver only at its first read, so "from the end" would skip
//! what came in between), in a consumer group of its own (`dashboard` unless
//! set: Event Hubs allows five readers per partition in a consumer group, and a reader with an
//! owner level — any SDK processor — closes the others in its group), and it stops
//! [`READER_LINGERS`] after the last page leaves. Each page has a bounded queue: a page too slow
//! to read is told how many alarms it missed, and the reader never waits for it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use azure_messaging_eventhubs::{
    ConsumerClient, OpenReceiverOptions, StartLocation, StartPosition,
};
use futures::StreamExt;
use hubhost_eventhubs::EventHubTarget;
use serde_json::json;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::AlarmEvent;
use crate::aggregate::Alarm;

/// Pages streaming at once, at most, per handler: each holds a connection and a queue.
pub const MAX_STREAMS: usize = 64;
/// Alarms queued for one page at most before it is told it missed some.
const QUEUED_PER_STREAM: usize = 1024;
/// How long the reader keeps reading after the last page left (a reload reconnects at once).
pub const READER_LINGERS: Duration = Duration::from_secs(30);
/// How far before its start the reader reads: the hub's clock and this machine's differ a little.
const CLOCKS_DIFFER_BY: Duration = Duration::from_secs(2);
/// The first wait after a partition's reader failed; it doubles up to [`RETRY_AT_MOST`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_AT_MOST: Duration = Duration::from_secs(30);
/// The consumer group the reader uses unless `HUBHOST_DASHBOARD_CONSUMER_GROUP` says otherwise.
pub const DEFAULT_CONSUMER_GROUP: &str = "dashboard";
/// The event hub the alarms are read from unless `HUBHOST_ALARMS_HUB` says otherwise: the one
/// `SensorAggregator`'s `alarms` output names.
pub const DEFAULT_ALARMS_HUB: &str = "alarms";

/// Where the alarms are read.
#[derive(Clone, Debug)]
pub struct AlarmSource {
    /// The alarms hub.
    pub target: EventHubTarget,
    pub consumer_group: String,
}

/// What a page's stream carries.
#[derive(Clone, Debug, PartialEq)]
pub enum Pushed {
    /// First on every stream, at once: the page knows its stream reaches it as it is written.
    Connected,
    /// The reader is reading every partition: alarms from now on arrive as they are raised.
    Live,
    /// One alarm, as the fleet view lists it (`home`, `kind`, `sensorId`, `ts`, `enqueued`).
    Alarm(Arc<str>),
    /// The reader cannot read (why); it tries again, and the page's polls go on meanwhile.
    Unavailable(Arc<str>),
    /// This page's queue overflowed: it missed this many alarms.
    Missed(u64),
}

/// Why a page cannot have a stream.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(
        "alarms are not pushed: the handler has no Event Hubs connection (EventHubConnection); the page's polls show them"
    )]
    NoSource,
    #[error(
        "{MAX_STREAMS} pages are streaming alarms from this handler already; the page's polls show them"
    )]
    TooManyStreams,
}

impl AlarmSource {
    /// From the app settings: the alarms hub (`HUBHOST_ALARMS_HUB`, default `alarms`) on the
    /// namespace of `sensors` (`EventHubConnection`'s), in consumer group
    /// `HUBHOST_DASHBOARD_CONSUMER_GROUP` (default `dashboard`).
    pub fn from_app_settings(
        sensors: Option<&EventHubTarget>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Option<Self> {
        let hub = env("HUBHOST_ALARMS_HUB").unwrap_or_else(|| DEFAULT_ALARMS_HUB.into());
        let consumer_group = env("HUBHOST_DASHBOARD_CONSUMER_GROUP")
            .unwrap_or_else(|| DEFAULT_CONSUMER_GROUP.into());
        sensors.map(|target| AlarmSource {
            target: target.for_hub(&hub),
            consumer_group,
        })
    }
}

/// The pushed alarms of one handler.
pub struct LiveAlarms {
    source: Option<AlarmSource>,
    sender: broadcast::Sender<Pushed>,
    /// The reader, while it runs. A reader that finds no page listening takes itself out under
    /// this lock, and a page joins under it, so a page never joins a reader that is leaving.
    reader: Arc<Mutex<Option<Reader>>>,
    readers_started: AtomicU64,
    streams: AtomicUsize,
}

/// The running reader of the alarms hub.
struct Reader {
    /// Which one (a reader takes itself out of the slot only if it is still the one there).
    id: u64,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    /// Whether every partition is open now (told to a page that joins).
    live: Arc<AtomicBool>,
}

/// One page's stream: what it receives; the count of streams goes down when it is dropped.
pub struct Subscription {
    receiver: broadcast::Receiver<Pushed>,
    live: Arc<LiveAlarms>,
    /// Told first: `Connected`, then `Live` if the reader was live when the page joined.
    greeting: Vec<Pushed>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.live.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Subscription {
    /// The next thing to tell the page; `None` when the feed is gone.
    pub async fn next(&mut self) -> Option<Pushed> {
        if !self.greeting.is_empty() {
            return Some(self.greeting.remove(0));
        }
        match self.receiver.recv().await {
            Ok(pushed) => Some(pushed),
            Err(broadcast::error::RecvError::Lagged(missed)) => Some(Pushed::Missed(missed)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

impl LiveAlarms {
    pub fn new(source: Option<AlarmSource>) -> Arc<Self> {
        let (sender, _) = broadcast::channel(QUEUED_PER_STREAM);
        Arc::new(LiveAlarms {
            source,
            sender,
            reader: Arc::new(Mutex::new(None)),
            readers_started: AtomicU64::new(0),
            streams: AtomicUsize::new(0),
        })
    }

    /// Pages streaming now.
    pub fn streams(&self) -> usize {
        self.streams.load(Ordering::Acquire)
    }

    /// A stream for one page; starts the reader if it is not running.
    pub fn subscribe(self: &Arc<Self>) -> Result<Subscription, LiveError> {
        let Some(source) = &self.source else {
            return Err(LiveError::NoSource);
        };
        let taken = self
            .streams
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_STREAMS).then_some(n + 1)
            });
        if taken.is_err() {
            return Err(LiveError::TooManyStreams);
        }
        let mut reader = self.reader.lock().expect("the reader's lock");
        let receiver = self.sender.subscribe();
        if reader.as_ref().is_none_or(|r| r.task.is_finished()) {
            let id = self.readers_started.fetch_add(1, Ordering::Relaxed);
            let (stop, live) = (CancellationToken::new(), Arc::new(AtomicBool::new(false)));
            let task = tokio::spawn(read_alarms(
                source.clone(),
                self.sender.clone(),
                live.clone(),
                (self.reader.clone(), id),
                stop.clone(),
            ));
            *reader = Some(Reader {
                id,
                stop,
                task,
                live,
            });
        }
        let live = reader
            .as_ref()
            .is_some_and(|r| r.live.load(Ordering::Acquire));
        drop(reader);
        Ok(Subscription {
            receiver,
            live: self.clone(),
            greeting: if live {
                vec![Pushed::Connected, Pushed::Live]
            } else {
                vec![Pushed::Connected]
            },
        })
    }

    /// Stops the reader now (the handler is stopping).
    pub fn stop(&self) {
        if let Some(reader) = self.reader.lock().expect("the reader's lock").take() {
            reader.stop.cancel();
        }
    }
}

impl Drop for LiveAlarms {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the page shows of an alarm event from the hub: the fleet view's row (`home` and the
/// alarm's fields), or `None` for a body that is not an alarm.
pub fn alarm_row(body: &[u8]) -> Option<String> {
    let event: AlarmEvent = serde_json::from_slice(body).ok()?;
    let alarm = Alarm {
        kind: event.kind,
        sensor_id: event.sensor_id,
        ts: event.ts,
        seq: event.sequence_number,
        enqueued: event.enqueued,
    };
    let mut row = serde_json::to_value(alarm).ok()?;
    row["home"] = json!(event.home_id);
    row["partition"] = json!(event.partition_id);
    Some(row.to_string())
}

/// Reads every partition of the alarms hub from now into `sender` until `stop`, or until
/// no page has listened for [`READER_LINGERS`]; then takes itself (`id`) out of `slot`. `live`
/// says whether every partition is open.
async fn read_alarms(
    source: AlarmSource,
    sender: broadcast::Sender<Pushed>,
    live: Arc<AtomicBool>,
    (slot, id): (Arc<Mutex<Option<Reader>>>, u64),
    stop: CancellationToken,
) {
    let idle = {
        let (sender, stop) = (sender.clone(), stop.clone());
        async move {
            let mut unheard_since = None;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                // Under the lock pages join under: one joining now finds this reader gone.
                let mut reader = slot.lock().expect("the reader's lock");
                if sender.receiver_count() > 0 {
                    unheard_since = None;
                } else if unheard_since
                    .get_or_insert_with(tokio::time::Instant::now)
                    .elapsed()
                    >= READER_LINGERS
                {
                    if reader.as_ref().is_some_and(|r| r.id == id) {
                        *reader = None;
                    }
                    return;
                }
            }
        }
    };
    let reading = read_every_partition(&source, &sender, &live, &stop);
    tokio::select! {
        _ = idle => tracing::debug!("no page listens for alarms; the reader stops"),
        _ = reading => {}
    }
}

async fn read_every_partition(
    source: &AlarmSource,
    sender: &broadcast::Sender<Pushed>,
    live: &Arc<AtomicBool>,
    stop: &CancellationToken,
) {
    let mut wait = RETRY_FIRST;
    let (consumer, partitions) = loop {
        let opened = async {
            let ends = source
                .target
                .partition_ends()
                .await
                .map_err(|e| e.to_string())?;
            let consumer = source
                .target
                .consumer(&source.consumer_group)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((consumer, ends))
        };
        match opened.await {
            Ok((consumer, ends)) => {
                break (
                    Arc::new(consumer),
                    ends.into_iter().map(|e| e.partition_id).collect::<Vec<_>>(),
                );
            }
            Err(why) => {
                unavailable(sender, &source.target.hub, &why);
                if sleep_or_stop(stop, wait).await {
                    return;
                }
                wait = (wait * 2).min(RETRY_AT_MOST);
            }
        }
    };
    let open = Arc::new(AtomicUsize::new(0));
    let count = partitions.len();
    let since = std::time::SystemTime::now() - CLOCKS_DIFFER_BY;
    let mut readers = tokio::task::JoinSet::new();
    for partition in partitions {
        readers.spawn(read_partition(
            consumer.clone(),
            source.target.hub.clone(),
            partition,
            since,
            sender.clone(),
            (open.clone(), count, live.clone()),
            stop.clone(),
        ));
    }
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = async { while readers.join_next().await.is_some() {} } => {}
    }
    readers.abort_all();
    drop(readers);
    if let Ok(consumer) = Arc::try_unwrap(consumer) {
        hubhost_eventhubs::close_quietly("consumer", consumer.close()).await;
    }
}

/// One partition from `since` (an enqueued time), reopened after a failure from where it was.
async fn read_partition(
    consumer: Arc<ConsumerClient>,
    hub: String,
    partition: String,
    since: std::time::SystemTime,
    sender: broadcast::Sender<Pushed>,
    (open, count, live): (Arc<AtomicUsize>, usize, Arc<AtomicBool>),
    stop: CancellationToken,
) {
    let mut after: Option<i64> = None;
    let mut wait = RETRY_FIRST;
    loop {
        let position = match after {
            Some(sequence_number) => StartPosition {
                location: StartLocation::SequenceNumber(sequence_number),
                inclusive: false,
            },
            None => StartPosition {
                location: StartLocation::EnqueuedTime(since),
                inclusive: false,
            },
        };
        let options = OpenReceiverOptions {
            start_position: Some(position),
            prefetch: Some(300),
            ..Default::default()
        };
        let receiver = tokio::select! {
            _ = stop.cancelled() => return,
            opened = consumer.open_receiver_on_partition(partition.clone(), Some(options)) => opened,
        };
        let receiver = match receiver {
            Ok(receiver) => receiver,
            Err(e) => {
                unavailable(&sender, &hub, &format!("partition {partition}: {e}"));
                if sleep_or_stop(&stop, wait).await {
                    return;
                }
                wait = (wait * 2).min(RETRY_AT_MOST);
                continue;
            }
        };
        wait = RETRY_FIRST;
        if open.fetch_add(1, Ordering::AcqRel) + 1 == count {
            live.store(true, Ordering::Release);
            let _ = sender.send(Pushed::Live);
        }
        let failure = {
            let mut events = Box::pin(receiver.stream_events());
            loop {
                let next = tokio::select! {
                    _ = stop.cancelled() => break None,
                    next = events.next() => next,
                };
                match next {
                    Some(Ok(event)) => {
                        after = event.sequence_number().or(after);
                        let row = event.event_data().body().and_then(alarm_row);
                        if let Some(row) = row {
                            // No page listening is no error: the reader lingers a while.
                            let _ = sender.send(Pushed::Alarm(row.into()));
                        }
                    }
                    Some(Err(e)) => break Some(e.to_string()),
                    None => break Some("the hub ended the stream".to_string()),
                }
            }
        };
        open.fetch_sub(1, Ordering::AcqRel);
        live.store(false, Ordering::Release);
        hubhost_eventhubs::close_quietly("receiver", receiver.close()).await;
        let Some(why) = failure else { return };
        unavailable(&sender, &hub, &format!("partition {partition}: {why}"));
        if sleep_or_stop(&stop, wait).await {
            return;
        }
        wait = (wait * 2).min(RETRY_AT_MOST);
    }
}

fn unavailable(sender: &broadcast::Sender<Pushed>, hub: &str, why: &str) {
    tracing::warn!(hub, error = %why, "the page's alarm feed cannot read the alarms hub; retrying (the page's polls go on)");
    let _ = sender.send(Pushed::Unavailable(
        format!("cannot read event hub {hub}: {why}").into(),
    ));
}

/// Sleeps unless stopped first; returns whether it was.
async fn sleep_or_stop(stop: &CancellationToken, wait: Duration) -> bool {
    tokio::select! {
        _ = stop.cancelled() => true,
        _ = tokio::time::sleep(wait) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alarm_event_becomes_the_row_the_fleet_view_lists() {
        let body = json!({
            "homeId": "home-00007", "sensorId": "smoke-1", "kind": "smoke",
            "ts": "2026-12-07T10:00:00Z", "partitionId": "3", "sequenceNumber": 42,
            "enqueued": "2026-12-07T10:00:00.250Z",
        });
        let row: serde_json::Value =
            serde_json::from_str(&alarm_row(body.to_string().as_bytes()).unwrap()).unwrap();
        assert_eq!(row["home"], "home-00007");
        assert_eq!(row["kind"], "smoke");
        assert_eq!(row["sensorId"], "smoke-1");
        assert_eq!(row["partition"], "3");
        assert!(
            row["enqueued"].is_number() || row["enqueued"].is_string(),
            "{row}"
        );
        assert!(alarm_row(b"{\"not\": \"an alarm\"}").is_none());
        assert!(alarm_row(b"\xff").is_none());
    }

    #[tokio::test]
    async fn without_a_connection_a_page_is_told_to_poll_and_streams_are_bounded() {
        let none = LiveAlarms::new(None);
        assert!(matches!(none.subscribe(), Err(LiveError::NoSource)));
        let target = EventHubTarget::parse(
            "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;",
            Some("alarms"),
        )
        .unwrap();
        let feed = LiveAlarms::new(Some(AlarmSource {
            target,
            consumer_group: "dashboard".into(),
        }));
        let mut held: Vec<Subscription> = (0..MAX_STREAMS)
            .map(|_| feed.subscribe().unwrap())
            .collect();
        assert!(matches!(feed.subscribe(), Err(LiveError::TooManyStreams)));
        held.pop();
        assert_eq!(feed.streams(), MAX_STREAMS - 1);
        let mut again = feed.subscribe().unwrap();
        assert_eq!(again.next().await, Some(Pushed::Connected));
        // Nothing listens on port 1: the page hears why, and the reader keeps trying.
        let told = tokio::time::timeout(Duration::from_secs(30), again.next())
            .await
            .unwrap();
        assert!(
            matches!(&told, Some(Pushed::Unavailable(why)) if why.contains("alarms")),
            "{told:?}"
        );
        feed.stop();
    }
}
