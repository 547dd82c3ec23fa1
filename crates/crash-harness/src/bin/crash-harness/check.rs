//! The checker: a separate process run while every worker is dead. It prints one JSON
//! [`CheckReport`] on stdout.
//!
//! Order: locks (each can be taken at once; none vanished or changed inode since the last
//! pass), entries (meta, artifact and the compiler's bytes agree), puts and staged directories
//! against the ledger, then the sweep (leftovers aged past `SWEEP_MIN_AGE` first, so nothing
//! waits) and what it left, then recovery (the workload's pack imports; every stored key and
//! every kernel is hit or rebuilt with the right bytes),
//! and last the event log's rules, which then include the recovery's own locks and compiles.

use crate::setup::{age, answer_problem, keys, RunDir};
use anyhow::{Context, Result};
use crash_harness::{
    check_put, dir_files, expected_artifact, kernel_index_of_name, kernel_text, CheckReport,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    kernels: usize,
    #[arg(long, default_value_t = 0)]
    store_keys: usize,
    /// The first pass, on an empty root: no recovery builds, so the workers start cold.
    #[arg(long)]
    cold: bool,
}

pub fn main(args: &CheckArgs) -> Result<ExitCode> {
    let run = RunDir::at(&args.dir);
    let report = check(&run, args.kernels, args.store_keys, args.cold)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(ExitCode::SUCCESS)
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn is_temp(name: &str) -> bool {
    durable_fs::is_temp_name(std::ffi::OsStr::new(name))
}

pub fn check(run: &RunDir, kernels: usize, store_keys: usize, cold: bool) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    let v1 = run.cache.join(jit_cache::FORMAT_DIR);
    check_locks(run, &v1, &mut report)?;
    check_entries(&v1, &mut report);
    check_ledger(run, &mut report);
    sweep(run, &v1, &mut report)?;
    let cache = run.open_cache()?;
    // On the first pass the root is empty; building there would only warm it for the workers.
    let kernels = if cold { 0 } else { kernels };
    if !cold {
        import_pack(run, &cache, &mut report);
        check_store_keys(&cache, store_keys, &mut report)?;
    }
    report
        .recovery_failures
        .extend((0..kernels).filter_map(|i| answer_problem(&cache, i)));
    let (traces, one_order) = crate::hosts::traces_to_check(&run.trace);
    let texts: Vec<String> = traces
        .iter()
        .map(|t| std::fs::read_to_string(t).unwrap_or_default())
        .collect();
    // The workload's kernels, and those a chase for missed phases made past them (`worker.rs`,
    // `CRASH_WORKER_COLD`): the compile rules hold for every kernel the trace saw compiled.
    let chased: BTreeSet<usize> = texts
        .iter()
        .flat_map(|t| crash_harness::parse(t))
        .filter(|e| e.kind == "compile-start")
        .filter_map(|e| kernel_index_of_name(&e.key))
        .filter(|i| *i >= kernels)
        .collect();
    let keys = keys(&cache, (0..kernels).chain(chased))?;
    let root = run.cache.display().to_string();
    if one_order && texts.len() > 1 {
        // Hosts sharing the root and its locks: one order, with the exception their negative
        // lookup caches allow (`trace.rs`).
        let text = crate::hosts::merged(&texts);
        report.trace =
            crash_harness::analyze_across_hosts(&crash_harness::parse(&text), &keys, &root);
    } else if one_order {
        let text = crate::hosts::merged(&texts);
        report.trace = crash_harness::analyze(&crash_harness::parse(&text), &keys, &root);
    } else {
        // `local` locks: each host's key locks are its own; the rules hold per host. Entries
        // are shared, though: every host's evictions (`trash`) join each host's log, so a
        // compile after another host evicted the entry counts as a recompile.
        for (i, text) in texts.iter().enumerate() {
            let evictions: String = texts
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .flat_map(|(_, t)| t.lines())
                .filter(|l| matches!(l.split(' ').nth(3), Some("trash" | "untrash")))
                .map(|l| format!("{l}\n"))
                .collect();
            let text = crate::hosts::merged(&[text.clone(), evictions]);
            let one = crash_harness::analyze(&crash_harness::parse(&text), &keys, &root);
            report.trace.absorb(one);
        }
    }
    Ok(report)
}

