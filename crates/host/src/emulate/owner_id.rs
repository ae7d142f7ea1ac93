//! Who this instance is in the checkpoint store: a stable owner id, claimed exclusively on
//! this machine.
//!
//! Ownership records carry the owner's id. An instance that restarts under the id it had
//! finds its records still live and renews them in its first cycle, so its partitions are
//! processed again at once instead of after the whole expiry (the complaint about the
//! Functions host, whose processors take a new random id at each start). That needs an id
//! that survives a restart: `--instance-id`, else the platform's instance id where there is
//! one (`WEBSITE_INSTANCE_ID` on App Service and Functions plans, `CONTAINER_NAME` in
//! containers), else the host name with the lowest slot number free on this machine
//! (`myhost-0`, `myhost-1`, …). Several processes on one machine (a local pool) share the
//! platform id or host name, so those ids take slots: the first process gets the platform id
//! itself, the next `{id}-1`, and so on.
//!
//! A stable id must never be used twice at once: two live processes under one id would both
//! believe they own the same partitions. So an id is *claimed* before use, with an exclusive
//! advisory lock (flock) on one file per (checkpoint store, consumer group, id) in a folder of
//! this machine. The kernel releases the lock when the process dies, `kill -9` included, so a
//! restarted instance gets its slot back; a slot in use makes a process take the next, and an
//! explicit `--instance-id` in use is refused. Processes on different machines never share a
//! host name or a platform instance id, so the lock only has to cover one machine.
//!
//! `candidates` (pure) decides which ids to try in which order; `claim` does the locking.

use std::fs::{File, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// How many host-name slots are tried before giving up.
const SLOTS: u32 = 256;

/// Where the id came from, for the start-up line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentitySource {
    /// `--instance-id`.
    Flag,
    /// A platform variable such as `WEBSITE_INSTANCE_ID`.
    Platform(&'static str),
    /// The host name and the lowest free slot.
    HostSlot,
}

/// The ids to try, in order: one fixed id (the flag), or slots of a base name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidates {
    Fixed(String),
    /// `base` itself first when `bare_first` (a platform id), then `base-1`, `base-2`, …;
    /// else `base-0`, `base-1`, … (a host name).
    Slots {
        base: String,
        source: IdentitySource,
        bare_first: bool,
    },
}

impl Candidates {
    fn ids(&self) -> Box<dyn Iterator<Item = (String, IdentitySource)> + '_> {
        match self {
            Candidates::Fixed(id) => Box::new(std::iter::once((id.clone(), IdentitySource::Flag))),
            Candidates::Slots {
                base,
                source,
                bare_first,
            } => Box::new((0..SLOTS).map(move |n| {
                let id = if n == 0 && *bare_first {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                };
                (id, source.clone())
            })),
        }
    }

    /// The first id tried.
    pub fn first(&self) -> String {
        self.ids().next().map(|(id, _)| id).unwrap_or_default()
    }
}

/// The platform variables that name an instance, most specific first.
pub const PLATFORM_VARIABLES: [&str; 2] = ["WEBSITE_INSTANCE_ID", "CONTAINER_NAME"];

/// Which ids to try: `--instance-id` if given, else the first platform variable set, else
/// slots of the host name. `env` reads the environment; `hostname` is this machine's name.
pub fn candidates(
    explicit: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
    hostname: Option<String>,
) -> Candidates {
    if let Some(id) = explicit {
        return Candidates::Fixed(id.to_string());
    }
    for variable in PLATFORM_VARIABLES {
        if let Some(value) = env(variable)
            .map(|v| sanitize(&v))
            .filter(|v| !v.is_empty())
        {
            return Candidates::Slots {
                base: value,
                source: IdentitySource::Platform(variable),
                bare_first: true,
            };
        }
    }
    let host = hostname
        .map(|h| sanitize(&h))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "hubhost".to_string());
    Candidates::Slots {
        base: host,
        source: IdentitySource::HostSlot,
        bare_first: false,
    }
}

