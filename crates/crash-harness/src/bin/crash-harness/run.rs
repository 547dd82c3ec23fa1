//! The supervisor and killer: starts the workers, kills them on the seeded schedule and at
//! failpoints, restarts them, stops them all every few kills for a checker pass, and reports.

use crate::fs_args::FsArgs;
use crate::setup::{append, phase_class, read_phase, RunDir, REQUIRED_PHASES};
use anyhow::{bail, Context, Result};
use crash_harness::{CheckReport, Rng};
use jit_cache::Failpoint;
use serde::Serialize;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The points a launch can be armed with: jit-cache's (by its own table's names), then the
/// worker's own.
const POINTS: [(&str, bool); 20] = [
    (Failpoint::Locked.word(), true),
    (Failpoint::Compiling.word(), true),
    (Failpoint::WritingMeta.word(), true),
    (Failpoint::Publishing.word(), true),
    (Failpoint::Published.word(), true),
    (Failpoint::Evicting.word(), true),
    (Failpoint::EvictingSecondLook.word(), true),
    (Failpoint::StoreLocked.word(), true),
    (Failpoint::StoreWritingMeta.word(), true),
    (Failpoint::StorePublishing.word(), true),
    (Failpoint::StorePublished.word(), true),
    (Failpoint::ImportLocked.word(), true),
    (Failpoint::ImportStaging.word(), true),
    (Failpoint::ImportPublishing.word(), true),
    (Failpoint::ImportPublished.word(), true),
    ("store-writing", false),
    ("put-writing", false),
    ("put-fsyncing", false),
    ("commit-writing", false),
    ("commit-fsyncing", false),
];

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Kills to make (SIGKILLs from the schedule, failpoint deaths, and the stops before checks).
    #[arg(long, default_value_t = 200)]
    pub kills: usize,
    /// Worker processes.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Seed of the schedule (printed; default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Kernels in the workload.
    #[arg(long, default_value_t = 6)]
    pub kernels: usize,
    /// Stop the workers and run the checker after this many kills.
    #[arg(long, default_value_t = 50)]
    pub check_every: usize,
    /// Percentage of worker launches armed with a failpoint (abort there).
    #[arg(long, default_value_t = 35)]
    pub failpoint_percent: u64,
    /// Stored entries in the workload (`jit_cache::store` keys, produced by begin/commit).
    #[arg(long, default_value_t = 6)]
    pub store_keys: usize,
    /// How long (ms) an armed launch is spared by the schedule, so that it reaches its point
    /// (after that, or when every worker is armed and young, it is a victim like any other).
    #[arg(long, default_value_t = 1500)]
    pub armed_grace_ms: u64,
    /// Longest pause between two kills, in ms (the pause is drawn from 2..=this).
    #[arg(long, default_value_t = 60)]
    pub max_delay_ms: u64,
    /// Break the protocol on purpose: in-place, meta-first, skip-lock, delete-lock-file.
    #[arg(long)]
    pub inject_bug: Option<String>,
    /// Arm only these points (comma-separated; default: all of them in turn).
    #[arg(long, value_delimiter = ',')]
    pub points: Vec<String>,
    /// After `--kills`, how long (seconds) the run may go on aiming launches at the required
    /// phases no kill landed in (the schedule's luck); a phase still missed then fails the run.
    /// A run that already found a violation stops at `--kills`.
    #[arg(long, default_value_t = 120)]
    pub phase_deadline_s: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Give the workers a real fleet tier (`--remote-store`), kill its server with SIGKILL on
    /// the schedule, and audit it at every check.
    #[arg(long)]
    pub remote: bool,
    /// The fleet tier's server with `--remote`: redis-server, or SeaweedFS's S3.
    #[arg(long, value_enum, default_value_t = crate::remote::Store::Redis)]
    pub remote_store: crate::remote::Store,
    /// Kill (and restart) the remote's server after every this many kills.
    #[arg(long, default_value_t = 40)]
    pub remote_kill_every: usize,
    #[command(flatten)]
    pub fs: FsArgs,
    #[command(flatten)]
    pub hosts: crate::hosts::HostArgs,
}

