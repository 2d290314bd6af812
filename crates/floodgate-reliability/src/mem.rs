//! Resident memory and open file descriptors, from `/proc` (Linux): of this process, or of
//! a child process by pid (the proxy under test).

/// Resident set size of this process in KiB; 0 where `/proc` is not available.
pub fn rss_kib() -> u64 {
    statm_rss_kib("/proc/self/statm")
}

/// Resident set size of process `pid` in KiB; 0 when it cannot be read (gone, no `/proc`).
pub fn rss_kib_of(pid: u32) -> u64 {
    statm_rss_kib(&format!("/proc/{pid}/statm"))
}

fn statm_rss_kib(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * page_size_kib())
}

fn page_size_kib() -> u64 {
    4 // every Linux target floodgate supports uses 4 KiB pages for statm accounting here
}

/// Open file descriptors of this process (Linux); 0 where `/proc` is not available.
pub fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// Open file descriptors of process `pid`; 0 when they cannot be listed.
pub fn open_fds_of(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_pid_reads_like_self() {
        let pid = std::process::id();
        assert!(super::rss_kib_of(pid) > 0);
        assert!(super::open_fds_of(pid) > 0);
        assert_eq!(super::rss_kib_of(u32::MAX), 0);
        assert_eq!(super::open_fds_of(u32::MAX), 0);
    }
}
