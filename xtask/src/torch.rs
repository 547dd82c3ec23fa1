//! `cargo xtask bench torch`: `jit_cache.torch` beside Inductor's own caches
//! (`crates/jit-cache-py/benches/torch_cache.py`), in the torch venv (`python.rs`).

use crate::util;
use crate::venv::in_venv;
use anyhow::Result;
use std::path::Path;

/// Builds and installs the wheel, then times a second process's compile with the store
/// against Inductor's local cache and against none, and a fleet hit against Inductor's own
/// Redis backend on the same server.
pub fn bench(venv: &Path, args: &[String]) -> Result<()> {
    let wheel = crate::python::install(venv)?;
    let torch_venv = crate::python::install_in_torch_venv(&wheel)?;
    let bench = util::workspace_root()
        .join("crates")
        .join("jit-cache-py")
        .join("benches")
        .join("torch_cache.py");
    util::run_checked(in_venv(&torch_venv, "python").arg(bench).args(args))
}
