//! The simulation's event hubs, in memory: each partition an ordered log, receivers fenced by
//! owner level as Event Hubs fences them (a new owner-level receiver ends the others with
//! `amqp:link:stolen`), links ended on demand (a detach fault), events enqueued at the
//! simulation's time. What the emulated host reads and sends through the
//! `hubhost_processor::source` seam, so that its pumps, balancer and outputs run unchanged.
//!
//! Two moves of Azure's that a local hub never makes are here too: partitions added to a
//! running event hub (Premium and Dedicated tiers allow it; the count only grows), and the
//! event hub deleted and created again under its name — every partition empty and numbered
//! from 0 again, while the checkpoints in the storage account stay where they were. A receiver
//! asked to start past a partition's end is refused as the service refuses it ("The supplied
//! sequence number '18' is invalid. The last sequence number in the system is '4'").
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
    /// Its partitions, in id order: more may be added, none taken away; all replaced when the
    /// event hub is recreated.
    partitions: Mutex<Vec<Arc<SimulatedPartition>>>,
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
                    partitions: Mutex::new(
                        (0..self.partitions).map(SimulatedPartition::new).collect(),
                    ),
                    next: Mutex::new(0),
                })
            })
            .clone()
    }
}

impl SimulatedHub {
    /// Its partitions now.
    pub fn partitions(&self) -> Vec<Arc<SimulatedPartition>> {
        self.partitions.lock().expect("partitions lock").clone()
    }

    /// How many partitions it has now.
    pub fn partition_count(&self) -> usize {
        self.partitions.lock().expect("partitions lock").len()
    }

    /// Appends `bodies` to partition `index` (modulo the count), each with `properties`;
    /// returns the partition's id and the sequence number of the last event appended.
    pub fn append(
        &self,
        index: usize,
        bodies: Vec<Vec<u8>>,
        properties: &[(String, String)],
    ) -> (String, i64) {
        let partition = {
            let partitions = self.partitions.lock().expect("partitions lock");
            partitions[index % partitions.len()].clone()
        };
        let last = partition.append(bodies, properties);
        (partition.id.clone(), last)
    }

    /// Adds partitions until there are `count` (a Premium or Dedicated event hub's partition
    /// count raised while it runs); the new ones are empty. Returns how many there are.
    pub fn add_partitions(&self, count: usize) -> usize {
        let mut partitions = self.partitions.lock().expect("partitions lock");
        while partitions.len() < count {
            let id = partitions.len() as u32;
            partitions.push(SimulatedPartition::new(id));
        }
        partitions.len()
    }

    /// The event hub deleted and created again with the same name and partition count: every
    /// receiver's link ends (the entity is gone), and the new partitions are empty, numbered
    /// from 0. Checkpoints are not the hub's: they stay where they were.
    pub fn recreate(&self) {
        let old = {
            let mut partitions = self.partitions.lock().expect("partitions lock");
            let fresh = (0..partitions.len() as u32)
                .map(SimulatedPartition::new)
                .collect();
            std::mem::replace(&mut *partitions, fresh)
        };
        for partition in old {
            partition.end_receivers(
                |_| true,
                || {
                    ReceiveError::Broken(format!(
                        "amqp:not-found: the messaging entity was deleted (partition {})",
                        partition.id
                    ))
                },
            );
        }
        *self.next.lock().expect("round-robin lock") = 0;
    }

