//! The custom handler process, started, probed, restarted and stopped the way the host does:
//! host.json `customHandler.description` (executable, arguments, working directory), the
//! port and worker variables in its environment, `GET /` until anything answers, SIGTERM then
//! SIGKILL. It dies with the emulator, even after `kill -9` (see `hubhost_process::child`).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::{AppSettings, EmulateError, HandlerStartProblem, HostJsonProblem};
use crate::invoker::Invoker;
use hubhost_functions::function_app::FunctionApp;

/// The host's `customHandler.initializationTimeout` default.
const HANDLER_START_TIMEOUT: Duration = Duration::from_secs(30);

/// The custom handler process, started and restarted the way the host does.
pub(super) struct HandlerProcess {
    program: PathBuf,
    arguments: Vec<String>,
    working_directory: PathBuf,
    env: Vec<(String, String)>,
    /// The port the handler is told to listen on.
    port: u16,
    /// The handler's stdout goes to this process's stderr (when stdout carries a result).
    stdout_to_stderr: bool,
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

    fn description(app: &FunctionApp) -> Result<&Value, EmulateError> {
        let section = app
            .host_json
            .get("customHandler")
            .or_else(|| app.host_json.get("httpWorker"))
            .ok_or(EmulateError::HostJson(HostJsonProblem::NoCustomHandler))?;
        section
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
        // `hubhost` in host.json finds this very build first.
        let mut path = settings.get("PATH").unwrap_or_default();
        if let Ok(me) = std::env::current_exe()
            && let Some(dir) = me.parent()
        {
            path = format!("{}:{path}", dir.display());
        }
        let program = super::executable::program(&declared, &app.root, &path)?;
        let mut arguments = Vec::new();
        for a in description
            .get("arguments")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            arguments.push(expand(a)?);
        }
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
        for (k, v) in [
            ("FUNCTIONS_CUSTOMHANDLER_PORT", port.to_string()),
            ("FUNCTIONS_HTTPWORKER_PORT", port.to_string()),
            ("FUNCTIONS_CUSTOMHANDLER_WORKER_ID", worker_id.clone()),
            ("FUNCTIONS_HTTPWORKER_ID", worker_id),
            ("FUNCTIONS_APP_ROOT_PATH", app.root.display().to_string()),
        ] {
            env.push((k.into(), v));
        }
        Ok(HandlerProcess {
            program,
            arguments,
            working_directory,
            env,
            port,
            stdout_to_stderr: false,
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
        // The host's worker does not outlive the host, even after `kill -9`.
        let mut cmd = hubhost_process::child::command(&self.program);
        cmd.args(&self.arguments)
            .current_dir(&self.working_directory)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null());
        if self.stdout_to_stderr {
            cmd.stdout(std::io::stderr());
        }
        cmd.spawn().map_err(|e| EmulateError::HandlerStart {
            command: self.describe(),
            problem: HandlerStartProblem::Spawn(e),
        })
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
    tokio::select! {
        ready = invoker.wait_ready(HANDLER_START_TIMEOUT) => {
            ready.map_err(|e| NotStarted {
                exited: false,
                error: EmulateError::HandlerStart { command: process.describe(), problem: HandlerStartProblem::NotReady(e) },
            })?;
        }
        status = child.wait() => {
            return Err(NotStarted {
                exited: true,
                error: EmulateError::HandlerStart {
                    command: process.describe(),
                    problem: HandlerStartProblem::Exited(status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string())),
                },
            });
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
            }) if attempt < HANDLER_PORT_ATTEMPTS => {
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
    if std::net::TcpListener::bind(("127.0.0.1", process.port)).is_err() {
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

/// SIGTERM, a moment to finish, then SIGKILL.
pub(super) async fn stop_child(child: &mut tokio::process::Child) {
    #[cfg(unix)]
    if let Some(pid) = child.id() {
        // SAFETY: sending a signal to our own child's pid.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
        if tokio::time::timeout(Duration::from_secs(3), child.wait())
            .await
            .is_ok()
        {
            return;
        }
    }
    let _ = child.kill().await;
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

        let (_, invoker, mut child, port) = start_on_free_port(&app, &settings, true)
            .await
            .expect("the second start answers");
        let ports = ports_started_on(app_dir.path());
        assert_eq!(ports.len(), 2, "started twice: {ports:?}");
        assert_eq!(ports[1], port, "the handler serves on the port returned");
        invoker
            .wait_ready(Duration::from_secs(5))
            .await
            .expect("it answers on that port");
        stop_child(&mut child).await;
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
        stop_child(&mut child).await;
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
