//! `jit_cache.durable`: `put`, `Batch`, `fsync`, `fsync_dir`, `atomic_rename` and `lock`, over
//! the `durable-fs` crate, with the GIL released around every write, fsync and lock wait.
//! `Batch.commit`'s report is `BatchReport` in `_types.py`.

use crate::errors;
use crate::process::ForkOwned;
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes-like data: `bytes` is borrowed as it is (immutable, so the GIL can be released while
/// it is written); anything else with the buffer protocol is copied once through `bytes()`.
pub(crate) fn as_bytes<'py>(data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    if let Ok(bytes) = data.cast::<PyBytes>() {
        return Ok(bytes.clone());
    }
    if let Ok(array) = data.cast::<PyByteArray>() {
        return Ok(PyBytes::new(data.py(), &array.to_vec()));
    }
    // `bytes(3)` would make three zero bytes and `bytes("x")` needs an encoding: refuse both.
    if data.is_instance_of::<pyo3::types::PyInt>() || data.is_instance_of::<pyo3::types::PyString>()
    {
        return Err(PyTypeError::new_err(format!(
            "data must be bytes-like, not {}",
            data.get_type().name()?
        )));
    }
    let builtins = data.py().import("builtins")?;
    let bytes = builtins.getattr("bytes")?.call1((data,))?;
    Ok(bytes.cast_into::<PyBytes>()?)
}

/// Replaces `path` with `data` durably: a temp beside it, write, fsync, rename, fsync the
/// directory. Readers see the old file or the whole new one, never a part.
#[pyfunction]
#[pyo3(signature = (path, data, mode=None))]
pub(crate) fn put(
    py: Python<'_>,
    path: PathBuf,
    data: &Bound<'_, PyAny>,
    mode: Option<u32>,
) -> PyResult<()> {
    let data = as_bytes(data)?;
    let bytes = data.as_bytes();
    py.detach(|| {
        durable_fs::put_with(&path, |file| {
            if let Some(mode) = mode {
                file.set_permissions(std::fs::Permissions::from_mode(mode))?;
            }
            file.write_all(bytes)
        })
    })
    .map_err(|e| errors::durable(py, &e))
}

/// fsyncs a file or directory.
#[pyfunction]
pub(crate) fn fsync(py: Python<'_>, path: PathBuf) -> PyResult<()> {
    py.detach(|| durable_fs::fsync_path(&path))
        .map_err(|e| errors::durable(py, &e))
}

/// fsyncs a directory (its entries: what a rename or a create changed).
#[pyfunction]
pub(crate) fn fsync_dir(py: Python<'_>, path: PathBuf) -> PyResult<()> {
    py.detach(|| durable_fs::fsync_dir(&path))
        .map_err(|e| errors::durable(py, &e))
}

/// Renames `src` over `dst` and fsyncs the directories involved.
#[pyfunction]
pub(crate) fn atomic_rename(py: Python<'_>, src: PathBuf, dst: PathBuf) -> PyResult<()> {
    py.detach(|| durable_fs::atomic_rename(&src, &dst))
        .map_err(|e| errors::durable(py, &e))
}

/// Many files written at once: each old-or-new on its own, two flushes for the whole batch.
#[pyclass(module = "jit_cache._native", frozen)]
pub(crate) struct Batch {
    batch: Mutex<ForkOwned<Option<durable_fs::Batch>>>,
}

impl Batch {
    /// Runs `f` on the batch. A batch is for one thread at a time: its mutex is only tried,
    /// never waited for (a thread that waited for it holding the GIL would deadlock with the
    /// holder, which releases the GIL while it writes and needs it back to return).
    fn with<T>(
        &self,
        f: impl FnOnce(&mut Option<durable_fs::Batch>) -> PyResult<T>,
    ) -> PyResult<T> {
        let mut guard =
            match self.batch.try_lock() {
                Ok(guard) => guard,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return Err(PyRuntimeError::new_err(
                    "this Batch is in use by another thread: a Batch is for one thread at a time",
                )),
            };
        // A forked child must not use its parent's batch (its temps are the parent's).
        let Some(batch) = guard.get_mut() else {
            return Err(PyRuntimeError::new_err(
                "this Batch belongs to another process (it was made before a fork); make a new one",
            ));
        };
        f(batch)
    }
}

#[pymethods]
impl Batch {
    #[new]
    fn new() -> Self {
        Batch {
            batch: Mutex::new(ForkOwned::new(Some(durable_fs::Batch::new()))),
        }
    }

    /// Writes `data` to a temp beside `path`; renamed over it by `commit`.
    fn put(&self, py: Python<'_>, path: PathBuf, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = as_bytes(data)?;
        let bytes = data.as_bytes();
        self.with(|batch| {
            let batch = batch.as_mut().ok_or_else(|| {
                PyRuntimeError::new_err("this Batch was already committed or discarded")
            })?;
            py.detach(|| batch.put(&path, bytes))
                .map_err(|e| errors::durable(py, &e))
        })
    }

