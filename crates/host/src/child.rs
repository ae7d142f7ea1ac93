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

/// The environment variable tokio's runtime reads for its number of worker threads.
pub const WORKER_THREADS_ENV: &str = "TOKIO_WORKER_THREADS";

/// Worker threads for each of `instances` instances sharing `cores`: an equal share, at least
/// one. On the platform every instance has cores of its own; instances emulated on one machine
/// share its cores, and each running a thread per core made them preempt one another — four
/// instances on 2 cores spent 20% more CPU per event than one (`bench pool`).
pub fn worker_threads_per_instance(cores: usize, instances: usize) -> usize {
    (cores / instances.max(1)).max(1)
}

/// This machine's cores, as the runtime counts them.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The value of [`WORKER_THREADS_ENV`] for a child among `instances` instances, unless the user
/// chose one for every process already.
pub fn worker_threads_setting(instances: usize) -> Option<String> {
    std::env::var_os(WORKER_THREADS_ENV)
        .is_none()
        .then(|| worker_threads_per_instance(cores(), instances).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_share_the_cores_and_each_keeps_one() {
        assert_eq!(worker_threads_per_instance(2, 1), 2);
        assert_eq!(worker_threads_per_instance(2, 4), 1);
        assert_eq!(worker_threads_per_instance(8, 4), 2);
        assert_eq!(worker_threads_per_instance(8, 3), 2);
        assert_eq!(worker_threads_per_instance(1, 16), 1);
        assert_eq!(worker_threads_per_instance(4, 0), 4);
    }
}
