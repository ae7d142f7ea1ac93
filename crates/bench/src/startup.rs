//! `hubhost bench startup`: what a cold start costs a handler executable, as the platform
//! starts one — its size on disk (the host copies and maps it), the time from exec until
//! `GET /` is answered (the host's readiness probe), and its resident memory once idle — each
//! executable measured alternately with the others, so a noisy moment hits all of them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hubhost_testkit::stats::median_and_range;

/// How long after its first answer an executable is left idle before its memory is read.
const SETTLE: Duration = Duration::from_millis(500);
/// A start that has not answered by then failed.
const START_LIMIT: Duration = Duration::from_secs(30);

/// One executable to start, with the arguments it is started with.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub label: String,
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl Candidate {
    /// `LABEL=PATH[ ARG…]`, e.g. `before=/tmp/hubhost serve`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (label, rest) = text
            .split_once('=')
            .ok_or(format!("{text:?} is not LABEL=PATH [ARGS]"))?;
        let mut words = rest.split_whitespace();
        let program = PathBuf::from(
            words
                .next()
                .ok_or(format!("{text:?} names no executable"))?,
        );
        Ok(Candidate {
            label: label.to_string(),
            program,
            args: words.map(str::to_string).collect(),
        })
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct StartupFigures {
    pub label: String,
    pub program: String,
    pub size_bytes: u64,
    /// Exec → `GET /` answered, one per start, in milliseconds.
    pub cold_start_ms: Vec<f64>,
    /// Resident memory once idle, one per start, in MiB.
    pub idle_rss_mib: Vec<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0} did not answer GET / within {START_LIMIT:?}")]
    NoAnswer(String),
    #[error("{0} exited before answering: {1}")]
    Exited(String, std::process::ExitStatus),
}

/// Starts each candidate `starts` times, in turn, and prints the table.
pub fn run(candidates: &[Candidate], starts: usize) -> Result<Vec<StartupFigures>, StartupError> {
    let mut figures = Vec::new();
    for c in candidates {
        let size = std::fs::metadata(&c.program)
            .map_err(|e| StartupError::Io(c.program.display().to_string(), e))?
            .len();
        figures.push(StartupFigures {
            label: c.label.clone(),
            program: c.program.display().to_string(),
            size_bytes: size,
            cold_start_ms: Vec::new(),
            idle_rss_mib: Vec::new(),
        });
    }
    let scratch = tempdir()?;
    // One start of each first, not counted: the executables into the page cache.
    for c in candidates {
        start_once(c, &scratch)?;
    }
    for _ in 0..starts {
        for (c, f) in candidates.iter().zip(&mut figures) {
            let (cold, rss) = start_once(c, &scratch)?;
            f.cold_start_ms.push(cold.as_secs_f64() * 1000.0);
            f.idle_rss_mib.push(rss as f64 / 1024.0);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(figures)
}

/// The table of figures, one row per executable.
pub fn table(figures: &[StartupFigures], starts: usize) -> String {
    let mut out = format!(
        "startup: {starts} starts of each, alternating; cold start = exec → GET / answered; idle RSS {} ms after\n",
        SETTLE.as_millis()
    );
    out += &format!(
        "{:<14} {:>8} {:>26} {:>24}\n",
        "executable", "size MB", "cold start ms (range)", "idle RSS MiB (range)"
    );
    for f in figures {
        let (c, c_lo, c_hi) = median_and_range(f.cold_start_ms.iter().copied());
        let (r, r_lo, r_hi) = median_and_range(f.idle_rss_mib.iter().copied());
        out += &format!(
            "{:<14} {:>8.1} {:>26} {:>24}\n",
            f.label,
            f.size_bytes as f64 / 1e6,
            format!("{c:.1} ({c_lo:.1}–{c_hi:.1})"),
            format!("{r:.1} ({r_lo:.1}–{r_hi:.1})"),
        );
    }
    out
}

fn tempdir() -> Result<PathBuf, StartupError> {
    let dir = std::env::temp_dir().join(format!("hubhost-bench-startup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| StartupError::Io(dir.display().to_string(), e))?;
    Ok(dir)
}

/// One start: the time until `GET /` is answered, and the resident KiB once idle.
fn start_once(c: &Candidate, scratch: &Path) -> Result<(Duration, u64), StartupError> {
    let port =
        hubhost_testkit::try_free_port().map_err(|e| StartupError::Io("a free port".into(), e))?;
    let started = Instant::now();
    let mut child = Command::new(&c.program)
        .args(&c.args)
        .env("FUNCTIONS_CUSTOMHANDLER_PORT", port.to_string())
        .env("HUBHOST_STORAGE", scratch)
        .env_remove("AzureWebJobsStorage")
        .env_remove("FUNCTIONS_APP_ROOT_PATH")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| StartupError::Io(c.program.display().to_string(), e))?;
    let answered = loop {
        if probe(port) {
            break started.elapsed();
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(StartupError::Exited(c.label.clone(), status));
        }
        if started.elapsed() > START_LIMIT {
            stop(&mut child);
            return Err(StartupError::NoAnswer(c.label.clone()));
        }
        std::thread::sleep(Duration::from_micros(500));
    };
    std::thread::sleep(SETTLE);
    let rss = hubhost_testkit::resident_kib(child.id()).unwrap_or(0);
    stop(&mut child);
    Ok((answered, rss))
}

/// Whether `GET /` on loopback `port` gets an HTTP answer.
fn probe(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 ")
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidate_is_a_label_an_executable_and_its_arguments() {
        let c = Candidate::parse("before=/tmp/hubhost serve --bind 127.0.0.1").unwrap();
        assert_eq!(c.label, "before");
        assert_eq!(c.program, PathBuf::from("/tmp/hubhost"));
        assert_eq!(c.args, ["serve", "--bind", "127.0.0.1"]);
        assert!(Candidate::parse("/tmp/hubhost").is_err());
        assert!(Candidate::parse("x=").is_err());
    }

    #[test]
    fn resident_memory_is_read_from_proc() {
        let kib = hubhost_testkit::resident_kib(std::process::id()).unwrap();
        assert!(kib > 0);
    }
}