fn check_locks(run: &RunDir, v1: &Path, report: &mut CheckReport) -> Result<()> {
    let record = run.root.join("logs/lock-inodes.json");
    let before: BTreeMap<String, u64> = std::fs::read(&record)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let mut now = BTreeMap::new();
    let locks = v1.join("locks");
    for name in names(&locks) {
        let path = locks.join(&name);
        match durable_fs::try_lock(&path, durable_fs::LockMode::Exclusive) {
            Ok(Some(_guard)) => {}
            Ok(None) => report.stuck_locks.push(format!(
                "{} is held with every worker dead (open in: {})",
                path.display(),
                holders_of(&path)
            )),
            Err(e) => report.stuck_locks.push(e.to_string()),
        }
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            now.insert(name, meta.ino());
        }
    }
    for (name, inode) in &before {
        match now.get(name) {
            None => report
                .lock_files_replaced
                .push(format!("{name} vanished since the last check")),
            Some(current) if current != inode => report.lock_files_replaced.push(format!(
                "{name} is a new file (inode {inode} -> {current}) since the last check"
            )),
            Some(_) => {}
        }
    }
    // Files seen once stay expected, even after they vanished, so one deletion is reported once
    // per pass until it reappears with its old inode (which it never will).
    let mut merged = before;
    merged.extend(now);
    std::fs::write(&record, serde_json::to_vec(&merged)?)
        .with_context(|| format!("write {}", record.display()))?;
    Ok(())
}

fn check_entries(v1: &Path, report: &mut CheckReport) {
    let entries = v1.join("entries");
    for shard in names(&entries) {
        for key in names(&entries.join(&shard)) {
            let key_dir = entries.join(&shard).join(&key);
            if !key_dir.is_dir() {
                continue;
            }
            for name in names(&key_dir) {
                if is_temp(&name) {
                    continue;
                }
                report.entries_checked += 1;
                check_entry(&key_dir.join(&name), &key, report);
            }
        }
    }
}

fn check_entry(dir: &Path, key: &str, report: &mut CheckReport) {
    let shown = dir.display();
    if !looks_like_kernel_entry(dir) {
        return check_stored_entry(dir, key, report);
    }
    let meta: serde_json::Value = match std::fs::read(dir.join("meta.json")) {
        Err(e) => return report.partial.push(format!("{shown}: no meta.json ({e})")),
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(meta) => meta,
            Err(e) => {
                return report
                    .partial
                    .push(format!("{shown}: meta.json is cut short or garbled ({e})"))
            }
        },
    };
    let file = meta["artifact_file"].as_str().unwrap_or("artifact.cubin");
    let size = meta["artifact_size"].as_u64().unwrap_or(0);
    let digest = meta["artifact_digest"].as_str().unwrap_or("");
    let name = meta["name"].as_str().unwrap_or("");
    if meta["key"].as_str() != Some(key) {
        report
            .corrupt
            .push(format!("{shown}: meta.json names key {:?}", meta["key"]));
    }
    let bytes = match std::fs::read(dir.join(file)) {
        Ok(bytes) => bytes,
        Err(e) => {
            return report
                .partial
                .push(format!("{shown}: meta.json without its artifact ({e})"))
        }
    };
    if (bytes.len() as u64) < size {
        return report.partial.push(format!(
            "{shown}: artifact is {} of {size} bytes",
            bytes.len()
        ));
    }
    if bytes.len() as u64 != size || fingerprint::Digest::of_bytes(&bytes).to_hex() != digest {
        return report
            .corrupt
            .push(format!("{shown}: artifact does not match meta.json"));
    }
    match kernel_index_of_name(name) {
        Some(i) if bytes == expected_artifact(&kernel_text(i)) => {}
        _ => report.corrupt.push(format!(
            "{shown}: artifact is not what the compiler produces for `{name}`"
        )),
    }
}

