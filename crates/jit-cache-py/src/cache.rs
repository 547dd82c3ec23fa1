//! `jit_cache.Cache`: the kernel cache, its answers and its maintenance calls.
//!
//! It uses `spec.rs` (requests), `pack.rs` (packs), `convert.rs` and `states.rs`, and none of
//! them uses it; `store.rs`, the layer above, opens its store through [`Opening`].
//!
//! Every call that may compile or wait runs on a helper thread (`blocking.rs`) so that Ctrl-C
//! gets through; the handle is made once per process (`process.rs`), so a forked child opens
//! its own and never continues a build its parent's threads had started.

use crate::blocking;
use crate::convert::to_dict;
use crate::errors;
use crate::pack;
use crate::process::{ForkOwned, PerProcess};
use crate::spec;
use crate::states;
use jit_cache::{Answer as RustAnswer, Artifact, Outcome};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a handle was asked for: enough to open it again in a forked child. A `Store` is opened
/// the same way, as the keyed store of a cache handle on its root.
#[derive(Clone)]
pub(crate) struct Opening {
    pub(crate) root: PathBuf,
    team: bool,
    remote: Option<String>,
    nvcc: Option<PathBuf>,
}

impl Opening {
    /// `root`, else the default root (`$JIT_CACHE_DIR`, `$XDG_CACHE_HOME/jit-cache`,
    /// `~/.cache/jit-cache`).
    pub(crate) fn new(
        root: Option<PathBuf>,
        team: bool,
        remote: Option<String>,
        nvcc: Option<PathBuf>,
    ) -> PyResult<Opening> {
        let root = match root {
            Some(root) => root,
            None => jit_cache::default_root().ok_or_else(|| {
                PyValueError::new_err(
                    "no cache directory: pass root, or set JIT_CACHE_DIR, XDG_CACHE_HOME or HOME",
                )
            })?,
        };
        Ok(Opening {
            root,
            team,
            remote,
            nvcc,
        })
    }

    /// The keyed store on the root, with the remote this opening names.
    pub(crate) fn open_store(&self) -> Result<jit_cache::store::Store, OpenError> {
        self.open()?.store().map_err(OpenError::Cache)
    }

    fn open(&self) -> Result<Arc<jit_cache::Cache>, OpenError> {
        let mode = if self.team {
            jit_cache::RootMode::Team
        } else {
            jit_cache::RootMode::Private
        };
        let mut options = jit_cache::CacheOptions::default().mode(mode);
        if let Some(path) = &self.nvcc {
            let nvcc = nvcc::Nvcc::at(path).map_err(|e| OpenError::Setting(e.to_string()))?;
            options = options.nvcc(nvcc);
        }
        if let Some(url) = &self.remote {
            let mut settings = jit_cache_fleet::RemoteSettings::from_env()
                .map_err(|e| OpenError::Setting(e.to_string()))?;
            settings.url = Some(url.clone());
            if let Some(remote) =
                jit_cache_fleet::remote(settings).map_err(|e| OpenError::Setting(e.to_string()))?
            {
                options = options.remote(remote);
            }
        }
        jit_cache::Cache::open_with(&self.root, options)
            .map(Arc::new)
            .map_err(OpenError::Cache)
    }
}

/// Why a handle could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// A setting (nvcc, remote) is unusable.
    #[error("{0}")]
    Setting(String),
    /// The cache refused the root.
    #[error(transparent)]
    Cache(jit_cache::Error),
}

impl OpenError {
    pub(crate) fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            OpenError::Setting(reason) => PyValueError::new_err(reason),
            OpenError::Cache(e) => errors::cache(py, &e),
        }
    }
}

/// A kernel cache rooted at one directory.
#[pyclass(module = "jit_cache._native", frozen)]
pub(crate) struct Cache {
    opening: Opening,
    handle: PerProcess<Arc<jit_cache::Cache>>,
}

impl Cache {
    /// This process's handle (a forked child opens its own on first use).
    fn handle(&self, py: Python<'_>) -> PyResult<Arc<jit_cache::Cache>> {
        let opening = &self.opening;
        self.handle
            .get_or_try_init(|| py.detach(|| opening.open()))
            .cloned()
            .map_err(|e| e.into_py(py))
    }
}

/// A compiled kernel: `.path` stays valid while the answer is alive (or until `close()`).
#[pyclass(module = "jit_cache._native", frozen)]
pub(crate) struct Answer {
    artifact: Mutex<ForkOwned<Option<Artifact>>>,
    path: String,
    outcome: &'static str,
    reasons: Vec<String>,
    warning: Option<String>,
    name: String,
    data: PyOnceLock<Py<PyBytes>>,
}

