//! Idempotent producers as Kafka defines them: their ids, and per producer and partition the
//! epoch, the last sequence and the last five batches, so that a retried batch is answered with
//! the offset it got the first time instead of being appended again — across a restart of the
//! hub too.
//!
//! - **Ids** are drawn at random from the 63 bits Kafka gives them (never from a counter), and
//!   never one that this hub remembers: no client can guess another's id, and a restarted hub
//!   cannot hand out an id whose batches its journal still holds.
//! - **What a batch is** is decided by [`place`] (pure), with the broker's rules: a duplicate
//!   only when id, epoch, first *and* last sequence match a batch kept; an older epoch refused
//!   with `INVALID_PRODUCER_EPOCH`, a gap or an overlap with `OUT_OF_ORDER_SEQUENCE_NUMBER`; a
//!   producer the hub does not know may start at any sequence.
//! - **Bounded** at [`MAX_PRODUCER_STATES`] (producer, partition) pairs: past it the least
//!   recently used is forgotten, as Kafka lets a silent producer's state expire, and nobody
//!   else's.
//!
//! With a data directory every batch is also appended to a journal among the hub's own files
//! (`kafka-producers.journal`, one line per batch, no fsync), read back at start and rewritten
//! whole when it has grown to several times what it holds. The line is written before the
//! partition's events, under the partition's lock (a `kill -9` between an append and a line
//! written after it lost the batch's state, and the producer's retry was stored twice); at
//! start, a line whose batch the log does not hold is dropped. Kafka rebuilds the same state from its log's batch headers; the hub's log
//! stores AMQP messages, which carry no producer id.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kafka_protocol::error::ResponseError;

/// The journal's name among the hub's own files.
pub(crate) const JOURNAL_FILE: &str = "kafka-producers.journal";
/// Batches remembered per producer and partition (Kafka's `max.in.flight` is at most 5 for
/// idempotence).
const RECENT_BATCHES: usize = 5;
/// (Producer, partition) pairs whose state is remembered at most; past it the least recently
/// used is forgotten.
pub const MAX_PRODUCER_STATES: usize = 100_000;
/// Journal lines past which it is rewritten with what it holds (never below this).
const COMPACT_AFTER_LINES: usize = 10_000;

/// A producer's place: producer id, hub (lowercased), partition.
pub(super) type ProducerKey = (i64, String, i32);

/// One batch a producer appended: its sequence numbers and the offset it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Recent {
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub base_offset: i64,
}

/// What the hub knows of one producer on one partition.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct ProducerState {
    pub epoch: i16,
    /// Its last batches, oldest first (never empty once known).
    pub recent: Vec<Recent>,
}

/// A produced batch's idempotence fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sequenced {
    pub epoch: i16,
    pub first_sequence: i32,
    pub last_sequence: i32,
}

/// What becomes of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Placement {
    /// Append it.
    Append,
    /// A retry of a batch appended before: answer with its base offset, append nothing.
    Duplicate { base_offset: i64 },
    /// Refuse it with this error.
    Refuse(ResponseError, String),
}

/// Decides a batch from what is known of its producer on its partition, by Kafka's rules
/// (`ProducerAppendInfo` and `UnifiedLog` in Apache Kafka's broker). Pure.
pub(super) fn place(known: Option<&ProducerState>, batch: Sequenced) -> Placement {
    let Some(state) = known else {
        // A producer the hub does not know (new, or forgotten) may start anywhere.
        return Placement::Append;
    };
    if batch.epoch < state.epoch {
        return Placement::Refuse(
            ResponseError::InvalidProducerEpoch,
            format!(
                "producer epoch {} is older than the partition's {}",
                batch.epoch, state.epoch
            ),
        );
    }
    if batch.epoch > state.epoch {
        return if batch.first_sequence == 0 {
            Placement::Append
        } else {
            Placement::Refuse(
                ResponseError::OutOfOrderSequenceNumber,
                format!(
                    "a new producer epoch {} starts at sequence {}, not 0",
                    batch.epoch, batch.first_sequence
                ),
            )
        };
    }
    if let Some(done) = state.recent.iter().find(|r| {
        r.first_sequence == batch.first_sequence && r.last_sequence == batch.last_sequence
    }) {
        return Placement::Duplicate {
            base_offset: done.base_offset,
        };
    }
    let last = state.recent.last().map_or(-1, |r| r.last_sequence);
    if batch.first_sequence == increment(last, 1) {
        Placement::Append
    } else {
        Placement::Refuse(
            ResponseError::OutOfOrderSequenceNumber,
            format!(
                "sequence {}..{} does not follow {last}",
                batch.first_sequence, batch.last_sequence
            ),
        )
    }
}

