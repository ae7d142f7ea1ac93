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

/// A loopback port for a child process to listen on, free when chosen.
///
/// It is chosen below the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`),
/// not by binding to port 0: a port from that range is free only until the kernel hands it to
/// some outgoing connection as its source port, and the child then fails with "address in use".
/// A pool of emulated hosts, each with hundreds of connections, did exactly that to a handler
/// port. Falls back to the kernel's choice where the range leaves no room below it.
pub fn free_listen_port() -> std::io::Result<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| parse_port_range(&text));
    let mut state = std::hash::BuildHasher::hash_one(
        &std::collections::hash_map::RandomState::new(),
        std::process::id(),
    );
    for candidate in listen_port_candidates(range, &mut state).take(64) {
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", candidate)) {
            return Ok(listener.local_addr()?.port());
        }
    }
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The first port hubhost picks listen ports from: above the registered services most machines
/// run, below where the ephemeral range starts on Linux (32768).
const LISTEN_PORTS_FROM: u16 = 20_000;

/// `low high` as the kernel writes the ephemeral range.
fn parse_port_range(text: &str) -> Option<(u16, u16)> {
    let mut parts = text.split_whitespace().map(|p| p.parse::<u16>().ok());
    let (low, high) = (parts.next()??, parts.next()??);
    (low <= high).then_some((low, high))
}

/// Pseudo-random ports from `LISTEN_PORTS_FROM` up to (not including) the ephemeral range's
/// start; none when the range starts too low to leave a thousand.
fn listen_port_candidates(
    ephemeral: Option<(u16, u16)>,
    state: &mut u64,
) -> impl Iterator<Item = u16> + '_ {
    let below = ephemeral.map_or(32_768, |(low, _)| low);
    let span = below.saturating_sub(LISTEN_PORTS_FROM);
    std::iter::from_fn(move || {
        if span < 1_000 {
            return None;
        }
        *state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        Some(LISTEN_PORTS_FROM + ((*state >> 33) % u64::from(span)) as u16)
    })
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

    #[test]
    fn the_ephemeral_range_is_read_as_the_kernel_writes_it() {
        assert_eq!(parse_port_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(parse_port_range("1024 65535"), Some((1024, 65535)));
        assert_eq!(parse_port_range("60999 32768"), None);
        assert_eq!(parse_port_range("x"), None);
    }

    #[test]
    fn listen_ports_stay_below_the_ephemeral_range() {
        let mut state = 7;
        let ports: Vec<u16> = listen_port_candidates(Some((32768, 60999)), &mut state)
            .take(1000)
            .collect();
        assert_eq!(ports.len(), 1000);
        assert!(ports.iter().all(|p| (LISTEN_PORTS_FROM..32768).contains(p)));
        assert!(
            ports
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                > 900
        );
        // A range that starts too low leaves the choice to the kernel.
        assert_eq!(
            listen_port_candidates(Some((20500, 60999)), &mut state).count(),
            0
        );
    }

    #[test]
    fn a_free_listen_port_can_be_listened_on() {
        let port = free_listen_port().unwrap();
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    }
}
