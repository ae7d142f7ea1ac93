//! `hubhost hub`, the local Event Hubs namespace, as a child process on a free port.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::process::{binary, free_port, wait_for_port};
use crate::python::python_json;

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
        Self::start_in(port, data_dir, hubs, flags, &[])
    }

    /// In memory, on a free port, the default hubs, tracing its sends and receives
    /// (`--traces`) to the OTLP/HTTP endpoint `otlp_endpoint`.
    pub fn start_traced(otlp_endpoint: &str) -> Hub {
        Self::start_in(
            free_port(),
            None,
            &[],
            &["--traces"],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_endpoint),
                ("OTEL_BSP_SCHEDULE_DELAY", "200"),
            ],
        )
    }

    fn start_in(
        port: u16,
        data_dir: Option<&Path>,
        hubs: &[&str],
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> Hub {
        let mut cmd = Command::new(binary("hubhost"));
        cmd.envs(env.iter().copied());
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
