//! `jit_cache.Store`: the keyed store (`jit_cache::store`) for a JIT that has its own key and its
//! own bytes (Triton's cache manager, `jit_cache.triton`).
//!
//! `begin` may wait for another producer, so it runs on a helper thread (`blocking.rs`) and
//! Ctrl-C gets through; `get` answers on the calling thread with the GIL released (a hit is a
//! few system calls). Entries and producers are [`ForkOwned`]: a forked child never reads
//! through its parent's pin, nor commits or drops its parent's producer (which holds the key's
//! lock and a staging directory).

use crate::blocking;
use crate::cache::Opening;
use crate::errors;
use crate::process::{ForkOwned, PerProcess};
use jit_cache::store::{Claim, Lookup, Namespace, StoredEntry as RustEntry};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A keyed store on one root (the root a `Cache` uses: its `gc`, `verify` and `stats` cover
/// stored entries too).
#[pyclass(module = "jit_cache._native", frozen)]
pub(crate) struct Store {
    opening: Opening,
    handle: PerProcess<jit_cache::store::Store>,
}

impl Store {
    /// This process's handle (a forked child opens its own on first use).
    fn handle(&self, py: Python<'_>) -> PyResult<jit_cache::store::Store> {
        let opening = &self.opening;
        self.handle
            .get_or_try_init(|| py.detach(|| opening.open_store()))
            .cloned()
            .map_err(|e| e.into_py(py))
    }
}

fn namespace(py: Python<'_>, name: &str) -> PyResult<Namespace> {
    Namespace::new(name).map_err(|e| errors::cache(py, &e))
}

fn duration(what: &str, seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

#[pymethods]
impl Store {
    /// Opens the store at `root` (default: `$JIT_CACHE_DIR`, else `$XDG_CACHE_HOME/jit-cache`,
    /// else `~/.cache/jit-cache`). `team=True` opens a group-shared root (mode 2770);
    /// `remote="redis://..."` or `"s3://bucket/prefix"` fetches missing entries from the fleet
    /// (every file verified) and uploads produced ones.
    #[new]
    #[pyo3(signature = (root=None, *, team=false, remote=None))]
    fn new(
        py: Python<'_>,
        root: Option<PathBuf>,
        team: bool,
        remote: Option<String>,
    ) -> PyResult<Store> {
        let store = Store {
            opening: Opening::new(root, team, remote, None)?,
            handle: PerProcess::new(),
        };
        store.handle(py)?;
        Ok(store)
    }

    /// The root directory, as given.
    #[getter]
    fn root(&self) -> PathBuf {
        self.opening.root.clone()
    }

    /// The root's directory of state files, shared by its hosts (each names its own files by
    /// host, as the identity caches do).
    #[getter]
    fn state_dir(&self, py: Python<'_>) -> PyResult<PathBuf> {
        Ok(self.handle(py)?.state_dir())
    }

    /// Whether the root follows the shared protocol (NFS, Lustre, ...).
    #[getter]
    fn shared(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.handle(py)?.is_shared())
    }

    /// The published entry for `key` in `namespace`, pinned, or `None`. Takes no lock: it
    /// never waits for a producer. An entry that fails its check is `None` with a
    /// `DamagedEntryWarning`.
    fn get(&self, py: Python<'_>, namespace: &str, key: &str) -> PyResult<Option<StoredEntry>> {
        let ns = self::namespace(py, namespace)?;
        let store = self.handle(py)?;
        let key = key.to_string();
        match py.detach(|| store.lookup(&ns, &key)) {
            Ok(Lookup::Found(entry)) => Ok(Some(StoredEntry::new(entry))),
            Ok(Lookup::Absent) => Ok(None),
            Ok(Lookup::Damaged(damage)) => errors::warn_damaged(py, &damage).map(|()| None),
            Err(e) => Err(errors::cache(py, &e)),
        }
    }

    /// The published entry for `key` (a `StoredEntry`), or a `Producer`: this process is then
    /// the key's one producer across threads, processes and hosts until it commits or
    /// abandons. Waits at most `wait` seconds for another producer, then raises `BusyError`
    /// (the caller may produce its bytes without the store).
    #[pyo3(signature = (namespace, key, *, wait))]
    fn begin(&self, py: Python<'_>, namespace: &str, key: &str, wait: f64) -> PyResult<Py<PyAny>> {
        let ns = self::namespace(py, namespace)?;
        let wait = duration("wait", wait)?;
        let store = self.handle(py)?;
        let key = key.to_string();
        match blocking::run(py, move || store.begin(&ns, &key, wait))? {
            Ok(Claim::Ready(entry)) => Ok(Py::new(py, StoredEntry::new(entry))?.into_any()),
            Ok(Claim::Produce(producer)) => Ok(Py::new(py, Producer::new(producer))?.into_any()),
            Err(e) => Err(errors::cache(py, &e)),
        }
    }

    fn __repr__(&self) -> String {
        format!("<jit_cache.Store at {}>", self.opening.root.display())
    }
}

/// A published stored entry: its paths stay valid while it is alive and not closed (eviction
/// skips a pinned entry).
#[pyclass(module = "jit_cache._native", frozen)]
pub(crate) struct StoredEntry {
    entry: Mutex<ForkOwned<Option<RustEntry>>>,
    dir: String,
    key: String,
    /// Every file's name and path, in name order.
    files: Vec<(String, String)>,
}

impl StoredEntry {
    fn new(entry: RustEntry) -> StoredEntry {
        let files = entry
            .files()
            .filter_map(|name| {
                let path = entry.path(name)?;
                Some((name.to_string(), path.to_string_lossy().into_owned()))
            })
            .collect();
        StoredEntry {
            dir: entry.dir().to_string_lossy().into_owned(),
            key: entry.key().to_string(),
            files,
            entry: Mutex::new(ForkOwned::new(Some(entry))),
        }
    }

    /// The pinned entry, cloned (one pin, shared): the lock is not held while it is used, so a
    /// `close` from another thread never waits for a read with the GIL held.
    fn pinned(&self) -> PyResult<RustEntry> {
        let guard = self.entry.lock().unwrap_or_else(|p| p.into_inner());
        guard.get().and_then(Option::clone).ok_or_else(|| {
            PyRuntimeError::new_err(
                "this entry was closed (or opened in another process): open it again",
            )
        })
    }
}

#[pymethods]
impl StoredEntry {
    /// The entry's directory.
    #[getter]
    fn dir(&self) -> &str {
        &self.dir
    }

    /// The caller's key.
    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    /// The names of the entry's files, sorted.
    #[getter]
    fn files(&self) -> Vec<String> {
        self.files.iter().map(|(name, _)| name.clone()).collect()
    }

    /// Every file's path by name: a new dict at each call.
    #[getter]
    fn paths<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let paths = PyDict::new(py);
        for (name, path) in &self.files {
            paths.set_item(PyString::new(py, name), PyString::new(py, path))?;
        }
        Ok(paths)
    }

    /// The path of the file `name` (valid while this entry is alive), or `None`.
    fn path(&self, name: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, path)| path.as_str())
    }

    /// The bytes of the file `name`, checked against their recorded size and digest.
    fn read<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyBytes>> {
        let entry = self.pinned()?;
        let bytes = py
            .detach(|| entry.read(name))
            .map_err(|e| errors::cache(py, &e))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Releases the pin now (the paths may then be evicted).
    fn close(&self) {
        let mut guard = self.entry.lock().unwrap_or_else(|p| p.into_inner());
        drop(guard.take());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        format!("<jit_cache.StoredEntry {} at {}>", self.key, self.dir)
    }
}

