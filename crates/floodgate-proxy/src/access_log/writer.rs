//! The access log's writer: one thread that takes lines from a bounded queue and writes
//! them to a file (appending) or to standard output, so that a slow disk never holds a
//! request. The file is opened again when asked ([`Writer::reopen`]: `SIGUSR1`, a
//! reload), which is what logrotate's `postrotate` needs after it renamed the file.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

use floodgate_engine::metrics::Metrics;

/// Lines the queue holds before new ones are dropped (and counted).
pub(crate) const QUEUE: usize = 16 * 1024;
/// Bytes buffered by the writer before a write; the buffer is flushed whenever the
/// queue is empty, so lines reach the file within this delay of being logged.
const WRITE_BUF: usize = 64 * 1024;
/// How often an idle writer looks at the reopen flag.
const IDLE_CHECK: Duration = Duration::from_millis(200);

/// Where the access log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessTarget {
    /// Standard output.
    Stdout,
    /// A file, appended to (created when missing).
    File(PathBuf),
}

impl AccessTarget {
    /// `"stdout"` or a file path.
    pub fn parse(s: &str) -> AccessTarget {
        if s == "stdout" {
            AccessTarget::Stdout
        } else {
            AccessTarget::File(PathBuf::from(s))
        }
    }

    fn open(&self) -> io::Result<Sink> {
        match self {
            AccessTarget::Stdout => Ok(Sink::Stdout(io::stdout())),
            AccessTarget::File(path) => OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map(Sink::File),
        }
    }
}

impl std::fmt::Display for AccessTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccessTarget::Stdout => f.write_str("stdout"),
            AccessTarget::File(p) => write!(f, "{}", p.display()),
        }
    }
}

enum Sink {
    Stdout(io::Stdout),
    File(File),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Stdout(s) => s.write(buf),
            Sink::File(f) => f.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Stdout(s) => s.flush(),
            Sink::File(f) => f.flush(),
        }
    }
}

/// The request side of the writer: hands lines over without waiting.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    lines: SyncSender<Vec<u8>>,
    reopen: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
}

impl Writer {
    /// Open `target` (an error here stops the proxy's start) and start the writer thread.
    pub(crate) fn start(target: AccessTarget, metrics: Arc<Metrics>) -> io::Result<Writer> {
        let sink = target.open()?;
        let (lines, rx) = sync_channel(QUEUE);
        let reopen = Arc::new(AtomicBool::new(false));
        let flag = reopen.clone();
        std::thread::Builder::new()
            .name("floodgate-access-log".into())
            .spawn(move || run(target, sink, &rx, &flag))?;
        Ok(Writer {
            lines,
            reopen,
            metrics,
        })
    }

    /// Queue `line`; when the queue is full it is dropped and counted
    /// (`floodgate_access_log_dropped_total`).
    pub(crate) fn send(&self, line: Vec<u8>) {
        match self.lines.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.metrics.access_log_dropped(),
            // the writer thread has ended (it cannot: it ends when every sender is gone)
            Err(TrySendError::Disconnected(_)) => self.metrics.access_log_dropped(),
        }
    }

    /// Open the file again before the next line (logrotate renamed it).
    pub(crate) fn reopen(&self) {
        self.reopen.store(true, Ordering::Release);
    }
}

/// The writer thread: until every [`Writer`] is gone, write what the queue holds,
/// flushing when it is empty, and reopen the file when flagged.
fn run(target: AccessTarget, mut sink: Sink, rx: &Receiver<Vec<u8>>, reopen: &AtomicBool) {
    let mut buf: Vec<u8> = Vec::with_capacity(WRITE_BUF);
    let mut failing = false;
    loop {
        let first = match rx.recv_timeout(IDLE_CHECK) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                let _ = sink.flush();
                return;
            }
        };
        if reopen.swap(false, Ordering::AcqRel) {
            let _ = write_out(&mut sink, &mut buf);
            match target.open() {
                Ok(s) => {
                    sink = s;
                    failing = false;
                    tracing::info!(file = %target, "access log reopened");
                }
                Err(e) => {
                    tracing::error!(file = %target, error = %e, "access log not reopened; writing to the file open before")
                }
            }
        }
        if let Some(line) = first {
            buf.extend_from_slice(&line);
            while buf.len() < WRITE_BUF {
                match rx.try_recv() {
                    Ok(line) => buf.extend_from_slice(&line),
                    Err(_) => break,
                }
            }
        }
        match write_out(&mut sink, &mut buf) {
            Ok(()) => failing = false,
            Err(e) => {
                // said once per failing spell, not per line
                if !failing {
                    tracing::error!(file = %target, error = %e, "access log write failed; lines are lost until it succeeds");
                }
                failing = true;
            }
        }
    }
}

/// Write and flush `buf`, then empty it (its lines are lost if the write failed).
fn write_out(sink: &mut Sink, buf: &mut Vec<u8>) -> io::Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    let r = sink.write_all(buf).and_then(|()| sink.flush());
    buf.clear();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_lines_and_counts_them_without_waiting() {
        let metrics = Arc::new(Metrics::new(&[]));
        // a queue of 2 whose reader is stalled (a disk that does not keep up)
        let (lines, rx) = sync_channel(2);
        let w = Writer {
            lines,
            reopen: Arc::new(AtomicBool::new(false)),
            metrics: metrics.clone(),
        };
        let start = std::time::Instant::now();
        for i in 0..5u8 {
            w.send(vec![i]);
        }
        assert!(start.elapsed() < Duration::from_secs(1));
        assert_eq!(metrics.access_log_dropped_count(), 3);
        assert!(
            metrics
                .encode()
                .contains("floodgate_access_log_dropped_total 3"),
            "{}",
            metrics.encode()
        );
        assert_eq!(rx.try_recv().unwrap(), vec![0]);
        assert_eq!(rx.try_recv().unwrap(), vec![1]);
    }

    #[test]
    fn the_writer_thread_writes_lines_and_reopens_a_renamed_file() {
        let dir = std::env::temp_dir().join(format!("fg-access-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.log");
        let metrics = Arc::new(Metrics::new(&[]));
        let w = Writer::start(AccessTarget::File(path.clone()), metrics).unwrap();
        let wait = |p: &std::path::Path, want: &str| {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            loop {
                let text = std::fs::read_to_string(p).unwrap_or_default();
                if text == want {
                    return;
                }
                assert!(std::time::Instant::now() < deadline, "{text:?} != {want:?}");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        w.send(b"one\n".to_vec());
        wait(&path, "one\n");
        std::fs::rename(&path, dir.join("a.log.1")).unwrap();
        w.reopen();
        std::thread::sleep(IDLE_CHECK * 2);
        w.send(b"two\n".to_vec());
        wait(&path, "two\n");
        wait(&dir.join("a.log.1"), "one\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
