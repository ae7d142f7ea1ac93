//! Progress lines for long-running commands (simulate, benchmarks): on a terminal one line
//! rewritten in place every second, otherwise (logs, CI) a plain line every few seconds.

use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Prints `line()` periodically on stderr until dropped.
pub struct Progress {
    task: tokio::task::JoinHandle<()>,
    tty: bool,
}

impl Progress {
    pub fn spawn(line: impl Fn() -> String + Send + 'static) -> Self {
        let tty = std::io::stderr().is_terminal();
        let every = if tty {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(5)
        };
        let task = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                let mut err = std::io::stderr().lock();
                let _ = if tty {
                    write!(err, "\r\x1b[2K{}", line())
                } else {
                    writeln!(err, "{}", line())
                };
                let _ = err.flush();
            }
        });
        Progress { task, tty }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
        if self.tty {
            eprintln!();
        }
    }
}
