//! Moving entries aside and removing them: eviction, variant pruning and the trash.
//!
//! An entry is moved into `trash/` with one rename, under its key's lock (so no builder loses its
//! entry mid-build) and only when no reader pins it (a reader holds a shared `flock` on the entry
//! directory), so a reader that holds an entry keeps working. The sweep later removes trash that
//! nobody pins.

use crate::error::{Error, Result};
use crate::storage::layout::{open_dir_nofollow, Layout, Subdir};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

/// Why [`open_dir_locked`] returned no descriptor.
#[derive(Debug)]
pub(crate) enum DirLockError {
    /// Opening failed: `NOENT`, `LOOP`/`NOTDIR` (a symlink or file in the directory's place), ...
    Open(Errno),
    /// Someone holds a conflicting lock (only with a non-blocking operation).
    Busy,
    /// `flock` itself failed.
    Lock(Errno),
}

/// Opens `path` (relative to `at`) as a directory without following a symlink in its last
/// component, then `flock`s the directory with `operation`. Pins (shared locks), eviction and
/// trash removal (non-blocking exclusive locks) all go through here, so they agree on what
/// "pinned" means.
pub(crate) fn open_dir_locked(
    at: impl AsFd,
    path: &Path,
    operation: FlockOperation,
) -> std::result::Result<OwnedFd, DirLockError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(at, path, flags, Mode::empty()).map_err(DirLockError::Open)?;
    match rustix::fs::flock(&fd, operation) {
        Ok(()) => Ok(fd),
        Err(Errno::WOULDBLOCK) => Err(DirLockError::Busy),
        Err(e) => Err(DirLockError::Lock(e)),
    }
}

/// Which directory a path named when it was looked at: device and inode, never followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirIdentity {
    dev: u64,
    ino: u64,
}

impl DirIdentity {
    /// What `path` names now (a planted symlink is itself, not its target); None when nothing.
    pub(crate) fn of_path(path: &Path) -> Option<DirIdentity> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path).ok()?;
        Some(DirIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    fn of_stat(stat: &rustix::fs::Stat) -> DirIdentity {
        DirIdentity {
            dev: stat.st_dev,
            ino: stat.st_ino,
        }
    }
}

/// What [`evict_unless_pinned`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Evicted {
    /// Moved into `trash/`.
    Moved,
    /// Left in place: a reader holds it.
    Pinned,
    /// Nothing there any more.
    Absent,
    /// Left in place: the path names another directory than the one the caller looked at.
    Replaced,
}

/// Moves an entry (or anything planted at an entry's path) into `trash/` with one rename, so a
/// reader holding it open keeps working. Never follows a symlink: a planted link is renamed, not
/// its target, and the entry's parents are reached from the `entries/` descriptor opened at
/// [`Layout::open`], so a symlink planted in place of a cache directory is refused.
pub(crate) fn move_to_trash(layout: &Layout, path: &Path) -> Result<()> {
    let Some((parent, name)) = open_parent(layout, path)? else {
        return Ok(());
    };
    rename_to_trash(layout, &parent, name, path).map(drop)
}

/// Moves an entry aside unless a reader pins it (holds a shared `flock` on its directory, as every
/// live [`crate::Artifact`] does): an artifact's path stays valid as long as the artifact lives.
/// Under the shared protocol an entry used within [`crate::PIN_GRACE`] also counts as pinned,
/// since a reader on another host holds a lock this host cannot see.
/// Returns whether it was moved. The caller holds the key's lock, so no builder races it.
pub(crate) fn evict_unpinned(layout: &Layout, dir: &Path) -> Result<bool> {
    Ok(evict_unless_pinned(layout, dir, None)? == Evicted::Moved)
}

