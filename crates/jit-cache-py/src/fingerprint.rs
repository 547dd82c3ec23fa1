//! `jit_cache.fingerprint`: content identity of files, trees and installed wheels, a manifest
//! whose diff says why, and the build-directory gate.
//!
//! The gate is the contract FlashInfer's PR #4490 writes by hand for its nvcc JIT directories
//! (whose freshness ninja judges by mtime alone, FlashInfer #4489): the caller takes a snapshot
//! of the build's inputs (a [`Manifest`]) *before* building; the gate compares it with the one
//! committed in the directory and wipes the directory when that one is missing, corrupt or
//! different, saying why; the snapshot is committed (durably, by one rename) only after the
//! build succeeded. A lock held from the check through the commit keeps two builders of one
//! directory from blessing each other's objects.

use crate::durable::acquire;
use crate::errors;
use crate::process::ForkOwned;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// The manifest's file inside a gated build directory.
pub(crate) const MANIFEST_FILE: &str = ".jit-cache-manifest.json";

/// The content digest (blake3, hex) of a file.
#[pyfunction]
pub(crate) fn hash_file(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    py.detach(|| fingerprint::hash_file(&path))
        .map(|d| d.to_hex())
        .map_err(|e| errors::fingerprint(py, &e))
}

/// The content digest (hex) of a tree: relative paths, kinds, exec bits and contents; never
/// mtimes. `ignore` adds glob patterns to the defaults (`.git`, `__pycache__`, ...).
#[pyfunction]
#[pyo3(signature = (path, *, ignore=Vec::new()))]
pub(crate) fn hash_tree(py: Python<'_>, path: PathBuf, ignore: Vec<String>) -> PyResult<String> {
    let options = tree_options(ignore);
    py.detach(|| fingerprint::hash_tree(&path, &options, None))
        .map(|t| t.digest.to_hex())
        .map_err(|e| errors::fingerprint(py, &e))
}

fn tree_options(ignore: Vec<String>) -> fingerprint::TreeOptions {
    ignore
        .into_iter()
        .fold(fingerprint::TreeOptions::default(), |o, pattern| {
            o.ignore(pattern)
        })
}

/// The identity of an installed distribution from its `RECORD` rows (or, for an editable
/// install, its source tree): a dict of `name`, `version`, `digest`, `editable`.
#[pyfunction]
pub(crate) fn wheel_identity<'py>(
    py: Python<'py>,
    site_packages: PathBuf,
    distribution: String,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let identity = py
        .detach(|| fingerprint::wheel_identity(&site_packages, &distribution))
        .map_err(|e| errors::fingerprint(py, &e))?;
    let out = pyo3::types::PyDict::new(py);
    out.set_item("name", identity.name)?;
    out.set_item("version", identity.version)?;
    out.set_item("digest", identity.digest.to_hex())?;
    out.set_item("editable", identity.editable)?;
    Ok(out)
}

/// Named inputs of a build, each a content digest (and a short value where there is one).
#[pyclass(module = "jit_cache._native", frozen)]
pub(crate) struct Manifest {
    inner: Mutex<fingerprint::Manifest>,
}