    /// Flushes every staged file, renames each over its target, flushes the renames. Returns
    /// what was done: files, directories, strategy and flushes.
    fn commit<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let batch = self.with(|batch| {
            batch.take().ok_or_else(|| {
                PyRuntimeError::new_err("this Batch was already committed or discarded")
            })
        })?;
        let report = py
            .detach(|| batch.commit())
            .map_err(|e| errors::durable(py, &e))?;
        let out = PyDict::new(py);
        out.set_item("files", report.files)?;
        out.set_item("directories", report.directories)?;
        out.set_item("strategy", crate::states::flush_strategy(report.strategy)?)?;
        out.set_item("flushes", report.flushes)?;
        Ok(out)
    }

    /// Removes every staged temp; nothing is published.
    fn discard(&self, py: Python<'_>) -> PyResult<()> {
        let batch = self.with(|batch| Ok(batch.take()))?;
        py.detach(move || drop(batch));
        Ok(())
    }

    /// How many files are staged.
    fn __len__(&self) -> PyResult<usize> {
        self.with(|batch| Ok(batch.as_ref().map_or(0, |b| b.len())))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Commits when the block ended normally; discards when it raised.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some_and(|t| !t.is_none()) {
            self.discard(py)?;
        } else {
            self.commit(py)?;
        }
        Ok(false)
    }
}

/// A held `flock`, released by `release()` or at the end of a `with` block.
#[pyclass(module = "jit_cache._native", frozen)]
pub(crate) struct Lock {
    path: PathBuf,
    guard: Mutex<ForkOwned<Option<durable_fs::LockGuard>>>,
}

/// Takes a `flock` the way `durable_fs::lock` does, in slices so that Ctrl-C gets through: each
/// slice waits up to [`crate::blocking::SLICE`] with the GIL released, then signals are checked.
pub(crate) fn acquire(
    py: Python<'_>,
    path: &std::path::Path,
    mode: durable_fs::LockMode,
    timeout: Option<Duration>,
) -> PyResult<durable_fs::LockGuard> {
    let started = Instant::now();
    loop {
        let slice = match timeout {
            Some(limit) => limit
                .saturating_sub(started.elapsed())
                .min(crate::blocking::SLICE),
            None => crate::blocking::SLICE,
        };
        let result = py.detach(|| durable_fs::lock(path, mode, durable_fs::Wait::Timeout(slice)));
        match result {
            Ok(guard) => return Ok(guard),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                if timeout.is_some_and(|limit| started.elapsed() >= limit) {
                    let waited = started.elapsed().as_secs_f64();
                    let io = std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("still held by another holder after {waited:.3} s"),
                    );
                    return Err(errors::os_error(py, "lock", path, None, &io));
                }
                py.check_signals()?;
            }
            Err(e) => return Err(errors::durable(py, &e)),
        }
    }
}

#[pymethods]
impl Lock {
    /// The lock file.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Whether this process still holds it.
    #[getter]
    fn held(&self) -> bool {
        let guard = self.guard.lock().unwrap_or_else(|p| p.into_inner());
        guard.get().is_some_and(Option::is_some)
    }

    /// Releases the lock (the lock file stays: deleting it would let two holders lock two
    /// different inodes).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = self.guard.lock().unwrap_or_else(|p| p.into_inner());
        // The mutex is never held while the GIL is released (see `Batch::with`).
        if !guard.is_ours() {
            return Err(PyRuntimeError::new_err(
                "this lock was taken by the parent process before a fork: only the parent can \
                 release it",
            ));
        }
        let held = guard.take().flatten();
        drop(guard);
        match held {
            Some(held) => py
                .detach(|| held.unlock())
                .map_err(|e| errors::durable(py, &e)),
            None => Ok(()),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.release(py)?;
        Ok(false)
    }
}

/// Takes a `flock` on `path` (created when missing, never deleted): exclusive, or shared with
/// `shared=True`; waits forever, or `timeout` seconds and then raises `TimeoutError`.
#[pyfunction]
#[pyo3(signature = (path, timeout=None, *, shared=false))]
pub(crate) fn lock(
    py: Python<'_>,
    path: PathBuf,
    timeout: Option<f64>,
    shared: bool,
) -> PyResult<Lock> {
    let timeout = timeout
        .map(|t| Duration::try_from_secs_f64(t.max(0.0)))
        .transpose()
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("timeout: {e}")))?;
    let mode = if shared {
        durable_fs::LockMode::Shared
    } else {
        durable_fs::LockMode::Exclusive
    };
    let held = acquire(py, &path, mode, timeout)?;
    Ok(Lock {
        path,
        guard: Mutex::new(ForkOwned::new(Some(held))),
    })
}