/// `sequence` advanced by `by`, wrapping from `i32::MAX` to 0 as Kafka's sequences do
/// (`DefaultRecordBatch.incrementSequence`). Pure.
pub(super) fn increment(sequence: i32, by: i32) -> i32 {
    if sequence > i32::MAX - by {
        by - (i32::MAX - sequence) - 1
    } else {
        sequence + by
    }
}

pub(super) struct ProducerStates {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    known: HashMap<ProducerKey, Known>,
    /// Use stamps, oldest first: what is forgotten when the states are full.
    by_use: BTreeMap<u64, ProducerKey>,
    next_stamp: u64,
    /// How many keys each producer id has, so that a new id is never a remembered one.
    ids: HashMap<i64, usize>,
    journal: Option<Journal>,
}

struct Known {
    state: ProducerState,
    stamp: u64,
}

struct Journal {
    path: PathBuf,
    file: std::fs::File,
    lines: usize,
    /// Batches announced and not yet recorded or withdrawn: a rewrite keeps their lines too.
    announced: Vec<(ProducerKey, i16, Recent)>,
}

impl State {
    /// Keeps `recent` as `key`'s newest batch at `epoch` (a new epoch starts afresh), marks the
    /// key as the most recently used, and forgets the least recently used past the bound.
    fn remember(&mut self, key: ProducerKey, epoch: i16, recent: Recent) {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        match self.known.get_mut(&key) {
            Some(known) => {
                self.by_use.remove(&known.stamp);
                known.stamp = stamp;
                if epoch != known.state.epoch {
                    known.state = ProducerState {
                        epoch,
                        recent: Vec::new(),
                    };
                }
                known.state.recent.push(recent);
                if known.state.recent.len() > RECENT_BATCHES {
                    known.state.recent.remove(0);
                }
            }
            None => {
                *self.ids.entry(key.0).or_default() += 1;
                self.known.insert(
                    key.clone(),
                    Known {
                        state: ProducerState {
                            epoch,
                            recent: vec![recent],
                        },
                        stamp,
                    },
                );
            }
        }
        self.by_use.insert(stamp, key);
        while self.known.len() > MAX_PRODUCER_STATES {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            self.forget(&oldest);
        }
    }

    /// Rewrites the journal (if there is one) from what is remembered and announced.
    fn rewrite_journal(&mut self) {
        let State {
            known,
            journal: Some(journal),
            ..
        } = self
        else {
            return;
        };
        if let Err(e) = compact(journal, known) {
            tracing::warn!("the idempotent producers' journal could not be rewritten: {e}");
        }
    }

    /// Forgets `key` entirely: a producer id with no key left may be handed out again.
    fn forget(&mut self, key: &ProducerKey) {
        if let Some(known) = self.known.remove(key) {
            self.by_use.remove(&known.stamp);
            if let Some(count) = self.ids.get_mut(&key.0) {
                *count -= 1;
                if *count == 0 {
                    self.ids.remove(&key.0);
                }
            }
        }
    }

    fn touch(&mut self, key: &ProducerKey) {
        let stamp = self.next_stamp;
        if let Some(known) = self.known.get_mut(key) {
            self.next_stamp += 1;
            self.by_use.remove(&known.stamp);
            known.stamp = stamp;
            self.by_use.insert(stamp, key.clone());
        }
    }
}

