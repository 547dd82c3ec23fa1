//! `cargo xtask crash-test`: kill -9 fault injection against the cache (see issue 7).
//!
//! ```text
//! cargo xtask crash-test [--kills N] [--workers W] [--seed S] [--fs tmp|ext4|xfs|xfs4k|btrfs|tmpfs]
//!                        [--kernels K] [--store-keys K] [--check-every K] [--json] [--inject-bug NAME]
//! cargo xtask crash-test --race [--procs P] [--kernels K] [--rounds R] [--fs ...] [--json] [--inject-bug NAME]
//! cargo xtask crash-test --power-loss [--cuts N] [--seed S] [--json]
//! cargo xtask crash-test --fs nfs-sim [--hosts N] [--locks shared|local] [--actimeo S]
//!                        [--grace-ms MS] [--host-crash-every K] [the run options above]
//! ```
//!
//! The first two build `crash-harness` (release) and run its `run` or `race` command with the
//! remaining arguments; `--power-loss` builds and runs `powercut-fs`'s `power-loss-test`.
//! `cargo xtask test` runs the same commands on the debug binaries its test step already built
//! ([`Build::Tests`]): a release build of both harnesses would cost it minutes for runs of
//! seconds.

use crate::util::{cargo, run_checked, target_dir};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// Which build of the harnesses a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    /// Release binaries (`cargo xtask crash-test`: long runs go faster).
    Release,
    /// The debug binaries of the test step, built with its package and feature selection
    /// (`selection::workspace_selection`), so that Cargo finds them built and fresh.
    Tests,
}

/// Builds `binary` of `package` as `build` says and returns its path.
fn built(build: Build, package: &str, binary: &str) -> Result<PathBuf> {
    match build {
        Build::Release => {
            run_checked(cargo().args(["build", "--release", "-p", package, "--bin", binary]))?;
            Ok(target_dir().join("release").join(binary))
        }
        Build::Tests => {
            run_checked(
                cargo()
                    .args(["build"])
                    .args(crate::selection::workspace_selection())
                    .args(["--bin", binary]),
            )?;
            Ok(target_dir().join("debug").join(binary))
        }
    }
}

pub fn run(args: &[String]) -> Result<()> {
    run_with(args, Build::Release)
}

pub fn run_with(args: &[String], build: Build) -> Result<()> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{}", usage());
        return Ok(());
    }
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let rest: Vec<String> = args
        .iter()
        .filter(|a| *a != "--race" && *a != "--power-loss")
        .cloned()
        .collect();
    if has("--power-loss") {
        return power_loss(&rest, build);
    }
    let harness = built(build, "crash-harness", "crash-harness")?;
    let command = if has("--race") { "race" } else { "run" };
    let status = Command::new(&harness)
        .arg(command)
        .args(&rest)
        .status()
        .with_context(|| format!("run {}", harness.display()))?;
    if !status.success() {
        bail!("crash-test {command} failed ({status}): see the report above");
    }
    Ok(())
}

fn power_loss(args: &[String], build: Build) -> Result<()> {
    let binary = built(build, "powercut-fs", "power-loss-test")
        .context("--power-loss: build powercut-fs's power-loss-test")?;
    let status = Command::new(&binary)
        .args(args)
        .status()
        .with_context(|| format!("run {}", binary.display()))?;
    if !status.success() {
        bail!("crash-test --power-loss failed ({status}): see the report above");
    }
    Ok(())
}

fn usage() -> &'static str {
    "usage:\n  cargo xtask crash-test [--kills N] [--workers W] [--seed S] [--fs tmp|ext4|xfs|xfs4k|btrfs|tmpfs] \
     [--kernels K] [--store-keys K] [--check-every K] [--json] [--inject-bug in-place|meta-first|skip-lock|delete-lock-file] \
     [--remote [--remote-store redis|s3] [--remote-kill-every K]]\n  \
     cargo xtask crash-test --race [--procs P] [--kernels K] [--rounds R] [--fs ...] [--json] [--inject-bug skip-lock]\n  \
     cargo xtask crash-test --power-loss [--cuts N] [--seed S] [--json]\n  \
     cargo xtask crash-test --fs nfs-sim [--hosts N] [--locks shared|local] [--actimeo S] [--grace-ms MS] [--host-crash-every K] [run options]"
}
