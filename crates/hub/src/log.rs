//! One partition's events: an append-only log of records in segment files (or only in memory),
//! with sequence numbers, byte offsets and enqueued times assigned on append.
//!
//! On disk a partition is a folder of segments named by their first offset
//! (`00000000000000000000.seg`, …). A record is `len u32 | crc32 u32 | sequence i64 | enqueued
//! millis i64 | payload`, and an event's offset is its record's position in the partition's byte
//! stream — so offsets grow with sequence numbers, as in Event Hubs. On open, every segment is
//! scanned; a record whose length or checksum does not hold ends the log and the file is cut
//! there (a torn tail after `kill -9`). A write returns once the records are in the file (the
//! page cache survives the death of the process; `fsync` is optional, for power loss).
//!
//! Memory stays bounded: a segment keeps a sparse index (one entry per `INDEX_EVERY` records), and
//! the newest events stay in a cache of at most `cache_bytes`, from which live readers are served.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

/// An event as stored: the payload is the encoded AMQP message, annotations included.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub sequence: i64,
    pub offset: i64,
    pub enqueued_ms: i64,
    pub payload: Bytes,
}

/// Where a read starts, resolved from a receiver's filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seek {
    /// The first event with sequence number ≥ n.
    Sequence(i64),
    /// The first event with offset ≥ n.
    Offset(i64),
    /// The first event enqueued at or after n (Unix millis).
    Time(i64),
}

