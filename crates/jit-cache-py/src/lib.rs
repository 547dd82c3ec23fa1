//! The native half of the `jit_cache` Python package (`jit_cache._native`), built by maturin
//! into an abi3 wheel (CPython 3.9 and later).
//!
//! The Python modules `jit_cache`, `jit_cache.durable` and `jit_cache.fingerprint` re-export
//! what this module defines; `python/jit_cache/_native.pyi` types it (with the `Literal`s and
//! `TypedDict`s of `python/jit_cache/_types.py`), checked against it by `mypy.stubtest`.
//!
//! Modules are layers, each using only those listed after it: `store`, `cache`, `pack`, `spec`,
//! `fingerprint`, `durable`, `errors`, `states`, `convert`, `blocking`, `process`.
//!
//! # Guarantees
//! - The GIL is released around every write, fsync, lock wait, hash and compile: other Python
//!   threads run meanwhile.
//! - A `KeyboardInterrupt` (any signal handler's exception) during a lock wait or a cache call
//!   is raised within 100 ms of the signal: lock waits are sliced, and cache calls run on a
//!   helper thread (`blocking.rs`). An interrupted cache call is abandoned, not killed: the
//!   library finishes or fails it by its own protocol, so nothing half-made is published.
//! - After `fork` (multiprocessing's fork start method), a child opens its own cache handle and
//!   never uses, drops or releases what it inherited: no lock, batch or staging directory of
//!   the parent's is published or removed by the child, and the child's copies of the
//!   descriptors that hold the parent's build locks are closed at once (`process.rs`).
//!
//! # Limitations
//! - An interrupted compile runs to its end on its helper thread (its result is dropped): the
//!   library offers no way to cancel a compile but its timeout.
//! - Data other than `bytes` (a `bytearray`, a `memoryview`, a NumPy array) is copied once:
//!   the buffer protocol is in the stable ABI only from Python 3.11.

mod blocking;
mod cache;
mod convert;
mod durable;
mod errors;
mod fingerprint;
mod pack;
mod process;
mod spec;
mod states;
mod store;

use pyo3::prelude::*;

/// The module `jit_cache._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MANIFEST_FILE", fingerprint::MANIFEST_FILE)?;
    errors::register(m)?;
    m.add_class::<cache::Cache>()?;
    m.add_class::<cache::Answer>()?;
    m.add_class::<spec::Source>()?;
    m.add_class::<spec::KernelSpec>()?;
    m.add_function(wrap_pyfunction!(pack::list_pack, m)?)?;
    m.add_class::<store::Store>()?;
    m.add_class::<store::StoredEntry>()?;
    m.add_class::<store::Producer>()?;
    m.add_function(wrap_pyfunction!(durable::put, m)?)?;
    m.add_function(wrap_pyfunction!(durable::fsync, m)?)?;
    m.add_function(wrap_pyfunction!(durable::fsync_dir, m)?)?;
    m.add_function(wrap_pyfunction!(durable::atomic_rename, m)?)?;
    m.add_function(wrap_pyfunction!(durable::lock, m)?)?;
    m.add_class::<durable::Batch>()?;
    m.add_class::<durable::Lock>()?;
    m.add_function(wrap_pyfunction!(fingerprint::hash_file, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint::hash_tree, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint::wheel_identity, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint::gate, m)?)?;
    m.add_class::<fingerprint::Manifest>()?;
    m.add_class::<fingerprint::Gate>()?;
    Ok(())
}
