//! The simulation's event hubs, in memory: each partition an ordered log, receivers fenced by
//! owner level as Event Hubs fences them (a new owner-level receiver ends the others with
//! `amqp:link:stolen`), links ended on demand (a detach fault), events enqueued at the
//! simulation's time. What the emulated host reads and sends through the
//! `hubhost_processor::source` seam, so that its pumps, balancer and outputs run unchanged.
//!
//! Nothing here waits on a wall clock or a socket, and nothing is numbered by a process-wide
//! counter: the same sends in the same order give the same hub.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::watch;

use hubhost_checkpoints::StartPosition;
use hubhost_eventhubs::{EventHubTarget, EventHubsError, PartitionEnd};
use hubhost_processor::source::{EventHubs, EventSource, PartitionReceiver, ReceiveError};
use hubhost_trigger::batch::EventRecord;

/// Every event hub of a simulation, each created with `partitions` partitions when first
/// named.
pub struct SimulatedHubs {
    partitions: u32,
    hubs: Mutex<BTreeMap<String, Arc<SimulatedHub>>>,
}

pub struct SimulatedHub {
    pub partitions: Vec<Arc<SimulatedPartition>>,
    /// Where the next send without a partition goes.
    next: Mutex<usize>,
}

pub struct SimulatedPartition {
    pub id: String,
    events: Mutex<Vec<EventRecord>>,
    /// How many events the partition holds; receivers wait on it.
    appended: watch::Sender<usize>,
    /// Per lowercased consumer group, the open receivers.
    receivers: Mutex<BTreeMap<String, Vec<OpenReceiver>>>,
    next_receiver: Mutex<u64>,
}

struct OpenReceiver {
    id: u64,
    stop: watch::Sender<Option<ReceiveError>>,
}

impl SimulatedHubs {
    pub fn new(partitions: u32) -> Arc<Self> {
        Arc::new(SimulatedHubs {
            partitions,
            hubs: Mutex::new(BTreeMap::new()),
        })
    }

    /// Event hub `name` (case-insensitive), created empty when first named.
    pub fn hub(&self, name: &str) -> Arc<SimulatedHub> {
        self.hubs
            .lock()
            .expect("hubs lock")
            .entry(name.to_ascii_lowercase())
            .or_insert_with(|| {
                Arc::new(SimulatedHub {
                    partitions: (0..self.partitions)
                        .map(|p| {
                            Arc::new(SimulatedPartition {
                                id: p.to_string(),
                                events: Mutex::new(Vec::new()),
                                appended: watch::channel(0).0,
                                receivers: Mutex::new(BTreeMap::new()),
                                next_receiver: Mutex::new(0),
                            })
                        })
                        .collect(),
                    next: Mutex::new(0),
                })
            })
            .clone()
    }
}

impl SimulatedHub {
    /// Appends `bodies` to partition `index`, each with `properties`.
    pub fn append(&self, index: usize, bodies: Vec<Vec<u8>>, properties: &[(String, String)]) {
        self.partitions[index % self.partitions.len()].append(bodies, properties);
    }

    /// Ends every receiver's link, as the service does when busy (`server_busy`) or when it
    /// moves a partition; clients reconnect.
    pub fn detach_receivers(&self, server_busy: bool) {
        for partition in &self.partitions {
            partition.end_receivers(
                |_| true,
                || {
                    ReceiveError::Broken(if server_busy {
                        "com.microsoft:server-busy: the simulated hub ended the link".into()
                    } else {
                        "amqp:link:detach-forced: the simulated hub ended the link".into()
                    })
                },
            );
        }
    }
}

