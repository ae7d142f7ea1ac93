//! CPU time spent by processes, read from the kernel: what each part of a pipeline costs per
//! event.
//!
//! On a machine whose cores are all busy (a 2-core runner with a hub, a host and a handler on
//! it), throughput is the cores divided by the CPU time every part spends per event, so the
//! per-part cost says where a slower pipeline loses against its baseline.

use std::time::Duration;

/// User plus system CPU time of process `pid` (all its threads) so far, or `None` when it has
/// gone or this is not Linux.
pub fn process_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    cpu_of_stat(&stat, ticks_per_second())
}

/// User plus system CPU time of this process so far.
pub fn own_cpu() -> Duration {
    process_cpu(std::process::id()).unwrap_or_default()
}

fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// utime + stime of a `/proc/{pid}/stat` line. The command name (field 2) is in parentheses and
/// may hold spaces or parentheses itself, so fields are counted after its last `)`.
fn cpu_of_stat(stat: &str, ticks_per_second: u64) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name: state (field 3) … utime (field 14), stime (field 15).
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = utime + stime;
    Some(Duration::from_micros(ticks * 1_000_000 / ticks_per_second))
}

/// CPU spent by a set of processes between two readings.
#[derive(Debug, Default, Clone)]
pub struct CpuMeter {
    /// (pid, CPU at the start).
    started: Vec<(u32, Duration)>,
}

impl CpuMeter {
    /// Starts measuring `pids` (those already gone are left out).
    pub fn start(pids: impl IntoIterator<Item = u32>) -> Self {
        CpuMeter {
            started: pids
                .into_iter()
                .filter_map(|pid| Some((pid, process_cpu(pid)?)))
                .collect(),
        }
    }

    /// CPU spent since `start` by the processes still running.
    pub fn spent(&self) -> Duration {
        self.started
            .iter()
            .filter_map(|(pid, at)| Some(process_cpu(*pid)?.saturating_sub(*at)))
            .sum()
    }
}

/// Microseconds of CPU per event.
pub fn micros_per_event(cpu: Duration, events: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / events.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_counted_after_the_last_parenthesis_of_the_name() {
        // A name with a space and a parenthesis; utime 250 and stime 50 ticks at 100 Hz.
        let stat =
            "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1 2 3";
        assert_eq!(cpu_of_stat(stat, 100), Some(Duration::from_secs(3)));
        assert_eq!(cpu_of_stat("garbage", 100), None);
    }

    /// Busy until the meter sees 50 ms spent, not for a span of wall time: on a loaded machine
    /// 200 ms of wall time once got this thread 10 ms of CPU. A meter that saw nothing would
    /// spin to the minute's deadline and fail.
    #[test]
    fn a_busy_process_is_seen_spending_cpu() {
        let meter = CpuMeter::start([std::process::id()]);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut x = 0u64;
        while meter.spent() < Duration::from_millis(50) && std::time::Instant::now() < deadline {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
        assert!(
            meter.spent() >= Duration::from_millis(50),
            "{:?}",
            meter.spent()
        );
        assert_eq!(micros_per_event(Duration::from_millis(3), 1_000), 3.0);
    }
}
