//! Child processes for tests: bounded in time, on free loopback ports, and the hubhost
//! executables found beside the test that runs them.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

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

/// A child process of a test's, killed and reaped when the test ends, failed or not: a test that
/// panics leaves nothing running beside the tests after it. Derefs to the [`Child`].
pub struct KilledOnDrop(pub Child);

impl KilledOnDrop {
    /// Kills the process now (it may have exited already) and reaps it.
    pub fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for KilledOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KilledOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits for `child` to exit within `limit`; one still running then is killed and the test
/// fails, naming `what`.
pub fn wait_within(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    try_wait_within(child, limit)
        .unwrap_or_else(|| panic!("{what} did not exit within {limit:?} and was killed"))
}

/// Waits for `child` to exit within `limit`; one still running then is killed and `None`
/// returned, for a test that has more to say about it (its log).
pub fn try_wait_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The fixed loopback ports a test holds while it runs: released on drop.
///
/// Most tests listen on free ports ([`free_port`]), but the documentation's commands use the
/// ports the docs name (the hub's 5672, the page's 7071, …) and one pool test needs the
/// emulator's default 5672. `scripts/test.sh` runs two test binaries at once, so two tests of
/// different processes may want the same port: they take turns on a lock file every process
/// of this machine sees, then wait for the ports to be free of anything else.
#[must_use = "the ports are held until this is dropped"]
pub struct FixedPorts {
    _lock: std::fs::File,
}

/// How long [`hold_fixed_ports`] waits for another test to finish with the fixed ports: the
/// longest holder, the pool test beside the SDK processors at their 30 s cycles, takes minutes.
pub const FIXED_PORTS_TURN: Duration = Duration::from_secs(15 * 60);

/// Takes the machine-wide turn for fixed ports (waiting up to [`FIXED_PORTS_TURN`] for another
/// test to finish with them), then waits up to 30 s for each of `ports` to be free; the test
/// fails, naming what it waited for, if either wait runs out.
pub fn hold_fixed_ports(ports: &[u16]) -> FixedPorts {
    let within = FIXED_PORTS_TURN;
    let path = std::env::temp_dir().join("hubhost-tests-fixed-ports.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{} cannot be opened: {e}", path.display()));
    let deadline = Instant::now() + within;
    loop {
        match lock.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!(
                "another test held the fixed ports {ports:?} ({}) for over {within:?}: {e}",
                path.display()
            ),
        }
    }
    for &port in ports {
        let free_by = Instant::now() + Duration::from_secs(30);
        while std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < free_by,
                "127.0.0.1:{port} is still taken after 30 s; this test needs it"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    FixedPorts { _lock: lock }
}

/// A loopback port nobody listens on now, for a process a test starts: chosen below the
/// kernel's ephemeral range, so no outgoing connection takes it before the process binds it
/// (`hubhost_process::child::free_listen_port`).
pub fn try_free_port() -> std::io::Result<u16> {
    hubhost_process::child::free_listen_port()
}

/// [`try_free_port`], for tests.
pub fn free_port() -> u16 {
    try_free_port().expect("a free loopback port")
}

/// `GET path` on loopback `port` over HTTP/1.0: the body, or `None` when nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    http_get_with(port, path, "")
}

/// [`http_get`] with a bearer token, as a hub's admin endpoint requires.
pub fn http_get_bearer(port: u16, path: &str, token: &str) -> Option<String> {
    http_get_with(port, path, &format!("Authorization: Bearer {token}\r\n"))
}

fn http_get_with(port: u16, path: &str, headers: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: localhost\r\n{headers}\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
}

