//! The shared protocol's periods: how often builders beat, how long another host's leftovers and
//! pins are respected, and how young a leftover the sweep never touches (`liveness.rs` says why
//! each is what it is).

use std::sync::OnceLock;
use std::time::Duration;

/// A builder refreshes the mtime of its staging directories this often (shared protocol).
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(20);

/// Another host's temp or staging directory is removed only when its heartbeat is older than
/// this: thirty missed heartbeats, ten times NFS's longest attribute cache, and room for clocks
/// that disagree by minutes.
pub const FOREIGN_GRACE: Duration = Duration::from_secs(600);

/// Under the shared protocol a hit refreshes its entry's last-use stamp when it is older than
/// this (an hour on a local filesystem).
pub const PIN_REFRESH: Duration = Duration::from_secs(60);

/// Under the shared protocol no host evicts an entry whose last-use stamp (or whose files) are
/// younger than this. An artifact obtained at time t therefore keeps its path on every host
/// until at least t + `PIN_GRACE` - `PIN_REFRESH` - the hosts' clock skew; on its own host, for
/// as long as it is held (the directory `flock`).
pub const PIN_GRACE: Duration = Duration::from_secs(600);

/// The environment variable that scales the shared protocol's periods for tests (a crash
/// harness run lasts seconds, not ten minutes): `JIT_CACHE_SHARED_GRACE_MS=<ms>` sets
/// [`FOREIGN_GRACE`] and [`PIN_GRACE`] to that, [`PIN_REFRESH`] to a tenth and
/// [`HEARTBEAT_INTERVAL`] to a thirtieth. Read once per process. It must stay far above the
/// mounts' `actimeo`, or another host's stale view of a stamp lets it evict a held entry.
pub const SHARED_GRACE_ENV: &str = "JIT_CACHE_SHARED_GRACE_MS";

fn scaled(default: Duration, divisor: u32) -> Duration {
    static GRACE: OnceLock<Option<Duration>> = OnceLock::new();
    let grace = GRACE.get_or_init(|| {
        std::env::var(SHARED_GRACE_ENV)
            .ok()
            .and_then(|ms| ms.trim().parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis)
    });
    grace.map_or(default, |grace| grace / divisor)
}

/// [`FOREIGN_GRACE`], or as [`SHARED_GRACE_ENV`] says.
pub(crate) fn foreign_grace() -> Duration {
    scaled(FOREIGN_GRACE, 1)
}

/// [`PIN_GRACE`], or as [`SHARED_GRACE_ENV`] says.
pub(crate) fn pin_grace() -> Duration {
    scaled(PIN_GRACE, 1)
}

/// [`PIN_REFRESH`] in whole seconds (the stamp's resolution), or as [`SHARED_GRACE_ENV`] says.
pub(crate) fn pin_refresh_secs() -> i64 {
    scaled(PIN_REFRESH, 10).as_secs() as i64
}

pub(crate) fn heartbeat_interval() -> Duration {
    scaled(HEARTBEAT_INTERVAL, 30).max(Duration::from_millis(10))
}

/// How long a directory leftover of this host must be before the sweep looks at it.
pub(crate) const LOCAL_MIN_AGE: Duration = SWEEP_MIN_AGE;

/// Leftovers younger than this are never swept: a live builder creates its staging directory and
/// locks it a few microseconds later, and the age rule covers that window (durable-fs's sweep
/// removes only what it can lock, and only when old enough).
pub const SWEEP_MIN_AGE: Duration = Duration::from_secs(2);
