//! `hubhost serve`, the reference app's custom handler, as a child process on a free port,
//! called over HTTP as the Functions host calls it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::process::{binary, free_port};

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
        let mut cmd = Command::new(binary("hubhost"));
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
