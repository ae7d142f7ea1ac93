//! The local-directory blob store: the embedded default, no account needed.
//!
//! A blob `name` in `container` is the file `{root}/{container}/{name}`, so the directory tree
//! mirrors the blob layout, and the file holds exactly the blob's bytes (`cat`, `jq` and any
//! tool read it as it is). Its properties — ETag, last-modified time, metadata, and the
//! content's length and CRC-32 — are a one-line magic and one line of JSON in the file beside
//! it, `.hubhost-head-{file name}`. A file without one is a blob too: put there by hand (its
//! ETag and time from the file's own), or written by an earlier hubhost, whose files began with
//! the magic `hubhost-blob 1` and that line (read as they are; a write rewrites them as now).
//! Several processes may share a directory safely:
//! - every write goes to a spare file beside the blob that then trades places with it in one
//!   atomic `renameat2(RENAME_EXCHANGE)` (renamed over it where that is not supported), so a
//!   reader (or a restart after `kill -9`) sees the old or the new version, never a torn one.
//!   Why a spare: renaming a new file over the blob frees an inode and allocates one on every
//!   write, and on ext4 without a journal (this project's machines) allocation scans past
//!   every inode freed in the last five minutes — at a hundred writes a second that was half
//!   of the handler's time. Trading places reuses the two inodes forever, and the spare keeps
//!   the previous version until the next write overwrites it in place (so the store takes up
//!   to twice its blobs' size on disk, and a write frees no blocks). A write fills the
//!   content's spare and the head's, then trades the content into place, then the head: the
//!   head is the commit. The price: a reader that opened the blob just before a write may find
//!   its file becoming the spare and rewritten under it, or the new content beside the old
//!   head, so the head carries the content's length and CRC-32, and a read counts only if they
//!   match and the paths still name the files read (otherwise it reads again; a read that
//!   loses five times in a row to a blob rewritten back to back is done once more holding the
//!   blob's lock). A writer killed between the two trades leaves the new content beside the
//!   old head and the new head in the head's spare: a read holding the lock finds the spare
//!   matching the content and trades it into place, finishing the write;
//! - conditional writes hold an exclusive OS file lock (one of 4,096 lock files per container,
//!   chosen by a hash of the blob name) between checking the ETag and renaming. A writer waits
//!   for that lock at most `LOCK_WAIT` (2 s), then fails as `Unavailable`: a process stopped
//!   (SIGSTOP, a debugger, a paused VM) while it held the lock keeps it until it runs again,
//!   and Azure Storage has no such wait, so no caller may hang on it. Only the blobs of that
//!   one shard are affected meanwhile; `bench chaos` freezes instances to keep this honest.
//!
//! File operations block, so they run on threads of the store's own: [`FILE_THREADS`] per process,
//! named `hubhost-store-N`, shared by every store the process opens. Why not tokio's blocking
//! pool: the pool starts a thread whenever a task finds none idle and lets one go only after ten
//! seconds without work — and a store in steady use gives some thread work more often than that —
//! so one burst (sixteen partitions checkpointing at once) left an instance with sixteen blocking
//! threads for good, and a handler with twenty. Each thread that allocates keeps pages of its own
//! in the allocator (mimalloc's thread-local heaps): in a soak at the reference load an instance
//! with twice the threads held about 11 MiB more. A writer waiting for a held lock waits between
//! attempts off those threads (each attempt is one short operation), so waiters never hold a
//! thread that other blobs' operations need.
//!
//! Renames survive a process crash; with `fsync` on they also survive a power cut, at a cost.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{
    Blob, BlobProperties, BlobStore, Condition, ETag, Metadata, StoreError, WriteOutcome,
    validate_blob_name, validate_container_name, validate_metadata,
};

/// The first line of a head file.
const HEAD_MAGIC: &[u8] = b"hubhost-head 1\n";
/// The first line of a blob file an earlier hubhost wrote, its header inside (read only).
const INLINE_MAGIC: &[u8] = b"hubhost-blob 1\n";
/// A blob's head is `{HEAD_PREFIX}{file name}` beside it.
const HEAD_PREFIX: &str = ".hubhost-head-";
/// Lock files per container.
pub const LOCK_SHARDS: u64 = 4096;
/// The longest a writer waits for a blob's lock; then the write fails as `Unavailable`.
const LOCK_WAIT: Duration = Duration::from_secs(2);
/// The first pause between attempts at a held lock; each next one is twice as long, up to
/// [`LOCK_PAUSE_MAX`].
const LOCK_PAUSE_MIN: Duration = Duration::from_micros(100);
const LOCK_PAUSE_MAX: Duration = Duration::from_millis(10);
/// The threads doing the local store's file operations in a process (see the module's notes).
/// Two cores gain nothing from more; the operations are short (a few syscalls, no waiting but
/// for the disk).
pub const FILE_THREADS: usize = 4;
/// Temporary files older than this are leftovers of a crashed writer and are removed at open.
const STALE_TMP_AGE: Duration = Duration::from_secs(3600);
/// Temporary files are written beside their blob under this prefix, which no blob name can have.
const TMP_PREFIX: &str = ".hubhost-tmp-";
/// A blob's spare (its previous version, whose file the next write overwrites) is
/// `{SPARE_PREFIX}{file name}`.
const SPARE_PREFIX: &str = ".hubhost-spare-";
/// Files of the store's own that are never blobs all start with this (blob names cannot).
const RESERVED_PREFIX: &str = ".hubhost";

