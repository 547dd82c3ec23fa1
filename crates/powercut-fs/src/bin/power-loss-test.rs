//! Runs `durable-fs` puts, staged commits and `jit-cache` builds (with a deterministic fake
//! nvcc) on powercut-fs through random power cuts and checks every cut:
//! `cuts N, operations checked N, lost 0, torn 0; builds checked N, lost 0, torn 0 (...)`.
//! Exits non-zero on a violation.

use std::process::ExitCode;

use clap::Parser;
use powercut_fs::{Options, RandomCuts, RenameFlags, Writer};

/// Power-loss test of durable-fs on a FUSE filesystem that forgets what was not fsynced.
#[derive(Debug, Parser)]
struct Args {
    /// Power cuts to make.
    #[arg(long, default_value_t = 300)]
    cuts: u64,
    /// Seed for the workload, the cut points and modes, and the injected faults.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of the summary line.
    #[arg(long)]
    json: bool,
    /// Refuse `renameat2` flags with EINVAL (as NFS does), so durable-fs's fallbacks run.
    #[arg(long)]
    refuse_rename_flags: bool,
    /// The put under test; the broken ones are negative controls that must fail.
    #[arg(long, value_enum, default_value_t = WriterArg::DurableFs)]
    writer: WriterArg,
    /// Leave `jit-cache` builds out of the workload (puts and staged commits only).
    #[arg(long)]
    no_jit_builds: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum WriterArg {
    /// `durable_fs::put` and staged commits.
    DurableFs,
    /// A put without the file fsync (must report lost or torn entries).
    NoFileFsync,
    /// A put without the directory fsync (must report lost entries).
    NoDirFsync,
}

fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let plan = RandomCuts {
        cuts: args.cuts,
        seed: args.seed,
        writer: match args.writer {
            WriterArg::DurableFs => Writer::DurableFs,
            WriterArg::NoFileFsync => Writer::NoFileFsync,
            WriterArg::NoDirFsync => Writer::NoDirFsync,
        },
        jit_builds: !args.no_jit_builds,
    };
    let started = std::time::Instant::now();
    let options = Options {
        rename_flags: if args.refuse_rename_flags {
            RenameFlags::RefuseWithEinval
        } else {
            RenameFlags::Supported
        },
        ..Options::default()
    };
    let outcome =
        powercut_fs::with_mount(options, |mount| powercut_fs::run_random_cuts(mount, plan));
    let totals = match outcome {
        Ok(totals) => totals?,
        Err(skipped) if fs_testbed::skips_are_failures() => {
            anyhow::bail!("{skipped} (FS_TESTBED_REQUIRE=1: a skip is a failure)")
        }
        Err(skipped) => {
            eprintln!("{skipped}");
            return Ok(ExitCode::SUCCESS);
        }
    };
    if args.json {
        let json = serde_json::json!({
            "cuts": totals.cuts,
            "operations_checked": totals.operations_checked,
            "lost": totals.lost,
            "torn": totals.torn,
            "fsync_errors_returned": totals.fsync_errors_returned,
            "builds": {
                "published": totals.builds.published,
                "checked": totals.builds.checked,
                "entry_checks": totals.builds.entry_checks,
                "hits": totals.builds.hits,
                "not_published": totals.builds.not_published,
                "lost": totals.builds.lost,
                "torn": totals.builds.torn,
                "swept": totals.builds.swept,
                "leftovers": totals.builds.leftovers,
                "fsync_errors_returned": totals.builds.fsync_errors_returned,
                "published_after_fsync_error": totals.builds.published_after_fsync_error,
            },
            "seed": args.seed,
            "seconds": started.elapsed().as_secs_f64(),
            "violations": totals.violations,
        });
        println!("{json}");
    } else {
        println!("{}", totals.summary());
        for v in &totals.violations {
            eprintln!("violation: {v}");
        }
    }
    Ok(if totals.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
