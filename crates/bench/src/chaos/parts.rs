//! The parts a chaos run breaks and mends, each a real process or a real directory: the event
//! hub (killed and started again on its data), the store (Azurite stopped and started, or a
//! directory made read-only), the producer (the runner's own, which remembers what the hub
//! acknowledged), and the read-back of every event the hub holds at the end.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use azure_messaging_eventhubs::models::EventData;
use azure_messaging_eventhubs::{
    EventDataBatchOptions, OpenReceiverOptions, StartLocation, StartPosition,
};
use futures::StreamExt;

use super::ChaosError;
use super::audit::{HubEvent, fingerprint};
use hubhost_app::fleet::{Fleet, SENSORS};
use hubhost_eventhubs::{EventHubTarget, close_quietly, on_sending_thread};

pub const HUB: &str = "sensors";
/// The emulator's well-known development key, which `hubhost hub` accepts by default.
const KEY: &str = "SAS_KEY_VALUE";

fn free_port() -> Result<u16, ChaosError> {
    hubhost_testkit::try_free_port().map_err(|e| ChaosError::Part(format!("no free port: {e}")))
}

fn wait_for_port(port: u16, what: &str, child: &mut Child) -> Result<(), ChaosError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(ChaosError::Part(format!("{what} exited: {status}")));
        }
        if Instant::now() > deadline {
            return Err(ChaosError::Part(format!(
                "{what} did not listen within 60 s"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, signal) };
}

/// `hubhost hub` serving the reference hubs (`sensors` with its `archive` group, `alarms`)
/// from a data directory that outlives the process.
pub struct HubProcess {
    child: Option<Child>,
    port: u16,
    data_dir: PathBuf,
    pub connection_string: String,
}

impl HubProcess {
    pub fn start(data_dir: &Path) -> Result<Self, ChaosError> {
        let port = free_port()?;
        let mut hub = HubProcess {
            child: None,
            port,
            data_dir: data_dir.to_path_buf(),
            connection_string: format!(
                "Endpoint=sb://localhost:{port};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY};UseDevelopmentEmulator=true"
            ),
        };
        hub.restart()?;
        Ok(hub)
    }

    /// Starts the hub again on the same port and data.
    pub fn restart(&mut self) -> Result<(), ChaosError> {
        let exe = crate::hubhost_exe().map_err(|e| ChaosError::Part(e.to_string()))?;
        let mut child = hubhost_process::child::std_command(exe)
            .args(["hub", "--port", &self.port.to_string(), "--data-dir"])
            .arg(&self.data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| ChaosError::Part(format!("hubhost hub: {e}")))?;
        wait_for_port(self.port, "hubhost hub", &mut child)?;
        self.child = Some(child);
        Ok(())
    }

    pub fn kill_9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn target(&self) -> Result<EventHubTarget, ChaosError> {
        EventHubTarget::parse(&self.connection_string, Some(HUB))
            .map_err(|e| ChaosError::Part(e.to_string()))
    }
}

impl Drop for HubProcess {
    fn drop(&mut self) {
        self.kill_9();
    }
}

/// The store the pool shares (checkpoints and the app's blobs), and how to take it away.
pub enum Store {
    /// A local directory; an outage remounts it read-only (as root) or takes the write bits
    /// away (as anyone else).
    Directory {
        path: PathBuf,
        readonly_mount: bool,
        broken: bool,
    },
    /// Azurite, stopped (SIGTERM, so it saves what it acknowledged) and started again on its
    /// data.
    Azurite {
        program: PathBuf,
        location: PathBuf,
        port: u16,
        child: Option<Child>,
    },
}

impl Store {
    pub fn directory(path: &Path) -> Result<Self, ChaosError> {
        std::fs::create_dir_all(path).map_err(|e| ChaosError::Part(e.to_string()))?;
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        Ok(Store::Directory {
            path: path.to_path_buf(),
            readonly_mount: root,
            broken: false,
        })
    }

    pub fn azurite(program: &Path, location: &Path) -> Result<Self, ChaosError> {
        std::fs::create_dir_all(location).map_err(|e| ChaosError::Part(e.to_string()))?;
        let mut store = Store::Azurite {
            program: program.to_path_buf(),
            location: location.to_path_buf(),
            port: free_port()?,
            child: None,
        };
        store.restore()?;
        Ok(store)
    }

    pub fn name(&self) -> &'static str {
        match self {
            Store::Directory { .. } => "directory",
            Store::Azurite { .. } => "Azurite",
        }
    }

    /// What `AzureWebJobsStorage` says to reach it.
    pub fn setting(&self) -> String {
        match self {
            Store::Directory { path, .. } => path.display().to_string(),
            Store::Azurite { port, .. } => format!(
                "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={};BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;",
                hubhost_storage::connection::DEV_KEY
            ),
        }
    }

    /// Takes the store away.
    pub fn break_it(&mut self) -> Result<(), ChaosError> {
        match self {
            Store::Directory {
                path,
                readonly_mount,
                broken,
            } => {
                *broken = true;
                set_writable(path, *readonly_mount, false)
            }
            Store::Azurite { child, .. } => {
                if let Some(mut c) = child.take() {
                    signal(&c, libc::SIGTERM);
                    let deadline = Instant::now() + Duration::from_secs(15);
                    while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    let _ = c.kill();
                    let _ = c.wait();
                }
                Ok(())
            }
        }
    }

    /// Gives the store back.
    pub fn restore(&mut self) -> Result<(), ChaosError> {
        match self {
            Store::Directory {
                path,
                readonly_mount,
                broken,
            } => {
                *broken = false;
                set_writable(path, *readonly_mount, true)
            }
            Store::Azurite {
                program,
                location,
                port,
                child,
            } => {
                let mut c = std::process::Command::new(program.as_path())
                    .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
                    .arg("--location")
                    .arg(location.as_path())
                    .args([
                        "--silent",
                        "--disableTelemetry",
                        "--skipApiVersionCheck",
                        "--loose",
                    ])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| ChaosError::Part(format!("{}: {e}", program.display())))?;
                wait_for_port(*port, "Azurite", &mut c)?;
                *child = Some(c);
                Ok(())
            }
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        match self {
            Store::Directory { broken: true, .. } => {
                let _ = self.restore();
            }
            Store::Azurite { child: Some(c), .. } => {
                let _ = c.kill();
                let _ = c.wait();
            }
            _ => {}
        }
    }
}