/// Keeps letters, digits, `.`, `_` and `-`; anything else becomes `-`, so the id is safe in
/// blob metadata and file names.
fn sanitize(raw: &str) -> String {
    raw.trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// This machine's host name (Linux `/proc`, else `HOSTNAME` / `COMPUTERNAME`).
pub fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

/// The folder of claim files: `HUBHOST_INSTANCE_LOCKS` if set, else one per user in the
/// temporary folder.
pub fn lock_folder() -> PathBuf {
    if let Some(dir) = std::env::var_os("HUBHOST_INSTANCE_LOCKS") {
        return PathBuf::from(dir);
    }
    // SAFETY: getuid(2) cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("hubhost-instances-{uid}"))
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "instance id {id} is in use by another process on this machine{holder} for the same \
         checkpoint store and consumer group; two live owners under one id would both process \
         the same partitions. Stop that process or choose another --instance-id"
    )]
    InUse { id: String, holder: String },
    #[error("no free instance id among the {SLOTS} slots from {first}")]
    NoFreeSlot { first: String },
    #[error("cannot claim an instance id in {folder}: {problem}")]
    Lock { folder: PathBuf, problem: String },
}

/// An id this process holds; the claim lasts as long as the value (and the process).
#[derive(Debug)]
pub struct InstanceIdentity {
    pub id: String,
    pub source: IdentitySource,
    _claims: Vec<File>,
}

/// Claims the first free id of `candidates` for every scope (one per checkpoint store and
/// consumer group the instance will own partitions in), with lock files in `folder`.
pub fn claim(
    candidates: &Candidates,
    scopes: &[String],
    folder: &Path,
) -> Result<InstanceIdentity, IdentityError> {
    let lock_error = |e: std::io::Error| IdentityError::Lock {
        folder: folder.to_path_buf(),
        problem: e.to_string(),
    };
    std::fs::create_dir_all(folder).map_err(lock_error)?;
    for (id, source) in candidates.ids() {
        match claim_all(&id, scopes, folder).map_err(lock_error)? {
            Ok(files) => {
                return Ok(InstanceIdentity {
                    id,
                    source,
                    _claims: files,
                });
            }
            Err(holder) if matches!(candidates, Candidates::Fixed(_)) => {
                return Err(IdentityError::InUse { id, holder });
            }
            Err(_) => continue,
        }
    }
    Err(IdentityError::NoFreeSlot {
        first: candidates.first(),
    })
}

/// Locks `id` in every scope, or none: `Ok(Err(holder))` when another process holds one. A
/// scope named twice is locked once: a second lock on the same file would wait on this
/// process's own.
fn claim_all(
    id: &str,
    scopes: &[String],
    folder: &Path,
) -> std::io::Result<Result<Vec<File>, String>> {
    let mut files = Vec::new();
    let scopes: std::collections::BTreeSet<&String> = scopes.iter().collect();
    for scope in scopes {
        let path = folder.join(format!("{}.lock", claim_name(scope, id)));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = holder_line(&path);
                let ours = holder.as_deref() == Some(&format!("pid {}", std::process::id()));
                if !(ours && lock_within(&file, OWN_LOCK_WAIT)?) {
                    return Ok(Err(holder
                        .map(|line| format!(" ({line})"))
                        .unwrap_or_default()));
                }
            }
            Err(TryLockError::Error(e)) => return Err(e),
        }
        // For a person (or the refusal) to see who holds it; read for a decision only to tell
        // this process's own lingering locks from another's (`OWN_LOCK_WAIT`).
        file.set_len(0)?;
        writeln!(file, "pid {}\nid {id}\nscope {scope}", std::process::id())?;
        files.push(file);
    }
    Ok(Ok(files))
}

/// How long a claim waits for a lock whose file names this very process as its holder. A
/// flock lasts until every descriptor of its open file is closed, and a child process that any
/// thread forks holds a copy of each descriptor until it execs: a lock this process just
/// dropped lingers that long. An instance restarted in the same process under its id (the test
/// kit's `LocalApp` runs instances in the test's process, beside the handler processes they
/// start) would otherwise find its own released id in use. A lock this process still holds
/// costs the wait, then is refused as before. The wait blocks the calling thread, as the file
/// operations around it do: a claim happens once, as an instance starts.
const OWN_LOCK_WAIT: Duration = Duration::from_secs(1);

/// The first line of a lock file (`pid N`), if it can be read.
fn holder_line(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.lines().next().map(str::to_string))
}