/// One HTTP/1.1 request, `method` to `url` + `query` with `body`, as a client sends it: the
/// status, the header block and the body.
pub fn http_request(url: &str, method: &str, query: &str, body: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = std::net::TcpStream::connect(authority).expect("the server listens");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a timeout");
    write!(
        stream,
        "{method} /{path}{query} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("the request is written");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("the response is read");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// A number of a `/proc/{pid}/status` text: `VmRSS` (in KiB), `Threads`, `THP_enabled`, …
pub fn status_number(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// A number of process `pid`'s `/proc/{pid}/status` (see [`status_number`]).
pub fn process_status_number(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_number(&status, field)
}

/// VmRSS of process `pid`, in KiB.
pub fn resident_kib(pid: u32) -> Option<u64> {
    process_status_number(pid, "VmRSS")
}

/// Whether process `pid` may get transparent huge pages (`THP_enabled` of its
/// `/proc/{pid}/status`, Linux 5.0 and later); `None` where the kernel does not say.
pub fn transparent_huge_pages(pid: u32) -> Option<bool> {
    match process_status_number(pid, "THP_enabled")? {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// Waits up to 30 s until something listens on loopback `port`; the test fails otherwise.
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

/// The executable `name` of this workspace (`hubhost`, `hubhost-app`, `hubhost-bench`): in
/// `HUBHOST_BIN_DIR` if set, else in the Cargo target folder the running test or program was
/// built in (a test runs from `target/<profile>/deps/`, the executables sit one level up), else
/// on `PATH`. A test that needs one that is not built fails saying how to build it.
pub fn binary(name: &str) -> PathBuf {
    find_binary(name).unwrap_or_else(|| {
        panic!(
            "the {name} executable is not built: run `cargo build --workspace` (or set HUBHOST_BIN_DIR to the folder that holds it)"
        )
    })
}

/// Removes from `command` the variables `cargo test` sets for the test binary running it
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME` and the rest of its package's, `CARGO_BIN_EXE_…`,
/// `OUT_DIR`): a user's shell has none of them, and a build Cargo starts with them differs
/// from one started without. Some build scripts ask Cargo to run them again when such a
/// variable changes (`ring`'s does), so a `cargo build` started from a test and one started
/// from a shell would each compile that crate and everything above it again, back and forth,
/// in one target folder. `CARGO` (which Cargo to run) and `CARGO_HOME` stay.
pub fn without_test_run_env(command: &mut Command) -> &mut Command {
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(set_by_cargo_test) {
            command.env_remove(key);
        }
    }
    command
}

/// Whether `cargo test` sets the variable `key` for the test binary it runs (see
/// [`without_test_run_env`]).
pub fn set_by_cargo_test(key: &str) -> bool {
    key == "OUT_DIR"
        || key.starts_with("CARGO_PKG_")
        || key.starts_with("CARGO_BIN_EXE_")
        || matches!(
            key,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
        )
}

/// Builds the workspace's example packages (among them `names`; the first must have an
/// executable of its own name) and returns the folder their executables are in. `cargo test`
/// builds a package's executable only for that package's own tests, and the examples have none,
/// so a test that runs one builds it.
///
/// It builds every target of the workspace (`cargo build --workspace --all-targets`), a no-op
/// once `scripts/test.sh` has built them: Cargo unifies a dependency's features over the
/// packages and targets a build selects, so `cargo build -p NAME` would compile much of the
/// dependency graph again with the features of that one package (and again for each other
/// selection), where the whole workspace's selection is the one the test build already made
/// (started without the test's own variables, as `scripts/test.sh` starts it:
/// [`without_test_run_env`]).
pub fn build_examples(names: &[&str]) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    without_test_run_env(&mut build)
        .args(["build", "-q", "--workspace", "--all-targets"])
        .current_dir(crate::repository());
    let status = build.status().expect("cargo runs");
    assert!(status.success(), "the workspace's examples {names:?} build");
    binary(names[0])
        .parent()
        .expect("an executable's folder")
        .to_path_buf()
}

/// [`binary`], or `None` where it is nowhere to be found.
pub fn find_binary(name: &str) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("HUBHOST_BIN_DIR") {
        let path = Path::new(&dir).join(name);
        return path.is_file().then_some(path);
    }
    if let Ok(me) = std::env::current_exe() {
        for dir in me.ancestors().skip(1).take(2) {
            let path = dir.join(name);
            if path.is_file() {
                return Some(path);
            }
        }
    }
    on_path(name)
}

/// The file `name` in the first folder of `PATH` that has one.
pub(crate) fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    })
}

/// Runs the `hubhost` command line to completion; returns (exit code, stdout, stderr).
pub fn hubhost(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = output_within(
        Command::new(binary("hubhost"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_field_is_read_by_its_whole_name() {
        let status =
            "Name:\thubhost\nVmRSSx:\t1 kB\nVmRSS:\t  48200 kB\nThreads:\t9\nTHP_enabled:\t0\n";
        assert_eq!(status_number(status, "VmRSS"), Some(48200));
        assert_eq!(status_number(status, "Threads"), Some(9));
        assert_eq!(status_number(status, "THP_enabled"), Some(0));
        assert_eq!(status_number(status, "VmSwap"), None);
    }
}
