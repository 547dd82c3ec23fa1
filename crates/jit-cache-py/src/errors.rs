//! The library's errors as Python exceptions: `OSError` subclasses for filesystem operations
//! (chosen by errno, as `OSError(errno, ...)` chooses), `jit_cache.CompileError` with the
//! compiler's diagnostics, `jit_cache.BusyError` when a stored entry's producer is still at
//! work after the wait, `jit_cache.PackError` for a damaged pack, `jit_cache.CacheError` for
//! everything else the cache reports.
//!
//! The exception classes are defined in Python (`jit_cache/_errors.py`) so that they are plain
//! classes with documented attributes; this module only fills them.

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
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

/// Makes an exception of one of `jit_cache._errors`' classes from a message and attributes.
fn ours(py: Python<'_>, class: &str, message: String, attributes: &Bound<'_, PyDict>) -> PyErr {
    let made = py
        .import("jit_cache._errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call((message,), Some(attributes)));
    match made {
        Ok(value) => PyErr::from_value(value),
        Err(e) => e,
    }
}

/// A cache error as `CompileError`, `InvalidSpecError` or `CacheError`.
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
        let errors = py.import("jit_cache._errors")?;
        let diagnostic = errors.getattr("Diagnostic")?;
        for d in &failure.diagnostics {
            let severity = match d.severity {
                nvcc::Severity::Fatal => "fatal",
                nvcc::Severity::Error => "error",
                nvcc::Severity::Warning => "warning",
                nvcc::Severity::Note => "note",
                _ => "other",
            };
            let file = d.file.as_ref().map(|f| f.to_string_lossy().into_owned());
            diagnostics
                .append(diagnostic.call1((file, d.line, d.column, severity, &d.message))?)?;
        }
        let cause = match &failure.cause {
            jit_cache::FailureCause::Source => "source",
            jit_cache::FailureCause::Timeout { .. } => "timeout",
            jit_cache::FailureCause::Signal { .. } => "signal",
            jit_cache::FailureCause::Environment { .. } => "environment",
            _ => "other",
        };
        attributes.set_item("name", &failure.name)?;
        attributes.set_item("command", failure.command.clone())?;
        attributes.set_item("exit_code", failure.exit_code)?;
        attributes.set_item("diagnostics", diagnostics)?;
        attributes.set_item("stderr", &failure.stderr_tail)?;
        attributes.set_item("cause", cause)?;
        attributes.set_item("from_record", failure.from_record)?;
        return Ok(ours(py, "CompileError", failure.to_string(), &attributes));
    }
    let class = match error {
        jit_cache::Error::InvalidSpec { .. }
        | jit_cache::Error::InvalidStoreKey { .. }
        | jit_cache::Error::InvalidPackFilter { .. } => "InvalidSpecError",
        jit_cache::Error::Busy { .. } => "BusyError",
        jit_cache::Error::Pack { .. } => "PackError",
        _ => "CacheError",
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
    Ok(ours(py, class, error.to_string(), &attributes))
}
