//! A node's clock stepped, for the [network faults](crate::netfaults): node 0 runs under
//! libfaketime (Debian's `faketime` package), which reads its offset from a file on
//! every call (`FAKETIME_TIMESTAMP_FILE`, `FAKETIME_NO_CACHE=1`), so the harness steps
//! the node's clock mid-run by rewriting that file.
//!
//! Which clocks move: a real clock step (NTP stepping, an operator's `date -s`) moves
//! `CLOCK_REALTIME` only; `CLOCK_MONOTONIC` never jumps. libfaketime fakes both unless
//! `FAKETIME_DONT_FAKE_MONOTONIC=1`, which the harness sets: in the node, Rust's
//! `SystemTime` steps and `Instant` (and tokio's timers) do not.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::procs::HarnessError;

/// The size of the step: node 0's clock goes this far forward when the fault begins and
/// back by as much when it ends.
pub const STEP: Duration = Duration::from_secs(1);

/// libfaketime's shared object: `FLOODGATE_LIBFAKETIME`, else where Debian's `faketime`
/// package installs it (the thread-safe build first: the proxy is multithreaded).
pub fn libfaketime() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FLOODGATE_LIBFAKETIME") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let mut dirs = vec![
        PathBuf::from("/usr/lib/faketime"),
        PathBuf::from("/usr/local/lib/faketime"),
    ];
    if let Ok(rd) = std::fs::read_dir("/usr/lib") {
        for e in rd.flatten() {
            dirs.push(e.path().join("faketime"));
        }
    }
    dirs.iter()
        .flat_map(|d| [d.join("libfaketimeMT.so.1"), d.join("libfaketime.so.1")])
        .find(|p| p.is_file())
}

/// A clock offset file read by libfaketime in the node started with [`env`](Self::env).
#[derive(Debug)]
pub struct FakeClock {
    lib: PathBuf,
    dir: PathBuf,
    file: PathBuf,
}

impl FakeClock {
    /// A clock at offset zero, or `None` without libfaketime.
    pub fn new() -> Result<Option<FakeClock>, HarnessError> {
        let Some(lib) = libfaketime() else {
            return Ok(None);
        };
        let dir = crate::procs::temp_dir("faketime")?;
        let clock = FakeClock {
            lib,
            file: dir.join("offset"),
            dir,
        };
        clock.step_to(0.0)?;
        Ok(Some(clock))
    }

    /// The environment that puts a process on this clock.
    pub fn env(&self) -> Vec<(String, String)> {
        let s = |p: &Path| p.display().to_string();
        vec![
            ("LD_PRELOAD".into(), s(&self.lib)),
            ("FAKETIME_TIMESTAMP_FILE".into(), s(&self.file)),
            ("FAKETIME_NO_CACHE".into(), "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ]
    }

    /// Set the offset from the real `CLOCK_REALTIME`, in seconds (written to a temporary
    /// file and renamed over the old one, so the node never reads half a line).
    pub fn step_to(&self, secs: f64) -> Result<(), HarnessError> {
        let tmp = self.dir.join("offset.new");
        let io = |what: &str| {
            let what = format!("{what} {}", self.file.display());
            move |source| HarnessError::Io { what, source }
        };
        std::fs::write(&tmp, format!("{secs:+.6}\n")).map_err(io("write"))?;
        std::fs::rename(&tmp, &self.file).map_err(io("rename over"))
    }
}

impl Drop for FakeClock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under libfaketime, `date +%s` in a child follows the file: stepped forward an hour,
    /// then back. Needs libfaketime.
    #[test]
    fn a_child_reads_the_stepped_clock() {
        let clock = FakeClock::new()
            .expect("temp dir")
            .expect("libfaketime (Debian package faketime; scripts/setup.sh installs it)");
        let now = |c: &FakeClock| -> i64 {
            let out = std::process::Command::new("date")
                .arg("+%s")
                .envs(c.env())
                .output()
                .expect("date runs");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("seconds")
        };
        let real = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_secs() as i64
        };
        clock.step_to(3600.0).expect("step");
        let d = now(&clock) - real();
        assert!((3598..=3602).contains(&d), "forward: {d}");
        clock.step_to(0.0).expect("step");
        let d = now(&clock) - real();
        assert!((-2..=2).contains(&d), "back: {d}");
    }
}
