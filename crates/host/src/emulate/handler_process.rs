//! The custom handler process, started, probed, restarted and stopped the way the host does:
//! host.json `customHandler.description` (executable, arguments, working directory), the
//! port and worker variables in its environment, `GET /` until anything answers, SIGTERM then
//! SIGKILL. It dies with the emulator, even after `kill -9` (see `hubhost_process::child`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::{AppSettings, EmulateError, HandlerStartProblem, HostJsonProblem};
use crate::invoker::Invoker;
use hubhost_functions::function_app::FunctionApp;

/// The host's `customHandler.initializationTimeout` default (`HttpWorkerOptions`).
const HANDLER_START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a stopped handler's process group has to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// The custom handler process, started and restarted the way the host does.
pub(super) struct HandlerProcess {
    program: PathBuf,
    arguments: Vec<String>,
    working_directory: PathBuf,
    env: Vec<(String, String)>,
    /// The port the handler is told to listen on.
    port: u16,
    /// host.json's `customHandler.port`: the handler always gets this one.
    fixed_port: Option<u16>,
    /// host.json's `customHandler.initializationTimeout`: how long the first `GET /` may take.
    initialization_timeout: Duration,
    /// The handler's stdout goes to this process's stderr (when stdout carries a result).
    stdout_to_stderr: bool,
    /// The process group of the handler started last, with its watchdog: every process the
    /// handler starts (a wrapper's server, say) goes with it.
    group: std::sync::Mutex<Option<ProcessGroup>>,
}

/// A started handler's process group (its id is the handler's pid) and a watchdog that kills
/// the whole group when this process goes away, even by `kill -9`: a `sh` reading a pipe only
/// this process writes to, which sees end-of-file however this process ends. The kernel's
/// parent-death signal reaches only the handler itself, not what it started.
struct ProcessGroup {
    id: u32,
    watchdog: Option<std::process::Child>,
}