/// Whether the entry at `dir` is a kernel's rather than a stored entry: its `meta.json` says so,
/// or, without a usable one, it has no file of the workload's stored entries.
fn looks_like_kernel_entry(dir: &Path) -> bool {
    let meta = std::fs::read(dir.join("meta.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    match meta {
        Some(meta) => meta["kind"].as_str() != Some("stored"),
        None => !names(dir).iter().any(|n| n.starts_with("kernel.")),
    }
}

/// A stored entry present is whole: `meta.json` names this key of the workload's namespace
/// and exactly its files, and each file holds the producer's bytes (read here, not through the
/// store, and compared with the workload's content, not only with `meta.json`).
fn check_stored_entry(dir: &Path, key_dir: &str, report: &mut CheckReport) {
    report.stored_checked += 1;
    let shown = dir.display();
    let mut torn = |why: String| report.stored_torn.push(format!("{shown}: {why}"));
    let meta: serde_json::Value = match std::fs::read(dir.join("meta.json")) {
        Err(e) => return torn(format!("no meta.json ({e})")),
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(meta) => meta,
            Err(e) => return torn(format!("meta.json is cut short or garbled ({e})")),
        },
    };
    let key = meta["key"].as_str().unwrap_or("");
    let Some(index) = crash_harness::store_index_of_key(key)
        .filter(|_| meta["namespace"].as_str() == Some(crash_harness::STORE_NAMESPACE))
    else {
        return torn(format!(
            "meta.json names {:?}/{key:?}, not a workload key",
            meta["namespace"]
        ));
    };
    if key_dir != crate::setup::store_digest(index) {
        torn(format!("{key} is published under another key's directory"));
    }
    let expected = crash_harness::stored_files(index);
    let mut wanted: Vec<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    wanted.sort_unstable();
    let listed: Vec<&str> = meta["files"]
        .as_array()
        .map(|files| files.iter().filter_map(|f| f["name"].as_str()).collect())
        .unwrap_or_default();
    if listed != wanted {
        torn(format!(
            "meta.json lists {listed:?}, the producer wrote {wanted:?}"
        ));
    }
    let mut on_disk = names(dir);
    on_disk.retain(|n| n != "meta.json");
    if on_disk != wanted {
        torn(format!("holds {on_disk:?}, the producer wrote {wanted:?}"));
    }
    for (name, bytes) in &expected {
        let recorded = meta["files"]
            .as_array()
            .and_then(|files| files.iter().find(|f| f["name"].as_str() == Some(name)));
        match std::fs::read(dir.join(name)) {
            Err(e) => torn(format!("{name} missing ({e})")),
            Ok(read) if read != *bytes => torn(format!(
                "{name} is {} bytes that are not the producer's {} bytes",
                read.len(),
                bytes.len()
            )),
            Ok(read) => {
                let digest = fingerprint::Digest::of_bytes(&read).to_hex();
                if recorded.is_some_and(|r| {
                    r["size"].as_u64() != Some(read.len() as u64)
                        || r["digest"].as_str() != Some(digest.as_str())
                }) {
                    torn(format!(
                        "{name} does not match its size and digest in meta.json"
                    ));
                }
            }
        }
    }
}

/// No stored key is stuck: with every worker dead, `begin` with a short wait on each key
/// answers `Ready` (then the entry is the producer's, byte for byte) or `Produce` (then this
/// pass produces it, so a later pass finds it ready), never `Busy` or an error.
/// Imports the workload's pack (when the run made one): whatever the killed workers left, an
/// import must succeed and skip nothing, and what it publishes is then read back by the
/// recovery's builds and `begin`s below, byte for byte.
fn import_pack(run: &RunDir, cache: &jit_cache::Cache, report: &mut CheckReport) {
    if !run.pack.exists() {
        return;
    }
    report.imports += 1;
    match cache.import_pack(&run.pack) {
        Ok(import) => {
            report.imported += import.imported;
            for (entry, why) in import.skipped {
                report
                    .import_failures
                    .push(format!("skipped {entry}: {why}"));
            }
        }
        Err(e) => report.import_failures.push(e.to_string()),
    }
}

