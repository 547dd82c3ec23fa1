//! One worker: a mixed workload against the shared cache root until it is killed.
//!
//! Builds (55%), durable puts (15%), staged directory commits (10%), `gc` (12%) and `verify` (8%)
//! in an order drawn from the seed. The worker records in the ledger each put and commit it
//! begins, and each one that returned `Ok` (after it returned), plus anything it saw wrong:
//! a build whose bytes differ from the compiler's, an entry `verify` found corrupt, a failed
//! operation. `CRASH_WORKER_FAILPOINT` (`put-writing`, `put-fsyncing`, `commit-writing`,
//! `commit-fsyncing`) makes it kill itself there.

use crate::setup::{append, set_phase, spec, RunDir};
use anyhow::Result;
use crash_harness::{dir_files, expected_artifact, kernel_name, kernel_text, put_contents, Rng};
use jit_cache::GcPolicy;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    slot: usize,
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    kernels: usize,
    #[arg(long)]
    generation: u64,
}

struct Worker {
    run: RunDir,
    slot: usize,
    pid: u32,
    phase: Option<std::fs::File>,
    failpoint: Option<String>,
}

impl Worker {
    fn ledger(&self, event: &str, detail: &str) {
        append(
            &self.run.ledger,
            self.pid,
            event,
            &self.slot.to_string(),
            detail,
        );
    }

    fn phase(&self, name: &str) {
        set_phase(self.phase.as_ref(), name);
    }

    /// Dies here, as kill -9 would, when this point is armed.
    fn failpoint(&self, name: &str) {
        if self.failpoint.as_deref() == Some(name) {
            self.phase(name);
            append(&self.run.trace, self.pid, "abort", "-", name);
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
        }
    }
}

pub fn main(args: &WorkerArgs) -> Result<ExitCode> {
    // A worker never outlives its supervisor.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let run = RunDir::at(&args.dir);
    let phase = std::fs::OpenOptions::new()
        .write(true)
        .open(run.phase_file(args.slot))
        .ok();
    let worker = Worker {
        slot: args.slot,
        pid: std::process::id(),
        phase,
        failpoint: std::env::var("CRASH_WORKER_FAILPOINT").ok(),
        run,
    };
    let cache = worker.run.open_cache()?;
    let expected: Vec<Vec<u8>> = (0..args.kernels)
        .map(|i| expected_artifact(&kernel_text(i)))
        .collect();
    let mut rng = Rng::derive(args.seed, ((args.slot as u64) << 32) | args.generation);
    // The artifact of the last build, held (pinned) until the next one: its path must keep
    // reading its bytes meanwhile, whatever gc, verify or clear run on this or another host. On
    // one host that holds for as long as it is held; across hosts for the window the shared
    // protocol promises (`PIN_WINDOW_ENV`, set by a multi-host run), which is what is checked.
    let window = std::env::var(crate::hosts::PIN_WINDOW_ENV)
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
        .map(std::time::Duration::from_millis);
    let mut held: Option<(jit_cache::Artifact, std::time::Instant)> = None;
    for counter in 1u64.. {
        if let Some((artifact, since)) = &held {
            let promised = window.is_none_or(|w| since.elapsed() < w);
            if promised && std::fs::read(artifact.path()).ok().as_deref() != Some(artifact.bytes())
            {
                worker.ledger(
                    "pin-vanished",
                    &format!(
                        "{} no longer reads the held artifact",
                        artifact.path().display()
                    ),
                );
            }
        }
        let seq = (args.generation << 40) | ((args.slot as u64) << 32) | counter;
        match rng.range(0, 100) {
            0..55 => {
                // The previous pin goes first: this worker's own gc may then evict it.
                drop(held.take());
                held = build(
                    &worker,
                    &cache,
                    &expected,
                    rng.range(0, args.kernels as u64) as usize,
                )
                .map(|artifact| (artifact, std::time::Instant::now()));
            }
            55..70 => put(
                &worker,
                seq,
                rng.range(0, 2),
                rng.range(256 << 10, 1 << 20) as usize,
            ),
            70..80 => commit(&worker, seq),
            80..92 => {
                worker.phase("gc");
                // Small enough that most entries go: keys turn cold again, and builders contend.
                if let Err(e) = cache.gc(GcPolicy {
                    max_bytes: Some(400 << 10),
                    max_age: None,
                }) {
                    worker.ledger("op-error", &format!("gc: {e}"));
                }
            }
            _ => {
                worker.phase("verifying");
                match cache.verify() {
                    Ok(report) => {
                        for (dir, why) in report.corrupt {
                            // jit-cache's verify reports an entry that a concurrent gc moved
                            // aside as corrupt ("meta.json unusable: ... No such file"): noted
                            // apart, not a violation (an entry left without its meta.json is
                            // caught by the checker as partial).
                            let event = if why.starts_with("meta.json unusable")
                                && why.contains("No such file or directory")
                            {
                                "verify-vanished"
                            } else {
                                "verify-corrupt"
                            };
                            worker.ledger(event, &format!("{}: {why}", dir.display()));
                        }
                    }
                    Err(e) => worker.ledger("op-error", &format!("verify: {e}")),
                }
            }
        }
        worker.phase("idle");
    }
    Ok(ExitCode::SUCCESS)
}