#[derive(Serialize, Deserialize)]
struct Header {
    etag: String,
    #[serde(rename = "lastModified")]
    last_modified: DateTime<Utc>,
    metadata: Metadata,
    /// The content's length and CRC-32, by which a reader tells a whole version from one a
    /// writer was rewriting under it (files written before these existed have neither).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    length: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    crc32: Option<u32>,
}

/// Reads that raced a writer are retried this many times before the file counts as corrupt.
const READ_ATTEMPTS: u32 = 5;

/// Why one attempt to read a blob file failed.
enum ReadFailure {
    Io(std::io::Error),
    /// Not a whole version of the blob: corrupt, or rewritten while it was read.
    Torn(String),
}

impl From<std::io::Error> for ReadFailure {
    fn from(e: std::io::Error) -> Self {
        ReadFailure::Io(e)
    }
}

/// Whether `path` still names the file that `opened` describes.
#[cfg(unix)]
fn still_at(path: &Path, opened: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).is_ok_and(|now| now.ino() == opened.ino() && now.dev() == opened.dev())
}

#[cfg(not(unix))]
fn still_at(_path: &Path, _opened: &fs::Metadata) -> bool {
    true
}

#[derive(Clone)]
pub struct LocalDirStore {
    inner: Arc<Inner>,
}

struct Inner {
    root: PathBuf,
    fsync: bool,
}

/// The lock file that guards conditional writes of blob `name` in `container` of the store at
/// `root` (one of [`LOCK_SHARDS`] per container). For tools that must tell a writer stopped
/// while it held a blob's lock (see the module's notes) from anything else: `bench chaos` finds
/// the lock files a frozen process holds in `/proc/locks`.
pub fn lock_file(root: &Path, container: &str, name: &str) -> PathBuf {
    let shard = fnv1a(name) % LOCK_SHARDS;
    root.join(".hubhost")
        .join("locks")
        .join(container)
        .join(format!("{shard:03x}.lock"))
}

impl LocalDirStore {
    /// Opens (and creates) a store rooted at `root`. Honours `HUBHOST_FSYNC=1` for durability
    /// against power loss.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        let fsync = std::env::var("HUBHOST_FSYNC").is_ok_and(|v| v == "1" || v == "true");
        Self::open_with(root, fsync)
    }

    pub fn open_with(root: &Path, fsync: bool) -> Result<Self, StoreError> {
        let store = LocalDirStore {
            inner: Arc::new(Inner {
                root: root.to_path_buf(),
                fsync,
            }),
        };
        fs::create_dir_all(root).map_err(|e| io_error(root, e))?;
        Ok(store)
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let inner = self.inner.clone();
        let operation: Operation = Box::new(move || {
            let _ = answer.send(f(&inner));
        });
        // A caller that gives up does not stop the operation: it runs, and its answer is dropped.
        file_threads().send(operation).map_err(|_| {
            StoreError::Unavailable("the local store's threads have stopped".into())
        })?;
        answered.await.map_err(|_| {
            StoreError::Unavailable("a local store operation failed (it panicked)".into())
        })?
    }

    /// Runs `op` holding the lock that guards `name`'s check-then-write sequences (see
    /// [`Inner::try_locked`]), waiting for a held lock at most [`LOCK_WAIT`]: each attempt is
    /// one operation on the store's threads, and the pauses between them are spent off them.
    async fn locked<T, F>(&self, container: &str, name: &str, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    {
        let mut wait = LockWait::new(std::time::Instant::now());
        let mut op = op;
        loop {
            let (c, n) = (container.to_string(), name.to_string());
            match self.blocking(move |s| s.try_locked(&c, &n, op)).await? {
                Attempt::Done(value) => return Ok(value),
                Attempt::Busy(back) => op = back,
            }
            let pause = wait
                .next_pause(std::time::Instant::now())
                .ok_or_else(|| held_too_long(container, name))?;
            tokio::time::sleep(pause).await;
        }
    }
}

/// A file operation for the store's threads; it sends its own answer.
type Operation = Box<dyn FnOnce() + Send>;

