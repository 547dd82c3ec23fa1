//! Liveness across hosts: builders' heartbeats, the shared-protocol sweep, and the grace period
//! that keeps entries other hosts hold (ARCHITECTURE.md, "Sharing one root between hosts").
//!
//! On NFS a `flock` on a directory is local to each client, so a sweeper on host B cannot see
//! that a builder on host A holds its staging directory, nor that a reader on A pins an entry.
//! Under the shared protocol:
//! - every temp and staging directory is named by durable-fs with its maker's host id (the
//!   owner record); a sweeper applies the local rule (old enough and unlockable) only to its own
//!   host's leftovers, and removes another host's only when its mtime (the heartbeat) is older
//!   than [`FOREIGN_GRACE`], far above any attribute-cache timeout (`actimeo` is at most 60 s);
//! - a builder refreshes its staging directories' mtime every [`HEARTBEAT_INTERVAL`] while it
//!   lives (one thread per process, only while a shared-protocol build runs);
//! - a reader refreshes an entry's last-use stamp when it is older than [`PIN_REFRESH`], and
//!   eviction on any host skips an entry used (or built) within [`PIN_GRACE`].

use crate::error::{Error, Result};
use crate::fstype::Protocol;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

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

fn heartbeat_interval() -> Duration {
    scaled(HEARTBEAT_INTERVAL, 30).max(Duration::from_millis(10))
}

/// How long a directory leftover of this host must be before the sweep looks at it.
const LOCAL_MIN_AGE: Duration = crate::maintenance::SWEEP_MIN_AGE;

// ---------------------------------------------------------------------------------------------
// Heartbeats.

#[derive(Default)]
struct Beats {
    next: u64,
    paths: HashMap<u64, PathBuf>,
    started: bool,
}

fn beats() -> &'static (Mutex<Beats>, Condvar) {
    static BEATS: OnceLock<(Mutex<Beats>, Condvar)> = OnceLock::new();
    BEATS.get_or_init(|| (Mutex::new(Beats::default()), Condvar::new()))
}

/// Keeps a staging directory's mtime fresh while it lives, so that no other host's sweep takes it
/// for a dead builder's. Dropping it stops the refresh.
#[derive(Debug)]
#[must_use = "the heartbeat stops when this is dropped"]
pub(crate) struct Heartbeat {
    id: u64,
}

impl Heartbeat {
    pub(crate) fn start(path: &Path) -> Heartbeat {
        let (lock, wake) = beats();
        let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
        let id = state.next;
        state.next += 1;
        state.paths.insert(id, path.to_path_buf());
        if !state.started {
            // One thread per process beats for every build; if it cannot be started the build
            // goes on and a foreign sweep still waits FOREIGN_GRACE after the last change.
            state.started = std::thread::Builder::new()
                .name("jit-cache-heartbeat".into())
                .spawn(beat_forever)
                .is_ok();
        }
        wake.notify_all();
        Heartbeat { id }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        let (lock, _) = beats();
        lock.lock()
            .unwrap_or_else(|p| p.into_inner())
            .paths
            .remove(&self.id);
    }
}

fn beat_forever() {
    let (lock, wake) = beats();
    let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let paths: Vec<PathBuf> = state.paths.values().cloned().collect();
        drop(state);
        for path in &paths {
            touch_now(path);
        }
        state = lock.lock().unwrap_or_else(|p| p.into_inner());
        // A timed wait, not a sleep used as synchronisation: the beat is periodic by nature.
        state = wake
            .wait_timeout(state, heartbeat_interval())
            .map(|(s, _)| s)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

/// Sets a path's mtime to now (the server's clock on NFS: `UTIME_NOW`). Best effort: a path
/// already committed or removed is simply gone.
fn touch_now(path: &Path) {
    let now = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: rustix::fs::UTIME_NOW,
    };
    let stamps = rustix::fs::Timestamps {
        last_access: now,
        last_modification: now,
    };
    let _ = rustix::fs::utimensat(rustix::fs::CWD, path, &stamps, AtFlags::SYMLINK_NOFOLLOW);
}

/// A staging directory of this process: durable-fs's, plus a heartbeat under the shared
/// protocol.
#[derive(Debug)]
pub(crate) struct Staging {
    inner: durable_fs::StagingDir,
    beat: Option<Heartbeat>,
}

