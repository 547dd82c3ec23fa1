//! `crash-harness`: the processes of `cargo xtask crash-test`.
//!
//! `run` is the supervisor and killer, `race` the race harness; `worker`, `check`, `fleet-read`,
//! `race-child` and `fake-nvcc` are the processes they start.

mod check;
mod fake_nvcc;
mod fleet_reader;
mod fs_args;
mod hosts;
mod race;
mod remote;
mod run;
mod setup;
mod worker;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// kill -9 fault injection and a race harness for the JIT kernel cache.
#[derive(Debug, Parser)]
#[command(name = "crash-harness")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs workers, kills them, checks the cache after every few kills and at the end.
    Run(run::RunArgs),
    /// P processes x K kernels x R rounds on a cold cache: one compile per kernel per round.
    Race(race::RaceArgs),
    /// (internal) One worker: a mixed workload until killed.
    Worker(worker::WorkerArgs),
    /// (internal) Checks a stopped run directory and prints a JSON report.
    Check(check::CheckArgs),
    /// (internal) A cold reader of a `--remote` run's fleet tier, after its last check.
    FleetRead(fleet_reader::FleetReadArgs),
    /// (internal) One process of a race round.
    RaceChild(race::ChildArgs),
}

fn main() -> ExitCode {
    // The fake compiler is reached through a script that runs `crash-harness fake-nvcc ...`
    // with nvcc's own arguments, which are not ours to parse.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("fake-nvcc") {
        return fake_nvcc::main(&args[2..]);
    }
    let cli = Cli::parse();
    // The fake compiler logs its compiles to the harness's event log: a write the cache must not
    // take for the compile's side effect (it would leave every compile uncached). Declared as a
    // user's logging wrapper would declare its log, before any thread starts.
    if let Some(log) = std::env::var_os("JIT_CACHE_LOCK_LOG") {
        if let Some(dir) = std::path::Path::new(&log).parent() {
            std::env::set_var("JIT_CACHE_IGNORED_PATHS", dir);
        }
    }
    let result = match cli.command {
        Command::Run(args) => run::main(&args),
        Command::Race(args) => race::main(&args),
        Command::Worker(args) => worker::main(&args),
        Command::Check(args) => check::main(&args),
        Command::FleetRead(args) => fleet_reader::main(&args),
        Command::RaceChild(args) => race::child_main(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("crash-harness: {e:#}");
            ExitCode::from(2)
        }
    }
}
