//! `cargo xtask gpu-check [--prepare] [ARGS...]`: the GPU run (see `crates/gpu-check`).
//!
//! `--prepare` builds, here, a self-contained release binary (stripped; libcuda is loaded at run
//! time) and copies it with the example kernels into `gpu-check-bundle/` at the workspace root
//! (ignored by git), then prints the command a GPU machine runs. Without `--prepare` it also runs
//! the bundle here, which needs an NVIDIA driver and nvcc on this machine.

use crate::util;
use anyhow::{Context, Result};
use std::path::Path;
use std::process::Command;

pub fn run(args: &[String]) -> Result<()> {
    let prepare_only = args.iter().any(|a| a == "--prepare");
    let rest: Vec<&String> = args.iter().filter(|a| *a != "--prepare").collect();
    let root = util::workspace_root();
    util::run_checked(
        util::cargo()
            .args(["build", "--release", "-q", "-p", "gpu-check"])
            .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
            .env("CARGO_PROFILE_RELEASE_STRIP", "true"),
    )?;
    let bundle = root.join("gpu-check-bundle");
    if bundle.exists() {
        std::fs::remove_dir_all(&bundle).with_context(|| format!("remove {}", bundle.display()))?;
    }
    std::fs::create_dir_all(bundle.join("kernels/include"))?;
    std::fs::copy(
        util::target_dir().join("release/gpu-check"),
        bundle.join("gpu-check"),
    )?;
    copy_files(&root.join("examples/kernels"), &bundle.join("kernels"))?;
    copy_files(
        &root.join("examples/kernels/include"),
        &bundle.join("kernels/include"),
    )?;
    let size = std::fs::metadata(bundle.join("gpu-check"))?.len();
    println!(
        "gpu-check bundle: {} ({:.1} MiB binary)",
        bundle.display(),
        size as f64 / (1 << 20) as f64
    );
    println!("on a GPU machine (repository root), carry `gpu-check-bundle` and run:");
    println!("  gpu-check-bundle/gpu-check --kernels gpu-check-bundle/kernels --work /tmp/gpu-check --checkpoint-gib 4 --out $OUT");
    if prepare_only {
        return Ok(());
    }
    let mut cmd = Command::new(bundle.join("gpu-check"));
    cmd.arg("--kernels").arg(bundle.join("kernels")).args(rest);
    util::run_checked(&mut cmd)
}

fn copy_files(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("read {}", from.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}