impl Staging {
    pub(crate) fn new(inner: durable_fs::StagingDir, protocol: Protocol) -> Staging {
        let beat = (protocol == Protocol::Shared).then(|| Heartbeat::start(inner.path()));
        Staging { inner, beat }
    }

    /// Where to build.
    pub(crate) fn path(&self) -> &Path {
        self.inner.path()
    }

    /// See [`durable_fs::StagingDir::commit_noreplace`].
    pub(crate) fn commit_noreplace(
        mut self,
        target: impl AsRef<Path>,
    ) -> durable_fs::Result<durable_fs::PublishOutcome> {
        let _beat = self.beat.take();
        self.inner.commit_noreplace(target)
    }
}

// ---------------------------------------------------------------------------------------------
// Sweeping under the shared protocol.

/// Removes abandoned temps and staging directories directly inside `dir` (a path that names the
/// directory, possibly `/proc/self/fd/N`) and returns how many. Under the local protocol this is
/// durable-fs's sweep with [`LOCAL_MIN_AGE`]; under the shared protocol a leftover of this host
/// follows the same rule, and another host's is removed only when its heartbeat is older than
/// [`FOREIGN_GRACE`] (its `flock`s are invisible from here).
pub(crate) fn sweep_dir(dir: &Path, protocol: Protocol) -> Result<usize> {
    if protocol == Protocol::Local || crate::hooks::sweep_two_seconds() {
        let policy = durable_fs::SweepPolicy {
            max_age: LOCAL_MIN_AGE,
        };
        return Ok(durable_fs::sweep(dir, &policy)?.removed.len());
    }
    let dirfd = rustix::fs::openat(
        rustix::fs::CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io("open directory to sweep", dir, e.into()))?;
    let names: Vec<Vec<u8>> = {
        let mut read = rustix::fs::Dir::read_from(&dirfd)
            .map_err(|e| Error::io("read directory to sweep", dir, e.into()))?;
        let mut names = Vec::new();
        while let Some(entry) = read.read() {
            match entry {
                Ok(entry) => names.push(entry.file_name().to_bytes().to_vec()),
                // Another host changed the directory under us: sweep what was read.
                Err(Errno::STALE | Errno::NOENT) => break,
                Err(e) => return Err(Error::io("read directory to sweep", dir, e.into())),
            }
        }
        names
    };
    let me = durable_fs::host_id();
    let now = SystemTime::now();
    let mut removed = 0;
    for name in names {
        let name = OsStr::from_bytes(&name);
        if name.as_bytes().starts_with(b".nfs") {
            continue;
        }
        let Some(host) = durable_fs::temp_name_host(name) else {
            continue;
        };
        let min_age = if host == me {
            LOCAL_MIN_AGE
        } else {
            foreign_grace()
        };
        if sweep_one(&dirfd, dir, name, now, min_age, host == me) {
            removed += 1;
        }
    }
    Ok(removed)
}

