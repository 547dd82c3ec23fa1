//! A staging directory: build a tree privately, then publish it with one rename.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, Mode, OFlags, CWD};

use crate::error::{Error, Result};
use crate::fsync::fsync_tree;
use crate::registry::{self, TempKind};
use crate::rename::{exchange, rename_noreplace, PublishOutcome};
use crate::sys;
use crate::temp_name::temp_name;

/// A temp-named directory beside a target, where a whole entry is built and then published with
/// one rename, so readers see no entry or a complete one (never one writer's file mixed with
/// another's).
///
/// It holds an exclusive `flock` on the directory for its lifetime, so [`crate::sweep`] skips
/// it, and it is registered for [`crate::remove_live_temps`]. Dropping it without a commit
/// removes it (best effort).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use durable_fs::{PublishOutcome, StagingDir};
/// let cache = tempfile::tempdir()?;
/// let staging = StagingDir::new_in(cache.path())?;
/// durable_fs::put(staging.path().join("kernel.cubin"), b"cubin")?;
/// durable_fs::put(staging.path().join("meta.json"), b"{}")?;
/// let entry = cache.path().join("entry-1");
/// assert_eq!(staging.commit_noreplace(&entry)?, PublishOutcome::Published);
/// assert_eq!(std::fs::read(entry.join("meta.json"))?, b"{}");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct StagingDir {
    path: PathBuf,
    // Held for the lifetime: its flock tells sweeps this directory is live.
    _lock: OwnedFd,
    ticket: registry::Ticket<'static>,
    done: bool,
    /// The process that made it: a forked child's inherited copy neither removes nor unlocks
    /// its parent's directory when dropped.
    pid: u32,
}

impl StagingDir {
    /// Creates a fresh temp-named directory (mode 0777 less the umask) in `parent`, which must
    /// be on the same filesystem as the targets it will be committed to.
    pub fn new_in(parent: impl AsRef<Path>) -> Result<StagingDir> {
        StagingDir::create_in(parent.as_ref(), 0o777)
    }

    /// As [`StagingDir::new_in`], but only its owner can enter it (mode 0700 from the `mkdir`
    /// on, whatever the umask): for a `parent` that others can write, where a directory they
    /// could write would let them plant a symlink for the owner's next write or `chmod` to
    /// follow. Widen its mode by descriptor ([`StagingDir::dir_fd`]) just before the commit.
    pub fn new_private_in(parent: impl AsRef<Path>) -> Result<StagingDir> {
        StagingDir::create_in(parent.as_ref(), 0o700)
    }

