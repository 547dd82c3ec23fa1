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

use crate::util::{cargo, run_checked, target_dir};
use anyhow::{bail, Context, Result};
use std::process::Command;

pub fn run(args: &[String]) -> Result<()> {
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
        return power_loss(&rest);
    }
    run_checked(cargo().args(["build", "--release", "-p", "crash-harness"]))?;
    let harness = target_dir().join("release/crash-harness");
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

fn power_loss(args: &[String]) -> Result<()> {
    let manifest =
        crate::util::workspace_root().join("crates/powercut-fs/src/bin/power-loss-test.rs");
    if !manifest.is_file() {
        bail!("--power-loss needs crates/powercut-fs's power-loss-test binary, which is not in this checkout yet");
    }
    let built = cargo()
        .args([
            "build",
            "--release",
            "-p",
            "powercut-fs",
            "--bin",
            "power-loss-test",
        ])
        .status();
    match built {
        Ok(status) if status.success() => {}
        Ok(status) => {
            bail!("--power-loss: powercut-fs's power-loss-test does not build yet ({status})")
        }
        Err(e) => bail!("--power-loss: cannot run cargo to build powercut-fs: {e}"),
    }
    let binary = target_dir().join("release/power-loss-test");
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
