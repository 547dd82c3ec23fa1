//! `jit_cache.Cache`: the kernel cache, its answers and its maintenance calls.
//!
//! Every call that may compile or wait runs on a helper thread (`blocking.rs`) so that Ctrl-C
//! gets through; the handle is made once per process (`process.rs`), so a forked child opens
//! its own and never continues a build its parent's threads had started.

use crate::blocking;
use crate::errors;
use crate::process::{ForkOwned, PerProcess};
use jit_cache::{Answer as RustAnswer, Artifact, KernelSpec, Outcome, OutputKind};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where a kernel's source comes from: a file, or text compiled from a private copy.
#[pyclass(module = "jit_cache._native", frozen)]
#[derive(Clone)]
pub(crate) struct Source {
    source: SourceKind,
}

#[derive(Clone)]
enum SourceKind {
    File(PathBuf),
    Text { file_name: String, text: String },
}

#[pymethods]
impl Source {
    /// Source text compiled as a file named `name` (such as `"scale.cu"`); quoted includes then
    /// resolve only through the include directories.
    #[staticmethod]
    fn text(name: String, text: String) -> Source {
        Source {
            source: SourceKind::Text {
                file_name: name,
                text,
            },
        }
    }

    /// A source file; quoted includes resolve relative to its directory, as nvcc does.
    #[staticmethod]
    fn file(path: PathBuf) -> Source {
        Source {
            source: SourceKind::File(path),
        }
    }

    fn __repr__(&self) -> String {
        match &self.source {
            SourceKind::File(path) => format!("Source.file({:?})", path.display().to_string()),
            SourceKind::Text { file_name, text } => {
                format!("Source.text({file_name:?}, <{} bytes>)", text.len())
            }
        }
    }
}

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
            let mut settings = jit_cache_redis::RemoteSettings::from_env()
                .map_err(|e| OpenError::Setting(e.to_string()))?;
            settings.url = Some(url.clone());
            if let Some(remote) =
                jit_cache_remote::remote(settings).map_err(|e| OpenError::Setting(e.to_string()))?
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

/// Reads `defines`: `"NAME"` / `"NAME=VALUE"` strings, `(name, value)` pairs, or a mapping.
fn defines(value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, Option<String>)>> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let items: Vec<Bound<'_, PyAny>> = if let Ok(map) = value.cast::<PyDict>() {
        map.items().iter().collect()
    } else {
        value.try_iter()?.collect::<PyResult<_>>()?
    };
    let mut out = Vec::new();
    for item in items {
        if let Ok(text) = item.extract::<String>() {
            match text.split_once('=') {
                Some((name, value)) => out.push((name.to_string(), Some(value.to_string()))),
                None => out.push((text, None)),
            }
        } else if let Ok(pair) = item.cast::<PyTuple>() {
            let (name, value): (String, Option<Bound<'_, PyAny>>) = pair.extract()?;
            let value = value.map(|v| v.str().map(|s| s.to_string())).transpose()?;
            out.push((name, value));
        } else {
            return Err(PyTypeError::new_err(
                "defines: each item is \"NAME\", \"NAME=VALUE\" or a (name, value) pair",
            ));
        }
    }
    Ok(out)
}

/// Reads a list of strings, refusing a lone string (which would be taken letter by letter).
pub(crate) fn strings(what: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    match value {
        None => Ok(Vec::new()),
        Some(v) if v.is_instance_of::<PyString>() => Ok(vec![v.extract()?]),
        Some(v) => v
            .try_iter()?
            .map(|item| item?.extract::<String>())
            .collect::<PyResult<_>>()
            .map_err(|e| PyTypeError::new_err(format!("{what}: {e}"))),
    }
}

fn output_kind(kind: &str) -> PyResult<OutputKind> {
    match kind {
        "cubin" => Ok(OutputKind::Cubin),
        "ptx" => Ok(OutputKind::Ptx),
        "fatbin" => Ok(OutputKind::Fatbin),
        other => Err(PyValueError::new_err(format!(
            "kind must be \"cubin\", \"ptx\" or \"fatbin\", not {other:?}"
        ))),
    }
}