fn check_store_keys(
    cache: &jit_cache::Cache,
    store_keys: usize,
    report: &mut CheckReport,
) -> Result<()> {
    use jit_cache::store::Claim;
    let store = cache.store().context("the cache's store")?;
    let namespace = crate::setup::namespace();
    for index in 0..store_keys {
        let key = crash_harness::store_key(index);
        let entry = match store.begin(&namespace, &key, std::time::Duration::from_millis(500)) {
            Ok(Claim::Ready(entry)) => {
                report.stored_ready += 1;
                entry
            }
            Ok(Claim::Produce(producer)) => {
                report.stored_produced += 1;
                match crate::setup::produce(producer, index) {
                    Ok(entry) => entry,
                    Err(e) => {
                        report.stored_stuck.push(format!("{key}: produce: {e}"));
                        continue;
                    }
                }
            }
            Err(e) => {
                report.stored_stuck.push(format!("{key}: begin: {e}"));
                continue;
            }
        };
        for problem in crate::setup::stored_entry_problems(&entry, index) {
            report.stored_stuck.push(format!("{key}: {problem}"));
        }
    }
    Ok(())
}

fn check_ledger(run: &RunDir, report: &mut CheckReport) {
    let text = std::fs::read_to_string(&run.ledger).unwrap_or_default();
    let mut begun: HashMap<String, HashSet<u64>> = HashMap::new();
    let mut done: HashMap<String, u64> = HashMap::new();
    let mut dirs_done = HashSet::new();
    let mut dirs_removed = HashSet::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.splitn(6, ' ').collect();
        let [_, _, _, event, _, detail] = fields[..] else {
            continue;
        };
        let mut parts = detail.rsplitn(2, ' ');
        match event {
            "put-begin" | "put-done" => {
                let (Some(seq), Some(path)) =
                    (parts.next().and_then(|s| s.parse().ok()), parts.next())
                else {
                    continue;
                };
                if event == "put-begin" {
                    begun.entry(path.to_string()).or_default().insert(seq);
                } else {
                    let last = done.entry(path.to_string()).or_insert(seq);
                    *last = (*last).max(seq);
                }
            }
            "dir-done" => {
                dirs_done.insert(detail.to_string());
            }
            "dir-remove" => {
                dirs_removed.insert(detail.to_string());
            }
            "verify-vanished" => report.verify_vanished.push(detail.to_string()),
            "store-busy" => report.store_busy += 1,
            "wrong-read" | "verify-corrupt" | "op-error" | "pin-vanished" => {
                report.worker_violations.push(format!("{event} {detail}"))
            }
            _ => {}
        }
    }
    for name in names(&run.puts).into_iter().filter(|n| !is_temp(n)) {
        begun
            .entry(run.puts.join(name).display().to_string())
            .or_default();
    }
    for (path, seqs) in &begun {
        report.puts_checked += 1;
        match std::fs::read(path) {
            Err(_) if done.contains_key(path) => report.puts_bad.push(format!(
                "{path} is gone though put {} returned Ok",
                done[path]
            )),
            Err(_) => {}
            Ok(bytes) => match check_put(&bytes) {
                Err(why) => report.puts_bad.push(format!("{path}: torn: {why}")),
                Ok(seq) if !seqs.contains(&seq) => report
                    .puts_bad
                    .push(format!("{path}: holds put {seq}, never begun")),
                Ok(seq) if done.get(path).is_some_and(|last| seq < *last) => {
                    report.puts_bad.push(format!(
                        "{path}: holds put {seq}, older than put {} that returned Ok",
                        done[path]
                    ))
                }
                Ok(_) => {}
            },
        }
    }
    let mut dirs: HashSet<String> = dirs_done.difference(&dirs_removed).cloned().collect();
    dirs.extend(
        names(&run.dirs)
            .into_iter()
            .filter(|n| !is_temp(n))
            .map(|n| run.dirs.join(n).display().to_string()),
    );
    for dir in dirs {
        report.dirs_checked += 1;
        let Some(seq) = dir
            .rsplit_once('-')
            .and_then(|(_, hex)| u64::from_str_radix(hex, 16).ok())
        else {
            report.dirs_bad.push(format!("{dir}: unexpected name"));
            continue;
        };
        if !Path::new(&dir).exists() {
            report
                .dirs_bad
                .push(format!("{dir} is gone though its commit returned Ok"));
            continue;
        }
        for (name, bytes) in dir_files(seq) {
            if std::fs::read(Path::new(&dir).join(&name)).ok().as_deref() != Some(bytes.as_slice())
            {
                report
                    .dirs_bad
                    .push(format!("{dir}/{name} is missing or not whole"));
            }
        }
    }
}

