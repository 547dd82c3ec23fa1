//! The Python package's venv: where it is, and how a program in it runs. Used by the package's
//! build, wheel and test steps alike (`python.rs`, `wheel.rs`).

use crate::util;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the venv lives: `XTASK_PYTHON_VENV`, else `target/python-venv`.
pub(crate) fn venv_path() -> PathBuf {
    std::env::var_os("XTASK_PYTHON_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| util::workspace_root().join("target").join("python-venv"))
}

/// A command run with the venv's `bin` first on PATH (maturin's PEP 517 hooks run `maturin`
/// from PATH) and the test environment.
pub(crate) fn in_venv(venv: &Path, program: &str) -> Command {
    let mut cmd = Command::new(venv.join("bin").join(program));
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![venv.join("bin")];
    paths.extend(std::env::split_paths(&path));
    if let Ok(joined) = std::env::join_paths(paths) {
        cmd.env("PATH", joined);
    }
    cmd.env("VIRTUAL_ENV", venv);
    cmd
}
