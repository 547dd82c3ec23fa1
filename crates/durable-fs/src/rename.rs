//! Renames made durable: replace, no-clobber publish, and exchange.

use std::io;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, CWD};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::sys;

/// What a no-clobber publish found.
#[must_use = "AlreadyExisted means another writer won: use its entry, and remove your own source"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The source now sits at the target, durably.
    Published,
    /// The target already existed and was left alone; the source was not moved.
    AlreadyExisted,
}

/// Renames `from` to `to` (replacing a file at `to`), then fsyncs the parent of `to` and, when it
/// is a different directory, the parent of `from`.
///
/// `rename(2)` is atomic for readers: they see the old `to` or the new one. On real filesystems
/// a rename is one journal transaction, but only the fsync of both directories makes it durable
/// everywhere. Parents are compared as written (`a/x` and `./a/y` are fsynced twice, which is
/// harmless).
pub fn atomic_rename(from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
    let (from, to) = (from.as_ref(), to.as_ref());
    rustix::fs::renameat(CWD, from, CWD, to).map_err(|e| Error::two("rename", from, to, e))?;
    fsync_parents(from, to)
}

/// Renames `from` to `to` only if `to` does not exist, then fsyncs the parents.
///
/// Losing the race is an answer, not an error: [`PublishOutcome::AlreadyExisted`] says that `to`
/// existed, and `from` is left where it was.
///
/// - First `renameat2(RENAME_NOREPLACE)` (ext4 since Linux 3.15, btrfs and tmpfs 3.17, xfs 4.0,
///   ZFS 2.2). `EEXIST` means the target existed.
/// - Where the filesystem refuses the flag (`EINVAL`; NFS, ceph, 9p, lustre, many FUSE
///   filesystems, ZFS before 2.2): a file is published with `linkat(from, to)` (which never
///   replaces; `EEXIST` means the target existed) and then `unlinkat(from)`; a directory, which
///   cannot be hard-linked, with a plain `rename`, which replaces only an absent or empty
///   directory: `ENOTEMPTY` or `EEXIST` mean the target existed. In this fallback an existing
///   *empty* directory at `to` is replaced.
/// - ESTALE with the target there is a lost race too: on NFS a directory another host renamed to
///   the target can be cached here under its old name, and the rename's lookup gives ESTALE.
/// - After a publish, the parents are fsynced as in [`atomic_rename`].
pub fn rename_noreplace(from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<PublishOutcome> {
    let (from, to) = (from.as_ref(), to.as_ref());
    let outcome = rename_noreplace_unflushed(from, to)?;
    if outcome == PublishOutcome::Published {
        fsync_parents(from, to)?;
    }
    Ok(outcome)
}

/// After a rename that failed with ESTALE, whether its target is there: then the rename lost the
/// race. On NFS (and FUSE) a directory another host renamed to the target may still be cached
/// here under its old name; the target's lookup, made under the rename lock, cannot move that
/// alias and gives ESTALE where a lookup of its own finds the directory. A rename that must not
/// replace the target would have answered EEXIST. The target is opened, not stated: the ESTALE
/// may instead be a target another host removed, which a cached `stat` still shows, while an
/// open asks the server (close-to-open) and looks the name up again when the handle is stale.
fn target_is_there(to: &Path) -> bool {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    match rustix::fs::open(to, flags, Mode::empty()) {
        Ok(_) => true,
        // A symlink, or a file this process may not read, is there too.
        Err(e) => e == Errno::LOOP || e == Errno::ACCESS,
    }
}

/// [`rename_noreplace`] without the parents' fsyncs: for a caller that makes many renames durable
/// with one flush afterwards (`StagingBatch`).
pub(crate) fn rename_noreplace_unflushed(from: &Path, to: &Path) -> Result<PublishOutcome> {
    if !crate::seams::rename_flags_unsupported() {
        match rustix::fs::renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(PublishOutcome::Published),
            Err(Errno::EXIST) => return Ok(PublishOutcome::AlreadyExisted),
            Err(e) if sys::is_unsupported_flag(e) => {}
            Err(Errno::STALE) if target_is_there(to) => return Ok(PublishOutcome::AlreadyExisted),
            Err(e) => return Err(Error::two("rename without replacing", from, to, e)),
        }
    }
    let meta = std::fs::symlink_metadata(from).map_err(|e| Error::new("stat", from, e))?;
    if meta.is_dir() {
        match rustix::fs::renameat(CWD, from, CWD, to) {
            Ok(()) => {}
            Err(Errno::NOTEMPTY | Errno::EXIST) => return Ok(PublishOutcome::AlreadyExisted),
            Err(e) => return Err(Error::two("rename directory", from, to, e)),
        }
    } else {
        match rustix::fs::linkat(CWD, from, CWD, to, AtFlags::empty()) {
            Ok(()) => {}
            Err(Errno::EXIST) => return Ok(PublishOutcome::AlreadyExisted),
            Err(e) => return Err(Error::two("link", from, to, e)),
        }
        rustix::fs::unlinkat(CWD, from, AtFlags::empty())
            .map_err(|e| Error::new("unlink", from, e))?;
    }
    Ok(PublishOutcome::Published)
}

/// Swaps `a` and `b` atomically (`renameat2(RENAME_EXCHANGE)`), then fsyncs both parents.
///
/// Both must exist; they may be non-empty directories. Where the filesystem lacks the flag the
/// error's kind is `ErrorKind::Unsupported` and nothing moved.
pub fn exchange(a: impl AsRef<Path>, b: impl AsRef<Path>) -> Result<()> {
    let (a, b) = (a.as_ref(), b.as_ref());
    let result = if crate::seams::rename_flags_unsupported() {
        Err(Errno::INVAL)
    } else {
        rustix::fs::renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE)
    };
    match result {
        Ok(()) => fsync_parents(a, b),
        Err(e) if sys::is_unsupported_flag(e) => Err(Error::two(
            "exchange",
            a,
            b,
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!("this filesystem does not support RENAME_EXCHANGE ({e})"),
            ),
        )),
        Err(e) => Err(Error::two("exchange", a, b, e)),
    }
}

pub(crate) fn fsync_parents(from: &Path, to: &Path) -> Result<()> {
    let (pf, pt) = (sys::parent_of(from), sys::parent_of(to));
    sys::fsync_dir_path(&pt)?;
    if pf != pt {
        sys::fsync_dir_path(&pf)?;
    }
    Ok(())
}