/// A partition's retained span and last event, for `$management` partition properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSummary {
    pub begin_sequence: i64,
    pub next_sequence: i64,
    pub last: Option<(i64, i64, i64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("partition log {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

const HEADER: usize = 24;
const INDEX_EVERY: i64 = 128;

pub struct LogOptions {
    /// `None` keeps the partition in memory only.
    pub dir: Option<PathBuf>,
    pub segment_bytes: u64,
    pub cache_bytes: usize,
    pub fsync: bool,
}

pub struct PartitionLog {
    options: LogOptions,
    segments: Vec<Segment>,
    active: Option<File>,
    cache: VecDeque<StoredEvent>,
    cache_size: usize,
    next_sequence: i64,
    next_offset: i64,
    last_enqueued_ms: i64,
}

struct Segment {
    path: PathBuf,
    first_offset: i64,
    len: u64,
    /// (sequence, position in file, enqueued millis) of every INDEX_EVERY-th record.
    index: Vec<(i64, u64, i64)>,
    last: Option<(i64, i64, i64)>,
}

impl Segment {
    fn first(&self) -> Option<(i64, u64, i64)> {
        self.index.first().copied()
    }
}

impl PartitionLog {
    /// Opens (or creates) a partition's log, recovering from a torn tail.
    pub fn open(options: LogOptions) -> Result<Self, LogError> {
        let mut log = PartitionLog {
            options,
            segments: Vec::new(),
            active: None,
            cache: VecDeque::new(),
            cache_size: 0,
            next_sequence: 0,
            next_offset: 0,
            last_enqueued_ms: 0,
        };
        let Some(dir) = log.options.dir.clone() else {
            return Ok(log);
        };
        let io = |source| LogError::Io {
            path: dir.clone(),
            source,
        };
        fs::create_dir_all(&dir).map_err(io)?;
        let mut names: Vec<(i64, PathBuf)> = fs::read_dir(&dir)
            .map_err(io)?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let path = e.path();
                let stem = path.file_name()?.to_str()?.strip_suffix(".seg")?;
                Some((stem.parse().ok()?, path))
            })
            .collect();
        names.sort();
        for (i, (first_offset, path)) in names.iter().enumerate() {
            let is_last = i + 1 == names.len();
            let segment = scan_segment(path, *first_offset, &mut log)?;
            if segment.len == 0 && !is_last {
                continue;
            }
            log.segments.push(segment);
        }
        if let Some(last) = log.segments.last() {
            log.next_offset = last.first_offset + last.len as i64;
        }
        Ok(log)
    }

    /// Appends events (payload, enqueued millis); returns each one's (sequence, offset).
    /// Enqueued times never go backwards within a partition, so time seeks stay monotonic.
    pub fn append(&mut self, events: Vec<(Bytes, i64)>) -> Result<Vec<(i64, i64)>, LogError> {
        let mut placed = Vec::with_capacity(events.len());
        let mut buffer = Vec::new();
        let mut stored = Vec::with_capacity(events.len());
        for (payload, enqueued_ms) in events {
            let enqueued_ms = enqueued_ms.max(self.last_enqueued_ms);
            self.last_enqueued_ms = enqueued_ms;
            let event = StoredEvent {
                sequence: self.next_sequence,
                offset: self.next_offset,
                enqueued_ms,
                payload,
            };
            if self.options.dir.is_some() {
                encode_record(&event, &mut buffer);
            }
            self.next_sequence += 1;
            self.next_offset += (HEADER + event.payload.len()) as i64;
            placed.push((event.sequence, event.offset));
            stored.push(event);
        }
        if self.options.dir.is_some() {
            self.write_records(&buffer, &stored)?;
        }
        for event in stored {
            self.cache_size += event.payload.len();
            self.cache.push_back(event);
        }
        if self.options.dir.is_some() {
            while self.cache_size > self.options.cache_bytes && self.cache.len() > 1 {
                let old = self.cache.pop_front().expect("non-empty");
                self.cache_size -= old.payload.len();
            }
        }
        Ok(placed)
    }

    fn write_records(&mut self, buffer: &[u8], events: &[StoredEvent]) -> Result<(), LogError> {
        let Some(first) = events.first() else {
            return Ok(());
        };
        let roll = match self.segments.last() {
            None => true,
            Some(s) => s.len >= self.options.segment_bytes,
        };
        if roll || self.active.is_none() {
            if roll {
                let dir = self.options.dir.as_ref().expect("disk log");
                let path = dir.join(format!("{:020}.seg", first.offset));
                self.segments.push(Segment {
                    path,
                    first_offset: first.offset,
                    len: 0,
                    index: Vec::new(),
                    last: None,
                });
            }
            let segment = self.segments.last().expect("just ensured");
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&segment.path)
                .map_err(|source| LogError::Io {
                    path: segment.path.clone(),
                    source,
                })?;
            self.active = Some(file);
        }
        let segment = self.segments.last_mut().expect("active segment");
        let file = self.active.as_mut().expect("active file");
        let io = |source| LogError::Io {
            path: segment.path.clone(),
            source,
        };
        file.write_all(buffer).map_err(io)?;
        if self.options.fsync {
            file.sync_data().map_err(io)?;
        }
        for event in events {
            let position = (event.offset - segment.first_offset) as u64;
            if segment.index.is_empty() || event.sequence % INDEX_EVERY == 0 {
                segment
                    .index
                    .push((event.sequence, position, event.enqueued_ms));
            }
            segment.last = Some((event.sequence, event.offset, event.enqueued_ms));
        }
        segment.len += buffer.len() as u64;
        Ok(())
    }

    /// Bytes the retained events take: the segment files, or the events kept in memory.
    pub fn retained_bytes(&self) -> u64 {
        match self.options.dir {
            Some(_) => self.segments.iter().map(|s| s.len).sum(),
            None => self.cache_size as u64,
        }
    }

    pub fn summary(&self) -> LogSummary {
        let begin_sequence = match (self.segments.first(), self.cache.front()) {
            (Some(s), _) if s.first().is_some() => s.first().expect("checked").0,
            (_, Some(e)) => e.sequence,
            _ => self.next_sequence,
        };
        let last = self
            .cache
            .back()
            .map(|e| (e.sequence, e.offset, e.enqueued_ms))
            .or_else(|| self.segments.iter().rev().find_map(|s| s.last));
        LogSummary {
            begin_sequence,
            next_sequence: self.next_sequence,
            last,
        }
    }

    /// The sequence number of the first retained event at or after `seek` (or the next
    /// sequence number to be assigned, when there is none yet).
    pub fn resolve(&self, seek: Seek) -> Result<i64, LogError> {
        let summary = self.summary();
        if let Seek::Sequence(n) = seek {
            return Ok(n.clamp(summary.begin_sequence, summary.next_sequence));
        }
        let reached = |sequence: i64, offset: i64, ms: i64| match seek {
            Seek::Sequence(n) => sequence >= n,
            Seek::Offset(n) => offset >= n,
            Seek::Time(n) => ms >= n,
        };
        // The cache holds the newest events: answer from it when its first event is already
        // past the target only if nothing older is retained on disk.
        if let Some(front) = self.cache.front() {
            let older_on_disk = summary.begin_sequence < front.sequence;
            if !older_on_disk || !reached(front.sequence, front.offset, front.enqueued_ms) {
                let at = self
                    .cache
                    .partition_point(|e| !reached(e.sequence, e.offset, e.enqueued_ms));
                return Ok(self
                    .cache
                    .get(at)
                    .map(|e| e.sequence)
                    .unwrap_or(self.next_sequence));
            }
        }
        for segment in &self.segments {
            let Some((seq, offset, ms)) = segment.last else {
                continue;
            };
            if !reached(seq, offset, ms) {
                continue;
            }
            let start = segment
                .index
                .partition_point(|&(s, pos, ms)| !reached(s, segment.first_offset + pos as i64, ms))
                .saturating_sub(1);
            let (_, position, _) = segment.index[start];
            let mut found = None;
            scan_records(segment, position, |event| {
                if reached(event.sequence, event.offset, event.enqueued_ms) {
                    found = Some(event.sequence);
                    false
                } else {
                    true
                }
            })?;
            if let Some(sequence) = found {
                return Ok(sequence);
            }
        }
        Ok(self.next_sequence)
    }

    /// Up to `max` events starting at sequence `from` (clamped to what is retained).
    pub fn read(&self, from: i64, max: usize) -> Result<Vec<StoredEvent>, LogError> {
        let from = from.max(self.summary().begin_sequence);
        if let Some(front) = self.cache.front()
            && from >= front.sequence
        {
            let skip = (from - front.sequence) as usize;
            return Ok(self.cache.iter().skip(skip).take(max).cloned().collect());
        }
        let mut out = Vec::new();
        // An empty segment (only ever the last: a new one, or one cut to nothing on open)
        // holds nothing before `from`; counting it as "before" would break the search and
        // skip every segment (found by the segment_recovery fuzz target).
        let segment_at = self
            .segments
            .partition_point(|s| s.last.is_some_and(|(last, _, _)| last < from));
        for segment in &self.segments[segment_at.min(self.segments.len())..] {
            let start = segment
                .index
                .partition_point(|&(s, _, _)| s <= from)
                .saturating_sub(1);
            let Some(&(_, position, _)) = segment.index.get(start) else {
                continue;
            };
            scan_records(segment, position, |event| {
                if event.sequence >= from {
                    out.push(event);
                }
                out.len() < max
            })?;
            if out.len() >= max {
                break;
            }
        }
        Ok(out)
    }

    /// Drops whole segments (never the one being written) whose newest event is older than
    /// `cutoff_ms`; in memory, drops the events older than it. Returns how many events went.
    pub fn enforce_retention(&mut self, cutoff_ms: i64) -> Result<u64, LogError> {
        let mut dropped = 0u64;
        if self.options.dir.is_none() {
            while self
                .cache
                .front()
                .is_some_and(|e| e.enqueued_ms < cutoff_ms)
            {
                let old = self.cache.pop_front().expect("checked");
                self.cache_size -= old.payload.len();
                dropped += 1;
            }
            return Ok(dropped);
        }
        while self.segments.len() > 1 {
            let segment = &self.segments[0];
            let Some((last_seq, _, last_ms)) = segment.last else {
                break;
            };
            if last_ms >= cutoff_ms {
                break;
            }
            let first_seq = segment.first().map(|f| f.0).unwrap_or(last_seq);
            fs::remove_file(&segment.path).map_err(|source| LogError::Io {
                path: segment.path.clone(),
                source,
            })?;
            dropped += (last_seq - first_seq + 1) as u64;
            self.segments.remove(0);
        }
        Ok(dropped)
    }

    #[cfg(test)]
    fn segment_count(&self) -> usize {
        self.segments.len()
    }
}