impl ProcessGroup {
    fn start(id: u32) -> Self {
        let watchdog = std::process::Command::new("/bin/sh")
            .args(["-c", "read _ignored; kill -s KILL -- \"-$0\"", &id.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .inspect_err(|e| {
                tracing::warn!(%e, "no watchdog for the handler's process group: a kill -9 of this process would leave what the handler started running");
            })
            .ok();
        ProcessGroup { id, watchdog }
    }

    /// Signals every process of the group.
    fn signal(&self, signal: i32) {
        #[cfg(unix)]
        // SAFETY: a signal to a process group this process created.
        unsafe {
            libc::kill(-(self.id as libc::pid_t), signal);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
        if let Some(mut watchdog) = self.watchdog.take() {
            // Its pipe closes: it exits, its kill finding nothing left. Reaped off the async
            // workers (a drop can happen on one).
            drop(watchdog.stdin.take());
            std::thread::spawn(move || watchdog.wait());
        }
    }
}

/// The `PATH` the handler's command is looked up in, and the handler gets: the app's own, with
/// this build's folder first, so that `hubhost` (or an executable built beside it, such as
/// `hubhost-app`) in host.json finds this very build.
fn search_path(settings: &AppSettings) -> String {
    let path = settings.get("PATH").unwrap_or_default();
    match std::env::current_exe() {
        Ok(me) => match me.parent() {
            Some(dir) => format!("{}:{path}", dir.display()),
            None => path,
        },
        Err(_) => path,
    }
}

/// The executable `emulate` starts for the app in `app_root`: host.json's
/// `defaultExecutablePath` with `%Setting%` expanded, found as the Functions host finds it (a
/// path from the app folder, else a command on `PATH`, this build's folder first), or where
/// Cargo built it; otherwise an error that says how to build it. `hubhost rehearse` finds its
/// handler here too.
pub fn handler_executable(app_root: &Path) -> Result<PathBuf, EmulateError> {
    let settings = AppSettings::load(app_root)?;
    let app = FunctionApp::load_with_settings(app_root, settings.values())?;
    let declared = HandlerProcess::declared_executable(&app, &settings)?;
    super::executable::program(&declared, &app.root, &search_path(&settings))
}

impl HandlerProcess {
    /// host.json's `defaultExecutablePath`, expanded: a path from the app root, or a command.
    pub(super) fn declared_executable(
        app: &FunctionApp,
        settings: &AppSettings,
    ) -> Result<String, EmulateError> {
        let description = Self::description(app)?;
        let executable = description
            .get("defaultExecutablePath")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .ok_or(EmulateError::HostJson(HostJsonProblem::NoExecutablePath))?;
        settings
            .expand(executable)
            .map_err(|e| EmulateError::HostJson(e.into()))
    }

    /// host.json's `customHandler` (or the older `httpWorker`).
    fn section(app: &FunctionApp) -> Result<&Value, EmulateError> {
        app.host_json
            .get("customHandler")
            .or_else(|| app.host_json.get("httpWorker"))
            .ok_or(EmulateError::HostJson(HostJsonProblem::NoCustomHandler))
    }

    fn description(app: &FunctionApp) -> Result<&Value, EmulateError> {
        Self::section(app)?
            .get("description")
            .ok_or(EmulateError::HostJson(HostJsonProblem::NoDescription))
    }

    /// From host.json `customHandler.description` (or the older `httpWorker`).
    pub(super) fn from_app(
        app: &FunctionApp,
        settings: &AppSettings,
        port: u16,
    ) -> Result<Self, EmulateError> {
        let description = Self::description(app)?;
        let text = |key: &str| description.get(key).and_then(Value::as_str);
        let expand = |s: &str| {
            settings
                .expand(s)
                .map_err(|e| EmulateError::HostJson(e.into()))
        };
        let declared = Self::declared_executable(app, settings)?;
        let path = search_path(settings);
        let program = super::executable::program(&declared, &app.root, &path)?;
        let section = Self::section(app)?;
        let fixed_port = match section.get("port") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                text_of(v)
                    .and_then(|t| t.trim().parse::<u16>().ok())
                    .ok_or_else(|| {
                        EmulateError::HostJson(HostJsonProblem::BadPort(v.to_string()))
                    })?,
            )
            .filter(|p| *p != 0),
        };
        let port = fixed_port.unwrap_or(port);
        let initialization_timeout = match section.get("initializationTimeout") {
            None | Some(Value::Null) => HANDLER_START_TIMEOUT,
            Some(v) => text_of(v)
                .and_then(|t| hubhost_trigger::time::parse_timespan(&t))
                .ok_or_else(|| {
                    EmulateError::HostJson(HostJsonProblem::BadInitializationTimeout(v.to_string()))
                })?,
        };
        let working_directory = match text("workingDirectory").filter(|d| !d.is_empty()) {
            Some(d) => app.root.join(expand(d)?),
            None => app.root.clone(),
        };
        let mut env: Vec<(String, String)> = settings
            .values
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        env.push(("PATH".into(), path));
        let worker_id = uuid::Uuid::new_v4().to_string();
        let worker_env = [
            ("FUNCTIONS_CUSTOMHANDLER_PORT", port.to_string()),
            ("FUNCTIONS_HTTPWORKER_PORT", port.to_string()),
            ("FUNCTIONS_CUSTOMHANDLER_WORKER_ID", worker_id.clone()),
            ("FUNCTIONS_HTTPWORKER_ID", worker_id),
            ("FUNCTIONS_APP_ROOT_PATH", app.root.display().to_string()),
        ];
        // As the host builds the command line: app settings, then the worker's own variables
        // (the port among them), and what is still unset dropped with a warning.
        let arguments = description
            .get("arguments")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter_map(|a| {
                let (expanded, unset) = expand_argument(a, |name| {
                    settings.get(name).or_else(|| {
                        worker_env
                            .iter()
                            .find(|(k, _)| k.eq_ignore_ascii_case(name))
                            .map(|(_, v)| v.clone())
                    })
                });
                for name in &unset {
                    tracing::warn!(argument = a, "the custom handler's argument uses %{name}%, which is not set: dropped, as the host drops it");
                }
                // The host joins the arguments into one command line, where an argument that
                // expanded to nothing is no argument at all.
                (!expanded.is_empty() || unset.is_empty()).then_some(expanded)
            })
            .collect();
        for (k, v) in worker_env {
            env.push((k.into(), v));
        }
        Ok(HandlerProcess {
            program,
            arguments,
            working_directory,
            env,
            port,
            fixed_port,
            initialization_timeout,
            stdout_to_stderr: false,
            group: std::sync::Mutex::new(None),
        })
    }

    /// Tells the handler to listen on `port` from its next start.
    fn listen_on(&mut self, port: u16) {
        for (key, value) in &mut self.env {
            if key == "FUNCTIONS_CUSTOMHANDLER_PORT" || key == "FUNCTIONS_HTTPWORKER_PORT" {
                *value = port.to_string();
            }
        }
        self.port = port;
    }

    /// Sends the handler's stdout to this process's stderr.
    pub(super) fn stdout_to_stderr(&mut self) {
        self.stdout_to_stderr = true;
    }

    pub(super) fn describe(&self) -> String {
        std::iter::once(self.program.display().to_string())
            .chain(self.arguments.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub(super) fn spawn(&self) -> Result<tokio::process::Child, EmulateError> {
        // What the previous start left (a wrapper's server, still holding the port) goes first.
        self.group.lock().expect("group lock").take();
        // The host's worker does not outlive the host, even after `kill -9`: the handler in a
        // process group of its own, which its stop and its watchdog kill whole.
        let mut cmd = hubhost_process::child::command(&self.program);
        cmd.args(&self.arguments)
            .current_dir(&self.working_directory)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .process_group(0);
        if self.stdout_to_stderr {
            cmd.stdout(std::io::stderr());
        }
        let child = cmd.spawn().map_err(|e| EmulateError::HandlerStart {
            command: self.describe(),
            problem: HandlerStartProblem::Spawn(e),
        })?;
        if let Some(pid) = child.id() {
            *self.group.lock().expect("group lock") = Some(ProcessGroup::start(pid));
        }
        Ok(child)
    }

    /// Stops the handler as the host stops a worker, and every process it started: SIGTERM
    /// to its process group, a moment to finish, then SIGKILL to what is left.
    pub(super) async fn stop(&self, child: &mut tokio::process::Child) {
        let group = self.group.lock().expect("group lock").take();
        match &group {
            Some(group) => group.signal(libc::SIGTERM),
            None => {
                if let Some(pid) = child.id() {
                    // SAFETY: a signal to our own child's pid.
                    unsafe {
                        libc::kill(pid as libc::pid_t, libc::SIGTERM);
                    }
                }
            }
        }
        if tokio::time::timeout(STOP_GRACE, child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
        // Dropping the group kills what is left of it.
        drop(group);
    }
}

/// Starts the handler and waits until it answers, as the host does before any invocation.
pub(super) async fn start_handler(
    process: &HandlerProcess,
    invoker: &Invoker,
) -> Result<tokio::process::Child, EmulateError> {
    start_or_exit(process, invoker).await.map_err(|e| e.error)
}

/// A handler that did not come up, and whether it exited before answering (the sign of a port
/// taken by someone else, among other causes).
struct NotStarted {
    exited: bool,
    error: EmulateError,
}

async fn start_or_exit(
    process: &HandlerProcess,
    invoker: &Invoker,
) -> Result<tokio::process::Child, NotStarted> {
    let mut child = process.spawn().map_err(|error| NotStarted {
        exited: false,
        error,
    })?;
    let timeout = process.initialization_timeout;
    let not_ready = |e| NotStarted {
        exited: false,
        error: EmulateError::HandlerStart {
            command: process.describe(),
            problem: HandlerStartProblem::NotReady(e),
        },
    };
    let ready = invoker.wait_ready(timeout);
    tokio::pin!(ready);
    tokio::select! {
        ready = &mut ready => ready.map_err(not_ready)?,
        status = child.wait() => {
            match status {
                // A wrapper that started the server and exited 0: the host does not restart
                // a worker that exits 0, and keeps polling its port until the timeout.
                Ok(status) if status.success() => {
                    ready.await.map_err(not_ready)?;
                    tracing::warn!("the custom handler's first process exited 0 and its port answers: running on, as the host does; the process group is stopped with the instance");
                }
                status => {
                    return Err(NotStarted {
                        exited: true,
                        error: EmulateError::HandlerStart {
                            command: process.describe(),
                            problem: HandlerStartProblem::Exited(status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string())),
                        },
                    });
                }
            }
        }
    }
    Ok(child)
}

/// Ports tried for a handler that exits before answering.
const HANDLER_PORT_ATTEMPTS: usize = 3;

/// A free port for the handler, the handler started on it and answering, and the invoker that
/// reaches it. The port is probed free, then the handler binds it: another process can take it
/// in between, and the handler then exits ("address in use") before answering. So a handler
/// that exits before answering is started again on another port, twice at most; a handler that
/// exits for another reason fails the same way each time, and its last error is returned.
pub(super) async fn start_on_free_port(
    app: &FunctionApp,
    settings: &AppSettings,
    stdout_to_stderr: bool,
) -> Result<(HandlerProcess, Invoker, tokio::process::Child, u16), EmulateError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port =
            hubhost_process::child::free_listen_port().map_err(|e| EmulateError::HandlerStart {
                command: "-".into(),
                problem: HandlerStartProblem::NoFreePort(e),
            })?;
        let mut process = HandlerProcess::from_app(app, settings, port)?;
        if stdout_to_stderr {
            process.stdout_to_stderr();
        }
        let invoker = Invoker::new(&format!("http://127.0.0.1:{port}"));
        match start_or_exit(&process, &invoker).await {
            Ok(child) => return Ok((process, invoker, child, port)),
            Err(NotStarted {
                exited: true,
                error,
            }) if attempt < HANDLER_PORT_ATTEMPTS && process.fixed_port.is_none() => {
                tracing::warn!(port, %error, "the custom handler exited before answering; trying another port");
            }
            Err(not_started) => return Err(not_started.error),
        }
    }
}

/// Starts the handler again after it exited: on its port while that is free, as the host
/// does; on a new free port when another process took it meanwhile (that process would answer
/// the readiness probe for a handler that cannot listen, and every restart would fail alike),
/// with `invoker` and its clones sent there from now on.
pub(super) async fn restart_handler(
    process: &mut HandlerProcess,
    invoker: &Invoker,
) -> Result<tokio::process::Child, EmulateError> {
    // Its previous process group first: a leftover of it may hold the port.
    process.group.lock().expect("group lock").take();
    if process.fixed_port.is_none()
        && std::net::TcpListener::bind(("127.0.0.1", process.port)).is_err()
    {
        let port =
            hubhost_process::child::free_listen_port().map_err(|e| EmulateError::HandlerStart {
                command: process.describe(),
                problem: HandlerStartProblem::NoFreePort(e),
            })?;
        tracing::warn!(
            taken = process.port,
            port,
            "the custom handler's port was taken while it was down; restarting it on another"
        );
        process.listen_on(port);
        invoker.retarget(&format!("http://127.0.0.1:{port}"));
    }
    start_handler(process, invoker).await
}

/// The app's handler as a process, called by a simulation one request at a time: each request,
/// and each start and restart, runs on `io` (a runtime of its own, with sockets and processes)
/// while the simulation's thread waits for it. Nothing else in the simulation runs meanwhile,
/// and its paused clock stands still: however long the handler takes, the run's order and
/// virtual times stay the seed's.
pub struct HeldProcess {
    io: tokio::runtime::Handle,
    running: std::sync::Mutex<Option<RunningProcess>>,
}

struct RunningProcess {
    process: HandlerProcess,
    invoker: Invoker,
    child: tokio::process::Child,
}

impl HeldProcess {
    /// Starts the handler of `app` with `settings` as its environment, and waits until it
    /// answers (on `io`, this thread blocked meanwhile).
    pub fn start(
        app: &FunctionApp,
        settings: &AppSettings,
        io: tokio::runtime::Handle,
    ) -> Result<Self, EmulateError> {
        let (app, settings) = (app.clone(), settings.clone());
        let (process, invoker, child, _) = block_on(&io, async move {
            start_on_free_port(&app, &settings, true).await
        })?;
        Ok(HeldProcess {
            io,
            running: std::sync::Mutex::new(Some(RunningProcess {
                process,
                invoker,
                child,
            })),
        })
    }
}

/// `work` on `io`, this thread blocked until it is done: the simulation's clock holds still.
fn block_on<T: Send + 'static>(
    io: &tokio::runtime::Handle,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let (done, outcome) = std::sync::mpsc::channel();
    io.spawn(async move {
        let _ = done.send(work.await);
    });
    outcome
        .recv()
        .expect("the handler's runtime runs until the simulation ends")
}