impl ProducerStates {
    /// Reads the journal of a hub with a data directory (a line it cannot read is skipped: a
    /// torn last line after a crash), or starts empty in memory.
    pub fn open(data_dir: Option<&Path>) -> std::io::Result<Self> {
        let mut state = State::default();
        if let Some(dir) = data_dir {
            let own = crate::own_files(dir);
            std::fs::create_dir_all(&own)?;
            let path = own.join(JOURNAL_FILE);
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(e) => return Err(e),
            };
            let mut lines = 0;
            for (key, epoch, recent) in text.lines().filter_map(parse_line) {
                state.remember(key, epoch, recent);
                lines += 1;
            }
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            state.journal = Some(Journal {
                path,
                file,
                lines,
                announced: Vec::new(),
            });
        }
        Ok(ProducerStates {
            state: Mutex::new(state),
        })
    }

    /// A new producer id: random in Kafka's non-negative range, and none this hub remembers.
    pub fn new_id(&self) -> i64 {
        let state = self.state.lock().expect("producers lock");
        loop {
            let (high, _) = uuid::Uuid::new_v4().as_u64_pair();
            let id = (high >> 1) as i64;
            if !state.ids.contains_key(&id) {
                return id;
            }
        }
    }

    /// What becomes of `batch` from producer `key` ([`place`]). A retry counts as a use of the
    /// key; an appended batch does when it is recorded.
    pub fn place(&self, key: &ProducerKey, batch: Sequenced) -> Placement {
        let mut state = self.state.lock().expect("producers lock");
        let placement = place(state.known.get(key).map(|k| &k.state), batch);
        if matches!(placement, Placement::Duplicate { .. }) {
            state.touch(key);
        }
        placement
    }

    /// Journals a batch `key` is about to append at `epoch`, at `recent.base_offset`, before
    /// the log has it: a line written after the append would be missing after a `kill -9`
    /// between the two, and the producer's retry of that batch would be appended again. A line
    /// whose batch the log never got is dropped at start ([`ProducerStates::drop_unstored`]).
    pub fn announce(&self, key: &ProducerKey, epoch: i16, recent: &Recent) {
        let mut state = self.state.lock().expect("producers lock");
        let Some(journal) = &mut state.journal else {
            return;
        };
        let written = journal
            .file
            .write_all(format_line(key, epoch, recent).as_bytes());
        journal.lines += 1;
        journal.announced.push((key.clone(), epoch, *recent));
        if let Err(e) = written {
            // The batch is appended either way; only a retry across a restart may repeat it.
            tracing::warn!("the idempotent producers' journal could not be written: {e}");
        }
    }

    /// Remembers a batch `key` appended at `epoch`, once the log has it (it was announced).
    pub fn record(&self, key: ProducerKey, epoch: i16, recent: Recent) {
        let mut state = self.state.lock().expect("producers lock");
        if let Some(journal) = &mut state.journal {
            journal.settle(&key, recent.first_sequence);
        }
        state.remember(key, epoch, recent);
        // Counting what is held walks every producer, so it waits until the journal is long.
        let lines = state.journal.as_ref().map_or(0, |j| j.lines);
        if lines > COMPACT_AFTER_LINES {
            let held: usize = state.known.values().map(|k| k.state.recent.len()).sum();
            if lines > 4 * held {
                state.rewrite_journal();
            }
        }
    }

    /// After `key`'s announced batch starting at `first_sequence` could not be appended: the
    /// journal is rewritten without it, since later batches take its offsets.
    pub fn withdraw(&self, key: &ProducerKey, first_sequence: i32) {
        let mut state = self.state.lock().expect("producers lock");
        if let Some(journal) = &mut state.journal {
            journal.settle(key, first_sequence);
        }
        state.rewrite_journal();
    }

    /// At start: forgets the journaled batches the log does not hold (announced, then the hub
    /// died before appending), `end(hub, partition)` being the partition's next offset (`None`:
    /// no such partition now), and rewrites the journal without them, so that the offsets they
    /// named, which later batches take, are never mistaken for theirs. Returns how many.
    pub fn drop_unstored(&self, end: impl Fn(&str, i32) -> Option<i64>) -> usize {
        let mut state = self.state.lock().expect("producers lock");
        let mut dropped = 0;
        for ((_, hub, partition), known) in state.known.iter_mut() {
            let end = end(hub, *partition).unwrap_or(i64::MIN);
            let before = known.state.recent.len();
            known
                .state
                .recent
                .retain(|r| r.base_offset.saturating_add(batch_len(r)) <= end);
            dropped += before - known.state.recent.len();
        }
        if dropped > 0 {
            // A producer with no batch left is unknown again: it may start at any sequence.
            let empty: Vec<ProducerKey> = state
                .known
                .iter()
                .filter(|(_, k)| k.state.recent.is_empty())
                .map(|(key, _)| key.clone())
                .collect();
            for key in &empty {
                state.forget(key);
            }
            state.rewrite_journal();
        }
        dropped
    }

    #[cfg(test)]
    fn known(&self, key: &ProducerKey) -> Option<ProducerState> {
        let state = self.state.lock().expect("producers lock");
        state.known.get(key).map(|k| k.state.clone())
    }
}

