//! Kernel packs from Python: `Cache.export_pack`, `Cache.import_pack` (methods in `cache.rs`,
//! which call the functions here) and `jit_cache.list_pack`. Reports are dicts, as the
//! command's `--json` prints them (`ExportReport`, `ImportReport`, `PackEntry` in
//! `_types.py`); a damaged pack raises `jit_cache.PackError`. This module uses `convert.rs`,
//! never `cache.rs`: `cache.rs` is the layer above.

use crate::blocking;
use crate::convert::{strings, to_dict};
use crate::errors;
use jit_cache::{PackFilter, PackKind};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::Arc;

/// The entries an export takes: `name` a glob, `arch` and `kind` a string or a list of them.
pub(crate) fn filter(
    name: Option<String>,
    arch: Option<&Bound<'_, PyAny>>,
    kind: Option<&Bound<'_, PyAny>>,
) -> PyResult<PackFilter> {
    let mut filter = PackFilter::default();
    if let Some(glob) = name {
        filter = filter.name(glob);
    }
    for arch in strings("arch", arch)? {
        filter = filter.arch(arch);
    }
    for kind in strings("kind", kind)? {
        let parsed = PackKind::from_name(&kind).ok_or_else(|| {
            PyValueError::new_err(format!(
                "kind must be one of {}, not {kind:?}",
                PackKind::names().join(", ")
            ))
        })?;
        filter = filter.kind(parsed);
    }
    Ok(filter)
}

pub(crate) fn export<'py>(
    py: Python<'py>,
    cache: Arc<jit_cache::Cache>,
    path: PathBuf,
    filter: PackFilter,
) -> PyResult<Bound<'py, PyAny>> {
    match blocking::run(py, move || cache.export_pack(&path, &filter))? {
        Ok(report) => to_dict(py, &report),
        Err(e) => Err(errors::cache(py, &e)),
    }
}

pub(crate) fn import<'py>(
    py: Python<'py>,
    cache: Arc<jit_cache::Cache>,
    path: PathBuf,
) -> PyResult<Bound<'py, PyAny>> {
    match blocking::run(py, move || cache.import_pack(&path))? {
        Ok(report) => to_dict(py, &report),
        Err(e) => Err(errors::cache(py, &e)),
    }
}

/// The entries of the pack at `path`, each a dict (kind, name, key, variant, output, arches,
/// toolchain, headers, files), without importing it: its header and index are checked.
#[pyfunction]
pub(crate) fn list_pack<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyAny>> {
    match py.detach(|| jit_cache::list_pack(&path)) {
        Ok(entries) => to_dict(py, &entries),
        Err(e) => Err(errors::cache(py, &e)),
    }
}
