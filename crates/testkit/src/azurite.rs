//! Azurite as a child process: its blob service, the local Azure Storage the checkpoint store,
//! the reference app and the Python SDK's checkpoint store all talk to, and where queue and
//! table outputs are tested, its queue and table services beside it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::{free_port, wait_for_port};
use crate::tools::azurite_bin;

/// A real Azurite blob service on a free port, killed on drop.
pub struct Azurite {
    child: Child,
    pub port: u16,
    /// The queue and table services' ports, when they run ([`Azurite::start_all`]).
    pub queue_port: Option<u16>,
    pub table_port: Option<u16>,
    pub location: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Azurite {
    pub fn start() -> Azurite {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().to_path_buf();
        let mut a = Azurite::start_at(&location, free_port());
        a._dir = Some(dir);
        a
    }

    /// Azurite's blob, queue and table services, each on a free port, for queue and table
    /// outputs.
    pub fn start_all() -> Azurite {
        let dir = tempfile::tempdir().unwrap();
        let (blob, queue, table) = (free_port(), free_port(), free_port());
        let child = Command::new(azurite_bin().with_file_name("azurite"))
            .args(["--blobHost", "127.0.0.1", "--blobPort", &blob.to_string()])
            .args([
                "--queueHost",
                "127.0.0.1",
                "--queuePort",
                &queue.to_string(),
            ])
            .args([
                "--tableHost",
                "127.0.0.1",
                "--tablePort",
                &table.to_string(),
            ])
            .args(["--location", dir.path().to_str().unwrap()])
            .args([
                "--silent",
                "--disableTelemetry",
                "--skipApiVersionCheck",
                "--loose",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("azurite starts");
        for port in [blob, queue, table] {
            wait_for_port(port, "Azurite");
        }
        Azurite {
            child,
            port: blob,
            queue_port: Some(queue),
            table_port: Some(table),
            location: dir.path().to_path_buf(),
            _dir: Some(dir),
        }
    }

    /// Starts Azurite keeping its data in `location`, so that a restart keeps the blobs.
    pub fn start_at(location: &Path, port: u16) -> Azurite {
        Azurite::start_with(location, port, &[])
    }

    /// Azurite with extra flags, e.g. `--oauth basic --cert … --key …` (HTTPS and bearer tokens).
    pub fn start_with(location: &Path, port: u16, extra: &[&str]) -> Azurite {
        let child = Command::new(azurite_bin())
            .args(extra)
            .args([
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                &port.to_string(),
                "--location",
                location.to_str().unwrap(),
                "--silent",
                "--disableTelemetry",
                "--skipApiVersionCheck",
                "--loose",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("azurite starts");
        wait_for_port(port, "Azurite");
        Azurite {
            child,
            port,
            queue_port: None,
            table_port: None,
            location: location.to_path_buf(),
            _dir: None,
        }
    }

    /// The account's connection string, with every service that runs.
    pub fn connection_string(&self) -> String {
        let mut text = format!(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={};BlobEndpoint=http://127.0.0.1:{}/devstoreaccount1;",
            hubhost_storage::connection::DEV_KEY,
            self.port
        );
        for (service, port) in [("Queue", self.queue_port), ("Table", self.table_port)] {
            if let Some(port) = port {
                text.push_str(&format!(
                    "{service}Endpoint=http://127.0.0.1:{port}/devstoreaccount1;"
                ));
            }
        }
        text
    }

    /// Stops Azurite gracefully (SIGTERM), so that it saves its data: unlike Azure, Azurite
    /// keeps blob metadata in memory and persists it on an interval, so SIGKILL would lose
    /// acknowledged writes.
    pub fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