impl Journal {
    /// `key`'s announced batch starting at `first_sequence` is recorded or withdrawn.
    fn settle(&mut self, key: &ProducerKey, first_sequence: i32) {
        self.announced
            .retain(|(k, _, r)| !(k == key && r.first_sequence == first_sequence));
    }
}

/// Rewrites the journal with what is remembered, and what is announced after it: beside it,
/// then renamed over it.
fn compact(journal: &mut Journal, known: &HashMap<ProducerKey, Known>) -> std::io::Result<()> {
    let temporary = journal.path.with_extension("journal.tmp");
    let mut out = std::fs::File::create(&temporary)?;
    let mut lines = 0;
    let remembered = known.iter().flat_map(|(key, known)| {
        known
            .state
            .recent
            .iter()
            .map(move |recent| (key, known.state.epoch, recent))
    });
    let announced = journal.announced.iter().map(|(k, e, r)| (k, *e, r));
    for (key, epoch, recent) in remembered.chain(announced) {
        out.write_all(format_line(key, epoch, recent).as_bytes())?;
        lines += 1;
    }
    std::fs::rename(&temporary, &journal.path)?;
    journal.file = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal.path)?;
    journal.lines = lines;
    Ok(())
}

/// The events of a batch, from its first and last sequence numbers (which wrap past
/// `i32::MAX` to 0, as [`increment`] counts). Pure.
fn batch_len(recent: &Recent) -> i64 {
    (i64::from(recent.last_sequence) - i64::from(recent.first_sequence))
        .rem_euclid(i64::from(i32::MAX) + 1)
        + 1
}

/// `producer partition epoch first last base hub\n` (the hub last: a name has no space). Pure.
fn format_line((producer, hub, partition): &ProducerKey, epoch: i16, recent: &Recent) -> String {
    format!(
        "{producer} {partition} {epoch} {} {} {} {hub}\n",
        recent.first_sequence, recent.last_sequence, recent.base_offset
    )
}

