#![doc = include_str!("../README.md")]
pub mod audit;
pub mod clock;
pub mod exactness;
pub mod faults;
pub mod fleet;
pub mod fuzz;
pub mod load;
pub mod mem;
pub mod net;
pub mod netcheck;
pub mod netclock;
pub mod netfaults;
pub mod netns;
pub mod netrun;
pub mod procs;
pub mod relay;
pub mod rotation;
pub mod soak;

use serde::Serialize;

/// One line of the report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    /// Area of the suite (rotation, clock, exactness, ...).
    pub area: &'static str,
    /// What was tried.
    pub case: String,
    /// Cases tried (configurations, seeds, algorithms).
    pub cases: u64,
    /// Faults injected (clock jumps, kills, pauses, ...).
    pub faults: u64,
    /// Requests (decisions asked for).
    pub requests: u64,
    /// Decisions lost: requests without an answer, or admitted but not charged.
    pub lost: u64,
    /// Decisions duplicated: charged twice, or admitted beyond the reference.
    pub duplicated: u64,
    /// Panics caught.
    pub panics: u64,
    /// Resident memory at the start, KiB.
    pub mem_start_kib: u64,
    /// Resident memory at the end, KiB.
    pub mem_end_kib: u64,
    /// Whether every check of the case held.
    pub pass: bool,
    /// The figures behind the verdict.
    pub detail: String,
}

/// Run `f`, turning a panic into a failed row (and counting it).
pub fn guarded(
    area: &'static str,
    case: &str,
    f: impl FnOnce() -> Row + std::panic::UnwindSafe,
) -> Row {
    let start = mem::rss_kib();
    match std::panic::catch_unwind(f) {
        Ok(row) => row,
        Err(p) => Row {
            area,
            case: case.to_string(),
            cases: 1,
            faults: 0,
            requests: 0,
            lost: 0,
            duplicated: 0,
            panics: 1,
            mem_start_kib: start,
            mem_end_kib: mem::rss_kib(),
            pass: false,
            detail: format!(
                "panicked: {}",
                p.downcast_ref::<String>()
                    .map(String::as_str)
                    .or(p.downcast_ref::<&str>().copied())
                    .unwrap_or("?")
            ),
        },
    }
}

/// The table, as text.
pub fn render(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<11} {:<46} {:>6} {:>7} {:>11} {:>5} {:>5} {:>6} {:>10} {:>10}  {}\n",
        "area",
        "case",
        "cases",
        "faults",
        "requests",
        "lost",
        "dup",
        "panic",
        "mem start",
        "mem end",
        "verdict"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<11} {:<46} {:>6} {:>7} {:>11} {:>5} {:>5} {:>6} {:>8}Ki {:>8}Ki  {}: {}\n",
            r.area,
            r.case,
            r.cases,
            r.faults,
            r.requests,
            r.lost,
            r.duplicated,
            r.panics,
            r.mem_start_kib,
            r.mem_end_kib,
            if r.pass { "PASS" } else { "FAIL" },
            r.detail
        ));
    }
    out
}