/// The keyword arguments of one request, as `get_or_build`, `explain` and `build_many` take.
#[allow(clippy::too_many_arguments)]
fn spec(
    source: &Bound<'_, PyAny>,
    include_dirs: Option<&Bound<'_, PyAny>>,
    defines_arg: Option<&Bound<'_, PyAny>>,
    flags: Option<&Bound<'_, PyAny>>,
    arch: Option<&Bound<'_, PyAny>>,
    kind: &str,
    name: Option<String>,
    timeout: Option<f64>,
) -> PyResult<KernelSpec> {
    let mut spec = if let Ok(source) = source.cast::<Source>() {
        match &source.get().source {
            SourceKind::File(path) => KernelSpec::from_file(path.clone()),
            SourceKind::Text { file_name, text } => {
                let stem = std::path::Path::new(file_name)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| file_name.clone());
                KernelSpec::from_text(stem, file_name.clone(), text.clone())
            }
        }
    } else {
        let path: PathBuf = source.extract().map_err(|_| {
            PyTypeError::new_err("source must be a path (str or os.PathLike) or a jit_cache.Source")
        })?;
        KernelSpec::from_file(path)
    };
    if let Some(dirs) = include_dirs {
        if dirs.is_instance_of::<PyString>() {
            spec = spec.include_dir(dirs.extract::<PathBuf>()?);
        } else {
            for dir in dirs.try_iter()? {
                spec = spec.include_dir(dir?.extract::<PathBuf>()?);
            }
        }
    }
    for (name, value) in defines(defines_arg)? {
        spec = spec.define(name, value.as_deref());
    }
    for flag in strings("flags", flags)? {
        spec = spec.flag(flag);
    }
    let arches = strings("arch", arch)?;
    if !arches.is_empty() {
        spec = spec.arches(arches);
    }
    spec = spec.kind(output_kind(kind)?);
    if let Some(name) = name {
        spec = spec.name(name);
    }
    if let Some(seconds) = timeout {
        let timeout = Duration::try_from_secs_f64(seconds)
            .map_err(|e| PyValueError::new_err(format!("timeout: {e}")))?;
        spec = spec.timeout(timeout);
    }
    Ok(spec)
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
    fn new(answer: RustAnswer, name: String) -> Answer {
        let (outcome, reasons) = match &answer.outcome {
            Outcome::Hit => ("hit", Vec::new()),
            Outcome::Built => ("built", Vec::new()),
            Outcome::Rebuilt { reasons } => {
                ("rebuilt", reasons.iter().map(ToString::to_string).collect())
            }
            Outcome::Fetched => ("fetched", Vec::new()),
            _ => ("other", Vec::new()),
        };
        Answer {
            path: answer.artifact.path().to_string_lossy().into_owned(),
            artifact: Mutex::new(ForkOwned::new(Some(answer.artifact))),
            outcome,
            reasons,
            warning: answer.warning,
            name,
            data: PyOnceLock::new(),
        }
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

/// A JSON-serialisable report as a Python dict (through `json.loads`: one codec for all).
pub(crate) fn to_dict<'py>(
    py: Python<'py>,
    value: &impl serde::Serialize,
) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value)
        .map_err(|e| PyRuntimeError::new_err(format!("jit_cache: encode a report: {e}")))?;
    py.import("json")?.getattr("loads")?.call1((text,))
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

    /// The compiled kernel for `source`: from memory, from the cache, or compiled once however
    /// many threads and processes ask at once. Raises `CompileError` when it does not compile.
    #[pyo3(signature = (source, *, include_dirs=None, defines=None, flags=None, arch=None, kind="cubin", name=None, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn get_or_build(
        &self,
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        include_dirs: Option<&Bound<'_, PyAny>>,
        defines: Option<&Bound<'_, PyAny>>,
        flags: Option<&Bound<'_, PyAny>>,
        arch: Option<&Bound<'_, PyAny>>,
        kind: &str,
        name: Option<String>,
        timeout: Option<f64>,
    ) -> PyResult<Answer> {
        let spec = spec(
            source,
            include_dirs,
            defines,
            flags,
            arch,
            kind,
            name,
            timeout,
        )?;
        let handle = self.handle(py)?;
        let name = spec.name.clone();
        let result = blocking::run(py, move || handle.get_or_build(&spec))?;
        match result {
            Ok(answer) => Ok(Answer::new(answer, name)),
            Err(e) => Err(errors::cache(py, &e)),
        }
    }

    /// Forgets a recorded compile failure for the request and compiles again.
    #[pyo3(signature = (source, *, include_dirs=None, defines=None, flags=None, arch=None, kind="cubin", name=None, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn retry(
        &self,
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        include_dirs: Option<&Bound<'_, PyAny>>,
        defines: Option<&Bound<'_, PyAny>>,
        flags: Option<&Bound<'_, PyAny>>,
        arch: Option<&Bound<'_, PyAny>>,
        kind: &str,
        name: Option<String>,
        timeout: Option<f64>,
    ) -> PyResult<Answer> {
        let spec = spec(
            source,
            include_dirs,
            defines,
            flags,
            arch,
            kind,
            name,
            timeout,
        )?;
        let handle = self.handle(py)?;
        let name = spec.name.clone();
        match blocking::run(py, move || handle.retry(&spec))? {
            Ok(answer) => Ok(Answer::new(answer, name)),
            Err(e) => Err(errors::cache(py, &e)),
        }
    }

    /// What `get_or_build` would do, and why, without compiling: a dict with `action`
    /// (`"hit"`, `"build"`, `"rebuild"` with `reasons`, `"failed_before"` with `failure`).
    #[pyo3(signature = (source, *, include_dirs=None, defines=None, flags=None, arch=None, kind="cubin", name=None))]
    #[allow(clippy::too_many_arguments)]
    fn explain<'py>(
        &self,
        py: Python<'py>,
        source: &Bound<'py, PyAny>,
        include_dirs: Option<&Bound<'py, PyAny>>,
        defines: Option<&Bound<'py, PyAny>>,
        flags: Option<&Bound<'py, PyAny>>,
        arch: Option<&Bound<'py, PyAny>>,
        kind: &str,
        name: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let spec = spec(source, include_dirs, defines, flags, arch, kind, name, None)?;
        let handle = self.handle(py)?;
        match blocking::run(py, move || handle.explain(&spec))? {
            Ok(explanation) => to_dict(py, &explanation),
            Err(e) => Err(errors::cache(py, &e)),
        }
    }

    /// Builds many kernels with at most `parallelism` compiles at once. Each request is a path,
    /// a `Source`, or a dict of `get_or_build`'s arguments (with `"source"`). Returns, in order,
    /// an `Answer` or the exception (`CompileError`, `CacheError`) for each: one failure never
    /// hides the others.
    #[pyo3(signature = (requests, *, parallelism=None))]
    fn build_many<'py>(
        &self,
        py: Python<'py>,
        requests: &Bound<'py, PyAny>,
        parallelism: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut specs = Vec::new();
        for request in requests.try_iter()? {
            let request = request?;
            let spec = if let Ok(args) = request.cast::<PyDict>() {
                let get = |key: &str| args.get_item(key);
                let source = get("source")?.ok_or_else(|| {
                    PyTypeError::new_err("build_many: a dict request needs \"source\"")
                })?;
                let kind: String = match get("kind")? {
                    Some(kind) => kind.extract()?,
                    None => "cubin".into(),
                };
                for key in args.keys() {
                    let key: String = key.extract()?;
                    let known = [
                        "source",
                        "include_dirs",
                        "defines",
                        "flags",
                        "arch",
                        "kind",
                        "name",
                        "timeout",
                    ];
                    if !known.contains(&key.as_str()) {
                        return Err(PyTypeError::new_err(format!(
                            "build_many: unknown request key {key:?}"
                        )));
                    }
                }
                spec(
                    &source,
                    get("include_dirs")?.as_ref(),
                    get("defines")?.as_ref(),
                    get("flags")?.as_ref(),
                    get("arch")?.as_ref(),
                    &kind,
                    get("name")?.map(|n| n.extract()).transpose()?,
                    get("timeout")?.map(|t| t.extract()).transpose()?,
                )?
            } else {
                spec(&request, None, None, None, None, "cubin", None, None)?
            };
            specs.push(spec);
        }
        let handle = self.handle(py)?;
        let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        let results = blocking::run(py, move || handle.build_many(&specs, parallelism, &|_| {}))?;
        let out = PyList::empty(py);
        for (result, name) in results.into_iter().zip(names) {
            match result {
                Ok(answer) => out.append(Answer::new(answer, name))?,
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
        let filter = crate::pack::filter(name, arch, kind)?;
        crate::pack::export(py, self.handle(py)?, path, filter)
    }

    /// Imports the pack at `path`: every entry is verified and matched against this host
    /// before it is published, never replacing one; entries from another toolchain or header
    /// set are skipped and listed. Raises `PackError` (with `offset` and `entry`) for a damaged
    /// pack. Returns the report as a dict.
    fn import_pack<'py>(&self, py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyAny>> {
        crate::pack::import(py, self.handle(py)?, path)
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
