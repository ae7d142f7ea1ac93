//! The custom handler process, started, probed, restarted and stopped the way the host does:
//! host.json `customHandler.description` (executable, arguments, working directory), the
//! port and worker variables in its environment, `GET /` until anything answers, SIGTERM then
//! SIGKILL. It dies with the emulator, even after `kill -9` (see `crate::child`).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::build::CargoBuild;
use super::{AppSettings, EmulateError};
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
    /// The handler's stdout goes to this process's stderr (when stdout carries a result).
    stdout_to_stderr: bool,
}

impl HandlerProcess {
    /// host.json's `defaultExecutablePath`, expanded, as a path from the app root (a command on
    /// PATH stays a bare name).
    pub(super) fn declared_executable(
        app: &FunctionApp,
        settings: &AppSettings,
    ) -> Result<PathBuf, EmulateError> {
        let description = Self::description(app)?;
        let executable = description
            .get("defaultExecutablePath")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .ok_or(EmulateError::HostJson(
                "WorkerDescription DefaultExecutablePath cannot be empty".into(),
            ))?;
        let executable = settings
            .expand(executable)
            .map_err(EmulateError::HostJson)?;
        Ok(if executable.contains('/') {
            app.root.join(executable)
        } else {
            PathBuf::from(executable)
        })
    }

    fn description(app: &FunctionApp) -> Result<&Value, EmulateError> {
        let section = app
            .host_json
            .get("customHandler")
            .or_else(|| app.host_json.get("httpWorker"))
            .ok_or(EmulateError::HostJson(
                "no customHandler section: hubhost emulate runs custom-handler apps".into(),
            ))?;
        section
            .get("description")
            .ok_or(EmulateError::HostJson("Missing worker Description.".into()))
    }

    /// From host.json `customHandler.description` (or the older `httpWorker`).
    pub(super) fn from_app(
        app: &FunctionApp,
        settings: &AppSettings,
        port: u16,
    ) -> Result<Self, EmulateError> {
        let description = Self::description(app)?;
        let text = |key: &str| description.get(key).and_then(Value::as_str);
        let expand = |s: &str| settings.expand(s).map_err(EmulateError::HostJson);
        let declared = Self::declared_executable(app, settings)?;
        // As the host: relative to the app root if that file exists, else a command on PATH.
        let bare_name = declared.components().count() == 1;
        let in_app = if bare_name {
            app.root.join(&declared)
        } else {
            declared.clone()
        };
        let program = if in_app.is_file() {
            in_app
        } else if bare_name {
            declared
        } else {
            // A path, not a command on PATH: say what is missing and how to make it.
            return Err(EmulateError::HandlerMissing {
                build: CargoBuild::of(&in_app).map(|b| b.in_project(&app.root).command_line()),
                path: in_app,
            });
        };
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
        // `hubhost` in host.json finds this very build first.
        if let Ok(me) = std::env::current_exe()
            && let Some(dir) = me.parent()
        {
            let path = settings.get("PATH").unwrap_or_default();
            env.push(("PATH".into(), format!("{}:{path}", dir.display())));
        }
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
            stdout_to_stderr: false,
        })
    }

    /// Sends the handler's stdout to this process's stderr.
    pub(super) fn stdout_to_stderr(&mut self) {
        self.stdout_to_stderr = true;
    }

    pub(super) fn describe(&self) -> String {
        format!("{} {}", self.program.display(), self.arguments.join(" "))
    }

    pub(super) fn spawn(&self) -> Result<tokio::process::Child, EmulateError> {
        // The host's worker does not outlive the host, even after `kill -9`.
        let mut cmd = crate::child::command(&self.program);
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
            problem: e.to_string(),
        })
    }
}

/// Starts the handler and waits until it answers, as the host does before any invocation.
pub(super) async fn start_handler(
    process: &HandlerProcess,
    invoker: &Invoker,
) -> Result<tokio::process::Child, EmulateError> {
    let mut child = process.spawn()?;
    tokio::select! {
        ready = invoker.wait_ready(HANDLER_START_TIMEOUT) => {
            ready.map_err(|e| EmulateError::HandlerStart { command: process.describe(), problem: e.to_string() })?;
        }
        status = child.wait() => {
            return Err(EmulateError::HandlerStart {
                command: process.describe(),
                problem: format!("it exited ({}) before answering GET /", status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string())),
            });
        }
    }
    Ok(child)
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