/// The whole run's findings.
#[derive(Debug, Default, Serialize)]
pub struct RunReport {
    pub seed: u64,
    pub fs: String,
    pub workers: usize,
    pub kernels: usize,
    pub inject_bug: Option<String>,
    pub kills: usize,
    pub kills_by_phase: BTreeMap<String, usize>,
    pub kills_at_failpoints: usize,
    pub kills_on_schedule: usize,
    pub kills_at_checks: usize,
    pub kills_at_host_crashes: usize,
    /// Phases with no kill: each fails the run.
    pub phases_missed: Vec<String>,
    /// Kills made after `--kills` while aiming at phases the schedule missed.
    pub chase_kills: usize,
    pub phases_required: Vec<String>,
    pub checks: usize,
    pub entries_checked: usize,
    pub corrupt: usize,
    pub partial: usize,
    pub stuck_locks: usize,
    pub lock_files_replaced: usize,
    pub swept: usize,
    pub leftovers_after_sweep: usize,
    pub recovery_failures: usize,
    pub puts_checked: usize,
    pub puts_bad: usize,
    pub dirs_checked: usize,
    pub dirs_bad: usize,
    pub worker_violations: usize,
    pub verify_vanished_reports: usize,
    pub lock_acquires: usize,
    pub compiles: usize,
    pub recompiles_after_kill: usize,
    pub recompiles_after_eviction: usize,
    pub uncached_compiles: usize,
    pub lock_overlaps: usize,
    pub double_compiles: usize,
    pub corrupt_found_by_builders: usize,
    /// Stored entries (`jit_cache::store`): examined, torn, stuck keys, what the checker's
    /// `begin` found, the workers' `Busy` answers, and the producer rule.
    pub stored_checked: usize,
    pub stored_torn: usize,
    pub stored_stuck: usize,
    pub stored_ready: usize,
    pub stored_produced_by_checker: usize,
    pub store_busy: usize,
    pub produces: usize,
    pub reproduces_after_kill: usize,
    pub reproduces_after_eviction: usize,
    pub double_produces: usize,
    /// The checker's imports of the workload's pack, the entries they published, and what
    /// failed (an error or a skipped entry: violations).
    pub checker_imports: usize,
    pub checker_imported: usize,
    pub import_failures: usize,
    pub violations: usize,
    pub violation_samples: Vec<String>,
    pub elapsed_s: f64,
    /// Simulated hosts (`--fs nfs-sim`), their lock mode and actimeo; 1 elsewhere.
    pub hosts: usize,
    pub locks: Option<String>,
    pub actimeo_s: Option<u64>,
    pub grace_ms: Option<u64>,
    /// Whole-host crashes (every process killed, the mount gone, its locks dropped).
    pub host_crashes: usize,
    /// Held artifacts whose path stopped reading their bytes (worker-reported).
    pub pins_vanished: usize,
    /// With `--remote`: what the workers did with it and what the audits found.
    pub remote: Option<RemoteReport>,
}

/// The remote tier's part of a run (`--remote`).
#[derive(Debug, Default, Serialize)]
pub struct RemoteReport {
    /// Which server it was.
    pub store: crate::remote::Store,
    /// SIGKILLs of the server (each followed by a fresh, empty one).
    pub server_kills: usize,
    /// The workers' remote events, from the root's log.
    pub stats: jit_cache::RemoteStats,
    /// Audits (one per checker pass) and what the last one saw.
    pub audits: usize,
    pub manifests: usize,
    pub variants: usize,
    pub blobs: usize,
    /// Variants whose blob is gone (readers take them as misses): not violations.
    pub variants_without_blob: usize,
    /// Over every audit: manifests that do not parse and blobs that do not hash to their names.
    pub unreadable_manifests: usize,
    pub corrupt_blobs: usize,
    /// After the last check: every kernel asked for through a fresh root (`fleet_reader.rs`).
    pub cold_reader: crate::fleet_reader::FleetReadReport,
}