fn encode_record(event: &StoredEvent, out: &mut Vec<u8>) {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&event.sequence.to_le_bytes());
    hasher.update(&event.enqueued_ms.to_le_bytes());
    hasher.update(&event.payload);
    out.extend_from_slice(&(event.payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&hasher.finalize().to_le_bytes());
    out.extend_from_slice(&event.sequence.to_le_bytes());
    out.extend_from_slice(&event.enqueued_ms.to_le_bytes());
    out.extend_from_slice(&event.payload);
}

/// Reads records from `position` on, handing each to `visit` until it returns false or the
/// segment ends.
fn scan_records(
    segment: &Segment,
    mut position: u64,
    mut visit: impl FnMut(StoredEvent) -> bool,
) -> Result<(), LogError> {
    let file = File::open(&segment.path).map_err(|source| LogError::Io {
        path: segment.path.clone(),
        source,
    })?;
    let mut chunk = vec![0u8; 256 * 1024];
    while position < segment.len {
        let want = ((segment.len - position) as usize).min(chunk.len());
        let got =
            read_full_at(&file, &mut chunk[..want], position).map_err(|source| LogError::Io {
                path: segment.path.clone(),
                source,
            })?;
        let mut at = 0usize;
        let mut grown = false;
        while at + HEADER <= got {
            let len = u32::from_le_bytes(chunk[at..at + 4].try_into().expect("4")) as usize;
            if at == 0 && HEADER + len > chunk.len() {
                chunk.resize(HEADER + len, 0);
                grown = true;
                break;
            }
            if at + HEADER + len > got {
                break;
            }
            let sequence = i64::from_le_bytes(chunk[at + 8..at + 16].try_into().expect("8"));
            let enqueued_ms = i64::from_le_bytes(chunk[at + 16..at + 24].try_into().expect("8"));
            let event = StoredEvent {
                sequence,
                offset: segment.first_offset + (position + at as u64) as i64,
                enqueued_ms,
                payload: Bytes::copy_from_slice(&chunk[at + HEADER..at + HEADER + len]),
            };
            at += HEADER + len;
            if !visit(event) {
                return Ok(());
            }
        }
        if at == 0 && !grown {
            // A record longer than what is left: the segment ends here.
            break;
        }
        position += at as u64;
    }
    Ok(())
}