/// The queue of the store's threads, started with the process's first operation.
fn file_threads() -> &'static std::sync::mpsc::Sender<Operation> {
    static QUEUE: std::sync::OnceLock<std::sync::mpsc::Sender<Operation>> =
        std::sync::OnceLock::new();
    QUEUE.get_or_init(|| {
        let (queue, operations) = std::sync::mpsc::channel::<Operation>();
        let operations = Arc::new(std::sync::Mutex::new(operations));
        for i in 0..FILE_THREADS {
            let operations = operations.clone();
            std::thread::Builder::new()
                .name(format!("hubhost-store-{i}"))
                .spawn(move || {
                    loop {
                        // The queue's lock is let go before the operation runs.
                        let next = operations
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .recv();
                        let Ok(operation) = next else { return };
                        // An operation that panics fails its caller (its answer is dropped),
                        // not the thread.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(operation));
                    }
                })
                .expect("a thread for the local store");
        }
        queue
    })
}

/// One attempt at a blob's lock: `op` ran holding it, or the lock was held and `op` comes back.
enum Attempt<T, F> {
    Done(T),
    Busy(F),
}

/// The pauses between attempts at a held lock: from [`LOCK_PAUSE_MIN`], doubling up to
/// [`LOCK_PAUSE_MAX`], until [`LOCK_WAIT`] has passed since the first attempt.
struct LockWait {
    deadline: std::time::Instant,
    pause: Duration,
}

impl LockWait {
    fn new(first_attempt: std::time::Instant) -> Self {
        LockWait {
            deadline: first_attempt + LOCK_WAIT,
            pause: LOCK_PAUSE_MIN,
        }
    }

    /// The pause before the next attempt, or `None` once the wait is over.
    fn next_pause(&mut self, now: std::time::Instant) -> Option<Duration> {
        if now >= self.deadline {
            return None;
        }
        let pause = self.pause;
        self.pause = (self.pause * 2).min(LOCK_PAUSE_MAX);
        Some(pause)
    }
}

fn held_too_long(container: &str, name: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "blob '{container}/{name}' is locked by another writer for over {LOCK_WAIT:?} \
         (a process stopped or hung while writing to this store?)"
    ))
}

/// Removes a temporary file left by a writer that crashed (an hour old: no live writer).
fn remove_if_stale(path: &Path) {
    let old = fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age > STALE_TMP_AGE);
    if old {
        let _ = fs::remove_file(path);
    }
}

fn io_error(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Unavailable(format!("{}: {e}", path.display()))
}

fn new_etag() -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    let random = uuid::Uuid::new_v4().as_u128() as u32;
    format!("0x{nanos:016X}{random:08X}")
}

fn fnv1a(s: &str) -> u64 {
    let mut hash: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    hash
}

impl Inner {
    fn container_dir(&self, container: &str) -> Result<PathBuf, StoreError> {
        validate_container_name(container)?;
        Ok(self.root.join(container))
    }

    fn blob_path(&self, container: &str, name: &str) -> Result<PathBuf, StoreError> {
        validate_blob_name(name)?;
        Ok(self.container_dir(container)?.join(name))
    }

    /// The lock file guarding `name` in `container`, and its folder.
    fn lock_path(&self, container: &str, name: &str) -> (PathBuf, PathBuf) {
        let path = lock_file(&self.root, container, name);
        let dir = path
            .parent()
            .expect("a lock file has a folder")
            .to_path_buf();
        (dir, path)
    }