fn build(
    worker: &Worker,
    cache: &jit_cache::Cache,
    expected: &[Vec<u8>],
    index: usize,
) -> Option<jit_cache::Artifact> {
    worker.phase("get");
    match cache.get_or_build(&spec(index)) {
        Ok(built) => {
            worker.phase("checking");
            if built.artifact.bytes() != expected[index].as_slice() {
                worker.ledger(
                    "wrong-read",
                    &format!(
                        "{}: {} bytes from {}",
                        kernel_name(index),
                        built.artifact.bytes().len(),
                        built.artifact.path().display()
                    ),
                );
            }
            if let Some(warning) = built.warning {
                worker.ledger("uncached", &format!("{}: {warning}", kernel_name(index)));
            }
            Some(built.artifact)
        }
        Err(e) => {
            worker.ledger("op-error", &format!("build {}: {e}", kernel_name(index)));
            None
        }
    }
}

fn put(worker: &Worker, seq: u64, which: u64, len: usize) {
    let path = worker.run.puts.join(format!("s{}-{which}", worker.slot));
    let contents = put_contents(seq, len);
    worker.ledger("put-begin", &format!("{} {seq}", path.display()));
    worker.phase("put-writing");
    let chunks: Vec<&[u8]> = contents.chunks(64 << 10).collect();
    let result = durable_fs::put_with(&path, |file| {
        for (n, chunk) in chunks.iter().enumerate() {
            file.write_all(chunk)?;
            if n == chunks.len() / 2 {
                worker.failpoint("put-writing");
            }
        }
        worker.failpoint("put-fsyncing");
        // What remains of put_with is the fsync, the rename and the directory fsync.
        worker.phase("put-fsyncing");
        Ok(())
    });
    match result {
        Ok(()) => worker.ledger("put-done", &format!("{} {seq}", path.display())),
        Err(e) => worker.ledger("op-error", &format!("put: {e}")),
    }
}

fn commit(worker: &Worker, seq: u64) {
    let path = worker.run.dirs.join(format!("s{}-{seq:016x}", worker.slot));
    worker.ledger("dir-begin", &path.display().to_string());
    worker.phase("commit-writing");
    let result = (|| -> Result<()> {
        let staging = durable_fs::StagingDir::new_in(&worker.run.dirs)?;
        for (n, (name, bytes)) in dir_files(seq).into_iter().enumerate() {
            std::fs::write(staging.path().join(name), bytes)?;
            if n == 1 {
                worker.failpoint("commit-writing");
            }
        }
        worker.failpoint("commit-fsyncing");
        // commit_noreplace fsyncs the tree, renames it, and fsyncs the parent.
        worker.phase("commit-fsyncing");
        match staging.commit_noreplace(&path)? {
            durable_fs::PublishOutcome::Published => Ok(()),
            // Names are unique per slot and sequence: nobody else can have published here.
            durable_fs::PublishOutcome::AlreadyExisted => {
                anyhow::bail!("{} already existed", path.display())
            }
        }
    })();
    match result {
        Ok(()) => worker.ledger("dir-done", &path.display().to_string()),
        Err(e) => worker.ledger("op-error", &format!("commit: {e:#}")),
    }
    worker.phase("commit-cleanup");
    // Keep this slot's two newest directories: the rest go aside under a temp name (which the
    // sweep reclaims if we die) and are removed.
    let prefix = format!("s{}-", worker.slot);
    let mut mine: Vec<String> = std::fs::read_dir(&worker.run.dirs)
        .map(|r| {
            r.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    mine.sort();
    let keep = mine.len().saturating_sub(2);
    for name in &mine[..keep] {
        let old = worker.run.dirs.join(name);
        worker.ledger("dir-remove", &old.display().to_string());
        let aside = worker.run.dirs.join(durable_fs::temp_name("removing"));
        if std::fs::rename(&old, &aside).is_ok() {
            let _ = std::fs::remove_dir_all(&aside);
        }
    }
}