impl SimulatedPartition {
    fn append(&self, bodies: Vec<Vec<u8>>, properties: &[(String, String)]) {
        let now = hubhost_clock::now();
        let mut events = self.events.lock().expect("events lock");
        for body in bodies {
            let sequence = events.len() as i64;
            events.push(EventRecord {
                body: body.into(),
                sequence_number: Some(sequence),
                offset: Some(sequence.to_string()),
                enqueued_time: Some(now),
                partition_key: None,
                properties: properties
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::from(v.clone())))
                    .collect(),
                system_properties: Default::default(),
            });
        }
        self.appended.send_replace(events.len());
    }

    /// Every event the partition holds.
    pub fn events(&self) -> Vec<EventRecord> {
        self.events.lock().expect("events lock").clone()
    }

    fn end_receivers(&self, which: impl Fn(u64) -> bool, why: impl Fn() -> ReceiveError) {
        let receivers = self.receivers.lock().expect("receivers lock");
        for receiver in receivers.values().flatten() {
            if which(receiver.id) {
                receiver.stop.send_replace(Some(why()));
            }
        }
    }

    /// The index of the first event after `position`.
    fn start_index(&self, position: &StartPosition) -> usize {
        let events = self.events.lock().expect("events lock");
        let after_sequence = |s: i64| usize::try_from(s + 1).unwrap_or(0).min(events.len());
        match position {
            StartPosition::Earliest => 0,
            StartPosition::Latest => events.len(),
            StartPosition::AfterSequenceNumber(s) => after_sequence(*s),
            StartPosition::AfterOffset(o) => after_sequence(o.parse().unwrap_or(-1)),
            StartPosition::EnqueuedTime(t) => events
                .iter()
                .position(|e| e.enqueued_time.is_some_and(|at| at > *t))
                .unwrap_or(events.len()),
        }
    }
}

#[async_trait]
impl EventHubs for SimulatedHubs {
    fn source(&self, target: &EventHubTarget) -> Arc<dyn EventSource> {
        self.hub(&target.hub)
    }

    async fn send(
        &self,
        target: &EventHubTarget,
        bodies: Vec<Vec<u8>>,
        properties: &[(String, String)],
    ) -> Result<(), String> {
        let hub = self.hub(&target.hub);
        // One batch lands on one partition, as the SDK sends a batch without a partition key.
        let index = {
            let mut next = hub.next.lock().expect("round-robin lock");
            *next += 1;
            *next - 1
        };
        hub.append(index, bodies, properties);
        Ok(())
    }
}

#[async_trait]
impl EventSource for SimulatedHub {
    async fn open(
        &self,
        consumer_group: &str,
        partition: &str,
        position: &StartPosition,
        _prefetch: u32,
    ) -> Result<Box<dyn PartitionReceiver>, String> {
        let partition = self
            .partitions
            .iter()
            .find(|p| p.id == partition)
            .ok_or_else(|| format!("the simulated hub has no partition {partition}"))?
            .clone();
        let (id, stopped) = {
            let mut next = partition.next_receiver.lock().expect("receiver ids lock");
            *next += 1;
            let id = *next;
            let (stop, stopped) = watch::channel(None);
            let mut receivers = partition.receivers.lock().expect("receivers lock");
            let list = receivers
                .entry(consumer_group.to_ascii_lowercase())
                .or_default();
            // Owner level 0 for every receiver, as the host opens them: the newest displaces
            // the others.
            for displaced in list.drain(..) {
                displaced.stop.send_replace(Some(ReceiveError::Stolen(format!(
                    "amqp:link:stolen: a new receiver of partition {} with owner level 0 took it",
                    partition.id
                ))));
            }
            list.push(OpenReceiver { id, stop });
            (id, stopped)
        };
        let next = partition.start_index(position);
        Ok(Box::new(SimulatedReceiver {
            partition,
            consumer_group: consumer_group.to_ascii_lowercase(),
            id,
            next,
            stopped,
        }))
    }

    async fn partition_ends(
        &self,
        _max_age: Duration,
    ) -> Result<Vec<PartitionEnd>, EventHubsError> {
        Ok(self
            .partitions
            .iter()
            .map(|p| {
                let events = p.events.lock().expect("events lock");
                let last = events.last();
                PartitionEnd {
                    partition_id: p.id.clone(),
                    beginning_sequence_number: 0,
                    last_sequence_number: events.len() as i64 - 1,
                    last_offset: last.and_then(|e| e.offset.clone()).unwrap_or_default(),
                    last_enqueued_time: last.and_then(|e| e.enqueued_time),
                    is_empty: events.is_empty(),
                }
            })
            .collect())
    }
}

