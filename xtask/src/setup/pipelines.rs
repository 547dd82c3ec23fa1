//! The venv of the real-pipeline tests: torch 2.15 and FlashInfer 0.7.2, with only what
//! `import torch`, `import flashinfer`, FlashInfer's JIT build and `torch.utils.cpp_extension`
//! load on a machine without a GPU.
//!
//! `pip install torch` brings the whole CUDA user space (about 5.3 GB installed, triton's 1 GB
//! among it) and `pip install flashinfer-python` adds the CuTe DSL, cuDNN's frontend, NCCL's
//! Python bindings and more. The two are installed with `--no-deps`, then the pinned list below:
//! the CUDA libraries `libtorch_cuda.so` names in `DT_NEEDED` (the loader refuses `import torch`
//! without any one of them), the Python modules the two packages import at start-up, and
//! `setuptools` (`cpp_extension` imports it). Left out: triton, cuSOLVER (loaded lazily, by
//! `torch.linalg` on a GPU only), cuda-bindings, NVTX, and FlashInfer's DSL and communication
//! extras. Installed: about 4.7 GB. The versions are the ones torch 2.15.0's metadata pins (its
//! `cuda-toolkit==13.2.2` extras) and the newest that worked here, so a later release cannot
//! change what the tests run.
//!
//! A marker file in the venv holds the list it was installed with: when it matches, setup costs
//! one read.

use crate::util;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Installed without their dependencies: each pulls far more than a CPU-only build needs.
const WITHOUT_DEPENDENCIES: &[&str] = &["torch==2.15.0", "flashinfer-python==0.7.2"];

/// Installed with their dependencies (pip resolves `requests`' and `jinja2`'s).
const PACKAGES: &[&str] = &[
    // The CUDA libraries libtorch_cuda.so links against (`ldd` lists each as needed).
    "nvidia-cuda-runtime==13.2.86",
    "nvidia-cuda-cupti==13.2.86",
    "nvidia-cuda-nvrtc==13.2.86",
    "nvidia-cublas==13.4.1.3",
    "nvidia-cufft==12.2.0.57",
    "nvidia-cufile==1.17.1.22",
    "nvidia-cusparse==12.7.10.12",
    "nvidia-nvjitlink==13.5.37",
    "nvidia-cusparselt-cu13==0.8.1",
    "nvidia-nccl-cu13==2.30.7",
    "nvidia-nvshmem-cu13==3.7.2",
    "nvidia-cudnn-cu13==9.26.0.51",
    // What `import torch` and `torch.utils.cpp_extension` import.
    "typing-extensions==4.16.0",
    "filelock==4.3.1",
    "sympy==1.14.0",
    "networkx==3.6.1",
    "jinja2==3.1.6",
    "fsspec==2026.9.0",
    "setuptools==84.2.1",
    // What `import flashinfer` and its JIT (`tvm_ffi` builds and loads the modules) import.
    "apache-tvm-ffi==0.1.15.post2",
    "packaging==26.4",
    "requests==2.34.2",
    "nvidia-ml-py==13.615.71",
    "tqdm==4.70.1",
    "numpy==2.4.6",
];

/// The file in the venv that records the list it was installed with.
const MARKER: &str = "xtask-pipelines.txt";

/// Where the venv lives: `XTASK_PIPELINES_VENV`, else `target/pipelines-venv`. The tests look
/// in the same place.
pub fn venv_path() -> PathBuf {
    std::env::var_os("XTASK_PIPELINES_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| util::workspace_root().join("target").join("pipelines-venv"))
}

/// The marker's text: every requirement, one a line.
fn marker_text() -> String {
    let mut text = String::new();
    for line in WITHOUT_DEPENDENCIES
        .iter()
        .map(|r| format!("--no-deps {r}"))
    {
        text.push_str(&line);
        text.push('\n');
    }
    for line in PACKAGES {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// Creates or completes the venv at `venv`; returns it. A venv whose marker matches is left as
/// it is.
pub fn ensure_venv(python: &str, venv: &Path) -> Result<PathBuf> {
    let marker = venv.join(MARKER);
    let want = marker_text();
    if std::fs::read_to_string(&marker).is_ok_and(|have| have == want) {
        return Ok(venv.to_path_buf());
    }
    eprintln!(
        "setup: installing torch and FlashInfer (about 4.7 GB, minutes) at {}",
        venv.display()
    );
    let started = std::time::Instant::now();
    if !venv.join("bin/pip").exists() {
        util::run_checked(Command::new(python).arg("-m").arg("venv").arg(venv))?;
    }
    let pip = || {
        let mut cmd = Command::new(venv.join("bin/pip"));
        cmd.args(["install", "-q", "--disable-pip-version-check"]);
        cmd
    };
    util::run_checked(pip().arg("--no-deps").args(WITHOUT_DEPENDENCIES))?;
    util::run_checked(pip().args(PACKAGES))?;
    // The proof the list is complete: both import, and cpp_extension with them.
    let check = Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import torch, flashinfer, torch.utils.cpp_extension; print(torch.__version__, flashinfer.__version__)",
        ])
        .output()
        .with_context(|| format!("spawn {}", venv.join("bin/python").display()))?;
    if !check.status.success() {
        bail!(
            "setup: the pipelines venv at {} cannot import torch and flashinfer: {}",
            venv.display(),
            String::from_utf8_lossy(&check.stderr)
        );
    }
    std::fs::write(&marker, want).with_context(|| format!("write {}", marker.display()))?;
    eprintln!(
        "setup: torch and FlashInfer ({}) installed in {:.0}s",
        String::from_utf8_lossy(&check.stdout).trim(),
        started.elapsed().as_secs_f64()
    );
    Ok(venv.to_path_buf())
}