    fn create_in(parent: &Path, mode: u32) -> Result<StagingDir> {
        let mut last = None;
        for _ in 0..3 {
            let path = parent.join(temp_name("staging"));
            match rustix::fs::mkdirat(CWD, &path, Mode::from_raw_mode(mode)) {
                Ok(()) => {}
                Err(rustix::io::Errno::EXIST) => {
                    last = Some(Error::new(
                        "create directory",
                        &path,
                        io::ErrorKind::AlreadyExists,
                    ));
                    continue;
                }
                Err(e) => return Err(Error::new("create directory", &path, e)),
            }
            let ticket = registry::global().register(path.clone(), TempKind::Dir);
            // Not through a symlink: where others can write `parent`, one could rename this
            // directory away and plant a link in its place before this open.
            let lock = rustix::fs::openat(
                CWD,
                &path,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
            )
            .map_err(|e| Error::new("open directory", &path, e))
            .and_then(|fd| {
                rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive)
                    .map_err(|e| Error::new("lock directory", &path, e))?;
                Ok(fd)
            });
            return match lock {
                Ok(lock) => {
                    crate::lock::note_held(&lock);
                    Ok(StagingDir {
                        path,
                        _lock: lock,
                        ticket,
                        done: false,
                        pid: std::process::id(),
                    })
                }
                Err(e) => {
                    let _ = std::fs::remove_dir(&path);
                    Err(e)
                }
            };
        }
        Err(last.unwrap_or_else(|| {
            Error::new("create directory", parent, io::ErrorKind::AlreadyExists)
        }))
    }

    /// The staging directory's path; build the entry under it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory itself, opened when it was made: changes made through it (`fchmod`,
    /// `openat`) reach this directory whatever has since been renamed or planted on its path.
    pub fn dir_fd(&self) -> BorrowedFd<'_> {
        self._lock.as_fd()
    }

    /// fsyncs the tree, then publishes it at `target` only if nothing is there.
    ///
    /// Uses [`rename_noreplace`] (so an existing non-empty directory is never replaced) and
    /// fsyncs the parents. On [`PublishOutcome::AlreadyExisted`] another writer won: the staging
    /// directory is removed, and the caller should use the winner's entry (on NFS the winner
    /// may be invisible for a while; the caller can keep its own copy by not committing).
    pub fn commit_noreplace(mut self, target: impl AsRef<Path>) -> Result<PublishOutcome> {
        let target = target.as_ref();
        fsync_tree(&self.path)?;
        let outcome = self.rename_unflushed(target)?;
        if outcome == PublishOutcome::Published {
            crate::rename::fsync_parents(&self.path, target)?;
        }
        Ok(outcome)
    }

    /// fsyncs the tree, then makes it the directory at `target`, replacing what is there.
    ///
    /// With `RENAME_EXCHANGE` (ext4, xfs, btrfs, tmpfs), the staged tree and the live one swap
    /// atomically: a reader sees the old tree or the new one, never neither; the old tree, now
    /// at the staging path, is then removed. When `target` does not exist it is published as by
    /// [`rename_noreplace`].
    ///
    /// Fallback where the filesystem lacks `RENAME_EXCHANGE` (NFS, FUSE): the old tree is
    /// renamed aside to a temp name, the new one renamed in, the old one removed. **Between the
    /// two renames a reader finds `target` absent**, and a crash there leaves no `target` and the
    /// old tree under a temp name (which the age sweep removes); treat an absent entry as a miss.
    pub fn commit_replace(mut self, target: impl AsRef<Path>) -> Result<()> {
        let target = target.as_ref();
        fsync_tree(&self.path)?;
        self.claim()?;
        let result = self.replace(target);
        if result.is_ok() {
            self.done = true;
        } else {
            self.ticket.abort_publish();
        }
        result
    }

    fn replace(&self, target: &Path) -> Result<()> {
        // A few rounds cover a target that appears or vanishes between our checks.
        for _ in 0..4 {
            match exchange(&self.path, target) {
                Ok(()) => {
                    // The staging path now holds the old tree. The new one is published whatever
                    // happens next; a failed removal is retried by Drop and then by the sweep.
                    let _ = remove_tree(&self.path);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound && !exists(target) => {
                    match rename_noreplace(&self.path, target)? {
                        PublishOutcome::Published => return Ok(()),
                        PublishOutcome::AlreadyExisted => continue,
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                    return self.replace_by_moving_aside(target)
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::new(
            "replace directory",
            target,
            io::Error::other("the target kept changing under us"),
        ))
    }

    fn replace_by_moving_aside(&self, target: &Path) -> Result<()> {
        let parent = sys::parent_of(target);
        let stem = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let aside = parent.join(temp_name(&format!("{stem}.old")));
        // Lock the old tree before it takes a temp name: its mtime may be old, and a sweep must
        // not remove it while we may still need to put it back.
        let _old_lock = sys::open_dir(target)
            .ok()
            .filter(|fd| rustix::fs::flock(fd, FlockOperation::NonBlockingLockExclusive).is_ok());
        let moved_aside = match rustix::fs::renameat(CWD, target, CWD, &aside) {
            Ok(()) => true,
            Err(rustix::io::Errno::NOENT) => false,
            Err(e) => return Err(Error::two("rename", target, &aside, e)),
        };
        if let Err(e) = rustix::fs::renameat(CWD, &self.path, CWD, target) {
            if moved_aside {
                // Put the old tree back so the target is not left missing.
                let _ = rustix::fs::renameat(CWD, &aside, CWD, target);
            }
            return Err(Error::two("rename", &self.path, target, e));
        }
        sys::fsync_dir_path(&parent)?;
        let staging_parent = sys::parent_of(&self.path);
        if staging_parent != parent {
            sys::fsync_dir_path(&staging_parent)?;
        }
        if moved_aside {
            // The new tree is published; an old tree left here is temp-named for the sweep.
            let _ = remove_tree(&aside);
        }
        Ok(())
    }

    /// Publishes the tree at `target` without replacing and without any flush, for
    /// [`crate::StagingBatch`], which flushed the data before and flushes the renames after.
    pub(crate) fn rename_unflushed(&mut self, target: &Path) -> Result<PublishOutcome> {
        self.claim()?;
        match crate::rename::rename_noreplace_unflushed(&self.path, target) {
            Ok(PublishOutcome::Published) => {
                self.done = true;
                Ok(PublishOutcome::Published)
            }
            Ok(PublishOutcome::AlreadyExisted) => {
                self.ticket.abort_publish();
                Ok(PublishOutcome::AlreadyExisted)
            }
            Err(e) => {
                self.ticket.abort_publish();
                Err(e)
            }
        }
    }

    fn claim(&self) -> Result<()> {
        if self.ticket.begin_publish() {
            Ok(())
        } else {
            Err(Error::new(
                "publish",
                &self.path,
                io::Error::new(
                    io::ErrorKind::Interrupted,
                    "the staging directory was removed by remove_live_temps",
                ),
            ))
        }
    }
}

fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Removes a tree without following symlinks; an already-removed tree is fine.
fn remove_tree(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::new("remove directory", path, e)),
    }
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        // Forgotten before the descriptor closes, so a fork never sees its number reused.
        crate::lock::forget_held(self._lock.as_raw_fd());
        if self.pid != std::process::id() {
            // A forked child's copy: the directory and its lock are the parent's.
            return;
        }
        if !self.done && !self.ticket.reclaimed() {
            // Best effort: a sweep removes whatever this leaves.
            let _ = std::fs::remove_dir_all(&self.path);
        }
        // The lock belongs to the open file description, which a forked child's inherited copy
        // of the descriptor keeps open: closing ours would leave the directory (now perhaps the
        // published entry) locked for as long as that copy lives. An explicit unlock ends it
        // for every copy, as `LockGuard` does.
        let _ = rustix::fs::flock(&self._lock, FlockOperation::Unlock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of the staging directory's lock descriptor that outlives the `StagingDir` (a
    /// forked child's inherited copy is one; `dup` makes the same open file description here):
    /// the `flock` belongs to that description, so only an explicit unlock ends it.
    #[test]
    fn a_committed_staging_directory_is_unlocked_even_while_a_copy_of_its_descriptor_lives() {
        let dir = tempfile::tempdir().expect("temp dir");
        let staging = StagingDir::new_in(dir.path()).expect("staging");
        std::fs::write(staging.path().join("f"), b"x").expect("write");
        let inherited = rustix::io::dup(&staging._lock).expect("dup the lock descriptor");
        let target = dir.path().join("entry");
        assert_eq!(
            staging.commit_noreplace(&target).expect("commit"),
            PublishOutcome::Published
        );
        let reader = sys::open_dir(&target).expect("open the published entry");
        assert!(
            rustix::fs::flock(&reader, FlockOperation::NonBlockingLockShared).is_ok(),
            "the published entry is still locked by the staging directory's lock"
        );
        drop(inherited);
    }

    #[test]
    fn a_private_staging_directory_is_0700_whatever_the_umask_and_its_fd_is_the_directory() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().expect("temp dir");
        // Others may write the parent; the staging directory is still only its owner's.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        let staging = StagingDir::new_private_in(dir.path()).expect("staging");
        let meta = std::fs::metadata(staging.path()).expect("stat");
        assert_eq!(meta.mode() & 0o777, 0o700);
        let by_fd = rustix::fs::fstat(staging.dir_fd()).expect("fstat");
        assert_eq!((by_fd.st_dev, by_fd.st_ino), (meta.dev(), meta.ino()));
    }
}