fn sweep_one(
    dirfd: &OwnedFd,
    dir: &Path,
    name: &OsStr,
    now: SystemTime,
    min_age: Duration,
    ours: bool,
) -> bool {
    let Ok(stat) = rustix::fs::statat(dirfd, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return false;
    };
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind != FileType::RegularFile && kind != FileType::Directory {
        return false;
    }
    if age_of(stat.st_mtime, now) < min_age {
        return false;
    }
    let opened = if kind == FileType::Directory {
        rustix::fs::openat(
            dirfd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    } else {
        rustix::fs::openat(
            dirfd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let Ok(fd) = opened else { return false };
    let Ok(held) = rustix::fs::fstat(&fd) else {
        return false;
    };
    if held.st_dev != stat.st_dev || held.st_ino != stat.st_ino {
        return false;
    }
    // This host's writers hold a `flock` for the temp's whole life, and this host sees it. A
    // foreign writer's lock may be invisible (directories on NFS, `local_lock`): its heartbeat
    // decided above. Locking it anyway keeps two sweepers of this host apart.
    match rustix::fs::flock(fd.as_fd(), FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(_) if ours => return false,
        Err(_) => {}
    }
    let path = dir.join(name);
    // A removal that races another host's (ENOENT, ESTALE, ENOTEMPTY) is skipped: the next
    // sweep looks again.
    let removed = if kind == FileType::Directory {
        std::fs::remove_dir_all(&path).is_ok()
    } else {
        rustix::fs::unlinkat(dirfd, name, AtFlags::empty()).is_ok()
    };
    drop(fd);
    removed
}

/// The age of a stamp read in whole seconds, counted from the end of that second. A stamp's
/// sub-second part is not read, and the last-use stamp is written without one, so an event
/// stamped `secs` happened at most a second later than `secs`; counting from `secs` itself would
/// make a hit 0.99 s younger look older, and with a short grace evict what another host holds.
fn age_of(secs: i64, now: SystemTime) -> Duration {
    let then = UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0).saturating_add(1));
    now.duration_since(then).unwrap_or(Duration::ZERO)
}

// ---------------------------------------------------------------------------------------------
// Pins across hosts.

/// Whether an entry directory (held open) was used or built within [`PIN_GRACE`]: the newest
/// access or modification time of its files. Eviction under the shared protocol leaves such an
/// entry alone, since another host may hold it (its directory `flock` is invisible here).
pub(crate) fn used_recently(entry: &OwnedFd) -> bool {
    if crate::hooks::pin_flock_only() {
        return false;
    }
    let Ok(mut read) = rustix::fs::Dir::read_from(entry) else {
        // Unreadable now (ESTALE: removed by another host): nothing to protect.
        return false;
    };
    let now = SystemTime::now();
    let mut newest = None;
    while let Some(Ok(item)) = read.read() {
        let name = item.file_name();
        if name.to_bytes().starts_with(b".") {
            continue;
        }
        // Opened, then `fstat`: an NFS client revalidates a file's attributes at open
        // (close-to-open), where a `stat` may answer from its attribute cache for up to
        // `actimeo`, hiding another host's fresh stamp (eviction looks twice, see `evict.rs`).
        // Only regular files are opened (a planted device node or FIFO never is). Some
        // filesystems leave the type out of the listing: then it is asked for.
        let kind = match item.file_type() {
            FileType::Unknown => rustix::fs::statat(entry, name, AtFlags::SYMLINK_NOFOLLOW)
                .map_or(FileType::Unknown, |s| FileType::from_raw_mode(s.st_mode)),
            kind => kind,
        };
        if kind != FileType::RegularFile {
            continue;
        }
        let opened = rustix::fs::openat(
            entry,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        );
        if let Ok(stat) = opened.and_then(|fd| rustix::fs::fstat(&fd)) {
            let stamp = stat.st_atime.max(stat.st_mtime);
            newest = Some(newest.map_or(stamp, |n: i64| n.max(stamp)));
        }
    }
    newest.is_some_and(|stamp| age_of(stamp, now) < pin_grace())
}

// ---------------------------------------------------------------------------------------------
// Publishing beside other hosts.

/// Under the shared protocol, a builder that finds an entry directory at its target (another
/// host published it since this one looked, hidden by a negative lookup cache or unguarded by an
/// invisible key lock) answers with it when it is whole. A damaged one is moved aside only when
/// no host can hold it; otherwise this builder answers with a private copy of its own output,
/// which is the same artifact (DeepEP #684: a loser must not insist on seeing the winner).
/// `None`: nothing usable is there any more; publish as usual.
pub(crate) fn adopt_existing(
    layout: &crate::layout::Layout,
    prepared: &crate::key::Prepared,
    kind: nvcc::OutputKind,
    target: &Path,
    bytes: &[u8],
    inputs: &crate::headers::Inputs,
) -> Result<Option<crate::cache::Answer>> {
    use crate::cache::{Answer, Outcome};
    use crate::entry::{open_entry, Unusable};
    use crate::evict::{evict_unless_pinned, Evicted};
    use std::sync::Arc;
    let variant_dir = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    match open_entry(target, &prepared.key, variant_dir).and_then(|o| o.load(kind)) {
        Ok((_, artifact)) => Ok(Some(Answer {
            artifact,
            outcome: Outcome::Built,
            warning: None,
            inputs: Some(Arc::new(inputs.clone())),
        })),
        Err(Unusable::Absent) => Ok(None),
        Err(Unusable::Corrupt(_)) => match evict_unless_pinned(layout, target, None)? {
            Evicted::Moved | Evicted::Absent => Ok(None),
            Evicted::Pinned | Evicted::Replaced => {
                let artifact = crate::compile::private_copy(kind, bytes.to_vec())?;
                Ok(Some(Answer {
                    artifact,
                    outcome: Outcome::Built,
                    warning: Some(format!(
                        "entry {} is damaged and may be held by another host; using a private copy",
                        target.display()
                    )),
                    inputs: None,
                }))
            }
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Publication notes: what a waiter's negative lookup cache may hide.

/// The length of the note a builder leaves in its key's lock file.
const NOTE_LEN: usize = 192;

/// Under the shared protocol a builder, still holding the key's lock after publishing, writes
/// `jit-cache published v2 <key> <variant> <unix ms>` at the start of the key's lock file. A waiter that
/// gets the lock next may still have a negative lookup cached for the new entry (NFS's
/// `lookupcache=all`, up to `actimeo`), but it reads the lock file's bytes afresh (close-to-open)
/// and so learns that the entry exists. Best effort: a note that cannot be written only costs a
/// compile. Lock files are never deleted or replaced; only these bytes change.
pub(crate) fn note_published(
    layout: &crate::layout::Layout,
    key: &fingerprint::Digest,
    variant: &fingerprint::Digest,
) {
    write_note(
        layout,
        key,
        "published",
        &crate::layout::variant_dir_name(variant),
    );
}

/// Eviction (under the key's lock) replaces a publication note of the key it evicted, so that
/// no waiter waits for an entry that is gone.
pub(crate) fn note_evicted(layout: &crate::layout::Layout, key: &fingerprint::Digest) {
    write_note(layout, key, "evicted", "-");
}

fn write_note(
    layout: &crate::layout::Layout,
    key: &fingerprint::Digest,
    what: &str,
    variant: &str,
) {
    use std::os::unix::fs::FileExt;
    let mut record = format!(
        "jit-cache {what} v2 {} {variant} {}",
        key.to_hex(),
        crate::publish::now_ms()
    )
    .into_bytes();
    record.resize(NOTE_LEN - 1, b' ');
    record.push(b'\n');
    let path = layout.lock_file(key);
    let opened = rustix::fs::open(
        &path,
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    );
    if let Ok(fd) = opened {
        let _ = std::fs::File::from(fd).write_at(&record, 0);
    }
}

/// When the key's lock file notes that `key` was published recently (within the bound below),
/// polls `lookup` until it finds the entry, for at most a little longer than NFS's longest
/// attribute cache (65 s, or the grace period if shorter). `None`: no recent note for this key,
/// the noted variant is visible and does not serve (`visible` says so: an input changed since
/// it was built, and waiting cannot change that), or it never became visible (the caller
/// compiles).
pub(crate) fn await_noted_entry<T>(
    layout: &crate::layout::Layout,
    key: &fingerprint::Digest,
    mut lookup: impl FnMut() -> Option<T>,
    mut visible: impl FnMut(&str) -> bool,
) -> Option<T> {
    use std::os::unix::fs::FileExt;
    let path = layout.lock_file(key);
    let fd = rustix::fs::open(
        &path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let mut note = [0u8; NOTE_LEN];
    let read = std::fs::File::from(fd).read_at(&mut note, 0).ok()?;
    let text = std::str::from_utf8(&note[..read]).ok()?;
    let mut fields = text.split_whitespace();
    let header = [fields.next()?, fields.next()?, fields.next()?];
    if header != ["jit-cache", "published", "v2"] || fields.next()? != key.to_hex() {
        return None;
    }
    let variant = fields.next()?.to_string();
    let noted_ms: u64 = fields.next()?.parse().ok()?;
    let bound = Duration::from_secs(65).min(pin_grace());
    let age = Duration::from_millis(crate::publish::now_ms().abs_diff(noted_ms));
    if age > bound {
        return None;
    }
    let deadline = std::time::Instant::now() + bound;
    loop {
        if let Some(found) = lookup() {
            return Some(found);
        }
        if visible(&variant) || std::time::Instant::now() >= deadline {
            return None;
        }
        // A bounded poll for a condition: this host's cached miss expires within `actimeo`.
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sets a path's mtime `secs_ago` seconds into the past (instead of sleeping).
    fn age(path: &Path, secs_ago: u64) {
        let then = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() - secs_ago)
            .unwrap_or(0);
        let stamp = rustix::fs::Timespec {
            tv_sec: then as i64,
            tv_nsec: 0,
        };
        let stamps = rustix::fs::Timestamps {
            last_access: stamp,
            last_modification: stamp,
        };
        rustix::fs::utimensat(rustix::fs::CWD, path, &stamps, AtFlags::empty()).expect("set mtime");
    }

    /// A staging name as another host's builder would make it.
    fn foreign_name() -> String {
        let ours = durable_fs::temp_name("staging");
        let ours = ours.to_str().expect("ascii temp name");
        let me = format!(".{:016x}.", durable_fs::host_id());
        let other = format!(".{:016x}.", durable_fs::host_id() ^ 0x5a5a);
        ours.replacen(&me, &other, 1)
    }

    #[test]
    fn another_hosts_live_staging_survives_the_shared_sweep_and_falls_to_the_local_rule() {
        let dir = tempfile::tempdir().expect("temp dir");
        let staging = dir.path().join(foreign_name());
        std::fs::create_dir(&staging).expect("mkdir");
        std::fs::write(staging.join("artifact.cubin"), b"half").expect("write");
        // Older than the local 2-second rule, far younger than the foreign grace: a builder on
        // another host whose directory flock is invisible here.
        age(&staging, 30);
        assert_eq!(sweep_dir(dir.path(), Protocol::Shared).expect("sweep"), 0);
        assert!(staging.exists(), "a foreign builder's staging survives");
        // Negative control: the local rule (2 s and an unheld flock) takes it.
        assert_eq!(sweep_dir(dir.path(), Protocol::Local).expect("sweep"), 1);
        assert!(
            !staging.exists(),
            "the local rule sweeps a live foreign build"
        );
        // A foreign builder silent for longer than the grace is dead: swept.
        std::fs::create_dir(&staging).expect("mkdir again");
        age(&staging, FOREIGN_GRACE.as_secs() + 5);
        assert_eq!(sweep_dir(dir.path(), Protocol::Shared).expect("sweep"), 1);
        assert!(!staging.exists(), "a dead foreign builder's staging goes");
    }

    #[test]
    fn this_hosts_leftovers_follow_the_lock_rule_under_the_shared_protocol() {
        let dir = tempfile::tempdir().expect("temp dir");
        let live = durable_fs::StagingDir::new_in(dir.path()).expect("staging");
        age(live.path(), 30);
        let dead = dir.path().join(durable_fs::temp_name("staging"));
        std::fs::create_dir(&dead).expect("mkdir");
        age(&dead, 30);
        assert_eq!(sweep_dir(dir.path(), Protocol::Shared).expect("sweep"), 1);
        assert!(
            live.path().exists(),
            "a live local builder keeps its staging"
        );
        assert!(!dead.exists(), "an unlocked old local leftover goes");
    }

    #[test]
    fn a_stamp_exactly_the_grace_old_in_whole_seconds_still_pins() {
        let dir = tempfile::tempdir().expect("temp dir");
        let artifact = dir.path().join("artifact.cubin");
        std::fs::write(&artifact, b"cubin").expect("write");
        // The hit that wrote this stamp happened somewhere in that second, up to 0.99 s after
        // it: less than the grace ago. Counted from the second's start it looked older than
        // the grace, and another host's eviction took an entry held elsewhere.
        let entry: OwnedFd = std::fs::File::open(dir.path()).expect("open entry").into();
        let second = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        };
        loop {
            let before = second();
            age(&artifact, PIN_GRACE.as_secs());
            let pinned = used_recently(&entry);
            // Stamped and checked within one second (else the stamp is a second older; again).
            if second() == before {
                assert!(pinned, "a stamp within the grace pins");
                break;
            }
        }
        age(&artifact, PIN_GRACE.as_secs() + 2);
        assert!(!used_recently(&entry), "a stamp past the grace does not");
    }

    #[test]
    fn a_heartbeat_refreshes_the_staging_mtime() {
        let dir = tempfile::tempdir().expect("temp dir");
        let staging = Staging::new(
            durable_fs::StagingDir::new_in(dir.path()).expect("staging"),
            Protocol::Shared,
        );
        age(staging.path(), 3600);
        // The beat thread wakes on every new heartbeat; wait (bounded) for its touch.
        let _second = Heartbeat::start(staging.path());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let mtime = std::fs::metadata(staging.path())
                .expect("stat")
                .modified()
                .expect("mtime");
            if SystemTime::now()
                .duration_since(mtime)
                .unwrap_or(Duration::ZERO)
                < Duration::from_secs(60)
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no heartbeat within 10 s"
            );
            std::thread::yield_now();
        }
    }
}