/// A directory store taken away (`writable` false) or given back: by a read-only mount over
/// it, or by its directories' write bits.
fn set_writable(path: &Path, by_mount: bool, writable: bool) -> Result<(), ChaosError> {
    match (by_mount, writable) {
        (true, false) => mount_read_only_over(path),
        (true, true) => unmount(path),
        (false, writable) => chmod_tree(path, writable),
    }
}

fn c_path(path: &Path) -> Result<std::ffi::CString, ChaosError> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| ChaosError::Part(format!("{} holds a NUL byte", path.display())))
}

fn os_error(what: &str, path: &Path) -> ChaosError {
    ChaosError::Part(format!(
        "{what} {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    ))
}

/// Covers `path` with a read-only copy of itself, in one step: the copy is made read-only
/// before it is attached (Linux's mount API, 5.12 and later). `mount --bind` followed by a
/// read-only remount fails under load: between the two, a writer opens a file on the new
/// mount, and a mount with a file open for writing cannot become read-only.
fn mount_read_only_over(path: &Path) -> Result<(), ChaosError> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    const MOUNT_ATTR_RDONLY: u64 = 1;
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
    /// `struct mount_attr` of linux/mount.h.
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    let target = c_path(path)?;
    let empty = c"";
    // SAFETY: the path pointers are NUL-terminated strings that outlive the calls, the
    // attribute struct is the kernel's layout with its size passed, and the descriptor
    // open_tree returns is closed exactly once below.
    unsafe {
        let fd = libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            target.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        );
        if fd < 0 {
            return Err(os_error("open_tree", path));
        }
        let fd = fd as libc::c_int;
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        let set = libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        );
        let moved = (set == 0).then(|| {
            libc::syscall(
                libc::SYS_move_mount,
                fd,
                empty.as_ptr(),
                libc::AT_FDCWD,
                target.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        });
        let error = (moved != Some(0)).then(|| {
            os_error(
                if set != 0 {
                    "mount_setattr"
                } else {
                    "move_mount"
                },
                path,
            )
        });
        libc::close(fd);
        error.map_or(Ok(()), Err)
    }
}

