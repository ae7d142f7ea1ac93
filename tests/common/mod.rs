//! Helpers shared by the integration tests: real `hubhost serve` processes and a real Azurite.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a command run by a test may take before it counts as hung.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(300);

/// Runs `command` to completion (stdin closed, stdout and stderr captured) within `limit`. A
/// command still running then is killed and the test fails with what it printed, so a hang
/// is a failure with its evidence instead of a CI run that never ends.
pub fn output_within(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?} does not start: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    let Some(status) = status else {
        panic!(
            "{command:?} did not finish within {limit:?} and was killed.\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        );
    };
    Output {
        status,
        stdout,
        stderr,
    }
}

/// Waits for `child` to exit within `limit`; one still running then is killed and the test
/// fails, naming `what`.
pub fn wait_within(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {limit:?} and was killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not start listening on {port}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A `hubhost serve` child process, killed on drop. Its stderr goes to a file.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let log = dir.path().join("stderr.log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hubhost"));
        cmd.args(["serve", "--port", &port.to_string()])
            .args(args)
            .env_remove("AzureWebJobsStorage")
            .env_remove("HUBHOST_STORAGE")
            .env_remove("FUNCTIONS_APP_ROOT_PATH")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("hubhost binary starts");
        let mut server = Server {
            child,
            port,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("hubhost serve exited with {status}: {}", server.stderr());
            }
            assert!(Instant::now() < deadline, "hubhost serve did not start");
            std::thread::sleep(Duration::from_millis(25));
        }
        server
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub async fn post(&self, function: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let resp = reqwest::Client::new()
            .post(format!("{}/{function}", self.url()))
            .header("Content-Type", "application/json; charset=utf-8")
            .body(body)
            .send()
            .await
            .expect("request reaches the handler");
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let bytes = resp.bytes().await.unwrap();
        assert!(
            content_type.starts_with("application/json"),
            "status {status}: content type {content_type:?}, body {:?}",
            String::from_utf8_lossy(&bytes)
        );
        (
            status,
            serde_json::from_slice(&bytes).expect("the handler always answers JSON"),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tool the test command installs under the repository (`relative`), or the path in the
/// environment variable `override_var`.
fn installed_tool(override_var: &str, relative: &str, what: &str) -> PathBuf {
    if let Ok(bin) = std::env::var(override_var) {
        return PathBuf::from(bin);
    }
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    assert!(
        bin.exists(),
        "{what} is not installed at {}: run scripts/test.sh (it installs it), or set {override_var}",
        bin.display()
    );
    bin
}

/// Where the test command installed Azurite (scripts/test.sh), or HUBHOST_AZURITE_BIN.
pub fn azurite_bin() -> PathBuf {
    installed_tool(
        "HUBHOST_AZURITE_BIN",
        ".tools/node_modules/.bin/azurite-blob",
        "Azurite",
    )
}

/// The `node_modules` where the test command installed `playwright-core` (scripts/test.sh),
/// or HUBHOST_NODE_MODULES.
pub fn node_modules() -> PathBuf {
    let modules = installed_tool(
        "HUBHOST_NODE_MODULES",
        ".tools/node_modules",
        "The test tools' node_modules",
    );
    assert!(
        modules.join("playwright-core").exists(),
        "playwright-core is not installed in {}: run scripts/test.sh (it installs it)",
        modules.display()
    );
    modules
}

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
            hubhost::storage::connection::DEV_KEY,
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

/// The Python that has the official Azure SDK packages (scripts/test.sh makes the virtualenv),
/// or HUBHOST_PYTHON.
pub fn python() -> PathBuf {
    installed_tool(
        "HUBHOST_PYTHON",
        ".tools/venv/bin/python",
        "The Python virtualenv",
    )
}

/// Runs a Python script from tests/python with arguments, to completion, whatever its exit.
pub fn python_output(script: &str, args: &[&str]) -> Output {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    output_within(Command::new(python()).arg(path).args(args), COMMAND_LIMIT)
}

/// Runs a Python script from tests/python with arguments; returns its stdout parsed as JSON.
pub fn python_json(script: &str, args: &[&str]) -> Value {
    let out = python_output(script, args);
    assert!(
        out.status.success(),
        "{script} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{script} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Runs the hubhost binary to completion; returns (exit code, stdout, stderr).
pub fn hubhost(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = output_within(
        Command::new(env!("CARGO_BIN_EXE_hubhost"))
            .args(args)
            .envs(env.iter().copied())
            .env_remove("HUBHOST_STORAGE")
            .env_remove("AzureWebJobsStorage"),
        COMMAND_LIMIT,
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The well-known key of the official emulator, which `hubhost hub` accepts by default.
pub const KEY: &str = "SAS_KEY_VALUE";

/// A `hubhost hub` child process on a free port, killed on drop.
pub struct Hub {
    pub child: Child,
    pub port: u16,
}

impl Hub {
    pub fn start(data_dir: Option<&Path>) -> Hub {
        Self::start_on(free_port(), data_dir)
    }

    pub fn start_on(port: u16, data_dir: Option<&Path>) -> Hub {
        Self::start_serving(port, data_dir, &[], &[])
    }

    /// In memory, on a free port, serving `hubs` (`name:partitions`) instead of the default.
    pub fn start_serving_hubs(hubs: &[&str]) -> Hub {
        Self::start_serving(free_port(), None, hubs, &[])
    }

    /// In memory, on a free port, the default hubs, with more `hubhost hub` flags.
    pub fn start_with_flags(flags: &[&str]) -> Hub {
        Self::start_serving(free_port(), None, &[], flags)
    }

    /// On `port`, its data in `data_dir` (or memory), serving `hubs` (or the default), with more
    /// `hubhost hub` flags.
    pub fn start_serving(port: u16, data_dir: Option<&Path>, hubs: &[&str], flags: &[&str]) -> Hub {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hubhost"));
        cmd.args(["hub", "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(if std::env::var_os("HUBHOST_TEST_HUB_LOG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        match data_dir {
            Some(dir) => cmd.arg("--data-dir").arg(dir),
            None => cmd.arg("--in-memory"),
        };
        for hub in hubs {
            cmd.args(["--hub", hub]);
        }
        cmd.args(flags);
        let child = cmd.spawn().expect("hubhost starts");
        wait_for_port(port, "hubhost hub");
        Hub { child, port }
    }

    /// The connection string users write for the official emulator, with this hub's port.
    pub fn connection_string(&self, key: &str) -> String {
        format!(
            "Endpoint=sb://localhost:{};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={key};UseDevelopmentEmulator=true;",
            self.port
        )
    }

    pub fn python(&self, op: &str, args: &[&str]) -> Value {
        let cs = self.connection_string(KEY);
        let mut all = vec![cs.as_str(), "sensors", op];
        all.extend_from_slice(args);
        python_json("eventhub_peer.py", &all)
    }

    pub fn kill_9(&mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.kill_9();
    }
}

/// Copies a folder tree of files and folders.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
