//! `gpu-check`: the run `cargo xtask gpu-check` prepares for a GPU machine.
//!
//! On a machine with an NVIDIA driver and nvcc it: builds the example kernels through `jit-cache`
//! into a fresh cache (cold) and again (hits); loads each artifact with cudarc; launches vector add
//! and the reduction on real data and checks them against the CPU; kills a builder with SIGKILL
//! mid-compile and shows the next run recovers; generates a safetensors checkpoint, streams it with
//! `direct-io` into device memory through pinned slots, checks every byte on the device against the
//! file, and measures GB/s against PyTorch's `safetensors.torch.load_file(..., device="cuda")` and
//! the disk's O_DIRECT ceiling (`dd iflag=direct`). It prints one table and exits non-zero on any
//! wrong byte or failed step.
//!
//! Without libcuda it stops at once with a clear error, never a panic.
//!
//! Usage: `gpu-check --kernels DIR [--work DIR] [--checkpoint-gib N] [--out DIR]`.

mod args;
mod checkpoint;
mod kernels;
mod recovery;
mod table;

use anyhow::{bail, Context, Result};

fn main() -> std::process::ExitCode {
    if std::env::args().nth(1).as_deref() == Some(recovery::CHILD_FLAG) {
        return recovery::child_main();
    }
    match run() {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("gpu-check: FAILED (see the table)");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("gpu-check: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run() -> Result<bool> {
    let args = args::parse()?;
    if !jit_cache::cuda::cuda_available() {
        bail!(
            "no CUDA driver here (libcuda.so.1 cannot be loaded): run gpu-check on a GPU machine"
        );
    }
    let nvcc = nvcc::Nvcc::locate().map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "gpu-check: nvcc {} ({})",
        nvcc.version().map_err(|e| anyhow::anyhow!("{e}"))?,
        nvcc.path().display()
    );
    if args.work.exists() {
        std::fs::remove_dir_all(&args.work)
            .with_context(|| format!("clear {}", args.work.display()))?;
    }
    std::fs::create_dir_all(&args.work)?;
    let mut table = table::Table::default();
    let ok_kernels = kernels::run(&args, &nvcc, &mut table)?;
    let ok_recovery = recovery::run(&args, &nvcc, &mut table)?;
    let ok_checkpoint = checkpoint::run(&args, &mut table)?;
    let text = table.render();
    println!("\n{text}");
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out)?;
        std::fs::write(out.join("gpu-check.txt"), &text)?;
    }
    Ok(ok_kernels && ok_recovery && ok_checkpoint)
}