impl Answer {
    fn new(answer: RustAnswer, name: String) -> PyResult<Answer> {
        let outcome = states::outcome(&answer.outcome)?;
        let reasons = match &answer.outcome {
            Outcome::Rebuilt { reasons } => reasons.iter().map(ToString::to_string).collect(),
            _ => Vec::new(),
        };
        Ok(Answer {
            path: answer.artifact.path().to_string_lossy().into_owned(),
            artifact: Mutex::new(ForkOwned::new(Some(answer.artifact))),
            outcome,
            reasons,
            warning: answer.warning,
            name,
            data: PyOnceLock::new(),
        })
    }
}

#[pymethods]
impl Answer {
    /// The artifact's path, valid while this answer is alive and not closed.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// The artifact's bytes.
    #[getter]
    fn data(&self, py: Python<'_>) -> PyResult<Py<PyBytes>> {
        self.data
            .get_or_try_init(py, || {
                let guard = self.artifact.lock().unwrap_or_else(|p| p.into_inner());
                match guard.get().and_then(Option::as_ref) {
                    Some(artifact) => Ok(PyBytes::new(py, artifact.bytes()).unbind()),
                    None => Err(PyRuntimeError::new_err(
                        "this answer was closed (or made in another process): its bytes are gone",
                    )),
                }
            })
            .map(|b| b.clone_ref(py))
    }

    /// `"hit"`, `"built"`, `"rebuilt"` or `"fetched"`.
    #[getter]
    fn outcome(&self) -> &'static str {
        self.outcome
    }

    /// Why an earlier variant could not be used (for `"rebuilt"`).
    #[getter]
    fn reasons(&self) -> Vec<String> {
        self.reasons.clone()
    }

    /// Set when the artifact was compiled privately, uncached: says why.
    #[getter]
    fn warning(&self) -> Option<String> {
        self.warning.clone()
    }

    /// The kernel's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Releases the pin on the entry now (the path may then be evicted).
    fn close(&self) {
        let mut guard = self.artifact.lock().unwrap_or_else(|p| p.into_inner());
        drop(guard.take());
    }

    fn __fspath__(&self) -> &str {
        &self.path
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
        format!(
            "<jit_cache.Answer {} {} at {}>",
            self.name, self.outcome, self.path
        )
    }
}

#[pymethods]
impl Cache {
    /// Opens the cache at `root` (default: `$JIT_CACHE_DIR`, else `$XDG_CACHE_HOME/jit-cache`,
    /// else `~/.cache/jit-cache`). `team=True` opens a group-shared root (mode 2770);
    /// `remote="redis://..."` or `"s3://bucket/prefix"` (with the `AWS_*` variables) shares
    /// kernels with other hosts; `nvcc` names the compiler
    /// (default: `NVCC`, `CUDA_HOME`, `PATH`).
    #[new]
    #[pyo3(signature = (root=None, *, team=false, remote=None, nvcc=None))]
    fn new(
        py: Python<'_>,
        root: Option<PathBuf>,
        team: bool,
        remote: Option<String>,
        nvcc: Option<PathBuf>,
    ) -> PyResult<Cache> {
        let cache = Cache {
            opening: Opening::new(root, team, remote, nvcc)?,
            handle: PerProcess::new(),
        };
        cache.handle(py)?;
        Ok(cache)
    }

    /// The root directory.
    #[getter]
    fn root(&self) -> PathBuf {
        self.opening.root.clone()
    }