impl RunReport {
    fn absorb(&mut self, check: &CheckReport) {
        self.checks += 1;
        self.entries_checked += check.entries_checked;
        self.corrupt += check.corrupt.len();
        self.partial += check.partial.len();
        self.stuck_locks += check.stuck_locks.len();
        self.lock_files_replaced += check.lock_files_replaced.len();
        self.swept += check.swept;
        self.leftovers_after_sweep += check.leftovers_after_sweep.len();
        self.recovery_failures += check.recovery_failures.len();
        self.checker_imports += check.imports;
        self.checker_imported += check.imported;
        self.import_failures += check.import_failures.len();
        self.puts_checked += check.puts_checked;
        self.puts_bad += check.puts_bad.len();
        self.dirs_checked += check.dirs_checked;
        self.dirs_bad += check.dirs_bad.len();
        self.stored_checked += check.stored_checked;
        self.stored_torn += check.stored_torn.len();
        self.stored_stuck += check.stored_stuck.len();
        self.stored_ready += check.stored_ready;
        self.stored_produced_by_checker += check.stored_produced;
        self.store_busy = check.store_busy;
        self.produces = check.trace.produces;
        self.reproduces_after_kill = check.trace.reproduces_after_kill;
        self.reproduces_after_eviction = check.trace.reproduces_after_eviction;
        self.double_produces = check.trace.double_produces.len();
        // Worker records and the event log are cumulative: the latest pass has them all.
        self.worker_violations = check.worker_violations.len();
        self.pins_vanished = check
            .worker_violations
            .iter()
            .filter(|v| v.starts_with("pin-vanished"))
            .count();
        self.verify_vanished_reports = check.verify_vanished.len();
        self.lock_acquires = check.trace.acquires;
        self.compiles = check.trace.compiles;
        self.recompiles_after_kill = check.trace.recompiles_after_kill;
        self.recompiles_after_eviction = check.trace.recompiles_after_eviction;
        self.uncached_compiles = check.trace.uncached_compiles;
        self.lock_overlaps = check.trace.lock_overlaps.len();
        self.double_compiles = check.trace.double_compiles.len();
        self.corrupt_found_by_builders = check.trace.corrupt_found.len();
        for violation in check.violations() {
            if self.violation_samples.len() < 40 && !self.violation_samples.contains(&violation) {
                self.violation_samples.push(violation);
            }
        }
        self.violations = self.corrupt
            + self.partial
            + self.stuck_locks
            + self.lock_files_replaced
            + self.leftovers_after_sweep
            + self.recovery_failures
            + self.import_failures
            + self.puts_bad
            + self.dirs_bad
            + self.worker_violations
            + self.lock_overlaps
            + self.double_compiles
            + self.corrupt_found_by_builders
            + self.stored_torn
            + self.stored_stuck
            + self.double_produces
            + self
                .remote
                .as_ref()
                .map_or(0, |r| r.unreadable_manifests + r.corrupt_blobs);
    }

    fn print(&self) {
        let by_phase: Vec<String> = self
            .kills_by_phase
            .iter()
            .map(|(p, n)| format!("{p} {n}"))
            .collect();
        println!(
            "crash-test seed {} on {}: {} kills in {:.1} s ({} workers, {} kernels, {} checks{})",
            self.seed,
            self.fs,
            self.kills,
            self.elapsed_s,
            self.workers,
            self.kernels,
            self.checks,
            self.inject_bug
                .as_ref()
                .map(|b| format!(", injected bug {b}"))
                .unwrap_or_default()
        );
        println!(
            "kills by phase: {} ({} at failpoints, {} on the schedule, {} stopping for checks, {} in host crashes)",
            by_phase.join(", "),
            self.kills_at_failpoints,
            self.kills_on_schedule,
            self.kills_at_checks,
            self.kills_at_host_crashes
        );
        if self.phases_missed.is_empty() {
            println!(
                "every required phase was hit: {}{}",
                self.phases_required.join(", "),
                if self.chase_kills > 0 {
                    format!(
                        " ({} kills aimed at phases the schedule missed)",
                        self.chase_kills
                    )
                } else {
                    String::new()
                }
            );
        } else {
            println!(
                "MISSED phases (no kill there, {} kills aimed at them): {}",
                self.chase_kills,
                self.phases_missed.join(", ")
            );
        }
        println!(
            "entries checked {}, corrupt {}, partial {}, stuck locks {}, lock files replaced {}, leftovers after sweep {} (swept {}), recovery failures {}",
            self.entries_checked,
            self.corrupt,
            self.partial,
            self.stuck_locks,
            self.lock_files_replaced,
            self.leftovers_after_sweep,
            self.swept,
            self.recovery_failures
        );
        println!(
            "puts checked {} (bad {}), staged dirs checked {} (bad {}), worker-reported violations {} (verify's vanished-entry false alarms, not counted: {})",
            self.puts_checked, self.puts_bad, self.dirs_checked, self.dirs_bad, self.worker_violations, self.verify_vanished_reports
        );
        println!(
            "lock acquires {}, overlapping holders {}; compiles {} (recompiles: {} after a kill, {} after eviction; {} uncached), double compiles {}, corrupt entries found by builders {}",
            self.lock_acquires,
            self.lock_overlaps,
            self.compiles,
            self.recompiles_after_kill,
            self.recompiles_after_eviction,
            self.uncached_compiles,
            self.double_compiles,
            self.corrupt_found_by_builders
        );
        println!(
            "stored entries checked {}, torn {}, stuck keys {} (the checker's begin: {} ready, {} produced), busy answers {}; produces {} (again: {} after a kill, {} after eviction), double produces {}",
            self.stored_checked,
            self.stored_torn,
            self.stored_stuck,
            self.stored_ready,
            self.stored_produced_by_checker,
            self.store_busy,
            self.produces,
            self.reproduces_after_kill,
            self.reproduces_after_eviction,
            self.double_produces
        );
        println!(
            "the checker's imports of the workload's pack {} (entries published {}), failed {}",
            self.checker_imports, self.checker_imported, self.import_failures
        );
        if self.hosts > 1 {
            println!(
                "hosts {} (locks {}, actimeo {} s, grace {} ms): {} host crashes; held artifacts whose path vanished {}",
                self.hosts,
                self.locks.as_deref().unwrap_or("-"),
                self.actimeo_s.unwrap_or(0),
                self.grace_ms.unwrap_or(0),
                self.host_crashes,
                self.pins_vanished
            );
        }
        if let Some(remote) = &self.remote {
            println!(
                "remote ({}): server killed {} times; {} fetched (verified), {} misses, {} uploads, {} leases waited, {} faults, {} values refused; {} audits, last: {} manifests ({} variants, {} without blob: misses), {} blobs; unreadable manifests {}, corrupt blobs {}",
                remote.store.name(),
                remote.server_kills,
                remote.stats.hits,
                remote.stats.misses,
                remote.stats.uploads,
                remote.stats.leases_waited,
                remote.stats.errors,
                remote.stats.rejected,
                remote.audits,
                remote.manifests,
                remote.variants,
                remote.variants_without_blob,
                remote.blobs,
                remote.unreadable_manifests,
                remote.corrupt_blobs
            );
            let cold = &remote.cold_reader;
            println!(
                "the cold fleet reader: {} kernels, {} fetched (verified), {} misses, {} values refused, {} bad answers",
                cold.reads,
                cold.hits,
                cold.misses,
                cold.rejected,
                cold.bad_answers.len()
            );
        }
        println!("violations: {}", self.violations);
        for sample in &self.violation_samples {
            println!("  {sample}");
        }
    }
}

