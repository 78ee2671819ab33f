//! What a latency-sensitive process (a worker, a producer, the broker) sets on itself at start.
//!
//! Transparent huge pages: on a kernel with THP `always` (Debian's default on many cloud
//! images), a page fault in a fresh 2 MiB region zeroes the whole huge page at once. mimalloc
//! returns freed pages to the kernel and touches fresh ones as a steady load allocates, so a
//! worker at 5,000 jobs/s stalled 4–5 ms about every 75 ms in `clear_page` (perf, this machine),
//! and those stalls alone set its p99 submit→start near 6.7 ms. Redis turns THP off for itself
//! for the same reason (`disable-thp`, on by default); this does the same for our processes.

/// Turns transparent huge pages off for this process and the processes it starts
/// (`PR_SET_THP_DISABLE`). Memory the process already faulted in keeps its pages. Returns
/// whether the kernel took the setting: false off Linux, or on a kernel without it (before 3.15).
pub fn disable_transparent_huge_pages() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with PR_SET_THP_DISABLE reads its integer arguments only
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Whether transparent huge pages are off for this process (always false off Linux).
pub fn transparent_huge_pages_disabled() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_GET_THP_DISABLE takes no pointer and returns the flag
        unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn huge_pages_go_off_for_the_process() {
        assert!(disable_transparent_huge_pages());
        assert!(transparent_huge_pages_disabled());
    }
}