/// Tries `file`'s lock again every 10 ms for at most `wait`: whether it was taken.
fn lock_within(file: &File, wait: Duration) -> std::io::Result<bool> {
    let deadline = Instant::now() + wait;
    loop {
        std::thread::sleep(Duration::from_millis(10));
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {}
            Err(TryLockError::WouldBlock) => return Ok(false),
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// A file name for (scope, id): a digest, since scopes hold URLs and paths.
fn claim_name(scope: &str, id: &str) -> String {
    let digest = Sha256::digest(format!("{scope}\n{id}").as_bytes());
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_flag_wins_then_the_platform_then_the_host_name() {
        let platform = |k: &str| (k == "CONTAINER_NAME").then(|| "app-7f9".to_string());
        assert_eq!(
            candidates(Some("mine"), platform, Some("box".into())),
            Candidates::Fixed("mine".into())
        );
        let from_platform = candidates(None, platform, Some("box".into()));
        let ids: Vec<_> = from_platform.ids().take(3).collect();
        let source = IdentitySource::Platform("CONTAINER_NAME");
        assert_eq!(
            ids,
            [
                ("app-7f9".to_string(), source.clone()),
                ("app-7f9-1".to_string(), source.clone()),
                ("app-7f9-2".to_string(), source),
            ]
        );
        let both = |k: &str| Some(format!("{k}-value"));
        assert_eq!(
            candidates(None, both, None).first(),
            "WEBSITE_INSTANCE_ID-value"
        );
        let host = candidates(None, no_env, Some("my box\n".into()));
        assert_eq!(
            host.ids().take(2).map(|(id, _)| id).collect::<Vec<_>>(),
            ["my-box-0", "my-box-1"]
        );
        assert_eq!(
            candidates(None, |_| Some("  ".into()), None).first(),
            "hubhost-0"
        );
    }

    #[test]
    fn slots_are_taken_lowest_first_and_come_back_when_released() {
        let folder = tempfile::tempdir().unwrap();
        let slots = candidates(None, no_env, Some("box".into()));
        let scopes = ["store a|ns/hub/$default".to_string()];
        let first = claim(&slots, &scopes, folder.path()).unwrap();
        let second = claim(&slots, &scopes, folder.path()).unwrap();
        assert_eq!((first.id.as_str(), second.id.as_str()), ("box-0", "box-1"));
        drop(first);
        // A restart after the first instance died gets its id back.
        assert_eq!(claim(&slots, &scopes, folder.path()).unwrap().id, "box-0");
        // Another store or consumer group is another scope: box-0 is free there.
        let other = ["store b|ns/hub/$default".to_string()];
        assert_eq!(claim(&slots, &other, folder.path()).unwrap().id, "box-0");
    }

    #[test]
    fn a_scope_named_twice_is_claimed_once_not_waited_on() {
        let folder = tempfile::tempdir().unwrap();
        let slots = candidates(None, no_env, Some("box".into()));
        let scope = "store a|ns/hub/$default".to_string();
        let started = Instant::now();
        let claimed = claim(&slots, &[scope.clone(), scope], folder.path()).unwrap();
        assert_eq!(claimed.id, "box-0");
        assert!(started.elapsed() < OWN_LOCK_WAIT, "{:?}", started.elapsed());
    }

    #[test]
    fn an_id_this_process_released_is_claimed_again_while_another_thread_forks() {
        // Without the wait for its own lingering locks, 199 of these 300 claims found the id in
        // use here (each right after the last one's release), with a thread starting `true` in
        // a loop.
        let forking = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let spawner = {
            let forking = forking.clone();
            std::thread::spawn(move || {
                while forking.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = std::process::Command::new("true").status();
                }
            })
        };
        let folder = tempfile::tempdir().unwrap();
        let scopes = ["s1".to_string(), "s2".to_string()];
        let fixed = candidates(Some("i1"), no_env, None);
        let claims: Vec<_> = (0..300)
            .map(|_| claim(&fixed, &scopes, folder.path()).map(|identity| identity.id))
            .collect();
        forking.store(false, std::sync::atomic::Ordering::Relaxed);
        spawner.join().unwrap();
        let refused: Vec<_> = claims.iter().filter(|c| c.is_err()).collect();
        assert!(
            refused.is_empty(),
            "{} of 300 refused: {:?}",
            refused.len(),
            refused.first()
        );
    }

    #[test]
    fn a_fixed_id_in_use_is_refused_naming_the_holder() {
        let folder = tempfile::tempdir().unwrap();
        let scopes = ["s1".to_string(), "s2".to_string()];
        let fixed = candidates(Some("i1"), no_env, None);
        let held = claim(&fixed, &scopes[1..], folder.path()).unwrap();
        let refused = claim(&fixed, &scopes, folder.path()).unwrap_err();
        let text = refused.to_string();
        assert!(matches!(refused, IdentityError::InUse { ref id, .. } if id == "i1"));
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        drop(held);
        assert_eq!(claim(&fixed, &scopes, folder.path()).unwrap().id, "i1");
    }
}