/// Moves the entry at `dir` aside unless a reader pins it and, with `expected`, only while `dir`
/// still names that directory (verify found *that* one corrupt; a replacement published since
/// is not). The caller holds the key's lock.
pub(crate) fn evict_unless_pinned(
    layout: &Layout,
    dir: &Path,
    expected: Option<DirIdentity>,
) -> Result<Evicted> {
    let Some((parent, name)) = open_parent(layout, dir)? else {
        return Ok(Evicted::Absent);
    };
    let is_expected = |stat: &rustix::fs::Stat| {
        expected.is_none_or(|expected| DirIdentity::of_stat(stat) == expected)
    };
    let held = match open_dir_locked(
        &parent,
        Path::new(name),
        FlockOperation::NonBlockingLockExclusive,
    ) {
        Ok(fd) => fd,
        Err(DirLockError::Open(Errno::NOENT)) => return Ok(Evicted::Absent),
        // Not a directory, or a planted symlink: nobody can pin it; move the name aside.
        Err(DirLockError::Open(Errno::LOOP | Errno::NOTDIR)) => {
            let Ok(stat) = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) else {
                return Ok(Evicted::Absent);
            };
            if !is_expected(&stat) {
                return Ok(Evicted::Replaced);
            }
            rename_to_trash(layout, &parent, name, dir)?;
            return Ok(Evicted::Moved);
        }
        Err(DirLockError::Open(e)) => {
            return Err(Error::io("open entry for eviction", dir, e.into()))
        }
        Err(DirLockError::Busy) => return Ok(Evicted::Pinned),
        Err(DirLockError::Lock(e)) => {
            return Err(Error::io("lock entry for eviction", dir, e.into()))
        }
    };
    let stat = rustix::fs::fstat(&held)
        .map_err(|e| Error::io("inspect entry for eviction", dir, e.into()))?;
    if !is_expected(&stat) {
        return Ok(Evicted::Replaced);
    }
    // Under the shared protocol a reader on another host pins with a lock this host cannot see:
    // an entry used or built within the grace period counts as pinned (`liveness.rs`).
    let shared = layout.protocol.stamp_pins();
    if shared && crate::storage::liveness::used_recently(&held) {
        return Ok(Evicted::Pinned);
    }
    crate::storage::hooks::point(crate::storage::hooks::Failpoint::Evicting);
    // A reader on another host refreshes the stamp, then checks the mark, then the path. One
    // that refreshed between the first look and the mark may hold the entry: the second look,
    // after the mark and before the move, sees its stamp and calls the eviction off, so the path
    // of an entry someone holds never names nothing, not even for an instant. One that refreshes
    // later finds the mark and misses.
    let marked = if shared {
        // A waiter must not wait for this entry any more (`notes::await_noted_entry`), nor
        // for one left marked by this eviction's kill. Said before the mark: an eviction called
        // off costs such a waiter one compile, never a wait for what it cannot open.
        let key = dir
            .parent()
            .and_then(|k| k.file_name())
            .and_then(|k| k.to_str())
            .and_then(|k| k.parse::<fingerprint::Digest>().ok());
        if let Some(key) = key {
            crate::storage::notes::note_evicted(layout, &key);
        }
        crate::storage::hooks::trashing(&layout.shown(dir));
        crate::storage::liveness::mark_evicting(&held)
    } else {
        None
    };
    if let Some(was) = marked {
        crate::storage::hooks::point(crate::storage::hooks::Failpoint::EvictingSecondLook);
        if !crate::storage::hooks::evict_with_one_look()
            && crate::storage::liveness::used_recently(&held)
        {
            crate::storage::liveness::unmark_evicting(&held, was);
            crate::storage::hooks::untrashed(&layout.shown(dir));
            return Ok(Evicted::Pinned);
        }
    }
    // Readers that opened the directory before this rename and lock it after will see that the
    // path no longer names it, and treat it as a miss.
    let moved = rename_to_trash(layout, &parent, name, dir).inspect_err(|_| {
        if let Some(was) = marked {
            crate::storage::liveness::unmark_evicting(&held, was);
            crate::storage::hooks::untrashed(&layout.shown(dir));
        }
    })?;
    if shared {
        // An entry that could not be marked (a team member's, whose times only its owner may
        // set) is looked at again after the move instead, and put back when a reader refreshed
        // it meanwhile (unless a new entry took the name; the reader's path then names that
        // one, of the same variant): its path names nothing for that instant.
        if let (None, Some((from, to))) = (marked, &moved) {
            crate::storage::hooks::point(crate::storage::hooks::Failpoint::EvictingSecondLook);
            if !crate::storage::hooks::evict_with_one_look()
                && crate::storage::liveness::used_recently(&held)
            {
                let _ = durable_fs::rename_noreplace(to, from);
                return Ok(Evicted::Pinned);
            }
        }
    }
    Ok(Evicted::Moved)
}

