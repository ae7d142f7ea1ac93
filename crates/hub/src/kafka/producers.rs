//! Idempotent producers' recent batches per partition, so that a retried batch is answered with
//! the offset it got the first time instead of being appended again — across a restart of the
//! hub too. With a data directory every batch remembered is also appended to a journal among the
//! hub's own files (`kafka-producers.journal`, one line per batch, written as the partition's
//! events are: no fsync), read back at start and rewritten whole when it has grown to several
//! times what it holds. Kafka rebuilds the same state from its log's batch headers; the hub's log
//! stores AMQP messages, which carry no producer id.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The journal's name among the hub's own files.
pub(crate) const JOURNAL_FILE: &str = "kafka-producers.journal";
/// Batches remembered per producer and partition (Kafka's `max.in.flight` is at most 5 for
/// idempotence).
const RECENT_BATCHES: usize = 5;
/// (Producer, partition) pairs whose recent batches are remembered at most.
const MAX_PRODUCER_STATES: usize = 100_000;
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

pub(super) struct ProducerStates {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    batches: HashMap<ProducerKey, Vec<Recent>>,
    journal: Option<Journal>,
}

struct Journal {
    path: PathBuf,
    file: std::fs::File,
    lines: usize,
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
            for (key, recent) in text.lines().filter_map(parse_line) {
                remember(&mut state.batches, key, recent);
                lines += 1;
            }
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            state.journal = Some(Journal { path, file, lines });
        }
        Ok(ProducerStates {
            state: Mutex::new(state),
        })
    }

    /// The batches `key` appended lately, oldest first.
    pub fn recent(&self, key: &ProducerKey) -> Option<Vec<Recent>> {
        let state = self.state.lock().expect("producers lock");
        state.batches.get(key).cloned()
    }

    /// Remembers a batch `key` appended (and journals it).
    pub fn record(&self, key: ProducerKey, recent: Recent) {
        let mut state = self.state.lock().expect("producers lock");
        let State { batches, journal } = &mut *state;
        if batches.len() >= MAX_PRODUCER_STATES && !batches.contains_key(&key) {
            // Bounded: producers come and go (each restart takes a new id); the ones forgotten
            // are treated as new, as Kafka treats an expired producer id.
            batches.clear();
            tracing::info!(
                "forgot the idempotent producers' recent batches ({MAX_PRODUCER_STATES} kept at most)"
            );
        }
        let line = format_line(&key, &recent);
        remember(batches, key, recent);
        if let Some(journal) = journal {
            let written = journal.file.write_all(line.as_bytes());
            journal.lines += 1;
            let held: usize = batches.values().map(Vec::len).sum();
            let compacted = if journal.lines > COMPACT_AFTER_LINES.max(4 * held) {
                compact(journal, batches)
            } else {
                Ok(())
            };
            if let Err(e) = written.and(compacted) {
                // The batch is appended either way; only a retry across a restart may repeat it.
                tracing::warn!("the idempotent producers' journal could not be written: {e}");
            }
        }
    }
}

/// Keeps `recent` among `key`'s last batches.
fn remember(batches: &mut HashMap<ProducerKey, Vec<Recent>>, key: ProducerKey, recent: Recent) {
    let kept = batches.entry(key).or_default();
    kept.push(recent);
    if kept.len() > RECENT_BATCHES {
        kept.remove(0);
    }
}

/// Rewrites the journal with what is remembered: beside it, then renamed over it.
fn compact(
    journal: &mut Journal,
    batches: &HashMap<ProducerKey, Vec<Recent>>,
) -> std::io::Result<()> {
    let temporary = journal.path.with_extension("journal.tmp");
    let mut out = std::fs::File::create(&temporary)?;
    let mut lines = 0;
    for (key, kept) in batches {
        for recent in kept {
            out.write_all(format_line(key, recent).as_bytes())?;
            lines += 1;
        }
    }
    std::fs::rename(&temporary, &journal.path)?;
    journal.file = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal.path)?;
    journal.lines = lines;
    Ok(())
}

/// `producer partition first last base hub\n` (the hub last: a name has no space). Pure.
fn format_line((producer, hub, partition): &ProducerKey, recent: &Recent) -> String {
    format!(
        "{producer} {partition} {} {} {} {hub}\n",
        recent.first_sequence, recent.last_sequence, recent.base_offset
    )
}

/// A journal line back, or `None` for one that is not whole. Pure.
fn parse_line(line: &str) -> Option<(ProducerKey, Recent)> {
    let mut fields = line.split(' ');
    let producer = fields.next()?.parse().ok()?;
    let partition = fields.next()?.parse().ok()?;
    let first_sequence = fields.next()?.parse().ok()?;
    let last_sequence = fields.next()?.parse().ok()?;
    let base_offset = fields.next()?.parse().ok()?;
    let hub = fields.next()?.to_string();
    if hub.is_empty() || fields.next().is_some() {
        return None;
    }
    Some((
        (producer, hub, partition),
        Recent {
            first_sequence,
            last_sequence,
            base_offset,
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

    #[test]
    fn recent_batches_survive_a_restart_and_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let key = (1_700_000_000_000, "sensors".to_string(), 3);
        let states = ProducerStates::open(Some(dir.path())).unwrap();
        for i in 0..7 {
            states.record(key.clone(), batch(i * 10, 100 + i64::from(i) * 10));
        }
        drop(states);
        // A crash in the middle of a line.
        let path = crate::own_files(dir.path()).join(JOURNAL_FILE);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"1700000000000 3 70 7").unwrap();
        drop(file);

        let reopened = ProducerStates::open(Some(dir.path())).unwrap();
        let recent = reopened.recent(&key).unwrap();
        assert_eq!(recent.len(), RECENT_BATCHES);
        assert_eq!(recent.last(), Some(&batch(60, 160)));
        assert_eq!(recent.first(), Some(&batch(20, 120)));
        assert_eq!(reopened.recent(&(1, "sensors".into(), 3)), None);
    }

    #[test]
    fn the_journal_is_rewritten_once_it_outgrows_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let states = ProducerStates::open(Some(dir.path())).unwrap();
        let key = (7, "orders".to_string(), 0);
        for i in 0..(COMPACT_AFTER_LINES as i32 + 10) {
            states.record(key.clone(), batch(i * 10, i64::from(i)));
        }
        let path = crate::own_files(dir.path()).join(JOURNAL_FILE);
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert!(lines < 100, "{lines} lines after compaction");
        drop(states);
        let reopened = ProducerStates::open(Some(dir.path())).unwrap();
        let last = COMPACT_AFTER_LINES as i32 + 9;
        assert_eq!(
            reopened.recent(&key).unwrap().last(),
            Some(&batch(last * 10, i64::from(last)))
        );
    }

    #[test]
    fn a_line_is_read_back_as_written() {
        let key = (-1, "a.b-c_d".to_string(), 31);
        let recent = Recent {
            first_sequence: i32::MAX,
            last_sequence: i32::MIN,
            base_offset: i64::MAX,
        };
        let line = format_line(&key, &recent);
        assert_eq!(parse_line(line.trim_end()), Some((key, recent)));
        assert_eq!(parse_line("1 2 3 4 5"), None);
        assert_eq!(parse_line("1 2 3 4 5 hub extra"), None);
        assert_eq!(parse_line("x 2 3 4 5 hub"), None);
    }
}