    /// One attempt at the exclusive lock that guards `name`'s check-then-write sequences,
    /// against other threads and other processes: when it is free, `op` runs holding it; when
    /// it is held, `op` comes back unrun.
    ///
    /// The lock file is opened for each attempt: `flock` locks belong to an open file, so two
    /// opens exclude each other even within one process, and no descriptor stays open.
    fn try_locked<T, F>(
        &self,
        container: &str,
        name: &str,
        op: F,
    ) -> Result<Attempt<T, F>, StoreError>
    where
        F: FnOnce(&Inner) -> Result<T, StoreError>,
    {
        let (dir, path) = self.lock_path(container, name);
        let open = || {
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
        };
        let file = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
                open()
            }
            other => other,
        }
        .map_err(|e| io_error(&path, e))?;
        match file.try_lock() {
            Ok(()) => {
                let result = op(self);
                let _ = file.unlock();
                result.map(Attempt::Done)
            }
            Err(std::fs::TryLockError::WouldBlock) => Ok(Attempt::Busy(op)),
            Err(std::fs::TryLockError::Error(e)) => Err(StoreError::Unavailable(format!(
                "locking for '{container}/{name}': {e}"
            ))),
        }
    }

    /// [`Self::try_locked`] until the lock is free, waiting at most [`LOCK_WAIT`] on this
    /// thread. Only for the rare read that must lock ([`Self::read_file_unlocked`]); writers
    /// wait off the store's threads ([`LocalDirStore::locked`]).
    fn locked_here<T>(
        &self,
        container: &str,
        name: &str,
        op: impl FnOnce(&Inner) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut wait = LockWait::new(std::time::Instant::now());
        let mut op = op;
        loop {
            match self.try_locked(container, name, op)? {
                Attempt::Done(value) => return Ok(value),
                Attempt::Busy(back) => op = back,
            }
            let pause = wait
                .next_pause(std::time::Instant::now())
                .ok_or_else(|| held_too_long(container, name))?;
            std::thread::sleep(pause);
        }
    }

    /// Reads the blob file at `path`: its header, its content (when `with_data`) and its size.
    ///
    /// A reader does not lock, so it can race a writer: the file it opened may have traded
    /// places with the spare and be rewritten while it reads (see the module's notes). A read
    /// counts only if the content's length and CRC match the header and the path still names
    /// the file read; otherwise it is read again, and after [`READ_ATTEMPTS`] it is corrupt.
    ///
    /// Holding the blob's lock (`holding_lock`), no writer is under way: a blob that still does
    /// not read whole is a writer's leftover, finished if its head's spare matches
    /// ([`finish_write`]) and read again.
    fn read_file(
        &self,
        container: &str,
        name: &str,
        path: &Path,
        with_data: bool,
        holding_lock: bool,
    ) -> Result<Option<(Header, Bytes, u64)>, StoreError> {
        let mut reason = String::new();
        for attempt in 0..=READ_ATTEMPTS {
            if attempt == READ_ATTEMPTS && !(holding_lock && finish_write(path)) {
                break;
            }
            match read_once(path, with_data) {
                Ok(found) => return Ok(found),
                Err(ReadFailure::Io(e)) if is_absent(&e) => return Ok(None),
                Err(ReadFailure::Io(e)) => return Err(io_error(path, e)),
                Err(ReadFailure::Torn(why)) => reason = why,
            }
        }
        Err(StoreError::Corrupt {
            container: container.to_string(),
            name: name.to_string(),
            reason,
        })
    }

    /// [`Self::read_file`] for a caller that does not hold the blob's lock: a read that lost
    /// to rewrites [`READ_ATTEMPTS`] times in a row (a writer rewriting one blob back to back)
    /// is done once more holding the lock, which no writer races, so every read ends. A file
    /// that is still unreadable then is corrupt.
    fn read_file_unlocked(
        &self,
        container: &str,
        name: &str,
        path: &Path,
        with_data: bool,
    ) -> Result<Option<(Header, Bytes, u64)>, StoreError> {
        match self.read_file(container, name, path, with_data, false) {
            Err(StoreError::Corrupt { .. }) => self.locked_here(container, name, |s| {
                s.read_file(container, name, path, with_data, true)
            }),
            other => other,
        }
    }

    /// Reads a blob; `holding_lock` says whether the caller holds its lock already.
    fn read(
        &self,
        container: &str,
        name: &str,
        holding_lock: bool,
    ) -> Result<Option<Blob>, StoreError> {
        let path = self.blob_path(container, name)?;
        let read = if holding_lock {
            self.read_file(container, name, &path, true, true)?
        } else {
            self.read_file_unlocked(container, name, &path, true)?
        };
        let Some((header, data, size)) = read else {
            return Ok(None);
        };
        Ok(Some(Blob {
            properties: BlobProperties {
                name: name.to_string(),
                etag: ETag::new(header.etag),
                last_modified: header.last_modified,
                metadata: header.metadata,
                size,
            },
            data,
        }))
    }

    fn check(
        &self,
        container: &str,
        name: &str,
        current: Option<&str>,
        condition: &Condition,
    ) -> Result<(), StoreError> {
        let (container, name) = (container.to_string(), name.to_string());
        match (condition, current) {
            (Condition::Always, _) => Ok(()),
            (Condition::IfNotExists, None) => Ok(()),
            (Condition::IfNotExists, Some(_)) => Err(StoreError::AlreadyExists { container, name }),
            (Condition::IfMatch(want), Some(have)) if want.as_str() == have => Ok(()),
            (Condition::IfMatch(_), _) => Err(StoreError::ConditionNotMet { container, name }),
        }
    }

    fn write(
        &self,
        container: &str,
        name: &str,
        path: &Path,
        data: &[u8],
        metadata: &Metadata,
    ) -> Result<WriteOutcome, StoreError> {
        let header = Header {
            etag: new_etag(),
            last_modified: Utc::now(),
            metadata: metadata.clone(),
            length: Some(data.len() as u64),
            crc32: Some(crc32fast::hash(data)),
        };
        let mut head = Vec::with_capacity(HEAD_MAGIC.len() + 128);
        head.extend_from_slice(HEAD_MAGIC);
        serde_json::to_writer(&mut head, &header).expect("headers serialize");
        head.push(b'\n');
        // Beside the target: a rename within one directory is atomic and does not serialise
        // all writers on one shared temporary directory.
        let parent = path.parent().unwrap_or(&self.root);
        let head_path = head_of(path);
        // Written over whatever the file held, then cut to length: a spare keeps the blocks of
        // the version before, so a write of about the same size allocates and frees none (on
        // this project's machines, ext4 mounted with `discard`, every freed block is a TRIM).
        let fill = |file: &Path, bytes: &[u8]| -> std::io::Result<()> {
            let mut file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(file)?;
            file.write_all(bytes)?;
            file.set_len(bytes.len() as u64)?;
            if self.fsync {
                file.sync_all()?;
            }
            Ok(())
        };
        // Only this writer uses the spares: every write of a blob holds its lock. Both are
        // filled before either trades places, so that a writer killed between the two trades
        // leaves the new head in its spare, for a reader to finish with ([`finish_write`]).
        let result = fs::create_dir_all(parent).and_then(|()| {
            fill(&spare_of(path), data)?;
            fill(&spare_of(&head_path), &head)?;
            put_in_place(&spare_of(path), path)?;
            put_in_place(&spare_of(&head_path), &head_path)
        });
        if let Err(e) = result {
            return Err(match e.kind() {
                std::io::ErrorKind::NotADirectory | std::io::ErrorKind::IsADirectory => {
                    StoreError::InvalidName {
                        name: format!("{container}/{name}"),
                        reason: "the name collides with another blob's path in the local directory"
                            .to_string(),
                    }
                }
                _ => io_error(path, e),
            });
        }
        if self.fsync
            && let Some(parent) = path.parent()
            && let Ok(dir) = File::open(parent)
        {
            let _ = dir.sync_all();
        }
        Ok(WriteOutcome {
            etag: ETag::new(header.etag),
            last_modified: header.last_modified,
        })
    }

    fn list_dir(
        &self,
        container: &str,
        base: &Path,
        dir: &Path,
        prefix: &str,
        out: &mut Vec<BlobProperties>,
    ) -> Result<(), StoreError> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if is_absent(&e) => return Ok(()),
            Err(e) => return Err(io_error(dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| io_error(dir, e))?;
            let path = entry.path();
            let Some(rel) = path
                .strip_prefix(base)
                .ok()
                .and_then(|p| p.to_str())
                .map(|s| s.replace(std::path::MAIN_SEPARATOR, "/"))
            else {
                continue;
            };
            let file_type = entry.file_type().map_err(|e| io_error(&path, e))?;
            let file_name = entry.file_name();
            let file_name = file_name.to_string_lossy();
            if file_name.starts_with(RESERVED_PREFIX) {
                if file_name.starts_with(TMP_PREFIX) {
                    remove_if_stale(&path);
                }
                continue;
            }
            if file_type.is_dir() {
                // Descend only where names under this folder can still match the prefix.
                let as_prefix = format!("{rel}/");
                if as_prefix.starts_with(prefix) || prefix.starts_with(&as_prefix) {
                    self.list_dir(container, base, &path, prefix, out)?;
                }
            } else if rel.starts_with(prefix)
                && let Some((header, _, size)) =
                    self.read_file_unlocked(container, &rel, &path, false)?
            {
                out.push(BlobProperties {
                    name: rel,
                    etag: ETag::new(header.etag),
                    last_modified: header.last_modified,
                    metadata: header.metadata,
                    size,
                });
            }
        }
        Ok(())
    }
}

