//! The library's errors as Python exceptions: `OSError` subclasses for filesystem operations
//! (chosen by errno, as `OSError(errno, ...)` chooses), `jit_cache.CompileError` with the
//! compiler's diagnostics, `jit_cache.BusyError` when a stored entry's producer is still at
//! work after the wait, `jit_cache.PackError` for a damaged pack, `jit_cache.CacheError` for
//! everything else the cache reports.
//!
//! The exception classes are defined in Python (`jit_cache/_errors.py`) so that they are plain
//! classes with documented, typed attributes and keyword constructors; this module imports each
//! once, when `_native` is initialised, re-exports it, and raises it by its Rust type.

use crate::states;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyType};
use pyo3::PyTypeInfo;
use std::io;
use std::path::Path;

/// The errno for an `io::Error`: its own, else the one its kind stands for.
fn errno_of(error: &io::Error) -> Option<i32> {
    error.raw_os_error().or(match error.kind() {
        io::ErrorKind::TimedOut => Some(libc::ETIMEDOUT),
        io::ErrorKind::NotFound => Some(libc::ENOENT),
        io::ErrorKind::PermissionDenied => Some(libc::EACCES),
        io::ErrorKind::AlreadyExists => Some(libc::EEXIST),
        io::ErrorKind::InvalidInput => Some(libc::EINVAL),
        _ => None,
    })
}

/// An `OSError` (its subclass chosen by errno: `FileNotFoundError`, `TimeoutError`, ...) with
/// `.operation` set, `.filename` the path and `.filename2` the second path of a rename.
pub(crate) fn os_error(
    py: Python<'_>,
    operation: &str,
    path: &Path,
    other: Option<&Path>,
    error: &io::Error,
) -> PyErr {
    let message = format!("{operation}: {error}");
    let path = path.to_string_lossy().into_owned();
    let err = match (errno_of(error), other) {
        (Some(errno), Some(other)) => PyOSError::new_err((
            errno,
            message,
            path.clone(),
            py.None(),
            other.to_string_lossy().into_owned(),
        )),
        (Some(errno), None) => PyOSError::new_err((errno, message, path.clone())),
        (None, _) => PyOSError::new_err(format!("{message}: {path}")),
    };
    let value = err.value(py);
    // Best effort: an exception without the attribute is still the right exception.
    let _ = value.setattr("operation", operation);
    if errno_of(error).is_none() {
        let _ = value.setattr("filename", path);
    }
    err
}

/// A durable-fs error as an `OSError`.
pub(crate) fn durable(py: Python<'_>, error: &durable_fs::Error) -> PyErr {
    os_error(
        py,
        error.op(),
        error.path(),
        error.other_path(),
        error.io_error(),
    )
}

/// A fingerprint error as an `OSError` (or a `ValueError` for a file that is no regular one).
pub(crate) fn fingerprint(py: Python<'_>, error: &fingerprint::Error) -> PyErr {
    match error.io_error() {
        Some(io) => os_error(py, error.operation(), error.path(), None, io),
        None => pyo3::exceptions::PyValueError::new_err(error.to_string()),
    }
}

/// The exception classes of `jit_cache/_errors.py`, as Rust types: each is imported once, when
/// `_native` is initialised ([`register`]), and every raise uses that class object.
mod classes {
    pyo3::import_exception!(jit_cache._errors, Error);
    pyo3::import_exception!(jit_cache._errors, CacheError);
    pyo3::import_exception!(jit_cache._errors, BusyError);
    pyo3::import_exception!(jit_cache._errors, PackError);
    pyo3::import_exception!(jit_cache._errors, InvalidSpecError);
    pyo3::import_exception!(jit_cache._errors, CompileError);
    pyo3::import_exception!(jit_cache._errors, DamagedEntryWarning);
}

use classes::{
    BusyError, CacheError, CompileError, DamagedEntryWarning, Error, InvalidSpecError, PackError,
};

/// `jit_cache._errors.Diagnostic` (a dataclass, not an exception), imported once.
static DIAGNOSTIC: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn diagnostic_class(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    DIAGNOSTIC.import(py, "jit_cache._errors", "Diagnostic")
}

/// Imports the classes (so that a later reload of `jit_cache._errors` cannot make the classes
/// raised differ from the ones `jit_cache` exports) and adds them to the module `_native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    // Imported here with `?`: the type objects below then come from the import cache and
    // cannot fail.
    py.import("jit_cache._errors")?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("CacheError", py.get_type::<CacheError>())?;
    m.add("BusyError", py.get_type::<BusyError>())?;
    m.add("PackError", py.get_type::<PackError>())?;
    m.add("InvalidSpecError", py.get_type::<InvalidSpecError>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("DamagedEntryWarning", py.get_type::<DamagedEntryWarning>())?;
    m.add("Diagnostic", diagnostic_class(py)?)?;
    Ok(())
}