    /// The compiled kernel for `source` (a path, a `Source`, or a `KernelSpec`; the options
    /// are `KernelSpec`'s): from memory, from the cache, or compiled once however many threads
    /// and processes ask at once. Raises `CompileError` when it does not compile.
    #[pyo3(signature = (source, **options))]
    fn get_or_build(
        &self,
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Answer> {
        let spec = spec::request(source, options)?;
        let handle = self.handle(py)?;
        let name = spec.name.clone();
        match blocking::run(py, move || handle.get_or_build(&spec))? {
            Ok(answer) => Answer::new(answer, name),
            Err(e) => Err(errors::cache(py, &e)),
        }
    }

    /// Forgets a recorded compile failure for the request and compiles again (arguments as
    /// `get_or_build`'s).
    #[pyo3(signature = (source, **options))]
    fn retry(
        &self,
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Answer> {
        let spec = spec::request(source, options)?;
        let handle = self.handle(py)?;
        let name = spec.name.clone();
        match blocking::run(py, move || handle.retry(&spec))? {
            Ok(answer) => Answer::new(answer, name),
            Err(e) => Err(errors::cache(py, &e)),
        }
    }

    /// What `get_or_build` would do, and why, without compiling (arguments as
    /// `get_or_build`'s; a timeout is ignored): a dict with `action` (`"hit"`, `"build"`,
    /// `"rebuild"` with `reasons`, `"failed_before"` with `failure`).
    #[pyo3(signature = (source, **options))]
    fn explain<'py>(
        &self,
        py: Python<'py>,
        source: &Bound<'py, PyAny>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let spec = spec::request(source, options)?;
        let handle = self.handle(py)?;
        match blocking::run(py, move || handle.explain(&spec))? {
            Ok(explanation) => to_dict(py, &explanation),
            Err(e) => Err(errors::cache(py, &e)),
        }
    }

    /// Builds many kernels with at most `parallelism` compiles at once. Each request is a path,
    /// a `Source`, a `KernelSpec`, or a dict of `get_or_build`'s arguments (with `"source"`).
    /// Returns, in order, an `Answer` or the exception (`CompileError`, `CacheError`) for each:
    /// one failure never hides the others.
    #[pyo3(signature = (requests, *, parallelism=None))]
    fn build_many<'py>(
        &self,
        py: Python<'py>,
        requests: &Bound<'py, PyAny>,
        parallelism: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        let specs = requests
            .try_iter()?
            .map(|request| spec::many_request(&request?))
            .collect::<PyResult<Vec<_>>>()?;
        let handle = self.handle(py)?;
        let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        let results = blocking::run(py, move || handle.build_many(&specs, parallelism, &|_| {}))?;
        let out = PyList::empty(py);
        for (result, name) in results.into_iter().zip(names) {
            match result {
                Ok(answer) => out.append(Answer::new(answer, name)?)?,
                Err(e) => out.append(errors::cache(py, &e).into_value(py))?,
            }
        }
        Ok(out)
    }

    /// Entries, bytes, builds and failures recorded, hits and builds counted, the filesystem
    /// and the protocol chosen for it: a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let handle = self.handle(py)?;
        match blocking::run(py, move || {
            // The counts of this process are saved first, so they are in the figures.
            handle.save_state();
            handle.stats()
        })? {
            Ok(stats) => to_dict(py, &stats),
            Err(e) => Err(errors::cache(py, &e)),
        }
    }

    /// Evicts entries past `max_size` bytes (least recently used first) or older than
    /// `max_age` seconds; entries in use are skipped. Returns the report as a dict.
    #[pyo3(signature = (*, max_size=None, max_age=None))]
    fn gc<'py>(
        &self,
        py: Python<'py>,
        max_size: Option<u64>,
        max_age: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // `GcPolicy` has no builder: fields set on the default survive `#[non_exhaustive]`,
        // which a struct literal would not.
        #[allow(clippy::field_reassign_with_default)]
        let policy = {
            let mut policy = jit_cache::GcPolicy::default();
            policy.max_bytes = max_size;
            policy.max_age = max_age
                .map(Duration::try_from_secs_f64)
                .transpose()
                .map_err(|e| PyValueError::new_err(format!("max_age: {e}")))?;
            policy
        };
        let handle = self.handle(py)?;
        match blocking::run(py, move || handle.gc(policy))? {
            Ok(report) => to_dict(py, &report),
            Err(e) => Err(errors::cache(py, &e)),
        }
    }

    /// Checks every entry's bytes against its digest; corrupt ones are moved aside. Returns
    /// the report as a dict.
    fn verify<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let handle = self.handle(py)?;
        match blocking::run(py, move || handle.verify())? {
            Ok(report) => to_dict(py, &report),
            Err(e) => Err(errors::cache(py, &e)),
        }
    }

    /// Writes the entries taken into a pack at `path` (replaced durably if it exists): all of
    /// them by default, or those whose name matches the glob `name`, built for one of `arch`
    /// (`"sm_90"` or a list), of one of `kind` (`"cubin"`, ..., `"stored"`). Damaged entries
    /// are left out and listed. Returns the report as a dict.
    #[pyo3(signature = (path, *, name=None, arch=None, kind=None))]
    fn export_pack<'py>(
        &self,
        py: Python<'py>,
        path: PathBuf,
        name: Option<String>,
        arch: Option<&Bound<'py, PyAny>>,
        kind: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let filter = pack::filter(name, arch, kind)?;
        pack::export(py, self.handle(py)?, path, filter)
    }

    /// Imports the pack at `path`: every entry is verified and matched against this host
    /// before it is published, never replacing one; entries from another toolchain or header
    /// set are skipped and listed. Raises `PackError` (with `offset` and `entry`) for a damaged
    /// pack. Returns the report as a dict.
    fn import_pack<'py>(&self, py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyAny>> {
        pack::import(py, self.handle(py)?, path)
    }

    /// Saves this process's counts and stat cache now (as dropping the handle does).
    fn save_state(&self, py: Python<'_>) -> PyResult<()> {
        let handle = self.handle(py)?;
        py.detach(|| handle.save_state());
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("<jit_cache.Cache at {}>", self.opening.root.display())
    }
}
