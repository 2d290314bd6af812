//! The one tokio runtime of the process (two worker threads, started on first use) that
//! drives every Redis connection, in-flight lease wait and `asyncio` awaitable of the
//! module, and the glue that completes an `asyncio` future from it.
//!
//! A forked child (gunicorn, multiprocessing) notices it is a new process ([`process`]
//! changed, counted by a hook `os.register_at_fork` runs in the child) and starts its own
//! runtime: the parent's worker threads do not exist in the child. Whatever was connected
//! on the parent's runtime (a `RedisStore`'s connection) is connected again on the
//! child's by its owner, which compares [`process`] too.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::{intern, wrap_pyfunction};
use tokio::runtime::{Handle, Runtime};

use crate::inbox;

struct Process {
    process: u64,
    runtime: Runtime,
}

static PROCESS: Mutex<Option<Process>> = Mutex::new(None);

/// How many times `os.fork()` made this process from the one that loaded the module.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// This process, as the number of forks from the process that loaded the module to it:
/// a value saved before a fork differs from the child's. One atomic load, no system
/// call (what is kept per process is checked on every decision).
pub fn process() -> u64 {
    FORKS.load(Ordering::Acquire)
}

/// Run by `os.fork()` in the child, before any other Python code there.
#[pyfunction]
fn after_fork_in_child() {
    FORKS.fetch_add(1, Ordering::AcqRel);
}

/// Counts the forks of this process from now on (`os.register_at_fork`; gunicorn,
/// multiprocessing and `os.fork` itself all fork through it).
pub fn watch_forks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let hook = wrap_pyfunction!(after_fork_in_child, m)?;
    let kwargs = pyo3::types::PyDict::new(m.py());
    kwargs.set_item("after_in_child", hook)?;
    m.py()
        .import("os")?
        .call_method("register_at_fork", (), Some(&kwargs))?;
    Ok(())
}

/// The runtime of this process, started on first use (again after a fork).
pub fn handle() -> PyResult<Handle> {
    let mut guard = PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let process = process();
    if guard.as_ref().is_none_or(|p| p.process != process) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("floodgate-io")
            .enable_all()
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start the I/O threads: {e}")))?;
        if let Some(stale) = guard.replace(Process { process, runtime }) {
            // Inherited through fork: its worker threads do not exist in this process, so
            // dropping it could wait forever. Leak it (once per fork).
            std::mem::forget(stale);
        }
    }
    Ok(guard.as_ref().expect("set above").runtime.handle().clone())
}

/// Run `fut` to its end on the runtime, the GIL released meanwhile.
pub fn block_on<T: Send>(py: Python<'_>, fut: impl Future<Output = T> + Send) -> PyResult<T> {
    let handle = handle()?;
    Ok(py.detach(|| handle.block_on(fut)))
}

/// Run `fut` to its end, first on the calling thread with the GIL held: a future that
/// completes on its first poll (an in-process decision, which never waits) costs no
/// hand-off to the runtime and no release of the GIL (each a microsecond or more). One
/// that would wait is driven to its end by [`block_on`], the GIL released meanwhile.
pub fn run_now<T: Send>(py: Python<'_>, fut: impl Future<Output = T> + Send) -> PyResult<T> {
    let handle = handle()?;
    let mut fut = std::pin::pin!(fut);
    {
        // in the runtime's context: a timer or task made on the first poll belongs to it
        let _in = handle.enter();
        let mut cx = Context::from_waker(Waker::noop());
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return Ok(out);
        }
    }
    // polled again by block_on, with a waker of its own (a future wakes its latest waker)
    Ok(py.detach(|| handle.block_on(fut)))
}

/// An `asyncio` future of the running event loop that `fut`, spawned on the runtime,
/// completes. The result is queued in the loop's [`inbox`] and made a Python object on
/// the loop's thread (the I/O threads never wait for the GIL; one wake of the loop
/// completes every result finished meanwhile); a loop without an inbox is called back
/// through `loop.call_soon_threadsafe`. A future cancelled meanwhile is left alone;
/// `fut` still runs to its end.
pub fn awaitable<'py, T>(
    py: Python<'py>,
    fut: impl Future<Output = PyResult<T>> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let event_loop = running_loop(py)?;
    let future = event_loop.call_method0(intern!(py, "create_future"))?;
    let handle = handle()?;
    let fu = future.clone().unbind();
    if let Some(inbox) = inbox::of(&event_loop, process()) {
        handle.spawn(async move {
            let out = fut.await;
            inbox.push(fu, Box::new(move |py| out.and_then(|v| v.into_py_any(py))));
        });
        return Ok(future);
    }
    let lp = event_loop.unbind();
    handle.spawn(async move {
        let out = fut.await;
        Python::attach(|py| {
            let (lp, fu) = (lp.bind(py), fu.bind(py));
            let (ok, value) = match out.and_then(|v| v.into_py_any(py)) {
                Ok(v) => (true, v),
                Err(e) => (false, e.into_value(py).into_any()),
            };
            let done = Complete {
                future: fu.clone().unbind(),
                ok,
                value,
            };
            // the loop may be closed by now: nothing is waiting then
            let _ = lp.call_method1("call_soon_threadsafe", (done,));
        });
    });
    Ok(future)
}

/// An `asyncio` future of the running event loop holding `value` already: no hand-off
/// to the I/O threads for a result known at once (an in-process decision).
pub fn ready<'py, T>(py: Python<'py>, value: T) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a>,
{
    let future = running_loop(py)?.call_method0(intern!(py, "create_future"))?;
    future.call_method1(intern!(py, "set_result"), (value.into_py_any(py)?,))?;
    Ok(future)
}

/// `asyncio.get_running_loop()` (a `RuntimeError` outside a coroutine).
fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static GET: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    GET.get_or_try_init(py, || {
        py.import("asyncio")?
            .getattr("get_running_loop")
            .map(Bound::unbind)
    })?
    .bind(py)
    .call0()
}

/// The callback that sets an `asyncio` future's result or exception on its loop's thread,
/// unless the future is done (cancelled) already.
#[pyclass(frozen)]
struct Complete {
    future: Py<PyAny>,
    ok: bool,
    value: Py<PyAny>,
}

#[pymethods]
impl Complete {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let f = self.future.bind(py);
        if f.call_method0("done")?.is_truthy()? {
            return Ok(());
        }
        let method = if self.ok {
            "set_result"
        } else {
            "set_exception"
        };
        f.call_method1(method, (self.value.clone_ref(py),))?;
        Ok(())
    }
}