/// Where leftovers of dead processes can be: (directory, whether everything in it is one).
fn leftover_places(run: &RunDir, v1: &Path) -> Vec<(PathBuf, bool)> {
    let mut places = vec![(v1.join("staging"), true), (v1.join("trash"), true)];
    for sub in ["slots", "failures", "state", "locks"] {
        places.push((v1.join(sub), false));
    }
    let entries = v1.join("entries");
    for shard in names(&entries) {
        places.push((entries.join(&shard), false));
        for key in names(&entries.join(&shard)) {
            places.push((entries.join(&shard).join(key), false));
        }
    }
    places.push((run.puts.clone(), false));
    places.push((run.dirs.clone(), false));
    places
}

fn sweep(run: &RunDir, v1: &Path, report: &mut CheckReport) -> Result<()> {
    let places = leftover_places(run, v1);
    for (dir, all) in &places {
        for name in names(dir) {
            if *all || is_temp(&name) {
                age(&dir.join(name));
            }
        }
    }
    let cache = run.open_cache()?;
    report.swept += cache.sweep().context("sweep the cache")?;
    let policy = durable_fs::SweepPolicy {
        max_age: jit_cache::SWEEP_MIN_AGE,
    };
    for dir in [&run.puts, &run.dirs] {
        let swept =
            durable_fs::sweep(dir, &policy).with_context(|| format!("sweep {}", dir.display()))?;
        report.swept += swept.removed.len();
        // Why a leftover stayed, for the report's reader.
        for e in &swept.errors {
            eprintln!("crash-harness check: sweep: {e}");
        }
        if swept.skipped_live + swept.skipped_young > 0 {
            eprintln!(
                "crash-harness check: sweep of {} skipped {} live, {} young",
                dir.display(),
                swept.skipped_live,
                swept.skipped_young
            );
        }
    }
    drop(cache);
    for (dir, all) in &places {
        for name in names(dir) {
            if *all || is_temp(&name) {
                let path = dir.join(&name);
                // What this client sees of it (mtime and inode, or why nothing): a leftover
                // the listing shows but a lookup misses is a client cache's doing.
                let seen = std::fs::symlink_metadata(&path).map(|m| (m.mtime(), m.ino()));
                report
                    .leftovers_after_sweep
                    .push(format!("{} (seen as {seen:?})", path.display()));
            }
        }
    }
    Ok(())
}

/// The processes with `path` open, for a stuck lock's message: `pid (command)`, or `none`.
fn holders_of(path: &Path) -> String {
    let mut found = Vec::new();
    for proc_entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = proc_entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let fds = std::fs::read_dir(proc_entry.path().join("fd"))
            .into_iter()
            .flatten()
            .flatten();
        if fds
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .any(|target| target == path)
        {
            let command = std::fs::read_to_string(proc_entry.path().join("cmdline"))
                .unwrap_or_default()
                .replace('\0', " ");
            found.push(format!("{pid} ({})", command.trim()));
        }
    }
    if found.is_empty() {
        "none".to_string()
    } else {
        found.join(", ")
    }
}
