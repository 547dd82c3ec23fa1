//! One worker: a mixed workload against the shared cache root until it is killed.
//!
//! Builds (41%), imports of the workload's pack (4%), stored entries produced through
//! `jit_cache::store`'s begin/write/commit (12%),
//! durable puts (13%), staged directory commits (10%), `gc` (12%) and `verify` (8%) in an order
//! drawn from the seed; in a multi-host run `gc` takes 18% and `verify` 2%, since under the
//! shared protocol a verify refreshes every entry's last-use stamp, which pins it for the grace
//! period on every host, and at 8% nothing would ever be idle long enough to be evicted. The
//! worker records in the ledger each put and commit it begins, and each one that returned `Ok`
//! (after it returned), plus anything it saw wrong: a build or stored entry whose bytes differ
//! from the workload's, an entry `verify` found corrupt, a failed operation. In the event log it
//! notes each stored entry it produces (`produce-start`, `produce-end`), for the one-producer rule.
//! `CRASH_WORKER_FAILPOINT` (`put-writing`, `put-fsyncing`, `commit-writing`,
//! `commit-fsyncing`, `store-writing`) makes it kill itself there; `CRASH_WORKER_AIM` (the point
//! a launch is armed with) makes it repeat the operation that reaches that point, and
//! `CRASH_WORKER_COLD` (set while the supervisor chases phases the schedule missed) makes each
//! of its builds and stored entries one no process made before (indices past the workload's),
//! evicts what it can before each import, and builds a fresh entry before each gc (then evicts
//! all it may), so that neither a warm root nor an emptied one keeps it from its point.

use crate::setup::{append, set_phase, spec, RunDir};
use anyhow::Result;
use crash_harness::{
    dir_files, expected_artifact, kernel_name, kernel_text, put_contents, store_key, stored_files,
    Rng,
};
use jit_cache::store::{Claim, Store, StoredEntry};
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
    /// Stored entries in the workload (keys `triton-000`...).
    #[arg(long)]
    store_keys: usize,
    /// A multi-host run: fewer verifies (see the module's docs).
    #[arg(long)]
    multi_host: bool,
}

/// How long a worker waits for another producer of a stored entry before `Busy`.
const STORE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The pause after each stored file a producer writes, so that kills land mid-producer (the
/// workload's pace, like the fake compiler's; not synchronisation).
const STORE_STEP: std::time::Duration = std::time::Duration::from_millis(3);

/// The operations of the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Build,
    Import,
    Store,
    Put,
    Commit,
    Gc,
    Verify,
}

impl Op {
    /// The operation drawn from `draw` (0..100).
    fn drawn(draw: u64, multi_host: bool) -> Op {
        let gc_end = if multi_host { 98 } else { 92 };
        match draw {
            0..41 => Op::Build,
            41..45 => Op::Import,
            45..57 => Op::Store,
            57..70 => Op::Put,
            70..80 => Op::Commit,
            d if d < gc_end => Op::Gc,
            _ => Op::Verify,
        }
    }

