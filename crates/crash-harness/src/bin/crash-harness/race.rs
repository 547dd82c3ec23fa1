//! The race harness: P processes ask for the same K kernels at once on a cold cache, R rounds.
//! Each round must compile each kernel exactly once, and every process must read the
//! compiler's bytes. Processes start together: each prepares, says `ready`, and waits on its
//! stdin until the harness has heard every `ready` (a pipe, not a sleep).

use crate::fs_args::FsArgs;
use crate::setup::{spec, RunDir};
use anyhow::{bail, Context, Result};
use crash_harness::{expected_artifact, kernel_text};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

#[derive(Debug, Clone, clap::Args)]
pub struct RaceArgs {
    /// Processes per round.
    #[arg(long, default_value_t = 8)]
    pub procs: usize,
    /// Kernels every process asks for.
    #[arg(long, default_value_t = 4)]
    pub kernels: usize,
    /// Rounds, each on a fresh (cold) cache.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Break the protocol on purpose (skip-lock is the negative control).
    #[arg(long)]
    pub inject_bug: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub fs: FsArgs,
    /// With `--fs nfs-sim`: processes spread over simulated hosts (`--hosts`, `--locks`,
    /// `--actimeo`). Shared locks: one compile per kernel per round across hosts; local locks:
    /// at most one per host.
    #[command(flatten)]
    pub hosts: crate::hosts::HostArgs,
}

#[derive(Debug, clap::Args)]
pub struct ChildArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    kernels: usize,
}