struct SimulatedReceiver {
    partition: Arc<SimulatedPartition>,
    consumer_group: String,
    id: u64,
    next: usize,
    stopped: watch::Receiver<Option<ReceiveError>>,
}

#[async_trait]
impl PartitionReceiver for SimulatedReceiver {
    fn events(&self) -> BoxStream<'_, Result<EventRecord, ReceiveError>> {
        let state = (
            self.next,
            self.partition.appended.subscribe(),
            self.stopped.clone(),
            false,
        );
        futures::stream::unfold(
            state,
            move |(next, mut appended, mut stopped, ended)| async move {
                if ended {
                    return None;
                }
                loop {
                    let ended_by = stopped.borrow_and_update().clone();
                    if let Some(why) = ended_by {
                        return Some((Err(why), (next, appended, stopped, true)));
                    }
                    let event = self
                        .partition
                        .events
                        .lock()
                        .expect("events lock")
                        .get(next)
                        .cloned();
                    if let Some(event) = event {
                        return Some((Ok(event), (next + 1, appended, stopped, false)));
                    }
                    tokio::select! {
                        biased;
                        _ = stopped.changed() => {}
                        _ = appended.changed() => {}
                    }
                }
            },
        )
        .boxed()
    }

    async fn close(self: Box<Self>) {}
}

impl Drop for SimulatedReceiver {
    fn drop(&mut self) {
        let mut receivers = self.partition.receivers.lock().expect("receivers lock");
        if let Some(list) = receivers.get_mut(&self.consumer_group) {
            list.retain(|r| r.id != self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(hub: &str) -> EventHubTarget {
        EventHubTarget::parse(
            "Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true",
            Some(hub),
        )
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_receiver_reads_after_its_position_and_a_newer_one_steals_the_partition() {
        let hubs = SimulatedHubs::new(2);
        let hub = hubs.hub("in");
        hub.append(0, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()], &[]);
        let source = hubs.source(&target("IN"));
        let first = source
            .open("$Default", "0", &StartPosition::AfterSequenceNumber(0), 10)
            .await
            .unwrap();
        let mut events = first.events();
        let body = |e: Result<EventRecord, ReceiveError>| e.unwrap().body.to_vec();
        assert_eq!(body(events.next().await.unwrap()), b"b");
        assert_eq!(body(events.next().await.unwrap()), b"c");
        let _second = source
            .open("$default", "0", &StartPosition::Earliest, 10)
            .await
            .unwrap();
        assert!(matches!(
            events.next().await.unwrap(),
            Err(ReceiveError::Stolen(_))
        ));
        assert!(events.next().await.is_none());
        let ends = source.partition_ends(Duration::ZERO).await.unwrap();
        assert_eq!(ends[0].last_sequence_number, 2);
        assert!(ends[1].is_empty);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_receiver_gets_what_is_sent_later_and_ends_when_detached() {
        let hubs = SimulatedHubs::new(1);
        let source = hubs.source(&target("in"));
        let receiver = source
            .open("$Default", "0", &StartPosition::Latest, 10)
            .await
            .unwrap();
        let mut events = receiver.events();
        hubs.send(
            &target("in"),
            vec![b"later".to_vec()],
            &[("k".into(), "v".into())],
        )
        .await
        .unwrap();
        let event = events.next().await.unwrap().unwrap();
        assert_eq!(
            (&event.body[..], event.properties["k"].as_str()),
            (&b"later"[..], Some("v"))
        );
        hubs.hub("in").detach_receivers(true);
        assert!(matches!(
            events.next().await.unwrap(),
            Err(ReceiveError::Broken(why)) if why.contains("server-busy")
        ));
    }
}