struct Worker {
    child: Child,
    armed: Option<&'static str>,
    started: Instant,
}

struct Supervisor<'a> {
    args: &'a RunArgs,
    /// The simulated hosts of a multi-host run.
    cluster: Option<&'a nfs_sim::Cluster>,
    /// The fleet tier's server (`--remote`).
    remote: Option<crate::remote::Server>,
    run: RunDir,
    seed: u64,
    rng: Rng,
    generation: u64,
    armed_launches: usize,
    /// While chasing missed phases: the points every launch is armed with, in turn.
    chasing: Vec<(&'static str, bool)>,
    stderr: std::fs::File,
    report: RunReport,
}

impl Supervisor<'_> {
    fn launch(&mut self, slot: usize) -> Result<Worker> {
        self.generation += 1;
        let armed = if !self.chasing.is_empty() {
            self.armed_launches += 1;
            self.chasing
                .get((self.armed_launches - 1) % self.chasing.len())
                .copied()
        } else if self.rng.range(0, 100) < self.args.failpoint_percent {
            self.armed_launches += 1;
            let allowed: Vec<(&'static str, bool)> = POINTS
                .iter()
                .copied()
                .filter(|(p, _)| {
                    self.args.points.is_empty() || self.args.points.iter().any(|a| a == p)
                })
                .collect();
            allowed
                .get((self.armed_launches - 1) % allowed.len().max(1))
                .copied()
        } else {
            None
        };
        let phase_file = self.run.phase_file(slot);
        crate::setup::set_phase(
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&phase_file)
                .ok()
                .as_ref(),
            "starting",
        );
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("worker")
            .arg("--dir")
            .arg(&self.run.root)
            .args([
                "--slot",
                &slot.to_string(),
                "--seed",
                &self.seed.to_string(),
            ])
            .args([
                "--kernels",
                &self.args.kernels.to_string(),
                "--generation",
                &self.generation.to_string(),
                "--store-keys",
                &self.args.store_keys.to_string(),
            ])
            .env("JIT_CACHE_LOCK_LOG", &self.run.trace)
            .env("JIT_CACHE_PHASE_FILE", &phase_file)
            .env_remove("JIT_CACHE_FAILPOINT")
            .env_remove("CRASH_WORKER_FAILPOINT")
            .env_remove("CRASH_WORKER_AIM")
            .env_remove(crate::worker::COLD_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.stderr.try_clone()?);
        if let Some(bug) = &self.args.inject_bug {
            cmd.env("JIT_CACHE_INJECT_BUG", bug);
        }
        if let Some(server) = &self.remote {
            cmd.envs(server.env());
        }
        if self.cluster.is_some() {
            cmd.arg("--multi-host");
        }
        if let Some((point, in_cache)) = armed {
            // The worker repeats the operation that reaches its point.
            cmd.env("CRASH_WORKER_AIM", point);
            if !self.chasing.is_empty() {
                cmd.env(crate::worker::COLD_ENV, "1");
            }
            if in_cache {
                cmd.env("JIT_CACHE_FAILPOINT", format!("{point}:abort"));
            } else {
                cmd.env("CRASH_WORKER_FAILPOINT", point);
            }
        }
        let child = match self.cluster {
            Some(cluster) => {
                let host = self.host_of(slot);
                cmd.env("JIT_CACHE_LOCK_LOG", self.trace_of(slot))
                    .env(crate::setup::DATA_ENV, cluster.root())
                    .env(
                        jit_cache::SHARED_GRACE_ENV,
                        self.args.hosts.grace_ms().to_string(),
                    )
                    .env(
                        crate::hosts::PIN_WINDOW_ENV,
                        self.args.hosts.pin_window_ms().to_string(),
                    );
                cluster
                    .spawn(host, cmd)
                    .context("start a worker on its host")?
            }
            None => cmd.spawn().context("start a worker")?,
        };
        Ok(Worker {
            child,
            armed: armed.map(|(p, _)| p),
            started: Instant::now(),
        })
    }

    /// The host a worker slot runs on.
    fn host_of(&self, slot: usize) -> usize {
        slot % self.args.hosts.hosts.max(1)
    }

    /// The event log of a slot's host (one per host in a multi-host run).
    fn trace_of(&self, slot: usize) -> std::path::PathBuf {
        match self.cluster {
            Some(_) => crate::hosts::trace_path(&self.run.root, self.host_of(slot)),
            None => self.run.trace.clone(),
        }
    }

    fn count(&mut self, phase: &str, source: Source) {
        self.report.kills += 1;
        *self
            .report
            .kills_by_phase
            .entry(phase_class(phase).to_string())
            .or_default() += 1;
        match source {
            Source::Failpoint => self.report.kills_at_failpoints += 1,
            Source::Schedule => self.report.kills_on_schedule += 1,
            Source::Check => self.report.kills_at_checks += 1,
            Source::HostCrash => self.report.kills_at_host_crashes += 1,
        }
    }

    /// Kills one worker (logging the kill first), reaps it and counts the phase it was in.
    fn kill(&mut self, slot: usize, worker: &mut Worker, source: Source) -> Result<()> {
        let phase = read_phase(&self.run.phase_file(slot));
        let pid = worker.child.id();
        let trace = self.trace_of(slot);
        append(
            &trace,
            std::process::id(),
            "kill",
            "-",
            &format!("{pid} {phase}"),
        );
        let _ = worker.child.kill();
        let status = worker.child.wait().context("reap a worker")?;
        append(&trace, std::process::id(), "reaped", "-", &pid.to_string());
        // It may have died at its armed failpoint just before: then that is what killed it.
        let source = if worker.armed.is_some_and(|p| p == phase) {
            Source::Failpoint
        } else {
            source
        };
        if status.signal() != Some(9) {
            bail!(
                "worker {pid} ended with {status} before it was killed (see {})",
                self.stderr_path().display()
            );
        }
        self.count(&phase, source);
        Ok(())
    }

    /// Reaps workers that died on their own (at an armed failpoint), counting and restarting them.
    fn reap(&mut self, workers: &mut [Worker]) -> Result<()> {
        for (slot, worker) in workers.iter_mut().enumerate() {
            if let Some(status) = worker.child.try_wait()? {
                append(
                    &self.trace_of(slot),
                    std::process::id(),
                    "reaped",
                    "-",
                    &worker.child.id().to_string(),
                );
                let phase = read_phase(&self.run.phase_file(slot));
                if status.signal() != Some(9) || worker.armed.is_none() {
                    bail!(
                        "worker in slot {slot} ended with {status} (see {})",
                        self.stderr_path().display()
                    );
                }
                self.count(&phase, Source::Failpoint);
                *worker = self.launch(slot)?;
            }
        }
        Ok(())
    }

    fn stderr_path(&self) -> std::path::PathBuf {
        self.run.root.join("logs/workers.stderr")
    }

    fn check(&mut self) -> Result<()> {
        let first = self.report.checks == 0;
        drain_orphans(self.remote.as_ref().map(|s| s.pid()));
        if let (Some(server), Some(report)) = (&self.remote, self.report.remote.as_mut()) {
            let audit = server.audit()?;
            report.audits += 1;
            report.manifests = audit.manifests;
            report.variants = audit.variants;
            report.blobs = audit.blobs;
            report.variants_without_blob = audit.variants_without_blob;
            report.unreadable_manifests += audit.unreadable_manifests;
            report.corrupt_blobs += audit.corrupt_blobs;
        }
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("check")
            .arg("--dir")
            .arg(&self.run.root)
            .args(["--kernels", &self.args.kernels.to_string()])
            .args(["--store-keys", &self.args.store_keys.to_string()])
            .env("JIT_CACHE_LOCK_LOG", &self.run.trace)
            .env_remove("JIT_CACHE_FAILPOINT")
            .env_remove("JIT_CACHE_PHASE_FILE")
            .stderr(Stdio::inherit());
        if let Some(bug) = &self.args.inject_bug {
            cmd.env("JIT_CACHE_INJECT_BUG", bug);
        }
        if first && self.cluster.is_some() {
            // Across hosts a warm entry rarely goes cold again in a short run (it is evicted
            // only once idle for the grace period), so the workers start cold: the first
            // builds are theirs, to be killed in. On one host gc makes keys cold again at once,
            // and a warm start gives `--remote` runs blobs to fetch from the start.
            cmd.arg("--cold");
        }
        let out = match self.cluster {
            // On host 0, reading every host's event log (by lock mode: one order across hosts,
            // or one per host).
            Some(cluster) => {
                // The checker judges the server's state, so it gets a fresh client: host 0's
                // kernel may still cache a miss for a file a killed worker's interrupted create
                // made (its reply was lost), which the sweep would then skip.
                cluster.crash(0).context("remount host 0 for the checker")?;
                cluster
                    .restart(0)
                    .context("remount host 0 for the checker")?;
                let traces: Vec<String> = (0..self.args.hosts.hosts)
                    .map(|h| {
                        crate::hosts::trace_path(&self.run.root, h)
                            .display()
                            .to_string()
                    })
                    .collect();
                cmd.env(
                    "JIT_CACHE_LOCK_LOG",
                    crate::hosts::trace_path(&self.run.root, 0),
                )
                .env(crate::setup::DATA_ENV, cluster.root())
                .env(crate::hosts::TRACES_ENV, traces.join(":"))
                .env(crate::hosts::LOCKS_ENV, &self.args.hosts.locks)
                .env(
                    jit_cache::SHARED_GRACE_ENV,
                    self.args.hosts.grace_ms().to_string(),
                )
                .stdout(Stdio::piped());
                cluster
                    .spawn(0, cmd)
                    .context("start the checker on host 0")?
                    .wait_with_output()
                    .context("run the checker")?
            }
            None => cmd.output().context("run the checker")?,
        };
        if !out.status.success() {
            bail!("the checker failed ({})", out.status);
        }
        let check: CheckReport =
            serde_json::from_slice(&out.stdout).context("parse the checker's report")?;
        self.report.absorb(&check);
        Ok(())
    }
}