#[async_trait::async_trait]
impl crate::invoker::DirectHandler for HeldProcess {
    async fn call(
        &self,
        function: &str,
        invocation_id: &str,
        body: Vec<u8>,
    ) -> Result<crate::invoker::Invocation, crate::invoker::InvokeError> {
        let invoker = self
            .running
            .lock()
            .expect("handler lock")
            .as_ref()
            .map(|r| r.invoker.clone())
            .ok_or_else(|| {
                crate::invoker::InvokeError::NoAnswer("the handler is stopped".into())
            })?;
        let (function, invocation_id) = (function.to_string(), invocation_id.to_string());
        block_on(&self.io, async move {
            invoker
                .invoke_as(&function, &invocation_id, body, None)
                .await
        })
    }

    fn restart(&self) {
        let Some(mut running) = self.running.lock().expect("handler lock").take() else {
            return;
        };
        let restarted = block_on(&self.io, async move {
            let _ = running.child.kill().await;
            match restart_handler(&mut running.process, &running.invoker).await {
                Ok(child) => {
                    running.child = child;
                    Some(running)
                }
                Err(e) => {
                    tracing::error!(error = %e, "the custom handler did not start again");
                    None
                }
            }
        });
        *self.running.lock().expect("handler lock") = restarted;
    }
}

