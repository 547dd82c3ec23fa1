//! `fleet-read`: a cold reader of the fleet tier, run once by the supervisor after the last
//! check of a `--remote` run, while the server still holds what the workers uploaded.
//!
//! Each kernel is asked for through a fresh root of its own, so every answer comes from the
//! remote (verified, or refused and rebuilt) or from a compile, never from the workers' root. The
//! workers' own remote reads are a matter of chance (a kill may come before a reader logs what
//! it refused, and a reader reaches the remote only after a local eviction); this pass reads
//! every variant the server holds, so what it refuses and what it returns are facts of the run.

use crate::setup::{answer_problem, RunDir};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct FleetReadArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    kernels: usize,
}

/// What the cold reader saw: printed as JSON on stdout, absorbed into the run's report.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct FleetReadReport {
    /// Kernels asked for (one fresh root each).
    pub reads: usize,
    /// Answers whose bytes were not the kernel's, and requests that got none: violations.
    pub bad_answers: Vec<String>,
    /// The readers' remote events: verified fetches, misses, refused values.
    pub hits: u64,
    pub misses: u64,
    pub rejected: u64,
}

pub fn main(args: &FleetReadArgs) -> Result<ExitCode> {
    let run = RunDir::at(&args.dir);
    let readers = run.root.join("fleet-readers");
    if readers.exists() {
        std::fs::remove_dir_all(&readers)
            .with_context(|| format!("remove {}", readers.display()))?;
    }
    let mut report = FleetReadReport::default();
    for i in 0..args.kernels {
        let cache = run.open_root(&readers.join(format!("k{i}")), crate::remote::from_env()?)?;
        report.reads += 1;
        report.bad_answers.extend(answer_problem(&cache, i));
        let stats = cache.remote_stats();
        report.hits += stats.hits;
        report.misses += stats.misses;
        report.rejected += stats.rejected;
    }
    println!("{}", serde_json::to_string(&report)?);
    Ok(ExitCode::SUCCESS)
}