impl Supervisor<'_> {
    /// With `--remote`: the cold reader's pass over what the server holds (no failpoints, no
    /// event log: its compiles are in roots of its own); a wrong answer is a violation.
    fn fleet_read(&mut self) -> Result<()> {
        let (Some(server), Some(report)) = (&self.remote, self.report.remote.as_mut()) else {
            return Ok(());
        };
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("fleet-read")
            .arg("--dir")
            .arg(&self.run.root)
            .args(["--kernels", &self.args.kernels.to_string()])
            .envs(server.env())
            .env_remove("JIT_CACHE_LOCK_LOG")
            .env_remove("JIT_CACHE_FAILPOINT")
            .env_remove("JIT_CACHE_PHASE_FILE")
            .env_remove(crate::setup::DATA_ENV)
            .stderr(Stdio::inherit());
        if let Some(bug) = &self.args.inject_bug {
            cmd.env("JIT_CACHE_INJECT_BUG", bug);
        }
        let out = cmd.output().context("run the fleet's cold reader")?;
        if !out.status.success() {
            bail!("the fleet's cold reader failed ({})", out.status);
        }
        report.cold_reader =
            serde_json::from_slice(&out.stdout).context("parse the cold reader's report")?;
        for bad in &report.cold_reader.bad_answers {
            self.report.violations += 1;
            if self.report.violation_samples.len() < 40 {
                self.report
                    .violation_samples
                    .push(format!("cold fleet reader: {bad}"));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Source {
    Failpoint,
    Schedule,
    Check,
    HostCrash,
}

pub fn main(args: &RunArgs) -> Result<ExitCode> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    if !args.json {
        println!("crash-test: seed {seed} (replay with --seed {seed})");
    }
    let report = if args.fs.fs == "nfs-sim" {
        crate::hosts::within_cluster(&args.hosts, |logs, cluster| {
            run_in(args, seed, logs, Some(cluster))
        })?
    } else {
        args.fs.within(|root| run_in(args, seed, root, None))?
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        report.print();
    }
    Ok(
        if report.violations == 0 && report.phases_missed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        },
    )
}

fn run_in(
    args: &RunArgs,
    seed: u64,
    root: &Path,
    cluster: Option<&nfs_sim::Cluster>,
) -> Result<RunReport> {
    if args.workers == 0 || args.kernels == 0 {
        bail!("--workers and --kernels must be at least 1");
    }
    if args.remote && cluster.is_some() {
        bail!("--remote runs on one host's filesystem (each host of a fleet has its own cache)");
    }
    let started = Instant::now();
    let run = match cluster {
        Some(cluster) => {
            let run = RunDir::split(&root.join("crash-test"), cluster.root());
            let on_host = run.clone();
            cluster.on(0, move || on_host.create_data())?;
            run
        }
        None => RunDir::at(&root.join("crash-test")),
    };
    run.create()?;
    let stderr_path = run.root.join("logs/workers.stderr");
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&stderr_path)?;
    let remote = if args.remote {
        Some(crate::remote::Server::start(
            args.remote_store,
            &run.root.join("remote"),
        )?)
    } else {
        None
    };
    let mut sup = Supervisor {
        args,
        cluster,
        remote,
        run,
        seed,
        rng: Rng::new(seed),
        generation: 0,
        armed_launches: 0,
        chasing: Vec::new(),
        stderr,
        report: RunReport {
            seed,
            fs: args.fs.fs.clone(),
            workers: args.workers,
            kernels: args.kernels,
            inject_bug: args.inject_bug.clone(),
            hosts: cluster.map_or(1, |c| c.hosts()),
            locks: cluster.map(|_| args.hosts.locks.clone()),
            actimeo_s: cluster.map(|_| args.hosts.actimeo),
            grace_ms: cluster.map(|_| args.hosts.grace_ms()),
            remote: args.remote.then(|| RemoteReport {
                store: args.remote_store,
                ..RemoteReport::default()
            }),
            ..RunReport::default()
        },
    };
    // Orphans of killed workers (a compiler, or a child between fork and exec that still shares
    // a worker's lock descriptor) become our children, so a check can wait until they are gone.
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .context("become a child subreaper")?;
    // A first pass on the empty root records the lock files' inodes and proves the checker runs.
    sup.check()?;
    crate::setup::make_pack(&sup.run, args.kernels, args.store_keys)
        .context("make the workload's pack")?;
    let mut workers = (0..args.workers)
        .map(|slot| sup.launch(slot))
        .collect::<Result<Vec<_>>>()?;
    let mut next_check = args.check_every.max(1);
    while sup.report.kills < args.kills {
        let delay = sup.rng.range(2, args.max_delay_ms.max(2) + 1);
        let drawn = sup.rng.range(0, args.workers as u64) as usize;
        // The schedule's pause, not synchronisation: the workers run meanwhile.
        std::thread::sleep(Duration::from_millis(delay));
        sup.reap(&mut workers)?;
        let victim = spare_armed(&workers, drawn, args.armed_grace_ms);
        sup.kill(victim, &mut workers[victim], Source::Schedule)?;
        workers[victim] = sup.launch(victim)?;
        if let Some(cluster) = cluster {
            let every = args.hosts.host_crash_every.max(1);
            if sup.report.kills >= (sup.report.host_crashes + 1) * every {
                // A whole host goes down: its workers die, its mount goes, the server drops
                // its locks; it comes back with empty caches and fresh workers.
                let host = sup.rng.range(0, cluster.hosts() as u64) as usize;
                let on_host: Vec<usize> = (0..args.workers)
                    .filter(|s| sup.host_of(*s) == host)
                    .collect();
                for &slot in &on_host {
                    sup.kill(slot, &mut workers[slot], Source::HostCrash)?;
                }
                cluster.crash(host).context("crash a host")?;
                cluster.restart(host).context("restart a host")?;
                sup.report.host_crashes += 1;
                for &slot in &on_host {
                    workers[slot] = sup.launch(slot)?;
                }
            }
        }
        if let (Some(server), Some(report)) = (sup.remote.as_mut(), sup.report.remote.as_mut()) {
            if sup.report.kills >= (report.server_kills + 1) * args.remote_kill_every.max(1) {
                // The fleet's store dies with everything it held, mid-operation for some workers.
                server
                    .kill_and_restart()
                    .context("kill and restart the remote's server")?;
                report.server_kills += 1;
            }
        }
        if sup.report.kills >= next_check && sup.report.kills < args.kills {
            for (slot, worker) in workers.iter_mut().enumerate() {
                sup.kill(slot, worker, Source::Check)?;
            }
            sup.check()?;
            next_check = sup.report.kills + args.check_every.max(1);
            workers = (0..args.workers)
                .map(|slot| sup.launch(slot))
                .collect::<Result<Vec<_>>>()?;
        }
    }
    chase_missed_phases(&mut sup, &mut workers)?;
    for (slot, worker) in workers.iter_mut().enumerate() {
        sup.kill(slot, worker, Source::Check)?;
    }
    sup.check()?;
    sup.fleet_read()?;
    if let Some(remote) = sup.report.remote.as_mut() {
        remote.stats = sup.run.open_cache()?.remote_stats();
    }
    let mut report = sup.report;
    report.phases_missed = missed_phases(&report, &args.points)
        .into_iter()
        .map(String::from)
        .collect();
    report.phases_required = required_phases(&args.points)
        .into_iter()
        .map(String::from)
        .collect();
    report.elapsed_s = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The schedule's victim: the drawn slot, or the next one not armed within its grace, so that
/// an armed launch lives to reach its point (the drawn one when every worker is spared).
fn spare_armed(workers: &[Worker], drawn: usize, grace_ms: u64) -> usize {
    let grace = Duration::from_millis(grace_ms);
    (0..workers.len())
        .map(|i| (drawn + i) % workers.len())
        .find(|&slot| {
            let worker = &workers[slot];
            worker.armed.is_none() || worker.started.elapsed() >= grace
        })
        .unwrap_or(drawn)
}

/// The required phases no kill has landed in yet.
fn missed_phases(report: &RunReport, points: &[String]) -> Vec<&'static str> {
    required_phases(points)
        .into_iter()
        .filter(|p| !report.kills_by_phase.contains_key(*p))
        .collect()
}

