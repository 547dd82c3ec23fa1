//! Conversions every Python-facing module shares, below all of them: a list-of-strings
//! argument, and a report as a dict.
//!
//! They sit here, not in the modules that first needed them, so that `cache.rs` and `pack.rs`
//! each use this layer and neither uses the other's (issue #32: no import cycles).

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyString;

/// Reads a list of strings, refusing a lone string (which would be taken letter by letter).
pub(crate) fn strings(what: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    match value {
        None => Ok(Vec::new()),
        Some(v) if v.is_none() => Ok(Vec::new()),
        Some(v) if v.is_instance_of::<PyString>() => Ok(vec![v.extract()?]),
        Some(v) => v
            .try_iter()?
            .map(|item| item?.extract::<String>())
            .collect::<PyResult<_>>()
            .map_err(|e| PyTypeError::new_err(format!("{what}: {e}"))),
    }
}

/// A JSON-serialisable report as a Python dict (through `json.loads`: one codec for all, the
/// one the command's `--json` prints with).
pub(crate) fn to_dict<'py>(
    py: Python<'py>,
    value: &impl serde::Serialize,
) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value)
        .map_err(|e| PyRuntimeError::new_err(format!("jit_cache: encode a report: {e}")))?;
    py.import("json")?.getattr("loads")?.call1((text,))
}
