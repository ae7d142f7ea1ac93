//! Azurite's blob service as a child process: the local Azure Storage the checkpoint store,
//! the reference app and the Python SDK's checkpoint store all talk to.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::{free_port, wait_for_port};
use crate::tools::azurite_bin;

/// A real Azurite blob service on a free port, killed on drop.
pub struct Azurite {
    child: Child,
    pub port: u16,
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
            location: location.to_path_buf(),
            _dir: None,
        }
    }

    pub fn connection_string(&self) -> String {
        format!(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={};BlobEndpoint=http://127.0.0.1:{}/devstoreaccount1;",
            hubhost_storage::connection::DEV_KEY,
            self.port
        )
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