/// After the schedule's kills (issue 31, item 10): while a required phase saw no kill and no
/// violation was found, every launch is armed with a point of a missed phase, in turn, and a
/// worker that has not reached its point within the armed grace is replaced, until every phase
/// is hit or `--phase-deadline-s` passes (then the missed phases fail the run, as before). No
/// check runs meanwhile: the final one checks what the chase left.
fn chase_missed_phases(sup: &mut Supervisor<'_>, workers: &mut [Worker]) -> Result<()> {
    let args = sup.args;
    let deadline = Instant::now() + Duration::from_secs(args.phase_deadline_s);
    let grace = Duration::from_millis(args.armed_grace_ms);
    let scheduled = sup.report.kills;
    loop {
        let missed = missed_phases(&sup.report, &args.points);
        if missed.is_empty() || sup.report.violations > 0 || Instant::now() >= deadline {
            break;
        }
        sup.chasing = POINTS
            .iter()
            .copied()
            .filter(|(p, _)| missed.contains(&phase_class(p)))
            .filter(|(p, _)| args.points.is_empty() || args.points.iter().any(|a| a == p))
            .collect();
        if sup.chasing.is_empty() {
            break;
        }
        // The schedule's pause, not synchronisation: the armed workers run meanwhile.
        std::thread::sleep(Duration::from_millis(args.max_delay_ms.max(2)));
        sup.reap(workers)?;
        for (slot, worker) in workers.iter_mut().enumerate() {
            let aimed = worker
                .armed
                .is_some_and(|p| sup.chasing.iter().any(|(c, _)| *c == p));
            if !aimed || worker.started.elapsed() >= grace {
                sup.kill(slot, worker, Source::Schedule)?;
                *worker = sup.launch(slot)?;
            }
        }
    }
    sup.chasing.clear();
    sup.report.chase_kills = sup.report.kills - scheduled;
    Ok(())
}

/// The phases the run must kill in: all of [`REQUIRED_PHASES`], or with `--points`, those the
/// chosen points belong to (the others may be missed by a schedule alone).
fn required_phases(points: &[String]) -> Vec<&'static str> {
    REQUIRED_PHASES
        .iter()
        .copied()
        .filter(|phase| points.is_empty() || points.iter().any(|p| phase_class(p) == *phase))
        .collect()
}

/// Waits until every process left by the killed workers has exited. Called with every worker
/// reaped, so the only children left are such orphans (a fake compiler stops at its next chunk
/// once its builder is gone, and a child between fork and exec drops the lock at exec), and the
/// remote's server, `keep`, which stays.
fn drain_orphans(keep: Option<u32>) {
    let Some(keep) = keep else {
        while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::empty()) {}
        return;
    };
    loop {
        let orphans: Vec<u32> = children().into_iter().filter(|p| *p != keep).collect();
        if orphans.is_empty() {
            return;
        }
        for pid in orphans {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
            }
        }
    }
}

/// This process's children, as every one of its threads lists them.
fn children() -> Vec<u32> {
    let mut pids = Vec::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            pids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    pids
}