impl Manifest {
    fn snapshot(&self) -> fingerprint::Manifest {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn edit(&self, f: impl FnOnce(&mut fingerprint::Manifest)) {
        f(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

/// The reasons two manifests differ, as sentences.
fn reasons(old: &fingerprint::Manifest, new: &fingerprint::Manifest) -> Vec<String> {
    fingerprint::diff(old, new)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[pymethods]
impl Manifest {
    #[new]
    fn new() -> Manifest {
        Manifest {
            inner: Mutex::new(fingerprint::Manifest::new()),
        }
    }

    /// Adds a file's content under `name` (such as `"source:gemm.cu"`); the path is not hashed.
    fn add_file(&self, py: Python<'_>, name: String, path: PathBuf) -> PyResult<()> {
        let mut scratch = fingerprint::Manifest::new();
        py.detach(|| scratch.insert_file(name.clone(), &path))
            .map_err(|e| errors::fingerprint(py, &e))?;
        self.merge(scratch);
        Ok(())
    }

    /// Adds a tree under `name`: its digest, and each file under `name/relpath`.
    #[pyo3(signature = (name, path, *, ignore=Vec::new()))]
    fn add_tree(
        &self,
        py: Python<'_>,
        name: String,
        path: PathBuf,
        ignore: Vec<String>,
    ) -> PyResult<()> {
        let options = tree_options(ignore);
        let mut scratch = fingerprint::Manifest::new();
        py.detach(|| scratch.insert_tree(name, &path, &options, None))
            .map_err(|e| errors::fingerprint(py, &e))?;
        self.merge(scratch);
        Ok(())
    }

    /// Adds bytes-like content under `name` (a rendered `build.ninja`, say).
    fn add_bytes(&self, name: String, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = crate::durable::as_bytes(data)?;
        self.edit(|m| m.insert_bytes(name, data.as_bytes()));
        Ok(())
    }

    /// Adds a short value (a version, a path that matters) under `name`.
    fn add_value(&self, name: String, value: String) {
        self.edit(|m| m.insert_value(name, &value));
    }

    /// Adds a list (flags) under `name`; its diff lists what was added and removed.
    fn add_list(&self, name: String, items: Vec<String>) {
        self.edit(|m| m.insert_list(name, &items));
    }

    /// Adds environment variable `var` under `env:VAR` (unset and empty differ).
    fn add_env(&self, var: String) {
        self.edit(|m| m.insert_env(&var));
    }

    /// Adds an installed distribution under `wheel:NAME`: its version and the digest of its
    /// `RECORD` rows (path, hash and size of every file), so a reinstall with other bytes at
    /// the same version differs.
    fn add_wheel(
        &self,
        py: Python<'_>,
        site_packages: PathBuf,
        distribution: String,
    ) -> PyResult<()> {
        let identity = py
            .detach(|| fingerprint::wheel_identity(&site_packages, &distribution))
            .map_err(|e| errors::fingerprint(py, &e))?;
        let value = format!("{} {}", identity.version, identity.digest.to_hex());
        self.edit(|m| m.insert_value(format!("wheel:{distribution}"), &value));
        Ok(())
    }

    /// The manifest's digest (hex): framed components, format version mixed in.
    #[getter]
    fn digest(&self) -> String {
        self.snapshot().digest().to_hex()
    }

    /// Component names, sorted.
    fn names(&self) -> Vec<String> {
        self.snapshot().iter().map(|(n, _)| n.to_string()).collect()
    }

    /// Why `old` is stale against this manifest, as sentences ("header `x` changed ...").
    fn diff(&self, old: &Manifest) -> Vec<String> {
        reasons(&old.snapshot(), &self.snapshot())
    }

    /// The manifest as JSON text.
    fn to_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.snapshot())
            .map_err(|e| PyRuntimeError::new_err(format!("encode manifest: {e}")))
    }

    /// A manifest from `to_json`'s text.
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<Manifest> {
        let inner: fingerprint::Manifest = serde_json::from_str(text)
            .map_err(|e| PyValueError::new_err(format!("not a manifest: {e}")))?;
        Ok(Manifest {
            inner: Mutex::new(inner),
        })
    }

    fn __len__(&self) -> usize {
        self.snapshot().len()
    }

    fn __eq__(&self, other: &Manifest) -> bool {
        self.snapshot() == other.snapshot()
    }
}

impl Manifest {
    fn merge(&self, scratch: fingerprint::Manifest) {
        self.edit(|m| {
            for (name, component) in scratch.iter() {
                m.insert(name, component.clone());
            }
        });
    }
}

/// What the directory's committed manifest says against the snapshot.
enum Verdict {
    Fresh,
    Stale(Vec<String>),
}

fn judge(dir: &Path, snapshot: &fingerprint::Manifest) -> Verdict {
    let file = dir.join(MANIFEST_FILE);
    match std::fs::read(&file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Verdict::Stale(vec![format!(
            "no manifest in {} (never built through the gate, or its build did not finish)",
            dir.display()
        )]),
        Err(e) => Verdict::Stale(vec![format!("manifest {} unreadable: {e}", file.display())]),
        Ok(bytes) => match serde_json::from_slice::<fingerprint::Manifest>(&bytes) {
            Err(e) => Verdict::Stale(vec![format!("manifest {} corrupt: {e}", file.display())]),
            Ok(committed) => {
                let why = reasons(&committed, snapshot);
                if why.is_empty() && committed.digest() == snapshot.digest() {
                    Verdict::Fresh
                } else if why.is_empty() {
                    Verdict::Stale(vec!["manifest digest differs".into()])
                } else {
                    Verdict::Stale(why)
                }
            }
        },
    }
}

/// Empties `dir` (creating it when missing), the manifest first and durably, so that a crash
/// half-way through leaves a directory without a manifest: wiped again next time.
fn wipe(dir: &Path) -> std::io::Result<()> {
    let manifest = dir.join(MANIFEST_FILE);
    match std::fs::remove_file(&manifest) {
        Ok(()) => durable_fs::fsync_dir(dir)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            durable_fs::create_dir_all_durable(dir, durable_fs::DirMode::default())?;
            return Ok(());
        }
        Err(e) => return Err(e),
        Ok(entries) => {
            for entry in entries {
                let entry = entry?;
                let path = entry.path();
                if entry.file_type()?.is_dir() {
                    std::fs::remove_dir_all(&path)?;
                } else {
                    std::fs::remove_file(&path)?;
                }
            }
        }
    }
    Ok(())
}

/// The gate's lock file: beside the directory, so wiping the directory never removes it.
fn lock_file(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "build".into());
    dir.with_file_name(format!(".{name}.jit-cache-gate.lock"))
}

/// A build directory held through its check, build and commit.
#[pyclass(module = "jit_cache._native", frozen)]
pub(crate) struct Gate {
    dir: PathBuf,
    snapshot: fingerprint::Manifest,
    fresh: bool,
    reasons: Vec<String>,
    lock: Mutex<ForkOwned<Option<durable_fs::LockGuard>>>,
}

#[pymethods]
impl Gate {
    /// The build directory.
    #[getter]
    fn dir(&self) -> PathBuf {
        self.dir.clone()
    }

