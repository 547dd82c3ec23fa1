//! Removing temps that killed writers left behind, and nothing else.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::sys;
use crate::temp_name::is_temp_name;

/// What [`sweep`] may remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepPolicy {
    /// Only temps whose modification time is at least this old are candidates. It must exceed
    /// the time between a writer creating its temp and locking it (microseconds); the default
    /// is one hour.
    pub max_age: Duration,
}

impl Default for SweepPolicy {
    fn default() -> Self {
        SweepPolicy {
            max_age: Duration::from_secs(3600),
        }
    }
}

/// What a [`sweep`] did.
#[derive(Debug, Default)]
pub struct SweepReport {
    /// Temps removed (files and staging directories), as paths under the swept directory.
    pub removed: Vec<PathBuf>,
    /// Old temps skipped because a live writer holds their lock.
    pub skipped_live: usize,
    /// Temps skipped because they are younger than the policy's `max_age`.
    pub skipped_young: usize,
    /// Entries that could not be examined or removed; the sweep went on past them.
    pub errors: Vec<Error>,
}

/// Removes abandoned temps directly inside `dir`: temp files of [`crate::put`] and staging
/// directories of [`crate::StagingDir`].
///
/// An entry is removed only when all hold: its name is one [`crate::temp_name`] makes
/// ([`crate::is_temp_name`]), it is a regular file or a directory (not a symlink: symlinks are
/// never followed nor removed), its mtime is at least `policy.max_age` old, and a non-blocking
/// exclusive `flock` on it succeeds (a live writer holds one for the temp's whole life). `.nfs*`
/// entries (NFS silly-renames) are skipped. The sweep looks only at `dir`'s own entries: it
/// never descends into other subdirectories and never touches anything above `dir`. Entries
/// that vanish or are busy meanwhile (`ENOENT`, `EBUSY`, `ENOTEMPTY`) are skipped silently;
/// other per-entry failures are collected in [`SweepReport::errors`]. Only failing to read
/// `dir` itself is an error.
pub fn sweep(dir: impl AsRef<Path>, policy: &SweepPolicy) -> Result<SweepReport> {
    let dir = dir.as_ref();
    let dirfd = sys::open_dir(dir)?;
    let mut entries =
        rustix::fs::Dir::read_from(&dirfd).map_err(|e| Error::new("read directory", dir, e))?;
    let now = SystemTime::now();
    let mut report = SweepReport::default();
    while let Some(entry) = entries.read() {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => return Err(Error::new("read directory", dir, e)),
        };
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name.as_bytes().starts_with(b".nfs") || !is_temp_name(name) {
            continue;
        }
        let path = dir.join(name);
        match sweep_one(&dirfd, name, &path, now, policy) {
            Ok(Outcome::Removed) => report.removed.push(path),
            Ok(Outcome::Live) => report.skipped_live += 1,
            Ok(Outcome::Young) => report.skipped_young += 1,
            Ok(Outcome::Ignored) => {}
            Err(e) => report.errors.push(e),
        }
    }
    Ok(report)
}

enum Outcome {
    Removed,
    Live,
    Young,
    Ignored,
}

fn tolerated(e: Errno) -> bool {
    e == Errno::NOENT || e == Errno::BUSY || e == Errno::NOTEMPTY
}

fn sweep_one(
    dirfd: &OwnedFd,
    name: &OsStr,
    path: &Path,
    now: SystemTime,
    policy: &SweepPolicy,
) -> Result<Outcome> {
    let stat = match rustix::fs::statat(dirfd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(e) if tolerated(e) => return Ok(Outcome::Ignored),
        Err(e) => return Err(Error::new("stat", path, e)),
    };
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind != FileType::RegularFile && kind != FileType::Directory {
        return Ok(Outcome::Ignored);
    }
    // Whole seconds are precise enough for an age limit.
    let mtime = UNIX_EPOCH + Duration::from_secs(u64::try_from(stat.st_mtime).unwrap_or(0));
    if now.duration_since(mtime).unwrap_or(Duration::ZERO) < policy.max_age {
        return Ok(Outcome::Young);
    }
    let opened = if kind == FileType::Directory {
        sys::open_dir_at(dirfd, name)
    } else {
        rustix::fs::openat(
            dirfd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err(e) if tolerated(e) => return Ok(Outcome::Ignored),
        Err(e) => return Err(Error::new("open", path, e)),
    };
    // The entry may have been replaced between the stat and the open; judge only what we hold.
    let held = rustix::fs::fstat(&fd).map_err(|e| Error::new("stat", path, e))?;
    if held.st_dev != stat.st_dev || held.st_ino != stat.st_ino {
        return Ok(Outcome::Ignored);
    }
    match rustix::fs::flock(fd.as_fd(), FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(Errno::WOULDBLOCK) => return Ok(Outcome::Live),
        Err(e) => return Err(Error::new("lock", path, e)),
    }
    let removed = if kind == FileType::Directory {
        // std's remove_dir_all never follows symlinks inside the tree.
        std::fs::remove_dir_all(path).map_err(|e| {
            let errno = e.raw_os_error().map(Errno::from_raw_os_error);
            (errno, e)
        })
    } else {
        rustix::fs::unlinkat(dirfd, name, AtFlags::empty()).map_err(|e| (Some(e), e.into()))
    };
    drop(fd);
    match removed {
        Ok(()) => Ok(Outcome::Removed),
        Err((Some(errno), _)) if tolerated(errno) => Ok(Outcome::Ignored),
        Err((_, e)) => Err(Error::new("remove", path, e)),
    }
}