/// Opens the directory that holds the entry `path` by walking from the `entries/` descriptor
/// without following symlinks, and returns it with the entry's name. None when a parent is gone.
fn open_parent<'p>(layout: &Layout, path: &'p Path) -> Result<Option<(OwnedFd, &'p OsStr)>> {
    let outside = || {
        Error::io(
            "locate entry in the cache",
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not under the cache's entries directory",
            ),
        )
    };
    let relative = path
        .strip_prefix(layout.dir(Subdir::Entries))
        .map_err(|_| outside())?;
    let mut names = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => names.push(name),
            _ => return Err(outside()),
        }
    }
    let Some(name) = names.pop() else {
        return Err(outside());
    };
    let mut dir = open_dir_nofollow(layout.dir_fd(Subdir::Entries), Path::new("."))?;
    for parent in names {
        dir = match open_dir_nofollow(&dir, Path::new(parent)) {
            Ok(fd) => fd,
            Err(Error::Io { ref source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
    }
    Ok(Some((dir, name)))
}

/// Renames `name` in `parent` to a fresh name in `trash/`, both named through descriptors.
/// Moves the entry `name` of `parent` into the trash under a fresh temp name; returns where from
/// and to (as paths through the descriptors), None when it was already gone.
fn rename_to_trash(
    layout: &Layout,
    parent: &OwnedFd,
    name: &OsStr,
    shown: &Path,
) -> Result<Option<(PathBuf, PathBuf)>> {
    // Every move into the trash goes through here, so the crash harness sees each eviction.
    crate::storage::hooks::trashing(shown);
    let from = layout
        .fd_path(parent.as_fd(), shown.parent().unwrap_or(shown))
        .join(name);
    let to = layout
        .pinned(Subdir::Trash)
        .join(durable_fs::temp_name("trash"));
    match durable_fs::atomic_rename(&from, &to) {
        Ok(()) => Ok(Some((from, to))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        // Named as anyone else would name them, not by this process's descriptors.
        Err(e) => Err(Error::Fs(e.map_paths(|p| {
            if p == from {
                shown.to_path_buf()
            } else {
                layout.shown(p)
            }
        }))),
    }
}

/// Removes the trash item `name` unless a reader still pins it, working relative to the `trash/`
/// descriptor opened at [`Layout::open`]. Never follows symlinks. Returns whether it was removed.
pub(crate) fn remove_unpinned(layout: &Layout, name: &OsStr) -> bool {
    let trash = layout.dir_fd(Subdir::Trash);
    let Ok(stat) = rustix::fs::statat(trash, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return false;
    };
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return rustix::fs::unlinkat(trash, name, AtFlags::empty()).is_ok();
    }
    let Ok(_pinned_by_us) = open_dir_locked(
        trash,
        Path::new(name),
        FlockOperation::NonBlockingLockExclusive,
    ) else {
        return false;
    };
    // std's remove_dir_all opens its argument without following a symlink there and never
    // follows one inside; the path is pinned to the trash descriptor.
    std::fs::remove_dir_all(layout.pinned(Subdir::Trash).join(name)).is_ok()
}