    /// Whether the committed manifest matched the snapshot (nothing was wiped).
    #[getter]
    fn fresh(&self) -> bool {
        self.fresh
    }

    /// Why the directory was wiped (empty when fresh).
    #[getter]
    fn reasons(&self) -> Vec<String> {
        self.reasons.clone()
    }

    /// Commits the snapshot taken before the build (durably, one rename) and releases the
    /// lock. Call it only after the build succeeded.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let held = self.take_lock()?;
        if held.is_none() {
            return Err(PyRuntimeError::new_err(
                "this gate was already committed or abandoned",
            ));
        }
        let text = serde_json::to_vec(&self.snapshot)
            .map_err(|e| PyRuntimeError::new_err(format!("encode manifest: {e}")))?;
        let file = self.dir.join(MANIFEST_FILE);
        py.detach(|| durable_fs::put(&file, &text))
            .map_err(|e| errors::durable(py, &e))?;
        drop(held);
        Ok(())
    }

    /// Releases the lock without committing: the directory stays without a manifest, so the
    /// next build wipes it.
    fn abandon(&self) -> PyResult<()> {
        drop(self.take_lock()?);
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Commits when the block ended normally; abandons when it raised.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some_and(|t| !t.is_none()) {
            self.abandon()?;
        } else if self
            .lock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get()
            .is_some_and(Option::is_some)
        {
            self.commit(py)?;
        }
        Ok(false)
    }
}

impl Gate {
    fn take_lock(&self) -> PyResult<Option<durable_fs::LockGuard>> {
        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        if !guard.is_ours() {
            return Err(PyRuntimeError::new_err(
                "this gate was opened by the parent process before a fork: only the parent can \
                 commit it",
            ));
        }
        Ok(guard.take().flatten())
    }
}

/// Opens the gate on `build_dir` for the build whose inputs `manifest` snapshots: takes the
/// directory's lock (waiting up to `timeout` seconds, forever by default), and wipes the
/// directory unless its committed manifest matches. Use as `with gate(dir, m) as g: build()`.
#[pyfunction]
#[pyo3(signature = (build_dir, manifest, *, timeout=None))]
pub(crate) fn gate(
    py: Python<'_>,
    build_dir: PathBuf,
    manifest: &Manifest,
    timeout: Option<f64>,
) -> PyResult<Gate> {
    let timeout = timeout
        .map(|t| Duration::try_from_secs_f64(t.max(0.0)))
        .transpose()
        .map_err(|e| PyValueError::new_err(format!("timeout: {e}")))?;
    let snapshot = manifest.snapshot();
    if let Some(parent) = build_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        py.detach(|| durable_fs::create_dir_all_durable(parent, durable_fs::DirMode::default()))
            .map_err(|e| errors::durable(py, &e))?;
    }
    let lock = acquire(
        py,
        &lock_file(&build_dir),
        durable_fs::LockMode::Exclusive,
        timeout,
    )?;
    let (fresh, reasons) = match py.detach(|| judge(&build_dir, &snapshot)) {
        Verdict::Fresh => (true, Vec::new()),
        Verdict::Stale(reasons) => {
            py.detach(|| wipe(&build_dir)).map_err(|e| {
                errors::os_error(py, "wipe stale build directory", &build_dir, None, &e)
            })?;
            (false, reasons)
        }
    };
    Ok(Gate {
        dir: build_dir,
        snapshot,
        fresh,
        reasons,
        lock: Mutex::new(ForkOwned::new(Some(lock))),
    })
}
