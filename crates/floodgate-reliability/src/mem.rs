//! Resident memory of this process, from `/proc/self/statm` (Linux).

/// Resident set size in KiB; 0 where `/proc` is not available.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
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
