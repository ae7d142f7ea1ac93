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
