//! The states Python sees as strings, each from a closed set that `jit_cache/_types.py` spells
//! as a `Literal`: an answer's `outcome`, a compile failure's `cause`, a diagnostic's
//! `severity`, a batch's flush `strategy`.
//!
//! The library's enums are `#[non_exhaustive]`, so a match on them needs an arm for variants
//! added later. That arm raises a `RuntimeError` naming the variant instead of making up a
//! string (the old `"other"`): a value outside the `Literal` is never handed to Python. The
//! package and the library are built together, so the arm is reached only by a change to the
//! library that this file was not taught; the tests that make each state catch it.

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;
use std::fmt::Debug;

/// The error of a variant this module does not know.
fn unknown(what: &str, value: &impl Debug) -> pyo3::PyErr {
    PyRuntimeError::new_err(format!(
        "jit_cache: the library reported {what} {value:?}, which this module does not know \
         (a bug: the module and the library are built together; please report it)"
    ))
}

/// `Answer.outcome`: `"hit"`, `"built"`, `"rebuilt"` or `"fetched"` (`Outcome` in `_types.py`).
pub(crate) fn outcome(outcome: &jit_cache::Outcome) -> PyResult<&'static str> {
    match outcome {
        jit_cache::Outcome::Hit => Ok("hit"),
        jit_cache::Outcome::Built => Ok("built"),
        jit_cache::Outcome::Rebuilt { .. } => Ok("rebuilt"),
        jit_cache::Outcome::Fetched => Ok("fetched"),
        other => Err(unknown("the outcome", other)),
    }
}

/// `CompileError.cause`: `"source"`, `"timeout"`, `"signal"` or `"environment"` (`Cause`).
pub(crate) fn cause(cause: &jit_cache::FailureCause) -> PyResult<&'static str> {
    match cause {
        jit_cache::FailureCause::Source => Ok("source"),
        jit_cache::FailureCause::Timeout { .. } => Ok("timeout"),
        jit_cache::FailureCause::Signal { .. } => Ok("signal"),
        jit_cache::FailureCause::Environment { .. } => Ok("environment"),
        other => Err(unknown("the failure cause", other)),
    }
}

/// `Diagnostic.severity`: `"fatal"`, `"error"`, `"warning"` or `"note"` (`Severity`).
pub(crate) fn severity(severity: nvcc::Severity) -> PyResult<&'static str> {
    match severity {
        nvcc::Severity::Fatal => Ok("fatal"),
        nvcc::Severity::Error => Ok("error"),
        nvcc::Severity::Warning => Ok("warning"),
        nvcc::Severity::Note => Ok("note"),
        other => Err(unknown("the severity", &other)),
    }
}

/// A committed `Batch`'s `strategy`: `"Syncfs"` or `"PerFile"` (`FlushStrategy`), spelt as the
/// enum's `Debug` always spelt them.
pub(crate) fn flush_strategy(strategy: durable_fs::FlushStrategy) -> PyResult<&'static str> {
    match strategy {
        durable_fs::FlushStrategy::Syncfs => Ok("Syncfs"),
        durable_fs::FlushStrategy::PerFile => Ok("PerFile"),
        other => Err(unknown("the flush strategy", &other)),
    }
}