    /// The operation that reaches the armed point `point`.
    fn reaching(point: &str) -> Option<Op> {
        use jit_cache::Failpoint as F;
        if let Ok(point) = point.parse::<F>() {
            return match point {
                F::Locked | F::Compiling | F::WritingMeta | F::Publishing | F::Published => {
                    Some(Op::Build)
                }
                F::Evicting | F::EvictingSecondLook => Some(Op::Gc),
                F::StoreLocked | F::StoreWritingMeta | F::StorePublishing | F::StorePublished => {
                    Some(Op::Store)
                }
                F::ImportLocked | F::ImportStaging | F::ImportPublishing | F::ImportPublished => {
                    Some(Op::Import)
                }
                F::VerifyFoundCorrupt => Some(Op::Verify),
            };
        }
        Some(match point {
            p if p.starts_with("store-") => Op::Store,
            p if p.starts_with("put-") => Op::Put,
            p if p.starts_with("commit-") => Op::Commit,
            _ => return None,
        })
    }
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
    let store = cache.store()?;
    let aim = std::env::var("CRASH_WORKER_AIM")
        .ok()
        .and_then(|p| Op::reaching(&p));
    let expected: Vec<Vec<u8>> = (0..args.kernels)
        .map(|i| expected_artifact(&kernel_text(i)))
        .collect();
    // Fresh indices for a cold aimed launch: past the workload's, unique per launch and op.
    let cold = aim.is_some() && std::env::var_os(COLD_ENV).is_some();
    let fresh = |base: usize, counter: u64| {
        base + (args.generation as usize) * 1_000_000 + counter as usize
    };
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
        let drawn = Op::drawn(rng.range(0, 100), args.multi_host);
        match aim.unwrap_or(drawn) {
            Op::Build => {
                // The previous pin goes first: this worker's own gc may then evict it.
                drop(held.take());
                let index = if cold {
                    fresh(args.kernels, counter)
                } else {
                    rng.range(0, args.kernels as u64) as usize
                };
                let bytes = match expected.get(index) {
                    Some(bytes) => std::borrow::Cow::Borrowed(bytes),
                    None => std::borrow::Cow::Owned(expected_artifact(&kernel_text(index))),
                };
                held = build(&worker, &cache, &bytes, index)
                    .map(|artifact| (artifact, std::time::Instant::now()));
            }
            Op::Import => {
                if cold {
                    // The pack's entries are made absent first (as far as this host's eviction
                    // rule allows), so that the import stages and publishes them again.
                    worker.phase("gc");
                    if let Err(e) = cache.gc(GcPolicy {
                        max_bytes: Some(0),
                        max_age: None,
                    }) {
                        worker.ledger("op-error", &format!("gc: {e}"));
                    }
                }
                import(&worker, &cache)
            }
            Op::Store if cold => store_op(&worker, &store, fresh(args.store_keys, counter)),
            Op::Store if args.store_keys > 0 => store_op(
                &worker,
                &store,
                rng.range(0, args.store_keys as u64) as usize,
            ),
            Op::Store => {}
            Op::Put => put(
                &worker,
                seq,
                rng.range(0, 2),
                rng.range(256 << 10, 1 << 20) as usize,
            ),
            Op::Commit => commit(&worker, seq),
            Op::Gc => {
                if cold {
                    // Aimed at eviction: a root the chase's own gcs emptied has nothing left to
                    // evict, and nothing else is built meanwhile. A fresh entry, not held, is
                    // made first, and the gc takes every entry it may.
                    drop(held.take());
                    let index = fresh(args.kernels, counter);
                    build(
                        &worker,
                        &cache,
                        &expected_artifact(&kernel_text(index)),
                        index,
                    );
                }
                worker.phase("gc");
                // Small enough that most entries go: keys turn cold again, and builders contend.
                if let Err(e) = cache.gc(GcPolicy {
                    max_bytes: Some(if cold { 0 } else { 600 << 10 }),
                    max_age: None,
                }) {
                    worker.ledger("op-error", &format!("gc: {e}"));
                }
            }
            Op::Verify => {
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

/// Set by the supervisor on a launch aimed at a phase the schedule missed (see the module doc).
pub const COLD_ENV: &str = "CRASH_WORKER_COLD";

fn build(
    worker: &Worker,
    cache: &jit_cache::Cache,
    expected: &[u8],
    index: usize,
) -> Option<jit_cache::Artifact> {
    worker.phase("get");
    match cache.get_or_build(&spec(index)) {
        Ok(built) => {
            worker.phase("checking");
            if built.artifact.bytes() != expected {
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

/// Imports the workload's pack. Its entries are the workload's own bytes, made with this run's
/// compiler, so the import must succeed and skip nothing: what it publishes is then read by the
/// builds and stored-entry checks of every worker and checked by the checker like any entry.
fn import(worker: &Worker, cache: &jit_cache::Cache) {
    worker.phase("importing");
    match cache.import_pack(&worker.run.pack) {
        Ok(report) => {
            for (entry, why) in &report.skipped {
                worker.ledger(
                    "op-error",
                    &format!("import skipped {entry} of the workload's pack: {why}"),
                );
            }
        }
        Err(e) => worker.ledger("op-error", &format!("import: {e}")),
    }
}

/// Asks the store for stored entry `index`: checks it when another producer made it, else
/// produces it file by file (a pause after each, the worker's `store-writing` point after the
/// second) and commits.
fn store_op(worker: &Worker, store: &Store, index: usize) {
    let key = store_key(index);
    let digest = crate::setup::store_digest(index);
    worker.phase("store-begin");
    match store.begin(&crate::setup::namespace(), &key, STORE_WAIT) {
        Ok(Claim::Ready(entry)) => {
            worker.phase("store-checking");
            check_stored(worker, &entry, index);
        }
        Ok(Claim::Produce(producer)) => {
            // Logged after the claim (the key's lock is held) and the end after the commit
            // returned: the lenient side, as the compiler's lines.
            append(
                &worker.run.trace,
                worker.pid,
                "produce-start",
                &digest,
                &key,
            );
            worker.phase("store-writing");
            for (n, (name, bytes)) in stored_files(index).iter().enumerate() {
                if let Err(e) = producer.write(name, bytes) {
                    worker.ledger("op-error", &format!("store {key}: {e}"));
                    return;
                }
                if n == 1 {
                    worker.failpoint("store-writing");
                }
                std::thread::sleep(STORE_STEP);
            }
            match producer.commit() {
                Ok(entry) => {
                    append(&worker.run.trace, worker.pid, "produce-end", &digest, &key);
                    worker.phase("store-checking");
                    check_stored(worker, &entry, index);
                }
                Err(e) => worker.ledger("op-error", &format!("store {key}: commit: {e}")),
            }
        }
        // Another producer held the key for the whole wait: counted, and the checker's
        // `begin` on every key (with every worker dead) is what proves no key stays stuck.
        Err(jit_cache::Error::Busy { .. }) => worker.ledger("store-busy", &key),
        Err(e) => worker.ledger("op-error", &format!("store {key}: begin: {e}")),
    }
}

/// A stored entry handed out must hold exactly the workload's files, byte for byte.
fn check_stored(worker: &Worker, entry: &StoredEntry, index: usize) {
    for problem in crate::setup::stored_entry_problems(entry, index) {
        worker.ledger(
            "wrong-read",
            &format!("stored {}: {problem}", store_key(index)),
        );
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