    /// Ends every receiver's link, as the service does when busy (`server_busy`) or when it
    /// moves a partition; clients reconnect.
    pub fn detach_receivers(&self, server_busy: bool) {
        for partition in self.partitions() {
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
    fn new(id: u32) -> Arc<Self> {
        Arc::new(SimulatedPartition {
            id: id.to_string(),
            events: Mutex::new(Vec::new()),
            appended: watch::channel(0).0,
            receivers: Mutex::new(BTreeMap::new()),
            next_receiver: Mutex::new(0),
        })
    }

    /// Appends; returns the last sequence number (-1 when `bodies` is empty and so is the
    /// partition).
    fn append(&self, bodies: Vec<Vec<u8>>, properties: &[(String, String)]) -> i64 {
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
        events.len() as i64 - 1
    }

    /// Every event the partition holds.
    pub fn events(&self) -> Vec<EventRecord> {
        self.events.lock().expect("events lock").clone()
    }

    /// The sequence number of its last event; -1 when it has none.
    pub fn last_sequence_number(&self) -> i64 {
        self.events.lock().expect("events lock").len() as i64 - 1
    }

    fn end_receivers(&self, which: impl Fn(u64) -> bool, why: impl Fn() -> ReceiveError) {
        let receivers = self.receivers.lock().expect("receivers lock");
        for receiver in receivers.values().flatten() {
            if which(receiver.id) {
                receiver.stop.send_replace(Some(why()));
            }
        }
    }

    /// The index of the first event after `position`, or the service's refusal of a position
    /// past the partition's end: a sequence number or offset after the last event's (an
    /// empty partition's last is -1) is `com.microsoft:argument-out-of-range`.
    fn start_index(&self, position: &StartPosition) -> Result<usize, String> {
        let events = self.events.lock().expect("events lock");
        let last = events.len() as i64 - 1;
        let after_sequence = |s: i64, what: &str, supplied: &str| {
            if s > last {
                Err(format!(
                    "com.microsoft:argument-out-of-range: The supplied {what} '{supplied}' is invalid. The last {what} in the system is '{last}'"
                ))
            } else {
                Ok(usize::try_from(s + 1).unwrap_or(0))
            }
        };
        match position {
            StartPosition::Earliest => Ok(0),
            StartPosition::Latest => Ok(events.len()),
            StartPosition::AfterSequenceNumber(s) => {
                after_sequence(*s, "sequence number", &s.to_string())
            }
            StartPosition::AfterOffset(o) => after_sequence(o.parse().unwrap_or(-1), "offset", o),
            StartPosition::EnqueuedTime(t) => Ok(events
                .iter()
                .position(|e| e.enqueued_time.is_some_and(|at| at > *t))
                .unwrap_or(events.len())),
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
            .partitions()
            .into_iter()
            .find(|p| p.id == partition)
            .ok_or_else(|| format!("the simulated hub has no partition {partition}"))?
            .clone();
        // Refused before any receiver is displaced, as the service refuses the attach.
        let next = partition.start_index(position)?;
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
            .partitions()
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

    #[tokio::test(start_paused = true)]
    async fn added_partitions_are_listed_and_read_and_the_old_ones_keep_their_events() {
        let hubs = SimulatedHubs::new(2);
        let hub = hubs.hub("in");
        hub.append(1, vec![b"old".to_vec()], &[]);
        assert_eq!(hub.add_partitions(4), 4);
        assert_eq!(hub.add_partitions(3), 4, "a partition count never shrinks");
        assert_eq!(hub.append(3, vec![b"new".to_vec()], &[]), ("3".into(), 0));
        let source = hubs.source(&target("in"));
        let ends = source.partition_ends(Duration::ZERO).await.unwrap();
        let ids: Vec<&str> = ends.iter().map(|e| e.partition_id.as_str()).collect();
        assert_eq!(ids, ["0", "1", "2", "3"]);
        assert_eq!(ends[1].last_sequence_number, 0);
        let receiver = source
            .open("$Default", "3", &StartPosition::Earliest, 10)
            .await
            .unwrap();
        let event = receiver.events().next().await.unwrap().unwrap();
        assert_eq!(&event.body[..], b"new");
    }

    #[tokio::test(start_paused = true)]
    async fn a_recreated_hub_is_empty_ends_its_links_and_refuses_positions_past_its_end() {
        let hubs = SimulatedHubs::new(1);
        let hub = hubs.hub("in");
        hub.append(0, (0..5).map(|i| vec![i]).collect(), &[]);
        let source = hubs.source(&target("in"));
        let reading = source
            .open("$Default", "0", &StartPosition::AfterSequenceNumber(1), 10)
            .await
            .unwrap();
        let mut events = reading.events();
        assert_eq!(
            events.next().await.unwrap().unwrap().sequence_number,
            Some(2)
        );
        hub.recreate();
        assert!(matches!(
            events.next().await.unwrap(),
            Err(ReceiveError::Broken(why)) if why.contains("amqp:not-found")
        ));
        // The checkpoint said "after 3": the new partition ends at -1.
        let refused = source
            .open("$Default", "0", &StartPosition::AfterSequenceNumber(3), 10)
            .await
            .err()
            .expect("a position past the end is refused");
        assert!(
            refused.contains("argument-out-of-range")
                && refused.contains("The supplied sequence number '3' is invalid. The last sequence number in the system is '-1'"),
            "{refused}"
        );
        let refused = source
            .open("$Default", "0", &StartPosition::AfterOffset("3".into()), 10)
            .await
            .err()
            .expect("an offset past the end is refused");
        assert!(
            refused.contains("The supplied offset '3' is invalid"),
            "{refused}"
        );
        // Once the new partition holds the checkpoint's event, reading goes on after it:
        // the events before were never delivered.
        hub.append(0, (0..5).map(|i| vec![100 + i]).collect(), &[]);
        let reading = source
            .open("$Default", "0", &StartPosition::AfterSequenceNumber(3), 10)
            .await
            .unwrap();
        let event = reading.events().next().await.unwrap().unwrap();
        assert_eq!(
            (event.sequence_number, &event.body[..]),
            (Some(4), &[104u8][..])
        );
        // At the end exactly is where a reader that is caught up opens.
        assert!(
            source
                .open("$Default", "0", &StartPosition::AfterSequenceNumber(4), 10)
                .await
                .is_ok()
        );
    }
}
