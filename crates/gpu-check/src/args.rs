//! The command line: what `gpu-check` runs on and where it writes, used by every step.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;

/// Parsed command line.
pub struct Args {
    /// `--kernels DIR`: the example kernels' sources (required).
    pub kernels: PathBuf,
    /// `--work DIR`: scratch space for the caches and the checkpoint (cleared at the start).
    pub work: PathBuf,
    /// `--checkpoint-gib N`: the size of the generated checkpoint.
    pub checkpoint_gib: f64,
    /// `--out DIR`: where the table is also written, as `gpu-check.txt`.
    pub out: Option<PathBuf>,
}

/// Parses the process's arguments (after the program name).
pub fn parse() -> Result<Args> {
    let mut args = std::env::args().skip(1);
    let mut kernels = None;
    let mut work = std::env::temp_dir().join("gpu-check");
    let mut checkpoint_gib = 4.0;
    let mut out = None;
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--kernels" => kernels = Some(PathBuf::from(value()?)),
            "--work" => work = PathBuf::from(value()?),
            "--checkpoint-gib" => checkpoint_gib = value()?.parse().context("--checkpoint-gib takes a number")?,
            "--out" => out = Some(PathBuf::from(value()?)),
            other => bail!("unknown argument `{other}`; usage: gpu-check --kernels DIR [--work DIR] [--checkpoint-gib N] [--out DIR]"),
        }
    }
    let kernels = kernels.context("--kernels DIR is required (the example kernels)")?;
    Ok(Args {
        kernels,
        work,
        checkpoint_gib,
        out,
    })
}