#[derive(Debug, Serialize, Deserialize)]
struct ChildResult {
    digests: Vec<String>,
    wrong_reads: Vec<String>,
    errors: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct RaceReport {
    pub procs: usize,
    pub kernels: usize,
    pub rounds: usize,
    pub inject_bug: Option<String>,
    pub compiler_calls_per_round: Vec<usize>,
    /// Simulated hosts and their lock mode (`--fs nfs-sim`); 1 and none elsewhere.
    pub hosts: usize,
    pub locks: Option<String>,
    pub wrong_reads: usize,
    pub errors: usize,
    pub artifacts_differing: usize,
    pub violations: Vec<String>,
}

pub fn child_main(args: &ChildArgs) -> Result<ExitCode> {
    let run = RunDir::at(&args.dir);
    let cache = run.open_cache()?;
    // Identify the compiler before the start line, so every process starts at the build.
    cache.explain(&spec(0)).context("probe the compiler")?;
    println!("ready");
    std::io::stdout().flush()?;
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;
    let mut result = ChildResult {
        digests: Vec::new(),
        wrong_reads: Vec::new(),
        errors: Vec::new(),
    };
    for i in 0..args.kernels {
        match cache.get_or_build(&spec(i)) {
            Ok(built) => {
                let bytes = built.artifact.bytes();
                if bytes != expected_artifact(&kernel_text(i)).as_slice() {
                    result
                        .wrong_reads
                        .push(format!("k{i}: {} bytes, not the compiler's", bytes.len()));
                }
                result
                    .digests
                    .push(fingerprint::Digest::of_bytes(bytes).to_hex());
            }
            Err(e) => {
                result.errors.push(format!("k{i}: {e}"));
                result.digests.push(String::new());
            }
        }
    }
    println!("{}", serde_json::to_string(&result)?);
    Ok(ExitCode::SUCCESS)
}

pub fn main(args: &RaceArgs) -> Result<ExitCode> {
    let report = if args.fs.fs == "nfs-sim" {
        crate::hosts::within_cluster(&args.hosts, |logs, cluster| {
            race_in(args, logs, Some(cluster))
        })?
    } else {
        args.fs.within(|root| race_in(args, root, None))?
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "race: {} processes x {} kernels x {} rounds{}{}: compiler calls per round {:?} (want {}), wrong reads {}, errors {}, differing artifacts {}",
            report.procs,
            report.kernels,
            report.rounds,
            report.locks.as_ref().map(|l| format!(" on {} hosts ({l} locks)", report.hosts)).unwrap_or_default(),
            report.inject_bug.as_ref().map(|b| format!(" (injected bug {b})")).unwrap_or_default(),
            report.compiler_calls_per_round,
            match report.locks.as_deref() {
                Some("local") => format!("{}..={} each", report.kernels, report.kernels * report.hosts),
                _ => format!("{} each", report.kernels),
            },
            report.wrong_reads,
            report.errors,
            report.artifacts_differing
        );
        println!("violations: {}", report.violations.len());
        for v in report.violations.iter().take(20) {
            println!("  {v}");
        }
    }
    Ok(if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn race_in(args: &RaceArgs, root: &Path, cluster: Option<&nfs_sim::Cluster>) -> Result<RaceReport> {
    let hosts = cluster.map_or(1, |c| c.hosts());
    let local_locks = cluster.is_some() && args.hosts.locks == "local";
    let mut report = RaceReport {
        procs: args.procs,
        kernels: args.kernels,
        rounds: args.rounds,
        inject_bug: args.inject_bug.clone(),
        hosts,
        locks: cluster.map(|_| args.hosts.locks.clone()),
        ..RaceReport::default()
    };
    for round in 0..args.rounds {
        let name = format!("race-{round}");
        let run = match cluster {
            Some(cluster) => {
                // The harness's files on the local disk, the cache on the export.
                let data = cluster.root().join(&name);
                let run = RunDir::split(&root.join(&name), &data);
                let on_host = run.clone();
                cluster.on(0, move || on_host.create_data())?;
                run
            }
            None => RunDir::at(&root.join(&name)),
        };
        run.create()?;
        let mut children = Vec::new();
        for proc_index in 0..args.procs {
            let mut cmd = Command::new(std::env::current_exe()?);
            cmd.arg("race-child")
                .arg("--dir")
                .arg(&run.root)
                .args(["--kernels", &args.kernels.to_string()])
                .env("JIT_CACHE_LOCK_LOG", &run.trace)
                .env_remove("JIT_CACHE_FAILPOINT")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            if let Some(bug) = &args.inject_bug {
                cmd.env("JIT_CACHE_INJECT_BUG", bug);
            }
            let child = match cluster {
                Some(cluster) => {
                    cmd.env(
                        crate::setup::DATA_ENV,
                        run.cache.parent().unwrap_or(&run.root),
                    );
                    cluster
                        .spawn(proc_index % hosts, cmd)
                        .context("start a race process on its host")?
                }
                None => cmd.spawn().context("start a race process")?,
            };
            children.push(child);
        }
        let mut readers = Vec::new();
        for child in &mut children {
            let mut reader = BufReader::new(child.stdout.take().context("child stdout")?);
            let mut line = String::new();
            reader.read_line(&mut line)?;
            if line.trim() != "ready" {
                bail!("a race process did not start: {line:?}");
            }
            readers.push(reader);
        }
        // Everyone is ready: start them together.
        for child in &mut children {
            let mut stdin = child.stdin.take().context("child stdin")?;
            stdin.write_all(b"go\n")?;
        }
        let mut results = Vec::new();
        for (child, mut reader) in children.iter_mut().zip(readers) {
            let mut line = String::new();
            reader.read_line(&mut line)?;
            let status = child.wait()?;
            if !status.success() {
                bail!("a race process failed ({status})");
            }
            results.push(
                serde_json::from_str::<ChildResult>(&line)
                    .context("parse a race process's result")?,
            );
        }
        let trace = std::fs::read_to_string(&run.trace).unwrap_or_default();
        let cache_root = run.cache.display().to_string();
        let events = crash_harness::parse(&trace);
        let compiles: Vec<(&str, u32)> = events
            .iter()
            .filter_map(|e| {
                let (parent, out) = e.detail.split_once(' ')?;
                (e.kind == "compile-start" && out.starts_with(&cache_root))
                    .then(|| Some((e.key.as_str(), parent.parse().ok()?)))?
            })
            .collect();
        let calls = compiles.len();
        report.compiler_calls_per_round.push(calls);
        if local_locks {
            // Each host's key lock is its own: one compile per kernel per host at most.
            if calls < args.kernels || calls > args.kernels * hosts {
                // Which host compiled which kernel more than once, and by which processes (one
                // process twice is a retry; two processes, a lock that did not exclude).
                let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
                let host_of = |pid: u32| pids.iter().position(|p| *p == pid).map(|i| i % hosts);
                let mut by_host: std::collections::BTreeMap<(Option<usize>, &str), Vec<u32>> =
                    std::collections::BTreeMap::new();
                for (kernel, pid) in &compiles {
                    by_host
                        .entry((host_of(*pid), kernel))
                        .or_default()
                        .push(*pid);
                }
                let twice: Vec<String> = by_host
                    .iter()
                    .filter(|(_, pids)| pids.len() > 1)
                    .map(|((host, kernel), pids)| format!("{kernel} on host {host:?} by {pids:?}"))
                    .collect();
                report.violations.push(format!(
                    "round {round}: {calls} compiler calls for {} kernels on {hosts} hosts with local locks (more than once: {})",
                    args.kernels,
                    twice.join(", ")
                ));
            }
        } else if calls != args.kernels {
            report.violations.push(format!(
                "round {round}: {calls} compiler calls for {} kernels",
                args.kernels
            ));
        }
        for result in &results {
            report.wrong_reads += result.wrong_reads.len();
            report.errors += result.errors.len();
            report.violations.extend(
                result
                    .wrong_reads
                    .iter()
                    .map(|w| format!("round {round}: wrong read {w}")),
            );
            report.violations.extend(
                result
                    .errors
                    .iter()
                    .map(|e| format!("round {round}: error {e}")),
            );
        }
        for i in 0..args.kernels {
            let want = fingerprint::Digest::of_bytes(&expected_artifact(&kernel_text(i))).to_hex();
            let differing = results
                .iter()
                .filter(|r| r.digests.get(i) != Some(&want))
                .count();
            if differing > 0 {
                report.artifacts_differing += differing;
                report.violations.push(format!(
                    "round {round}: k{i}: {differing} processes got other bytes"
                ));
            }
        }
    }
    Ok(report)
}