/// A journal line back, or `None` for one that is not whole. A line of six fields is the
/// journal's format before epochs were kept: epoch 0, which is what the hub handed out then.
/// Pure.
fn parse_line(line: &str) -> Option<(ProducerKey, i16, Recent)> {
    let fields: Vec<&str> = line.split(' ').collect();
    let (producer, partition, epoch, rest) = match fields.as_slice() {
        [producer, partition, rest @ ..] if rest.len() == 4 => (producer, partition, "0", rest),
        [producer, partition, epoch, rest @ ..] if rest.len() == 4 => {
            (producer, partition, *epoch, rest)
        }
        _ => return None,
    };
    let hub = rest[3];
    if hub.is_empty() {
        return None;
    }
    Some((
        (
            producer.parse().ok()?,
            hub.to_string(),
            partition.parse().ok()?,
        ),
        epoch.parse().ok()?,
        Recent {
            first_sequence: rest[0].parse().ok()?,
            last_sequence: rest[1].parse().ok()?,
            base_offset: rest[2].parse().ok()?,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(first: i32, base_offset: i64) -> Recent {
        Recent {
            first_sequence: first,
            last_sequence: first + 9,
            base_offset,
        }
    }

    /// A batch appended as the produce path appends one: announced, then recorded.
    fn append(states: &ProducerStates, key: &ProducerKey, epoch: i16, recent: Recent) {
        states.announce(key, epoch, &recent);
        states.record(key.clone(), epoch, recent);
    }

    fn sequenced(epoch: i16, first: i32, last: i32) -> Sequenced {
        Sequenced {
            epoch,
            first_sequence: first,
            last_sequence: last,
        }
    }

    #[test]
    fn a_batch_is_placed_by_kafka_s_rules() {
        let state = ProducerState {
            epoch: 2,
            recent: vec![batch(0, 100), batch(10, 110)],
        };
        let known = Some(&state);
        // Unknown producers start anywhere.
        assert_eq!(place(None, sequenced(0, 77, 80)), Placement::Append);
        // The next batch.
        assert_eq!(place(known, sequenced(2, 20, 24)), Placement::Append);
        // A retry is a duplicate only when first *and* last match.
        assert_eq!(
            place(known, sequenced(2, 10, 19)),
            Placement::Duplicate { base_offset: 110 }
        );
        assert!(matches!(
            place(known, sequenced(2, 10, 12)),
            Placement::Refuse(ResponseError::OutOfOrderSequenceNumber, _)
        ));
        // A gap.
        assert!(matches!(
            place(known, sequenced(2, 21, 22)),
            Placement::Refuse(ResponseError::OutOfOrderSequenceNumber, _)
        ));
        // A fenced (older) epoch, whatever its sequence.
        assert!(matches!(
            place(known, sequenced(1, 20, 21)),
            Placement::Refuse(ResponseError::InvalidProducerEpoch, _)
        ));
        // A new epoch starts at 0.
        assert_eq!(place(known, sequenced(3, 0, 4)), Placement::Append);
        assert!(matches!(
            place(known, sequenced(3, 20, 24)),
            Placement::Refuse(ResponseError::OutOfOrderSequenceNumber, _)
        ));
        // Sequences wrap at i32::MAX, as Kafka's do.
        let at_end = ProducerState {
            epoch: 0,
            recent: vec![Recent {
                first_sequence: i32::MAX - 1,
                last_sequence: i32::MAX,
                base_offset: 5,
            }],
        };
        assert_eq!(place(Some(&at_end), sequenced(0, 0, 3)), Placement::Append);
        assert_eq!(increment(i32::MAX - 1, 3), 1);
        assert_eq!(increment(4, 3), 7);
    }

    #[test]
    fn new_ids_are_random_and_never_one_remembered() {
        let states = ProducerStates::open(None).unwrap();
        let ids: std::collections::HashSet<i64> = (0..1_000).map(|_| states.new_id()).collect();
        assert_eq!(ids.len(), 1_000);
        assert!(ids.iter().all(|id| *id >= 0));
        let mut sorted: Vec<i64> = ids.into_iter().collect();
        sorted.sort();
        let consecutive = sorted.windows(2).filter(|w| w[1] - w[0] == 1).count();
        assert_eq!(consecutive, 0, "ids handed out in sequence can be guessed");
    }

    #[test]
    fn a_full_table_forgets_the_least_recently_used_producer_only() {
        let states = ProducerStates::open(None).unwrap();
        let key = |id: i64| (id, "sensors".to_string(), 0);
        for id in 0..MAX_PRODUCER_STATES as i64 {
            states.record(key(id), 0, batch(0, id));
        }
        // Producer 0 keeps producing; producer 1 went quiet.
        assert_eq!(
            states.place(&key(0), sequenced(0, 10, 19)),
            Placement::Append
        );
        states.record(key(0), 0, batch(10, 7));
        states.record(key(-5), 0, batch(0, 1));
        assert!(states.known(&key(0)).is_some(), "the busy producer is kept");
        assert!(
            states.known(&key(1)).is_none(),
            "the quiet one is forgotten"
        );
        assert!(states.known(&key(2)).is_some(), "and nobody else");
        assert!(states.known(&key(-5)).is_some());
    }

    #[test]
    fn recent_batches_survive_a_restart_and_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let key = (1_700_000_000_000, "sensors".to_string(), 3);
        let states = ProducerStates::open(Some(dir.path())).unwrap();
        for i in 0..7 {
            append(&states, &key, 1, batch(i * 10, 100 + i64::from(i) * 10));
        }
        drop(states);
        // A crash in the middle of a line.
        let path = crate::own_files(dir.path()).join(JOURNAL_FILE);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"1700000000000 3 1 70 7").unwrap();
        drop(file);

        let reopened = ProducerStates::open(Some(dir.path())).unwrap();
        let known = reopened.known(&key).unwrap();
        assert_eq!(known.epoch, 1);
        assert_eq!(known.recent.len(), RECENT_BATCHES);
        assert_eq!(known.recent.last(), Some(&batch(60, 160)));
        assert_eq!(known.recent.first(), Some(&batch(20, 120)));
        assert_eq!(reopened.known(&(1, "sensors".into(), 3)), None);
        // A restarted hub never hands out an id its journal holds.
        assert!((0..1_000).all(|_| reopened.new_id() != key.0));
    }

    #[test]
    fn the_journal_is_rewritten_once_it_outgrows_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let states = ProducerStates::open(Some(dir.path())).unwrap();
        let key = (7, "orders".to_string(), 0);
        for i in 0..(COMPACT_AFTER_LINES as i32 + 10) {
            append(&states, &key, 0, batch(i * 10, i64::from(i)));
        }
        let path = crate::own_files(dir.path()).join(JOURNAL_FILE);
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert!(lines < 100, "{lines} lines after compaction");
        drop(states);
        let reopened = ProducerStates::open(Some(dir.path())).unwrap();
        let last = COMPACT_AFTER_LINES as i32 + 9;
        assert_eq!(
            reopened.known(&key).unwrap().recent.last(),
            Some(&batch(last * 10, i64::from(last)))
        );
    }

    /// A `kill -9` between the journal line and the log's append: the batch is journaled but
    /// not stored. At start it is forgotten (the producer's retry is appended, not answered
    /// as a duplicate of events the log lacks), and the journal no longer names it; a batch
    /// the log holds stays a duplicate.
    #[test]
    fn a_batch_journaled_but_never_stored_is_forgotten_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let key = (42, "mixed".to_string(), 2);
        let states = ProducerStates::open(Some(dir.path())).unwrap();
        append(&states, &key, 0, batch(0, 100));
        // Announced; the hub died before the log had it.
        states.announce(&key, 0, &batch(10, 110));
        drop(states);

        let reopened = ProducerStates::open(Some(dir.path())).unwrap();
        assert_eq!(reopened.known(&key).unwrap().recent.len(), 2);
        // The partition's next offset is 110: the first batch (100..=109) is stored.
        let end = |hub: &str, partition: i32| (hub == "mixed" && partition == 2).then_some(110);
        assert_eq!(reopened.drop_unstored(end), 1);
        assert_eq!(
            reopened.place(&key, sequenced(0, 10, 19)),
            Placement::Append,
            "the retry of the unstored batch is appended"
        );
        assert_eq!(
            reopened.place(&key, sequenced(0, 0, 9)),
            Placement::Duplicate { base_offset: 100 }
        );
        drop(reopened);
        let again = ProducerStates::open(Some(dir.path())).unwrap();
        assert_eq!(again.known(&key).unwrap().recent, vec![batch(0, 100)]);
        // A partition that is gone keeps nothing of its producers.
        assert_eq!(again.drop_unstored(|_, _| None), 1);
        assert_eq!(again.known(&key), None);
    }

    /// A rewrite of the journal keeps the batches announced and not yet recorded.
    #[test]
    fn a_rewrite_keeps_what_is_announced_but_not_yet_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let states = ProducerStates::open(Some(dir.path())).unwrap();
        let pending = (9, "orders".to_string(), 1);
        states.announce(&pending, 0, &batch(0, 5));
        let key = (7, "orders".to_string(), 0);
        for i in 0..(COMPACT_AFTER_LINES as i32 + 10) {
            append(&states, &key, 0, batch(i * 10, i64::from(i)));
        }
        drop(states);
        let reopened = ProducerStates::open(Some(dir.path())).unwrap();
        assert_eq!(reopened.known(&pending).unwrap().recent, vec![batch(0, 5)]);
    }

    #[test]
    fn a_line_is_read_back_as_written_and_the_old_format_as_epoch_0() {
        let key = (-1, "a.b-c_d".to_string(), 31);
        let recent = Recent {
            first_sequence: i32::MAX,
            last_sequence: i32::MIN,
            base_offset: i64::MAX,
        };
        let line = format_line(&key, 4, &recent);
        assert_eq!(parse_line(line.trim_end()), Some((key.clone(), 4, recent)));
        assert_eq!(
            parse_line("-1 31 2147483647 -2147483648 9223372036854775807 a.b-c_d"),
            Some((key, 0, recent))
        );
        assert_eq!(parse_line("1 2 3 4 5"), None);
        assert_eq!(parse_line("1 2 3 4 5 6 hub extra"), None);
        assert_eq!(parse_line("x 2 3 4 5 hub"), None);
        assert_eq!(parse_line("1 2 3 4 5 "), None);
    }
}