/// Warns `jit_cache.DamagedEntryWarning` for a stored entry answered as a miss, at the caller's
/// line (an error raised by a filter that makes the warning an exception is returned).
pub(crate) fn warn_damaged(py: Python<'_>, damage: &jit_cache::store::Damage) -> PyResult<()> {
    let message = std::ffi::CString::new(damage.to_string().replace('\0', "\\0"))
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    PyErr::warn(py, &py.get_type::<DamagedEntryWarning>(), &message, 1)
}

/// An exception of class `T` from a message and its keyword attributes.
fn raise<T: PyTypeInfo>(py: Python<'_>, message: String, attributes: &Bound<'_, PyDict>) -> PyErr {
    match py.get_type::<T>().call((message,), Some(attributes)) {
        Ok(value) => PyErr::from_value(value),
        Err(e) => e,
    }
}

/// A cache error as `CompileError`, `InvalidSpecError`, `BusyError`, `PackError` or
/// `CacheError`.
pub(crate) fn cache(py: Python<'_>, error: &jit_cache::Error) -> PyErr {
    match build_cache_error(py, error) {
        Ok(err) => err,
        Err(err) => err,
    }
}

fn build_cache_error(py: Python<'_>, error: &jit_cache::Error) -> PyResult<PyErr> {
    let attributes = PyDict::new(py);
    if let Some(failure) = error.compile_failure() {
        let diagnostics = PyList::empty(py);
        let diagnostic = diagnostic_class(py)?;
        for d in &failure.diagnostics {
            let file = d.file.as_ref().map(|f| f.to_string_lossy().into_owned());
            let severity = states::severity(d.severity)?;
            diagnostics
                .append(diagnostic.call1((file, d.line, d.column, severity, &d.message))?)?;
        }
        attributes.set_item("name", &failure.name)?;
        attributes.set_item("command", failure.command.clone())?;
        attributes.set_item("exit_code", failure.exit_code)?;
        attributes.set_item("diagnostics", diagnostics)?;
        attributes.set_item("stderr", &failure.stderr_tail)?;
        attributes.set_item("cause", states::cause(&failure.cause)?)?;
        attributes.set_item("from_record", failure.from_record)?;
        return Ok(raise::<CompileError>(py, failure.to_string(), &attributes));
    }
    let raise_as: fn(Python<'_>, String, &Bound<'_, PyDict>) -> PyErr = match error {
        jit_cache::Error::InvalidSpec { .. }
        | jit_cache::Error::InvalidStoreKey { .. }
        | jit_cache::Error::InvalidPackFilter { .. } => raise::<InvalidSpecError>,
        jit_cache::Error::Busy { .. } => raise::<BusyError>,
        jit_cache::Error::Pack { .. } => raise::<PackError>,
        _ => raise::<CacheError>,
    };
    let mut inner = error;
    while let jit_cache::Error::Shared(shared) = inner {
        inner = shared;
    }
    match inner {
        jit_cache::Error::Io { op, path, source } => {
            attributes.set_item("operation", *op)?;
            attributes.set_item("path", path.to_string_lossy().into_owned())?;
            attributes.set_item("errno", errno_of(source))?;
        }
        jit_cache::Error::Fs(fs) => {
            attributes.set_item("operation", fs.op())?;
            attributes.set_item("path", fs.path().to_string_lossy().into_owned())?;
            attributes.set_item("errno", errno_of(fs.io_error()))?;
        }
        jit_cache::Error::Fingerprint(fp) => {
            attributes.set_item("operation", fp.operation())?;
            attributes.set_item("path", fp.path().to_string_lossy().into_owned())?;
            attributes.set_item("errno", fp.io_error().and_then(errno_of))?;
        }
        jit_cache::Error::Busy { lock, .. } => {
            attributes.set_item("operation", "wait for the producer of a stored entry")?;
            attributes.set_item("path", lock.to_string_lossy().into_owned())?;
            attributes.set_item("errno", libc::ETIMEDOUT)?;
        }
        jit_cache::Error::Pack {
            path,
            offset,
            entry,
            ..
        } => {
            attributes.set_item("operation", "read pack")?;
            attributes.set_item("path", path.to_string_lossy().into_owned())?;
            attributes.set_item("offset", *offset)?;
            attributes.set_item("entry", entry.clone())?;
        }
        jit_cache::Error::UnsafeRoot { path, .. } => {
            attributes.set_item("operation", "open cache root")?;
            attributes.set_item("path", path.to_string_lossy().into_owned())?;
        }
        _ => {}
    }
    Ok(raise_as(py, error.to_string(), &attributes))
}
