//! Child processes that never outlive hubhost: the emulated host's handler, and the hubs,
//! instances and simulators the benchmarks start.
//!
//! `kill_on_drop` covers a normal exit and a panic; it cannot cover SIGTERM or `kill -9`, after
//! which no destructor runs. On Linux the kernel covers those: each child asks, before it
//! executes, to be sent SIGKILL when its parent dies (`PR_SET_PDEATHSIG`).

use std::ffi::OsStr;

/// A command for `program` that is killed when this process exits, however it exits.
pub fn command(program: impl AsRef<OsStr>) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::from(std_command(program));
    cmd.kill_on_drop(true);
    cmd
}

/// The same for code that waits synchronously; its owner kills the child on drop.
pub fn std_command(program: impl AsRef<OsStr>) -> std::process::Command {
    #[allow(unused_mut)]
    let mut cmd = std::process::Command::new(program);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}