/// Takes the read-only copy off `path` (lazily: files opened through it stay usable).
fn unmount(path: &Path) -> Result<(), ChaosError> {
    let target = c_path(path)?;
    // SAFETY: a NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } == 0 {
        Ok(())
    } else {
        Err(os_error("umount", path))
    }
}

/// Every directory under `root` writable again, or not.
fn chmod_tree(root: &Path, writable: bool) -> Result<(), ChaosError> {
    use std::os::unix::fs::PermissionsExt;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mode = if writable { 0o755 } else { 0o555 };
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
            .map_err(|e| ChaosError::Part(format!("{}: {e}", dir.display())))?;
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    Ok(())
}

/// Whether this machine can take a directory store away (a read-only bind mount needs mount
/// rights; without root the write bits do it).
pub fn can_break_a_directory(probe: &Path) -> Result<(), ChaosError> {
    let mut store = Store::directory(probe)?;
    store.break_it()?;
    let refused = std::fs::write(probe.join("probe"), b"x").is_err();
    store.restore()?;
    let _ = std::fs::remove_file(probe.join("probe"));
    if refused {
        Ok(())
    } else {
        Err(ChaosError::Part(
            "a read-only directory still took a write".into(),
        ))
    }
}

/// What the producer has done so far.
#[derive(Default)]
pub struct ProducerTally {
    /// Fingerprints of every event the hub acknowledged.
    pub acknowledged: Mutex<HashSet<u64>>,
    pub acknowledged_events: AtomicU64,
    /// Events whose send failed or timed out (the hub may or may not hold them).
    pub failed_events: AtomicU64,
    pub poison_sent: AtomicU64,
}

/// The runner's producer: the fleet's readings, a home's six at a time, into the home's
/// partition, at `rate` events per second; one poison event in every 300 sends. A failed send
/// is not repeated (the hub may hold it or not; either way the check uses what the hub holds)
/// and the client is opened again, so the producer outlives a killed hub.
pub struct Producer {
    stop: Arc<AtomicBool>,
    pub tally: Arc<ProducerTally>,
    done: tokio::task::JoinHandle<Option<()>>,
}

impl Producer {
    pub fn start(target: EventHubTarget, rate: u32, seed: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(ProducerTally::default());
        let (s, t) = (stop.clone(), tally.clone());
        let done = tokio::spawn(on_sending_thread(move || produce(target, rate, seed, s, t)));
        Producer { stop, tally, done }
    }

    pub async fn stop(self) -> Arc<ProducerTally> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.done.await;
        self.tally
    }
}