impl Drop for HeldProcess {
    fn drop(&mut self) {
        if let Some(mut running) = self.running.lock().expect("handler lock").take() {
            let _ = running.child.start_kill();
            // Dropping the process group kills what the handler started.
            running.process.group.lock().expect("group lock").take();
        }
    }
}

/// `text` with each `%NAME%` replaced by `lookup(NAME)`, and the names `lookup` does not know
/// (replaced by nothing, as the host's `SanitizeExpandedArgument` removes them).
fn expand_argument(text: &str, lookup: impl Fn(&str) -> Option<String>) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut unset = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('%') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('%').filter(|e| *e > 0) else {
            break;
        };
        out.push_str(&rest[..start]);
        let name = &after[..end];
        match lookup(name) {
            Some(value) => out.push_str(&value),
            None => unset.push(name.to_string()),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    (out, unset)
}

/// A host.json value as the configuration binder sees it: text (a number's or a string's).
fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function app whose custom handler is `script` (a shell script in the app's folder).
    fn script_app(script: &str) -> (tempfile::TempDir, FunctionApp, AppSettings) {
        use std::os::unix::fs::PermissionsExt;
        let app_dir = tempfile::tempdir().unwrap();
        std::fs::write(
            app_dir.path().join("host.json"),
            r#"{"version": "2.0", "customHandler": {"description": {"defaultExecutablePath": "handler.sh"}}}"#,
        )
        .unwrap();
        let path = app_dir.path().join("handler.sh");
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let app = FunctionApp::load(app_dir.path()).unwrap();
        let settings = AppSettings::load(app_dir.path()).unwrap();
        (app_dir, app, settings)
    }

    /// The ports a script handler was started on, in order (it writes each to `ports`).
    fn ports_started_on(app_dir: &std::path::Path) -> Vec<u16> {
        let ports = std::fs::read_to_string(app_dir.join("ports")).unwrap();
        ports.lines().map(|p| p.parse().unwrap()).collect()
    }

    /// A handler whose first start exits before answering, as one whose port was taken does;
    /// the second start serves. `start_on_free_port` must come up on its second port.
    #[tokio::test]
    async fn a_handler_that_exits_before_answering_is_started_again_on_another_port() {
        let (app_dir, app, settings) = script_app(
            "#!/bin/sh\n\
             echo \"$FUNCTIONS_CUSTOMHANDLER_PORT\" >> ports\n\
             if [ ! -e started-once ]; then touch started-once; exit 98; fi\n\
             exec python3 -m http.server --bind 127.0.0.1 \"$FUNCTIONS_CUSTOMHANDLER_PORT\"\n",
        );

        let (process, invoker, mut child, port) = start_on_free_port(&app, &settings, true)
            .await
            .expect("the second start answers");
        let ports = ports_started_on(app_dir.path());
        assert_eq!(ports.len(), 2, "started twice: {ports:?}");
        assert_eq!(ports[1], port, "the handler serves on the port returned");
        invoker
            .wait_ready(Duration::from_secs(5))
            .await
            .expect("it answers on that port");
        process.stop(&mut child).await;
    }

    /// A handler that died while another process took its port is restarted on a new port,
    /// and the invoker (every clone of it) follows; the other process, which answers HTTP as a
    /// handler would, is never mistaken for the restarted handler.
    #[tokio::test]
    async fn a_handler_whose_port_was_taken_while_it_was_down_restarts_on_another() {
        let (app_dir, app, settings) = script_app(
            "#!/bin/sh\n\
             echo \"$FUNCTIONS_CUSTOMHANDLER_PORT\" >> ports\n\
             exec python3 -m http.server --bind 127.0.0.1 \"$FUNCTIONS_CUSTOMHANDLER_PORT\"\n",
        );
        let (mut process, invoker, mut child, port) = start_on_free_port(&app, &settings, true)
            .await
            .expect("the handler starts");
        let pumps_copy = invoker.clone();
        let _ = child.kill().await;
        // Another process takes the port and answers whatever it is asked.
        let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            for stream in squatter.incoming() {
                let Ok(mut stream) = stream else { return };
                let _ = stream.read(&mut [0; 4096]);
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
            }
        });

        let mut child = restart_handler(&mut process, &invoker)
            .await
            .expect("the handler restarts");
        let ports = ports_started_on(app_dir.path());
        assert_eq!(ports.len(), 2, "started twice: {ports:?}");
        assert_ne!(ports[1], port, "not on the taken port");
        assert_eq!(pumps_copy.base(), format!("http://127.0.0.1:{}", ports[1]));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            child.try_wait().unwrap().is_none(),
            "the restarted handler is still up"
        );
        process.stop(&mut child).await;
    }

    /// A handler that always exits before answering is given up after the attempts, with its
    /// own exit in the error.
    #[tokio::test]
    async fn a_handler_that_always_exits_fails_with_its_exit() {
        let (app_dir, app, settings) = script_app("#!/bin/sh\necho started >> starts\nexit 7\n");

        let Err(error) = start_on_free_port(&app, &settings, true).await else {
            panic!("a handler that exits cannot start");
        };
        assert!(
            matches!(&error, EmulateError::HandlerStart { problem: HandlerStartProblem::Exited(status), .. } if status.contains("exit status: 7")),
            "{error}"
        );
        let starts = std::fs::read_to_string(app_dir.path().join("starts")).unwrap();
        assert_eq!(starts.lines().count(), HANDLER_PORT_ATTEMPTS);
    }

    /// What host.json lacks is named by variant, with the host's own words where it has them.
    #[test]
    fn a_host_json_without_what_the_handler_needs_is_refused_saying_what() {
        let app_with = |host: serde_json::Value| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("host.json"), host.to_string()).unwrap();
            let app = FunctionApp::load(dir.path()).unwrap();
            (dir, app)
        };
        let settings = AppSettings::from_pairs([]);
        let cases = [
            (serde_json::json!({"version": "2.0"}), "no customHandler"),
            (serde_json::json!({"customHandler": {}}), "no description"),
            (
                serde_json::json!({"customHandler": {"description": {"defaultExecutablePath": ""}}}),
                "empty path",
            ),
            (
                serde_json::json!({"customHandler": {"description": {"defaultExecutablePath": "%Handler%"}}}),
                "unset setting",
            ),
        ];
        for (host, case) in cases {
            let (_dir, app) = app_with(host);
            let error = HandlerProcess::declared_executable(&app, &settings).unwrap_err();
            let EmulateError::HostJson(problem) = &error else {
                panic!("{case}: {error}");
            };
            match case {
                "no customHandler" => assert!(matches!(problem, HostJsonProblem::NoCustomHandler)),
                "no description" => assert!(matches!(problem, HostJsonProblem::NoDescription)),
                "empty path" => assert!(matches!(problem, HostJsonProblem::NoExecutablePath)),
                _ => assert!(matches!(
                    problem,
                    HostJsonProblem::Expand(crate::emulate::ExpandError::Unset { name }) if name == "Handler"
                )),
            }
            assert!(error.to_string().starts_with("host.json: "), "{error}");
        }
    }
}