/// One attempt of [`LocalDirStore::read_file`]: the head, then the content it describes.
fn read_once(path: &Path, with_data: bool) -> Result<Option<(Header, Bytes, u64)>, ReadFailure> {
    let head_path = head_of(path);
    let head_file = match File::open(&head_path) {
        Ok(file) => file,
        Err(e) if is_absent(&e) => return read_headless(path, with_data),
        Err(e) => return Err(e.into()),
    };
    let head_opened = head_file.metadata()?;
    let header = read_head(head_file)?;
    let file = match File::open(path) {
        Ok(file) => file,
        // A head whose blob is gone: a delete killed between its two removals.
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let opened = file.metadata()?;
    if opened.is_dir() {
        return Ok(None);
    }
    let (data, size) = read_content(file, &opened, with_data)?;
    check_content(&header, &data, size, with_data)?;
    if !still_at(path, &opened) || !still_at(&head_path, &head_opened) {
        return Err(ReadFailure::Torn(
            "the file was replaced while it was read".into(),
        ));
    }
    Ok(Some((header, data, size)))
}

/// A blob file without a head: a new blob whose write is under way (its head still in the
/// spare), one an earlier hubhost wrote (its header inside), or one put there by hand.
fn read_headless(
    path: &Path,
    with_data: bool,
) -> Result<Option<(Header, Bytes, u64)>, ReadFailure> {
    let file = File::open(path)?;
    let opened = file.metadata()?;
    if opened.is_dir() {
        return Ok(None);
    }
    if spare_of(&head_of(path)).exists() {
        return Err(ReadFailure::Torn("its head is not in place yet".into()));
    }
    let mut reader = BufReader::new(file);
    let mut start = vec![0u8; INLINE_MAGIC.len()];
    let read = read_up_to(&mut reader, &mut start)?;
    if read == INLINE_MAGIC.len() && start == INLINE_MAGIC {
        let mut line = Vec::new();
        reader.read_until(b'\n', &mut line)?;
        let header = parse_header(&line)?;
        let (data, size) = if with_data {
            let mut data = Vec::new();
            reader.read_to_end(&mut data)?;
            let size = data.len() as u64;
            (Bytes::from(data), size)
        } else {
            let size = opened
                .len()
                .saturating_sub((INLINE_MAGIC.len() + line.len()) as u64);
            (Bytes::new(), size)
        };
        check_content(&header, &data, size, with_data)?;
        if !still_at(path, &opened) {
            return Err(ReadFailure::Torn(
                "the file was replaced while it was read".into(),
            ));
        }
        return Ok(Some((header, data, size)));
    }
    // Put there by hand: the file's own time and length stand for the ETag.
    let (data, size) = if with_data {
        let mut data = start[..read].to_vec();
        reader.read_to_end(&mut data)?;
        let size = data.len() as u64;
        (Bytes::from(data), size)
    } else {
        (Bytes::new(), opened.len())
    };
    let now = fs::metadata(path)?;
    if !still_at(path, &opened) || now.modified().ok() != opened.modified().ok() {
        return Err(ReadFailure::Torn(
            "the file changed while it was read".into(),
        ));
    }
    let modified = opened.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    let nanos = modified
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    let header = Header {
        etag: format!("0x{nanos:016X}{:08X}", opened.len() as u32),
        last_modified: DateTime::<Utc>::from(modified),
        metadata: Metadata::new(),
        length: None,
        crc32: None,
    };
    Ok(Some((header, data, size)))
}

/// Reads into `buffer` until it is full or the file ends; how much was read.
fn read_up_to(reader: &mut impl Read, buffer: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// A head file's header.
fn read_head(file: File) -> Result<Header, ReadFailure> {
    let mut reader = BufReader::new(file);
    let mut magic = vec![0u8; HEAD_MAGIC.len()];
    if reader.read_exact(&mut magic).is_err() || magic != HEAD_MAGIC {
        return Err(ReadFailure::Torn(
            "not a hubhost head file (bad first line)".into(),
        ));
    }
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    parse_header(&line)
}

fn parse_header(line: &[u8]) -> Result<Header, ReadFailure> {
    if line.last() != Some(&b'\n') {
        return Err(ReadFailure::Torn("header line is not terminated".into()));
    }
    serde_json::from_slice(line).map_err(|e| ReadFailure::Torn(format!("bad header line: {e}")))
}

/// The content of `file` (when `with_data`) and its size.
fn read_content(
    file: File,
    opened: &fs::Metadata,
    with_data: bool,
) -> Result<(Bytes, u64), ReadFailure> {
    if !with_data {
        return Ok((Bytes::new(), opened.len()));
    }
    let mut data = Vec::with_capacity(opened.len() as usize);
    BufReader::new(file).read_to_end(&mut data)?;
    let size = data.len() as u64;
    Ok((Bytes::from(data), size))
}

/// Whether the content read is the one `header` describes: its length, and its CRC-32 when it
/// was read.
fn check_content(
    header: &Header,
    data: &[u8],
    size: u64,
    with_data: bool,
) -> Result<(), ReadFailure> {
    if header.length.is_some_and(|length| length != size) {
        return Err(ReadFailure::Torn(format!(
            "{size} bytes of content where the header says {}",
            header.length.unwrap_or_default()
        )));
    }
    if with_data && header.crc32.is_some_and(|crc| crc != crc32fast::hash(data)) {
        return Err(ReadFailure::Torn(
            "the content does not match its checksum".into(),
        ));
    }
    Ok(())
}

/// `.hubhost-head-{file name}` beside the blob file at `path`.
fn head_of(path: &Path) -> PathBuf {
    beside(path, HEAD_PREFIX)
}

/// `.hubhost-spare-{file name}` beside the file at `path`.
fn spare_of(path: &Path) -> PathBuf {
    beside(path, SPARE_PREFIX)
}

fn beside(path: &Path, prefix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{prefix}{name}"))
}

/// Puts the filled `spare` at `target`: trading places with the version there, or renamed
/// there for a new file (or a file system without exchange).
fn put_in_place(spare: &Path, target: &Path) -> std::io::Result<()> {
    match exchange(spare, target) {
        Ok(()) => Ok(()),
        Err(_) => fs::rename(spare, target),
    }
}

/// Finishes the write of a writer killed between trading the blob's content into place and
/// its head (called holding the blob's lock): when the head's spare describes the content now
/// in place, it becomes the head. Whether it did.
fn finish_write(path: &Path) -> bool {
    let head_path = head_of(path);
    let spare = spare_of(&head_path);
    let Ok(header) = File::open(&spare)
        .map_err(ReadFailure::from)
        .and_then(read_head)
    else {
        return false;
    };
    let Ok(data) = fs::read(path) else {
        return false;
    };
    let size = data.len() as u64;
    if header.length.is_none() || check_content(&header, &data, size, true).is_err() {
        return false;
    }
    tracing::warn!(blob = %path.display(), "a write was cut short between its content and its head: finished");
    put_in_place(&spare, &head_path).is_ok()
}

/// Atomically swaps the files at `a` and `b`; fails if either is missing or the file system
/// cannot (then the caller renames instead).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes()).map_err(|_| std::io::ErrorKind::InvalidInput)
    };
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: both are valid NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_a: &Path, _b: &Path) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