async fn produce(
    target: EventHubTarget,
    rate: u32,
    seed: u64,
    stop: Arc<AtomicBool>,
    tally: Arc<ProducerTally>,
) {
    const HOMES: u32 = 2_000;
    let fleet = Fleet {
        homes: HOMES,
        partitions: 16,
        seed,
    };
    let start = chrono::Utc::now();
    let started = Instant::now();
    let per_send = SENSORS.len() as f64;
    let mut producer = None;
    let mut sends = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let due = Duration::from_secs_f64(sends as f64 * per_send / f64::from(rate.max(1)));
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let home = (sends % u64::from(HOMES)) as u32;
        let minute = start + chrono::Duration::minutes((sends / u64::from(HOMES)) as i64);
        let home_id = Fleet::home_id(home);
        let partition = fleet.partition_of(&home_id).to_string();
        let bodies: Vec<String> = if sends % 300 == 299 {
            vec![format!(r#"{{"chaos":"poison","send":{sends}}}"#)]
        } else {
            (0..SENSORS.len())
                .map(|s| fleet.reading(&home_id, s, minute))
                .collect()
        };
        sends += 1;
        if producer.is_none() {
            match tokio::time::timeout(Duration::from_secs(10), target.producer()).await {
                Ok(Ok(p)) => producer = Some(p),
                _ => {
                    tally
                        .failed_events
                        .fetch_add(bodies.len() as u64, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            }
        }
        let client = producer.as_ref().expect("opened above");
        let sent = tokio::time::timeout(Duration::from_secs(10), async {
            let batch = client
                .create_batch(Some(EventDataBatchOptions {
                    partition_id: Some(partition.clone()),
                    ..Default::default()
                }))
                .await?;
            for body in &bodies {
                let event = EventData::builder()
                    .with_body(body.as_bytes().to_vec())
                    .build();
                batch.try_add_event_data(event, None)?;
            }
            client.send_batch(batch, None).await
        })
        .await;
        match sent {
            Ok(Ok(())) => {
                let mut acknowledged = tally.acknowledged.lock().expect("tally lock");
                for body in &bodies {
                    acknowledged.insert(fingerprint(body.as_bytes()));
                }
                tally
                    .acknowledged_events
                    .fetch_add(bodies.len() as u64, Ordering::Relaxed);
                if bodies.len() == 1 {
                    tally.poison_sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {
                tally
                    .failed_events
                    .fetch_add(bodies.len() as u64, Ordering::Relaxed);
                if let Some(p) = producer.take() {
                    close_quietly("producer", p.close()).await;
                }
            }
        }
    }
    if let Some(p) = producer.take() {
        close_quietly("producer", p.close()).await;
    }
}

/// Every event the hub holds in each partition, read from the start with the SDK's consumer.
pub async fn read_hub(target: &EventHubTarget) -> Result<Vec<HubEvent>, ChaosError> {
    let ends = target
        .partition_ends()
        .await
        .map_err(|e| ChaosError::Part(e.to_string()))?;
    let target = target.clone();
    on_sending_thread(move || async move {
        let consumer = target
            .consumer("$Default")
            .await
            .map_err(|e| ChaosError::Part(e.to_string()))?;
        let mut events = Vec::new();
        for end in ends {
            if end.last_sequence_number < 0 {
                continue;
            }
            let receiver = consumer
                .open_receiver_on_partition(
                    end.partition_id.clone(),
                    Some(OpenReceiverOptions {
                        start_position: Some(StartPosition {
                            location: StartLocation::Earliest,
                            inclusive: true,
                        }),
                        prefetch: Some(1000),
                        ..Default::default()
                    }),
                )
                .await
                .map_err(|e| ChaosError::Part(format!("reading the hub: {e}")))?;
            let mut stream = Box::pin(receiver.stream_events());
            let mut seen: BTreeMap<i64, ()> = BTreeMap::new();
            while seen.len() as i64 <= end.last_sequence_number {
                let next = tokio::time::timeout(Duration::from_secs(30), stream.next()).await;
                let Ok(Some(Ok(event))) = next else {
                    return Err(ChaosError::Part(format!(
                        "reading partition {} of the hub stalled at {} of {} events",
                        end.partition_id,
                        seen.len(),
                        end.last_sequence_number + 1
                    )));
                };
                let Some(sequence) = event.sequence_number() else {
                    continue;
                };
                if seen.insert(sequence, ()).is_some() {
                    continue;
                }
                events.push(HubEvent {
                    partition: end.partition_id.clone(),
                    sequence,
                    enqueued: event.enqueued_time().map(chrono::DateTime::from),
                    body: event
                        .event_data()
                        .body()
                        .map(|b| b.to_vec())
                        .unwrap_or_default(),
                });
            }
            drop(stream);
            close_quietly("receiver", receiver.close()).await;
        }
        close_quietly("consumer", consumer.close()).await;
        Ok(events)
    })
    .await
    .unwrap_or_else(|| Err(ChaosError::Part("the hub reader panicked".into())))
}
