//! Moving entries aside and removing them: eviction, variant pruning and the trash.
//!
//! An entry is moved into `trash/` with one rename, under its key's lock (so no builder loses its
//! entry mid-build) and only when no reader pins it (a reader holds a shared `flock` on the entry
//! directory), so a reader that holds an entry keeps working. The sweep later removes trash that
//! nobody pins.

use crate::build::failpoint;
use crate::entry;
use crate::error::{Error, Result};
use crate::layout::Layout;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use std::path::{Path, PathBuf};

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

/// Moves an entry (or anything planted at an entry's path) into `trash/` with one rename, so a
/// reader holding it open keeps working. Never follows a symlink: a planted link is renamed, not
/// its target.
pub(crate) fn move_to_trash(layout: &Layout, path: &Path) -> Result<()> {
    #[cfg(feature = "failpoints")]
    crate::failpoints::trashing(path);
    let trash = layout.dir("trash").join(durable_fs::temp_name("trash"));
    match durable_fs::atomic_rename(path, &trash) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Keeps at most `max` variants under a key, moving the oldest-built aside.
pub(crate) fn prune_variants(layout: &Layout, key_dir: &Path, max: usize) -> Result<()> {
    let variants = entry::list_variants(key_dir);
    if variants.len() <= max {
        return Ok(());
    }
    let mut aged: Vec<(u64, PathBuf)> = variants
        .iter()
        .map(|v| {
            let dir = key_dir.join(v);
            let created = entry::read_meta(&dir)
                .map(|m| m.created_unix_ms)
                .unwrap_or(0);
            (created, dir)
        })
        .collect();
    aged.sort();
    for (_, dir) in aged.iter().take(variants.len() - max) {
        evict_unpinned(layout, dir)?;
    }
    Ok(())
}

/// Moves an entry aside unless a reader pins it (holds a shared `flock` on its directory, as every
/// live [`crate::Artifact`] does): an artifact's path stays valid as long as the artifact lives.
/// Returns whether it was moved. The caller holds the key's lock, so no builder races it.
pub(crate) fn evict_unpinned(layout: &Layout, dir: &Path) -> Result<bool> {
    let _pinned_by_us = match open_dir_locked(
        rustix::fs::CWD,
        dir,
        FlockOperation::NonBlockingLockExclusive,
    ) {
        Ok(fd) => fd,
        Err(DirLockError::Open(Errno::NOENT)) => return Ok(false),
        // Not a directory, or a planted symlink: nobody can pin it; move the name aside.
        Err(DirLockError::Open(Errno::LOOP | Errno::NOTDIR)) => {
            move_to_trash(layout, dir)?;
            return Ok(true);
        }
        Err(DirLockError::Open(e)) => {
            return Err(Error::io("open entry for eviction", dir, e.into()))
        }
        Err(DirLockError::Busy | DirLockError::Lock(_)) => return Ok(false),
    };
    failpoint("evicting");
    // Readers that opened the directory before this rename and lock it after will see that the
    // path no longer names it, and treat it as a miss.
    move_to_trash(layout, dir)?;
    Ok(true)
}

/// Removes a trash item unless a reader still pins it. Never follows symlinks.
pub(crate) fn remove_unpinned(path: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if !meta.is_dir() {
        return std::fs::remove_file(path).is_ok();
    }
    let Ok(_pinned_by_us) = open_dir_locked(
        rustix::fs::CWD,
        path,
        FlockOperation::NonBlockingLockExclusive,
    ) else {
        return false;
    };
    std::fs::remove_dir_all(path).is_ok()
}
