//! Completing `asyncio` futures from the I/O threads without taking the GIL there.
//!
//! Each event loop that awaits the module gets one [`Inbox`]: a queue of finished
//! results and a socket pair whose reading end the loop watches (`loop.add_reader`). An
//! I/O thread pushes a result and, when the queue was empty, writes one byte; the loop,
//! on its own thread with the GIL it holds anyway, reads the byte, takes the whole queue
//! and completes every future in it. So the I/O threads never wait for the GIL (which a
//! busy event loop gives up only every `sys.getswitchinterval()`, 5 ms by default), and a
//! burst of round trips finishing together costs the loop one wake, not one each.
//!
//! A loop without `add_reader` (the proactor loop on Windows) or that cannot be weakly
//! referenced gets no inbox: its futures are completed through `call_soon_threadsafe`,
//! called from the I/O thread with the GIL taken there (see `runtime::awaitable`).

use std::sync::{Arc, Mutex};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyWeakrefReference;

/// A result made on the I/O threads, turned into its Python object on the loop's thread.
pub type Make = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// One finished awaitable: its `asyncio` future and the result to set.
struct Done {
    future: Py<PyAny>,
    make: Make,
}

impl Done {
    /// Sets the future's result (or exception) unless it is done (cancelled) already.
    fn complete(self, py: Python<'_>) {
        let f = self.future.bind(py);
        match f
            .call_method0(intern!(py, "done"))
            .and_then(|d| d.is_truthy())
        {
            Ok(false) => {}
            Ok(true) => return,
            Err(e) => return e.write_unraisable(py, Some(f)),
        }
        let set = match (self.make)(py) {
            Ok(v) => f.call_method1(intern!(py, "set_result"), (v,)),
            Err(e) => f.call_method1(intern!(py, "set_exception"), (e.into_value(py),)),
        };
        if let Err(e) = set {
            e.write_unraisable(py, Some(f));
        }
    }
}

#[derive(Default)]
struct Queue {
    done: Vec<Done>,
    /// A byte is written and not yet taken: the loop will drain.
    signalled: bool,
}

/// The finished results of one event loop, and the socket pair that wakes it.
pub struct Inbox {
    queue: Mutex<Queue>,
    wake: wake::Pair,
}

impl Inbox {
    /// Queues `future`'s result; wakes the loop when the queue was empty (one byte for
    /// a whole batch). Called on the I/O threads, without the GIL.
    pub fn push(&self, future: Py<PyAny>, make: Make) {
        let first = {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.done.push(Done { future, make });
            !std::mem::replace(&mut q.signalled, true)
        };
        if first {
            self.wake.signal();
        }
    }

    /// Everything finished so far. The wake bytes are read first: a push after the
    /// queue is taken writes a byte of its own, so none is left without a wake.
    fn take(&self) -> Vec<Done> {
        self.wake.clear();
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.signalled = false;
        std::mem::take(&mut q.done)
    }
}

/// The reader the loop calls when the inbox's socket is readable: completes every
/// finished future.
#[pyclass(frozen)]
struct Drain(Arc<Inbox>);

#[pymethods]
impl Drain {
    fn __call__(&self, py: Python<'_>) {
        for d in self.0.take() {
            d.complete(py);
        }
    }
}

/// An event loop with its inbox (`None`: the loop takes no reader), in the process
/// (fork generation) it was registered in.
struct Entry {
    process: u64,
    event_loop: Py<PyWeakrefReference>,
    inbox: Option<Arc<Inbox>>,
}

/// The loops seen so far; an entry goes when its loop is gone.
static LOOPS: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// The inbox of `event_loop` (the running loop) in `process` (`runtime::process`: the
/// inboxes of the parent of a forked process are not this one's), made and registered
/// with the loop on first use; `None` when the loop cannot take one (its futures are then
/// completed through `call_soon_threadsafe`).
pub fn of(event_loop: &Bound<'_, PyAny>, process: u64) -> Option<Arc<Inbox>> {
    let py = event_loop.py();
    {
        let loops = LOOPS.lock().unwrap_or_else(|e| e.into_inner());
        for e in loops.iter() {
            if e.process == process
                && e.event_loop
                    .bind(py)
                    .upgrade()
                    .is_some_and(|l| l.is(event_loop))
            {
                return e.inbox.clone();
            }
        }
    }
    // A new loop. No lock is held while Python runs (add_reader): Python code may
    // release the GIL, and a thread holding the GIL may be waiting on the lock.
    let weak = PyWeakrefReference::new(event_loop).ok()?.unbind();
    let inbox = register(event_loop);
    let mut loops = LOOPS.lock().unwrap_or_else(|e| e.into_inner());
    // the loops gone meanwhile, and those of the parent of a forked process (whose
    // inherited sockets this process does not read)
    let gone: Vec<Entry> = {
        let (keep, gone) = std::mem::take(&mut *loops)
            .into_iter()
            .partition(|e| e.process == process && e.event_loop.bind(py).upgrade().is_some());
        *loops = keep;
        gone
    };
    loops.push(Entry {
        process,
        event_loop: weak,
        inbox: inbox.clone(),
    });
    drop(loops);
    drop(gone);
    inbox
}

/// A new inbox, its socket watched by `event_loop`; `None` when the loop refuses.
fn register(event_loop: &Bound<'_, PyAny>) -> Option<Arc<Inbox>> {
    let inbox = Arc::new(Inbox {
        queue: Mutex::new(Queue::default()),
        wake: wake::Pair::new()?,
    });
    let drain = Drain(inbox.clone());
    let py = event_loop.py();
    event_loop
        .call_method1(intern!(py, "add_reader"), (inbox.wake.fd(), drain))
        .ok()?;
    Some(inbox)
}

#[cfg(unix)]
mod wake {
    use std::io::{ErrorKind, Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    /// A connected socket pair, both ends non-blocking: the I/O threads write to one,
    /// the loop reads the other.
    pub struct Pair {
        tx: UnixStream,
        rx: UnixStream,
    }

    impl Pair {
        pub fn new() -> Option<Pair> {
            let (tx, rx) = UnixStream::pair().ok()?;
            tx.set_nonblocking(true).ok()?;
            rx.set_nonblocking(true).ok()?;
            Some(Pair { tx, rx })
        }

        /// The descriptor the loop watches.
        pub fn fd(&self) -> i32 {
            self.rx.as_raw_fd()
        }

        /// Makes the reading end readable. A full socket buffer is readable already.
        pub fn signal(&self) {
            let _ = (&self.tx).write(&[1]);
        }

        /// Reads every byte written so far.
        pub fn clear(&self) {
            let mut buf = [0u8; 64];
            loop {
                match (&self.rx).read(&mut buf) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        }
    }
}

#[cfg(not(unix))]
mod wake {
    /// No socket pair here: every loop completes through `call_soon_threadsafe`.
    pub struct Pair;

    impl Pair {
        pub fn new() -> Option<Pair> {
            None
        }
        pub fn fd(&self) -> i32 {
            -1
        }
        pub fn signal(&self) {}
        pub fn clear(&self) {}
    }
}