fn is_absent(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

#[async_trait]
impl BlobStore for LocalDirStore {
    fn describe(&self) -> String {
        format!("local directory {}", self.inner.root.display())
    }

    async fn ensure_container(&self, container: &str) -> Result<(), StoreError> {
        let container = container.to_string();
        self.blocking(move |s| {
            let dir = s.container_dir(&container)?;
            fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))
        })
        .await
    }

    async fn get(&self, container: &str, name: &str) -> Result<Option<Blob>, StoreError> {
        let (container, name) = (container.to_string(), name.to_string());
        self.blocking(move |s| s.read(&container, &name, false))
            .await
    }

    async fn put(
        &self,
        container: &str,
        name: &str,
        data: Bytes,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<WriteOutcome, StoreError> {
        validate_metadata(metadata)?;
        let (metadata, condition) = (metadata.clone(), condition.clone());
        let path = self.inner.blob_path(container, name)?;
        // Unconditional writes lock too, so that they cannot slip between another writer's
        // ETag check and its rename.
        let (c, n) = (container.to_string(), name.to_string());
        self.locked(container, name, move |s| {
            if condition != Condition::Always {
                let current = match s.read_file(&c, &n, &path, false, true) {
                    Ok(h) => h.map(|(h, _, _)| h.etag),
                    // A corrupt file exists: it can only be replaced unconditionally.
                    Err(StoreError::Corrupt { .. }) => Some(String::new()),
                    Err(e) => return Err(e),
                };
                s.check(&c, &n, current.as_deref(), &condition)?;
            }
            s.write(&c, &n, &path, &data, &metadata)
        })
        .await
    }

    async fn set_metadata(
        &self,
        container: &str,
        name: &str,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<WriteOutcome, StoreError> {
        validate_metadata(metadata)?;
        let (metadata, condition) = (metadata.clone(), condition.clone());
        let path = self.inner.blob_path(container, name)?;
        let (c, n) = (container.to_string(), name.to_string());
        self.locked(container, name, move |s| {
            let Some(blob) = s.read(&c, &n, true)? else {
                return Err(StoreError::NotFound {
                    container: c,
                    name: n,
                });
            };
            s.check(&c, &n, Some(blob.properties.etag.as_str()), &condition)?;
            s.write(&c, &n, &path, &blob.data, &metadata)
        })
        .await
    }

    async fn list(&self, container: &str, prefix: &str) -> Result<Vec<BlobProperties>, StoreError> {
        let (container, prefix) = (container.to_string(), prefix.to_string());
        self.blocking(move |s| {
            let base = s.container_dir(&container)?;
            if prefix.split('/').any(|seg| seg == "..") || prefix.contains('\\') {
                return Err(StoreError::InvalidName {
                    name: prefix,
                    reason: "a listing prefix cannot contain '..' segments or backslashes"
                        .to_string(),
                });
            }
            // Start at the deepest folder the prefix fully names.
            let start = match prefix.rfind('/') {
                Some(i) => base.join(&prefix[..i]),
                None => base.clone(),
            };
            let mut out = Vec::new();
            s.list_dir(&container, &base, &start, &prefix, &mut out)?;
            out.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(out)
        })
        .await
    }

    async fn delete(&self, container: &str, name: &str) -> Result<(), StoreError> {
        let path = self.inner.blob_path(container, name)?;
        self.locked(container, name, move |_| {
            // The content first: a delete killed after it leaves a head without a blob, which
            // reads as absent.
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if is_absent(&e) => {}
                Err(e) => return Err(io_error(&path, e)),
            }
            let head = head_of(&path);
            for file in [spare_of(&path), head.clone(), spare_of(&head)] {
                let _ = fs::remove_file(file);
            }
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holds the lock guarding blob `name` of container `box` as a writer stopped mid-write
    /// would (`flock` locks belong to an open file, so another open of the lock file is another
    /// writer to the kernel, as another process is); returns it with a blob of `box` guarded by
    /// another lock file.
    fn hold_lock(store: &LocalDirStore, name: &str) -> (File, String) {
        let (dir, path) = store.inner.lock_path("box", name);
        fs::create_dir_all(dir).unwrap();
        let holder = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap();
        holder.lock().unwrap();
        let other = (0..)
            .map(|i| format!("other-{i}"))
            .find(|n| store.inner.lock_path("box", n).1 != path)
            .unwrap();
        (holder, other)
    }

    async fn put_always(store: &LocalDirStore, name: &str) -> Result<WriteOutcome, StoreError> {
        let data = Bytes::from(name.to_string());
        store
            .put("box", name, data, &Metadata::new(), &Condition::Always)
            .await
    }

    /// The pauses between attempts double from the first to the longest, and the wait ends
    /// once `LOCK_WAIT` has passed, however the attempts themselves took.
    #[test]
    fn a_lock_wait_backs_off_and_ends_after_lock_wait() {
        let start = std::time::Instant::now();
        let mut wait = LockWait::new(start);
        let mut now = start;
        let mut pauses = Vec::new();
        while let Some(pause) = wait.next_pause(now) {
            pauses.push(pause);
            now += pause;
        }
        assert_eq!(pauses[0], LOCK_PAUSE_MIN);
        assert_eq!(pauses[1], LOCK_PAUSE_MIN * 2);
        assert!(
            pauses
                .windows(2)
                .all(|w| w[1] == (w[0] * 2).min(LOCK_PAUSE_MAX))
        );
        assert_eq!(*pauses.last().unwrap(), LOCK_PAUSE_MAX);
        let waited: Duration = pauses.iter().sum();
        assert!(
            waited >= LOCK_WAIT && waited < LOCK_WAIT + LOCK_PAUSE_MAX,
            "{waited:?}"
        );
        // An attempt that itself took past the deadline ends the wait at once.
        let mut slow = LockWait::new(start);
        assert_eq!(slow.next_pause(start + LOCK_WAIT), None);
    }

    /// However many operations run at once, the store does them on its own `FILE_THREADS`
    /// threads: a burst leaves no more threads behind.
    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_operations_runs_on_the_stores_own_threads() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalDirStore::open_with(dir.path(), false).unwrap();
        let burst: Vec<_> = (0..64)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { put_always(&store, &format!("burst-{i}")).await })
            })
            .collect();
        for put in burst {
            put.await.unwrap().unwrap();
        }
        assert_eq!(store.list("box", "burst-").await.unwrap().len(), 64);
        let store_threads = fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| fs::read_to_string(t.unwrap().path().join("comm")).ok())
            .filter(|name| name.starts_with("hubhost-store-"))
            .count();
        assert_eq!(store_threads, FILE_THREADS);
    }

    /// Writers waiting for a held lock wait off the store's threads: twice as many of them as
    /// there are threads leave no operation of another blob waiting (were they waiting on the
    /// threads, that write would wait for them to give up).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writers_waiting_for_a_held_lock_leave_other_blobs_free() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalDirStore::open_with(dir.path(), false).unwrap();
        let (_holder, other) = hold_lock(&store, "held");
        let waiting: Vec<_> = (0..FILE_THREADS * 2)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { put_always(&store, "held").await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let began = std::time::Instant::now();
        put_always(&store, &other)
            .await
            .expect("another shard is not held");
        assert!(
            began.elapsed() < LOCK_WAIT / 2,
            "a write of another blob waited {:?} behind writers waiting for a lock",
            began.elapsed()
        );
        for writer in waiting {
            let outcome = writer.await.unwrap();
            assert!(
                matches!(&outcome, Err(StoreError::Unavailable(m)) if m.contains("box/held")),
                "{outcome:?}"
            );
        }
        assert!(store.get("box", "held").await.unwrap().is_none());
    }

    /// A writer that holds a blob's lock and does not let go (a process stopped mid-write)
    /// makes writes of that blob fail after `LOCK_WAIT`, not hang; other blobs are written
    /// meanwhile, and the blob once it lets go.
    #[tokio::test]
    async fn a_writer_that_keeps_a_lock_fails_others_after_a_bounded_wait() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalDirStore::open_with(dir.path(), false).unwrap();
        let md = Metadata::new();
        let first = store
            .put(
                "box",
                "held",
                Bytes::from_static(b"1"),
                &md,
                &Condition::IfNotExists,
            )
            .await
            .unwrap();
        let (holder, other) = hold_lock(&store, "held");

        let began = std::time::Instant::now();
        let blocked = tokio::time::timeout(
            LOCK_WAIT * 5,
            store.put(
                "box",
                "held",
                Bytes::from_static(b"2"),
                &md,
                &Condition::IfMatch(first.etag.clone()),
            ),
        )
        .await
        .expect("a held lock must not make a writer hang");
        assert!(
            matches!(&blocked, Err(StoreError::Unavailable(m)) if m.contains("box/held")),
            "{blocked:?}"
        );
        assert!(began.elapsed() >= LOCK_WAIT);
        put_always(&store, &other)
            .await
            .expect("another shard is not held");

        holder.unlock().unwrap();
        let written = store
            .put(
                "box",
                "held",
                Bytes::from_static(b"2"),
                &md,
                &Condition::IfMatch(first.etag),
            )
            .await
            .expect("the failed write changed nothing, so the ETag still matches");
        let blob = store.get("box", "held").await.unwrap().unwrap();
        assert_eq!(&blob.data[..], b"2");
        assert_eq!(blob.properties.etag, written.etag);
    }
}
