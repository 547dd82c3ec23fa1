//! Multi-host runs (`--fs nfs-sim --hosts N`): the simulated hosts, one event log per host, and
//! how the checker reads them.
//!
//! Workers are spread over the hosts (slot `s` on host `s % N`), each started in its host's
//! mount namespace with that host's identity. The harness's own files (event logs, ledger,
//! phase files) stay on the local disk, where `O_APPEND` is atomic; the cache and the durable-fs
//! workload live on the export. With `shared` locks the key lock is one lock across hosts, so
//! the event logs are merged into one order (their monotonic stamps come from one machine) and
//! the one-compile rule holds across hosts; with `local` locks each host's log is checked on
//! its own (at most one compile per key per host at a time).

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The event logs of every host, `:`-separated, for the checker.
pub const TRACES_ENV: &str = "CRASH_HARNESS_TRACES";
/// `shared` or `local`, for the checker.
pub const LOCKS_ENV: &str = "CRASH_HARNESS_LOCKS";
/// How long (ms) a worker's held artifact must keep its path across hosts: the grace period less
/// the stamp's refresh interval and 1 s resolution, and the mounts' `actimeo` (another host sees
/// the stamp that late).
pub const PIN_WINDOW_ENV: &str = "CRASH_HARNESS_PIN_WINDOW_MS";

#[derive(Debug, Clone, clap::Args)]
pub struct HostArgs {
    /// Simulated hosts sharing the cache (`--fs nfs-sim` only).
    #[arg(long, default_value_t = 3)]
    pub hosts: usize,
    /// Lock mode of the simulated NFS mounts: shared (a lock manager) or local
    /// (`nolock`/`local_lock=all`).
    #[arg(long, default_value = "shared")]
    pub locks: String,
    /// Attribute and lookup cache timeout of every mount, in seconds (0..=60).
    #[arg(long, default_value_t = 3)]
    pub actimeo: u64,
    /// Crash a whole host after every this many kills.
    #[arg(long, default_value_t = 40)]
    pub host_crash_every: usize,
    /// The shared protocol's grace period in ms (`JIT_CACHE_SHARED_GRACE_MS`; 10 min in
    /// production). Default: 4 x actimeo + 2 s, so that eviction happens within a run.
    #[arg(long)]
    pub grace_ms: Option<u64>,
}

impl HostArgs {
    /// The grace period the run's processes use.
    pub fn grace_ms(&self) -> u64 {
        self.grace_ms.unwrap_or(4 * self.actimeo * 1000 + 2000)
    }

    /// The window a held artifact's path is promised across hosts (see [`PIN_WINDOW_ENV`]).
    pub fn pin_window_ms(&self) -> u64 {
        let grace = self.grace_ms();
        grace.saturating_sub(grace / 10 + 1000 + self.actimeo * 1000)
    }
}

/// Host `host`'s event log.
pub fn trace_path(run_root: &Path, host: usize) -> PathBuf {
    run_root.join(format!("logs/trace-host{host}.log"))
}

/// Starts the hosts and runs `f` with a local directory for the harness's files.
pub fn within_cluster<R>(
    args: &HostArgs,
    f: impl FnOnce(&Path, &nfs_sim::Cluster) -> Result<R>,
) -> Result<R> {
    let locks = match args.locks.as_str() {
        "shared" => nfs_sim::Locks::Shared,
        "local" => nfs_sim::Locks::Local,
        other => bail!("unknown --locks {other} (shared, local)"),
    };
    if args.actimeo > 60 || args.hosts == 0 {
        bail!("--actimeo must be 0..=60 and --hosts at least 1");
    }
    let cluster = match nfs_sim::Cluster::start(nfs_sim::Options {
        hosts: args.hosts,
        actimeo: Duration::from_secs(args.actimeo),
        locks,
    }) {
        Ok(cluster) => cluster,
        Err(skipped) => bail!("cannot provide --fs nfs-sim: {skipped}"),
    };
    let logs = tempfile::Builder::new()
        .prefix("crash-test-hosts-")
        .tempdir()?;
    f(logs.path(), &cluster)
}

/// The event logs the checker reads and whether to check them as one order.
pub fn traces_to_check(default: &Path) -> (Vec<PathBuf>, bool) {
    let traces: Vec<PathBuf> = std::env::var(TRACES_ENV)
        .ok()
        .map(|t| t.split(':').map(PathBuf::from).collect())
        .unwrap_or_else(|| vec![default.to_path_buf()]);
    let one_order = std::env::var(LOCKS_ENV).map_or(true, |l| l != "local");
    (traces, one_order)
}

/// Merges event logs into one order by their monotonic stamps (first field).
pub fn merged(texts: &[String]) -> String {
    let mut lines: Vec<(u128, &str)> = texts
        .iter()
        .flat_map(|t| t.lines())
        .map(|l| {
            let stamp = l
                .split(' ')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            (stamp, l)
        })
        .collect();
    lines.sort_by_key(|(stamp, _)| *stamp);
    let mut out = String::new();
    for (_, line) in lines {
        out.push_str(line);
        out.push('\n');
    }
    out
}
