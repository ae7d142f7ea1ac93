//! The memory allocator of hubhost's executables (`hubhost`, `hubhost-app`, `hubhost-bench`),
//! chosen and set up in one place: each executable declares [`Allocator`] as its global
//! allocator and calls [`disable_transparent_huge_pages`] first thing in `main`.
//!
//! **mimalloc.** Every event is a handful of short-lived buffers that cross threads; glibc's
//! allocator spent a fifth of the pipeline's time in malloc and free (and in consolidating its
//! fragmented free lists) when `bench pool` profiled it, mimalloc's thread-local pages much less.
//!
//! **No transparent huge pages.** mimalloc asks the kernel for huge pages on the large regions it
//! reserves (`madvise(MADV_HUGEPAGE)`). Then the first touch anywhere in a 2 MiB range can make the
//! whole range resident, and with the kernel's default `khugepaged/max_ptes_none` (511 of 512) the
//! `khugepaged` thread later turns a range with a single page in use back into a whole resident
//! 2 MiB page, long after the allocator gave the rest back. An emulate instance at the reference
//! load had 8–20 MiB of its 42–55 MiB in huge pages, rising and falling from one reading to the
//! next at a steady load, and a rise could hold for the rest of an hour-long run; with huge pages
//! off the same instance holds 29–34 MiB. A process of some tens of MiB gains little from huge
//! pages (TLB reach) and loses a memory figure that says what it holds, so hubhost's processes opt
//! out — only themselves, the machine's setting is left alone. The kernel's documentation:
//! <https://docs.kernel.org/admin-guide/mm/transhuge.html>.

/// How often a worker thread gives freed memory back at most ([`give_back_freed_memory`]).
const GIVE_BACK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Gives back to the system what this thread's heap freed more than mimalloc's purge delay ago
/// (a second), at most once a second per thread: for a tokio runtime's
/// `on_thread_park`, so that what a burst freed (a hostile client's closed connections, a large
/// batch's buffers) is returned once the worker that freed it goes idle. mimalloc purges only
/// on a thread's later allocations, so a worker idle after a burst otherwise kept it resident:
/// a hub that 300 connections had each sent 260 KB kept 33 MiB of their freed buffers after
/// the connections were gone.
pub fn give_back_freed_memory() {
    use std::cell::Cell;
    use std::time::Instant;
    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    let due = LAST.with(|last| {
        let due = last
            .get()
            .is_none_or(|at| now.duration_since(at) >= GIVE_BACK_EVERY);
        if due {
            last.set(Some(now));
        }
        due
    });
    if due {
        // SAFETY: mi_collect takes no pointer; it frees and purges this thread's own heap.
        unsafe { libmimalloc_sys::mi_collect(false) };
    }
}

/// A multi-threaded tokio runtime whose idle workers give freed memory back
/// ([`give_back_freed_memory`]): the runtime of hubhost's executables.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(give_back_freed_memory)
        .build()
}

/// The global allocator of hubhost's executables:
/// `#[global_allocator] static ALLOCATOR: Allocator = Allocator;`.
pub use mimalloc::MiMalloc as Allocator;

/// Turns transparent huge pages off for this process and the processes it starts
/// (`prctl(PR_SET_THP_DISABLE)`: kept across `fork` and `exec`, so a function `hubhost emulate`
/// starts runs without them too; that changes how its memory is paged, not what it does), whatever
/// the machine's `/sys/kernel/mm/transparent_hugepage/enabled` says. Best effort: where the kernel
/// has no such switch (before Linux 3.15, or not Linux) memory is simply paged as the machine says.
pub fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and changes nothing but a flag
    // of this process's memory map.
    unsafe {
        libc::prctl(
            libc::PR_SET_THP_DISABLE,
            1 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        );
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_process_opts_out_of_transparent_huge_pages() {
        disable_transparent_huge_pages();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let enabled = status
            .lines()
            .find_map(|line| line.strip_prefix("THP_enabled:"))
            .map(str::trim);
        // Kernels before 5.0 do not say; then there is nothing to check.
        if let Some(enabled) = enabled {
            assert_eq!(enabled, "0", "THP_enabled of /proc/self/status");
        }
    }
}
