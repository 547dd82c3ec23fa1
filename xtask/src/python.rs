//! The Python package (`crates/jit-cache-py`): its venv, its build and install, its tests and
//! its benchmarks.
//!
//! `cargo xtask setup` makes `target/python-venv` (or `XTASK_PYTHON_VENV`) holding maturin,
//! pytest and triton at pinned versions; `cargo xtask test` builds the wheel there (`pip install
//! --no-build-isolation crates/jit-cache-py`: maturin builds the extension, the package's
//! backend the `jit-cache` binary it ships) and runs pytest; `cargo xtask bench python` runs
//! `benches/python.py` beside the Rust library's hit loop, `cargo xtask bench triton`
//! `benches/triton_cache.py` beside Triton's own cache manager. A missing tool fails the step.

use crate::util;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the venv holds, pinned so that a later release cannot change what the tests run.
/// `triton` is the real compiler the Triton cache manager's tests and benchmark run
/// (`jit_cache.triton`; it compiles cubins on the CPU with its bundled ptxas, about 1 GB).
const PACKAGES: &[&str] = &["maturin==1.16.0", "pytest==8.4.2", "triton==3.9.0"];

/// The file in the venv that records the list it was installed with.
const MARKER: &str = "xtask-python.txt";

/// Where the venv lives: `XTASK_PYTHON_VENV`, else `target/python-venv`.
pub fn venv_path() -> PathBuf {
    std::env::var_os("XTASK_PYTHON_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| util::workspace_root().join("target").join("python-venv"))
}

/// The package's directory.
fn package_dir() -> PathBuf {
    util::workspace_root().join("crates").join("jit-cache-py")
}

/// Creates or completes the venv; returns it. A venv whose marker matches is left as it is.
pub fn ensure_venv(python: &str) -> Result<PathBuf> {
    let venv = venv_path();
    let want = PACKAGES.join("\n") + "\n";
    if std::fs::read_to_string(venv.join(MARKER)).is_ok_and(|have| have == want) {
        return Ok(venv);
    }
    eprintln!(
        "setup: maturin, pytest and triton for the Python package at {}",
        venv.display()
    );
    if !venv.join("bin/pip").exists() {
        util::run_checked(Command::new(python).arg("-m").arg("venv").arg(&venv))?;
    }
    util::run_checked(
        Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "--disable-pip-version-check"])
            .args(PACKAGES),
    )?;
    std::fs::write(venv.join(MARKER), want)
        .with_context(|| format!("write {}", venv.join(MARKER).display()))?;
    Ok(venv)
}

/// A command run with the venv's `bin` first on PATH (maturin's PEP 517 hooks run `maturin`
/// from PATH) and the test environment.
fn in_venv(venv: &Path, program: &str) -> Command {
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

/// Builds the wheel and installs it into the venv (the extension and the `jit-cache` binary).
pub fn install(venv: &Path) -> Result<()> {
    for tool in ["maturin", "pytest", "pip"] {
        if !venv.join("bin").join(tool).exists() {
            bail!(
                "{tool} is missing from {}: run `cargo xtask setup`",
                venv.display()
            );
        }
    }
    util::run_checked(
        in_venv(venv, "pip")
            .args([
                "install",
                "-q",
                "--disable-pip-version-check",
                "--no-build-isolation",
                "--force-reinstall",
                "--no-deps",
            ])
            .arg(package_dir()),
    )
}

/// The S3 test server the suite starts (SeaweedFS behind `jit-cache-s3`'s test server).
pub const S3_TEST_SERVER_ENV: &str = "JIT_CACHE_S3_TEST_SERVER";

/// The simulated NFS hosts the suite starts (`nfs-sim`'s hosts binary).
pub const NFS_SIM_HOSTS_ENV: &str = "JIT_CACHE_NFS_SIM_HOSTS";

/// Runs the package's pytest suite against the installed package.
pub fn test(venv: &Path, nvcc: &Path) -> Result<()> {
    install(venv)?;
    // The servers the suite starts, as the test step built them (the same selection: no rebuild).
    util::run_checked(
        util::cargo()
            .arg("build")
            .args(crate::test::workspace_selection())
            .args(["--example", "s3_test_server", "--bin", "nfs-sim-hosts"]),
    )?;
    let s3_server = util::target_dir().join("debug/examples/s3_test_server");
    let nfs_hosts = util::target_dir().join("debug/nfs-sim-hosts");
    util::run_checked(
        in_venv(venv, "python")
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
            .current_dir(package_dir())
            .env("NVCC", nvcc)
            .env(S3_TEST_SERVER_ENV, s3_server)
            .env(NFS_SIM_HOSTS_ENV, nfs_hosts)
            .env("FS_TESTBED_REQUIRE", "1")
            .env("XTASK_TEST", "1"),
    )
}

/// `cargo xtask bench python`: the package's side-by-side benchmarks.
pub fn bench(venv: &Path, nvcc: &Path, args: &[String]) -> Result<()> {
    install(venv)?;
    // The Rust library's hit loop, the peer of `Cache.get_or_build`, and the cargo-built CLI,
    // the peer of the installed one.
    util::run_checked(util::cargo().args([
        "build",
        "--release",
        "-p",
        "jit-cache-py",
        "--example",
        "hit_loop",
        "-p",
        "jit-cache-cli",
        "--bin",
        "jit-cache",
    ]))?;
    let release = util::target_dir().join("release");
    util::run_checked(
        in_venv(venv, "python")
            .arg(package_dir().join("benches").join("python.py"))
            .args(args)
            .env("NVCC", nvcc)
            .env(
                "JIT_CACHE_RUST_HIT_LOOP",
                release.join("examples").join("hit_loop"),
            )
            .env("JIT_CACHE_CARGO_BIN", release.join("jit-cache")),
    )
}

/// `cargo xtask bench triton`: `jit_cache.triton` beside Triton's own cache manager
/// (`benches/triton_cache.py`).
pub fn bench_triton(venv: &Path, args: &[String]) -> Result<()> {
    install(venv)?;
    util::run_checked(
        in_venv(venv, "python")
            .arg(package_dir().join("benches").join("triton_cache.py"))
            .args(args),
    )
}
