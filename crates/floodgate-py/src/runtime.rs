//! The one tokio runtime of the process (two worker threads, started on first use) that
//! drives every Redis connection, in-flight lease wait and `asyncio` awaitable of the
//! module, and the glue that completes an `asyncio` future from it.
//!
//! A forked child (gunicorn, multiprocessing) notices the new process id and starts its
//! own runtime: the parent's worker threads do not exist in the child. Whatever was
//! connected on the parent's runtime (a `RedisStore`'s connection) is connected again on
//! the child's by its owner, which compares [`pid`]s too.

use std::future::Future;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::runtime::{Handle, Runtime};

struct Process {
    pid: u32,
    runtime: Runtime,
}

static PROCESS: Mutex<Option<Process>> = Mutex::new(None);

/// This process's id.
pub fn pid() -> u32 {
    std::process::id()
}

/// The runtime of this process, started on first use (again after a fork).
pub fn handle() -> PyResult<Handle> {
    let mut guard = PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let pid = pid();
    if guard.as_ref().is_none_or(|p| p.pid != pid) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("floodgate-io")
            .enable_all()
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start the I/O threads: {e}")))?;
        if let Some(stale) = guard.replace(Process { pid, runtime }) {
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
/// completes (from the runtime's thread, through `loop.call_soon_threadsafe`). A future
/// cancelled meanwhile is left alone; `fut` still runs to its end.
pub fn awaitable<'py, T>(
    py: Python<'py>,
    fut: impl Future<Output = PyResult<T>> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let asyncio = py.import("asyncio")?;
    let event_loop = asyncio.call_method0("get_running_loop")?;
    let future = event_loop.call_method0("create_future")?;
    let (lp, fu) = (event_loop.unbind(), future.clone().unbind());
    handle()?.spawn(async move {
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
