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

use crate::base::fstype::Protocol;
pub(crate) use crate::base::grace::{foreign_grace, pin_grace, pin_refresh_secs, LOCAL_MIN_AGE};
pub use crate::base::grace::{
    FOREIGN_GRACE, HEARTBEAT_INTERVAL, PIN_GRACE, PIN_REFRESH, SHARED_GRACE_ENV, SWEEP_MIN_AGE,
};
use crate::error::{Error, Result};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

// ---------------------------------------------------------------------------------------------
// Sweeping under the shared protocol.

/// Removes abandoned temps and staging directories directly inside `dir` (a path that names the
/// directory, possibly `/proc/self/fd/N`; errors name it `shown`) and returns how many. Under the local protocol this is
/// durable-fs's sweep with [`LOCAL_MIN_AGE`]; under the shared protocol a leftover of this host
/// follows the same rule, and another host's is removed only when its heartbeat is older than
/// [`FOREIGN_GRACE`] (its `flock`s are invisible from here).
pub(crate) fn sweep_dir(dir: &Path, shown: &Path, protocol: Protocol) -> Result<usize> {
    sweep_dir_inner(dir, protocol).map_err(|e| {
        e.map_paths(|p| match p.strip_prefix(dir) {
            Ok(rest) => shown.join(rest),
            Err(_) => p.to_path_buf(),
        })
    })
}

fn sweep_dir_inner(dir: &Path, protocol: Protocol) -> Result<usize> {
    if !protocol.builders_beat() || crate::storage::hooks::sweep_two_seconds() {
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
    if crate::storage::hooks::pin_flock_only() {
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

/// The file whose modification time marks an entry as being evicted: every entry's `meta.json`
/// (kernels' and stored entries' alike). A reader never changes it (a hit refreshes access
/// times only), and an NFS client revalidates its attributes at every open (close-to-open),
/// where a new marker file could hide behind another host's negative lookup cache.
pub(crate) const MARK_FILE: &str = crate::storage::layout::META_FILE;

/// The modification time (whole seconds since the epoch) that says "being evicted": no entry is
/// written in 1970.
const EVICTING_MTIME: i64 = 0;

/// Marks an entry (held open under its exclusive `flock`, its key locked) as being evicted, so
/// that a reader on another host that refreshes its stamp from now on refuses it
/// ([`is_marked_evicting`]). Returns the modification time to restore if the eviction is called
/// off, or `None` when it could not mark: no `meta.json` (no reader can hold such an entry, since
/// every reader reads it first), or a team member's file whose times only its owner may set.
///
/// Why a mark: an eviction that moved the entry aside first and looked at its stamp afterwards
/// (putting it back when a reader had refreshed it meanwhile) left the entry's path naming
/// nothing for an instant, under the feet of a reader on another host that had just found it.
/// Marked, looked at again, and only then moved, an entry is moved only once no reader can be
/// holding it: a reader refreshes its stamp before it checks the mark, so one that found no
/// mark refreshed before the second look, which sees it.
pub(crate) fn mark_evicting(entry: &OwnedFd) -> Option<rustix::fs::Timespec> {
    let fd = open_mark(entry).ok()?;
    let stat = rustix::fs::fstat(&fd).ok()?;
    let was = rustix::fs::Timespec {
        tv_sec: stat.st_mtime,
        tv_nsec: stat.st_mtime_nsec as _,
    };
    set_mark_mtime(&fd, EVICTING_MTIME_SPEC).ok()?;
    Some(was)
}

/// Calls an eviction off: `meta.json`'s modification time back to what it was.
pub(crate) fn unmark_evicting(entry: &OwnedFd, was: rustix::fs::Timespec) {
    if let Ok(fd) = open_mark(entry) {
        let _ = set_mark_mtime(&fd, was);
    }
}

/// Whether an eviction on some host marked the entry (held open) and may be moving it: a reader
/// treats it as a miss. The file is opened afresh, so an NFS client asks the server.
pub(crate) fn is_marked_evicting(entry: &OwnedFd) -> bool {
    open_mark(entry)
        .and_then(|fd| rustix::fs::fstat(&fd))
        .is_ok_and(|stat| stat.st_mtime == EVICTING_MTIME)
}

/// [`is_marked_evicting`] of the entry directory at `dir` (never following a link).
pub(crate) fn is_marked_evicting_at(dir: &Path) -> bool {
    rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .is_ok_and(|fd| is_marked_evicting(&fd))
}

const EVICTING_MTIME_SPEC: rustix::fs::Timespec = rustix::fs::Timespec {
    tv_sec: EVICTING_MTIME,
    tv_nsec: 0,
};

fn open_mark(entry: &OwnedFd) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        entry,
        MARK_FILE,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Sets the modification time alone (the access time is another host's pin, left as it is).
fn set_mark_mtime(fd: &OwnedFd, mtime: rustix::fs::Timespec) -> rustix::io::Result<()> {
    let stamps = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        last_modification: mtime,
    };
    rustix::fs::futimens(fd, &stamps)
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
        assert_eq!(
            sweep_dir(dir.path(), dir.path(), Protocol::Shared).expect("sweep"),
            0
        );
        assert!(staging.exists(), "a foreign builder's staging survives");
        // Negative control: the local rule (2 s and an unheld flock) takes it.
        assert_eq!(
            sweep_dir(dir.path(), dir.path(), Protocol::Local).expect("sweep"),
            1
        );
        assert!(
            !staging.exists(),
            "the local rule sweeps a live foreign build"
        );
        // A foreign builder silent for longer than the grace is dead: swept.
        std::fs::create_dir(&staging).expect("mkdir again");
        age(&staging, FOREIGN_GRACE.as_secs() + 5);
        assert_eq!(
            sweep_dir(dir.path(), dir.path(), Protocol::Shared).expect("sweep"),
            1
        );
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
        assert_eq!(
            sweep_dir(dir.path(), dir.path(), Protocol::Shared).expect("sweep"),
            1
        );
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
}