/// The one producer of a stored entry: files written into its directory are published together
/// by `commit`; `abandon` (or losing the last reference, or dying) publishes nothing and lets
/// the next waiter produce. As a context manager it commits when the block ends normally and
/// abandons when it raises.
#[pyclass(module = "jit_cache._native", frozen)]
pub(crate) struct Producer {
    /// Shared with a write in flight, which runs without this lock: a `commit` or `abandon`
    /// from another thread never waits on it with the GIL held.
    producer: Mutex<ForkOwned<Option<Arc<jit_cache::store::Producer>>>>,
    dir: String,
    key: String,
}

impl Producer {
    fn new(producer: jit_cache::store::Producer) -> Producer {
        Producer {
            dir: producer.dir().to_string_lossy().into_owned(),
            key: producer.key().to_string(),
            producer: Mutex::new(ForkOwned::new(Some(Arc::new(producer)))),
        }
    }

    /// Whether this process may still commit or abandon it.
    fn open(&self) -> bool {
        let guard = self.producer.lock().unwrap_or_else(|p| p.into_inner());
        guard.get().is_some_and(Option::is_some)
    }

    fn gone() -> PyErr {
        PyRuntimeError::new_err(
            "this producer was committed or abandoned (or made in another process)",
        )
    }
}

#[pymethods]
impl Producer {
    /// The staging directory: files written here (regular files, plain names) are part of the
    /// entry, as `write`'s are.
    #[getter]
    fn dir(&self) -> &str {
        &self.dir
    }

    /// The caller's key.
    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    /// Writes the file `name` of the entry (fsynced by `commit`); returns its staging path.
    fn write(&self, py: Python<'_>, name: &str, data: &Bound<'_, PyAny>) -> PyResult<String> {
        let producer = {
            let guard = self.producer.lock().unwrap_or_else(|p| p.into_inner());
            guard.get().and_then(Option::clone).ok_or_else(Self::gone)?
        };
        let written = if let Ok(bytes) = data.cast::<PyBytes>() {
            let bytes = bytes.as_bytes();
            py.detach(|| producer.write(name, bytes))
        } else {
            let bytes: Vec<u8> = data.extract()?;
            py.detach(|| producer.write(name, &bytes))
        };
        written.map_err(|e| errors::cache(py, &e))?;
        Ok(format!("{}/{name}", self.dir))
    }

    /// Publishes the entry (every file fsynced, `meta.json` last, one rename) and answers with
    /// it, pinned. Raises and publishes nothing on an error.
    fn commit(&self, py: Python<'_>) -> PyResult<StoredEntry> {
        let producer = {
            let mut guard = self.producer.lock().unwrap_or_else(|p| p.into_inner());
            guard.take().flatten().ok_or_else(Self::gone)?
        };
        let producer = Arc::try_unwrap(producer).map_err(|_| {
            PyRuntimeError::new_err(
                "a write to this producer was still running: nothing was committed, and the key \
                 is given up when that write ends",
            )
        })?;
        match blocking::run(py, move || producer.commit())? {
            Ok(entry) => Ok(StoredEntry::new(entry)),
            Err(e) => Err(errors::cache(py, &e)),
        }
    }

    /// Gives the key up with nothing published: the next waiter becomes its producer.
    fn abandon(&self) {
        let mut guard = self.producer.lock().unwrap_or_else(|p| p.into_inner());
        drop(guard.take());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Commits when the block ended normally (unless it already committed or abandoned);
    /// abandons when it raised. The committed entry is not kept: `Store.get` opens it.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some_and(|t| !t.is_none()) {
            self.abandon();
        } else if self.open() {
            drop(self.commit(py)?);
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<jit_cache.Producer {} at {}>", self.key, self.dir)
    }
}
