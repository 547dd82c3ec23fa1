//! `cargo xtask bench <crate>`: each crate keeps one side-by-side benchmark (`benches/<crate>.rs`,
//! a plain `harness = false` binary that prints medians and ratios), run here in release mode.
//! `jit-cache`'s lives in `jit-cache-cli`, beside the binary it times.

use crate::util;
use anyhow::{bail, Result};

const BENCHED: &[&str] = &[
    "durable-fs",
    "fingerprint",
    "nvcc",
    "direct-io",
    "file-trace",
    "jit-cache",
    "launcher",
    "remote",
    "pack",
    "python",
    "triton",
    "torch",
];

pub fn run(args: &[String]) -> Result<()> {
    let Some(krate) = args.first() else {
        bail!("usage: cargo xtask bench <{}> [ARGS...]", BENCHED.join("|"));
    };
    if !BENCHED.contains(&krate.as_str()) {
        bail!("no benchmark for `{krate}`; known: {}", BENCHED.join(", "));
    }
    // The benches need no pipeline packages (torch, FlashInfer: gigabytes).
    let paths = crate::setup::run(&["--no-pipelines".into()])?;
    if krate == "triton" {
        // `jit_cache.triton` beside Triton's own FileCacheManager (`python.rs`).
        return crate::python::bench_triton(&crate::venv::venv_path(), &args[1..]);
    }
    if krate == "torch" {
        // `jit_cache.torch` beside Inductor's own caches (`torch.rs`).
        return crate::torch::bench(&crate::venv::venv_path(), &args[1..]);
    }
    if krate == "python" {
        // Python's `jit_cache` beside the Rust library and pure-Python peers (`python.rs`).
        return crate::python::bench(&crate::venv::venv_path(), &paths.nvcc, &args[1..]);
    }
    let bench_name = krate.replace('-', "_");
    // The jit-cache bench times the `jit-cache` binary too, so it belongs to the CLI's crate.
    let package = match krate.as_str() {
        // The nvcc launcher is the CLI's too: `jit-cache nvcc` against `ccache nvcc`.
        // The remote tier's bench times the binary's fleet against ccache + Redis.
        // Kernel packs: export and import against `cat` and `cp -r` + `sync`.
        "jit-cache" | "launcher" | "remote" | "pack" => "jit-cache-cli",
        other => other,
    };
    let mut cmd = util::cargo();
    cmd.args(["bench", "-p", package, "--bench", &bench_name, "--"]);
    cmd.args(&args[1..]).env("NVCC", &paths.nvcc);
    util::run_checked(&mut cmd)
}