fn read_full_at(file: &File, buf: &mut [u8], position: u64) -> std::io::Result<usize> {
    let mut read = 0;
    while read < buf.len() {
        match file.read_at(&mut buf[read..], position + read as u64)? {
            0 => break,
            n => read += n,
        }
    }
    Ok(read)
}

/// Scans one segment file at open: rebuilds its index, restores the log's counters, and cuts a
/// torn tail (only the newest segment can have one; an older one is cut too rather than
/// trusted).
fn scan_segment(
    path: &Path,
    first_offset: i64,
    log: &mut PartitionLog,
) -> Result<Segment, LogError> {
    let io = |source| LogError::Io {
        path: path.to_path_buf(),
        source,
    };
    let data = fs::read(path).map_err(io)?;
    let mut segment = Segment {
        path: path.to_path_buf(),
        first_offset,
        len: 0,
        index: Vec::new(),
        last: None,
    };
    let mut at = 0usize;
    while at + HEADER <= data.len() {
        let len = u32::from_le_bytes(data[at..at + 4].try_into().expect("4")) as usize;
        if at + HEADER + len > data.len() {
            break;
        }
        let crc = u32::from_le_bytes(data[at + 4..at + 8].try_into().expect("4"));
        if crc32fast::hash(&data[at + 8..at + HEADER + len]) != crc {
            break;
        }
        let sequence = i64::from_le_bytes(data[at + 8..at + 16].try_into().expect("8"));
        let enqueued_ms = i64::from_le_bytes(data[at + 16..at + 24].try_into().expect("8"));
        if segment.index.is_empty() || sequence % INDEX_EVERY == 0 {
            segment.index.push((sequence, at as u64, enqueued_ms));
        }
        segment.last = Some((sequence, first_offset + at as i64, enqueued_ms));
        log.next_sequence = sequence + 1;
        log.last_enqueued_ms = enqueued_ms;
        at += HEADER + len;
    }
    if at < data.len() {
        tracing::warn!(
            segment = %path.display(),
            kept = at,
            cut = data.len() - at,
            "cutting a torn tail from a partition log"
        );
        let file = OpenOptions::new().write(true).open(path).map_err(io)?;
        file.set_len(at as u64).map_err(io)?;
        file.sync_all().map_err(io)?;
    }
    segment.len = at as u64;
    Ok(segment)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(dir: &Path, segment_bytes: u64, cache_bytes: usize) -> PartitionLog {
        PartitionLog::open(LogOptions {
            dir: Some(dir.to_path_buf()),
            segment_bytes,
            cache_bytes,
            fsync: false,
        })
        .unwrap()
    }

    /// A last segment that is empty — rolled just before a `kill -9`, or cut to nothing
    /// because its first record was damaged — must not hide the segments before it.
    #[test]
    fn an_empty_last_segment_hides_nothing_before_it() {
        let dir = tempfile::tempdir().unwrap();
        {
            // Three records per segment: two segments, the second with two records.
            let mut log = disk(dir.path(), 100, 1 << 20);
            fill(&mut log, 5, 1_000);
        }
        let mut segments: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        segments.sort();
        assert_eq!(segments.len(), 2, "{segments:?}");
        // Damage the first record of the last segment: it is cut to nothing on open.
        let last = segments.last().unwrap();
        let mut data = fs::read(last).unwrap();
        data[HEADER] ^= 0xff;
        fs::write(last, &data).unwrap();
        let log = disk(dir.path(), 100, 1 << 20);
        let summary = log.summary();
        let events = log.read(0, 100).unwrap();
        assert!(summary.next_sequence > 0);
        assert_eq!(
            events.iter().map(|e| e.sequence).collect::<Vec<_>>(),
            (0..summary.next_sequence).collect::<Vec<_>>()
        );
    }

    fn fill(log: &mut PartitionLog, n: i64, ms_from: i64) {
        for i in 0..n {
            let payload = Bytes::from(format!("event-{i:05}"));
            log.append(vec![(payload, ms_from + i)]).unwrap();
        }
    }

    #[test]
    fn sequence_offset_and_time_seeks_agree_on_disk_and_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        // Tiny segments and cache, so reads and seeks go through files and indexes.
        let mut on_disk = disk(dir.path(), 1_000, 100);
        let mut in_memory = PartitionLog::open(LogOptions {
            dir: None,
            segment_bytes: 0,
            cache_bytes: 0,
            fsync: false,
        })
        .unwrap();
        fill(&mut on_disk, 500, 10_000);
        fill(&mut in_memory, 500, 10_000);
        assert!(on_disk.segment_count() > 10);
        for log in [&on_disk, &in_memory] {
            let all = log.read(0, 1_000).unwrap();
            assert_eq!(all.len(), 500);
            for (i, e) in all.iter().enumerate() {
                assert_eq!(e.sequence, i as i64);
                assert_eq!(e.payload, Bytes::from(format!("event-{i:05}")));
                assert_eq!(e.enqueued_ms, 10_000 + i as i64);
            }
            let e = &all[321];
            assert_eq!(log.resolve(Seek::Offset(e.offset)).unwrap(), 321);
            assert_eq!(log.resolve(Seek::Offset(e.offset + 1)).unwrap(), 322);
            assert_eq!(log.resolve(Seek::Time(10_321)).unwrap(), 321);
            assert_eq!(log.resolve(Seek::Sequence(321)).unwrap(), 321);
            assert_eq!(log.resolve(Seek::Sequence(9_999)).unwrap(), 500);
            assert_eq!(log.resolve(Seek::Time(99_999)).unwrap(), 500);
            let some = log.read(130, 5).unwrap();
            assert_eq!(
                some.iter().map(|e| e.sequence).collect::<Vec<_>>(),
                vec![130, 131, 132, 133, 134]
            );
        }
    }

    #[test]
    fn reopening_keeps_every_event_and_cuts_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = disk(dir.path(), 1 << 20, 1 << 20);
        fill(&mut log, 50, 0);
        drop(log);
        // A half-written record, as kill -9 in the middle of a write leaves it.
        let segment = dir.path().join(format!("{:020}.seg", 0));
        let mut file = OpenOptions::new().append(true).open(&segment).unwrap();
        file.write_all(&[200, 0, 0, 0, 1, 2, 3]).unwrap();
        drop(file);
        let mut log = disk(dir.path(), 1 << 20, 1 << 20);
        assert_eq!(log.summary().next_sequence, 50);
        assert_eq!(log.read(0, 100).unwrap().len(), 50);
        // Appends continue after the cut, with offsets that match the file.
        fill(&mut log, 1, 100);
        let reopened = disk(dir.path(), 1 << 20, 1 << 20);
        let all = reopened.read(0, 100).unwrap();
        assert_eq!(all.len(), 51);
        assert_eq!(all[50].sequence, 50);
        assert_eq!(all[50].offset, log.read(50, 1).unwrap()[0].offset);
    }

    #[test]
    fn a_corrupted_record_ends_the_log_there() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = disk(dir.path(), 1 << 20, 1 << 20);
        fill(&mut log, 10, 0);
        let fifth = log.read(5, 1).unwrap()[0].offset as u64;
        drop(log);
        let segment = dir.path().join(format!("{:020}.seg", 0));
        let file = OpenOptions::new().write(true).open(&segment).unwrap();
        file.write_at(b"XX", fifth + HEADER as u64).unwrap();
        let log = disk(dir.path(), 1 << 20, 1 << 20);
        assert_eq!(log.summary().next_sequence, 5);
    }

    #[test]
    fn retention_drops_old_segments_and_readers_move_to_the_earliest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = disk(dir.path(), 500, 100);
        fill(&mut log, 200, 0);
        let before = log.segment_count();
        let dropped = log.enforce_retention(100).unwrap();
        assert!(dropped > 50 && dropped <= 100, "dropped {dropped}");
        assert!(log.segment_count() < before);
        let begin = log.summary().begin_sequence;
        assert_eq!(begin, dropped as i64);
        assert_eq!(log.read(0, 1).unwrap()[0].sequence, begin);
        assert_eq!(log.resolve(Seek::Sequence(0)).unwrap(), begin);
        // Reopening sees the same span.
        drop(log);
        let log = disk(dir.path(), 500, 100);
        assert_eq!(log.summary().begin_sequence, begin);
        assert_eq!(log.summary().next_sequence, 200);
    }
}
