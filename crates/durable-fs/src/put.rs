//! `put`: write a file beside the target, fsync it, rename it over the target, fsync the directory.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};

use crate::error::{Error, Result};
use crate::registry::{self, TempKind};
use crate::sys;
use crate::temp_name::temp_name;

/// How many fresh temp names `put` tries when one already exists (someone planted an entry at
/// a random name; a real collision of 64 random bits does not happen).
pub(crate) const NAME_ATTEMPTS: usize = 3;

/// Writes `bytes` to `path` durably and atomically.
///
/// The sequence: create a temp file beside `path` (`O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC |
/// O_NOFOLLOW`, mode 0666 less the umask), take a `flock` on it so [`crate::sweep`] leaves it
/// alone, write, `fsync` the file, `rename` it over `path`, `fsync` the directory. A concurrent
/// reader sees the old file or the whole new one. On any error before the rename, the temp is
/// removed and `path` is untouched; the error names the operation and the path. An fsync error
/// is never retried. If only the final directory fsync fails, the new file is already visible
/// but its rename may not survive a power cut; the error says `fsync directory`.
///
/// The new file replaces whatever entry `path` names: **a symlink at `path` is replaced by the
/// file, not followed**, and **the old file's mode, owner, ACLs and xattrs are not kept** (the
/// new one has mode 0666 less the umask and belongs to the caller; [`put_with`] shows how to
/// keep the mode). To write many files with two flushes in all, use [`crate::Batch`].
///
/// Why the name `put` and not `write_atomic`: the call is the whole durable sequence (temp,
/// fsync, rename, fsync directory), not an atomic `write(2)`, and the same verb stages a file in
/// a [`crate::Batch`]. rustdoc's search finds it under `write_atomic` and `atomic_write` too.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("kernel.cubin");
/// durable_fs::put(&path, b"\x7fELF...")?;
/// assert_eq!(std::fs::read(&path)?, b"\x7fELF...");
/// # Ok(()) }
/// ```
#[doc(alias = "write_atomic", alias = "atomic_write", alias = "persist")]
pub fn put(path: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
    put_with(path, |file| file.write_all(bytes))
}

/// Like [`put`], with the contents produced by `write` streaming into the temp file.
///
/// `write` receives the open temp file positioned at 0; its error aborts the put (the temp is
/// removed, the target untouched) and is returned as the `write temp file` error.
///
/// Keeping the old file's mode (its owner would need `fchown` and privileges):
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::io::Write;
/// use std::os::unix::fs::PermissionsExt;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("run.sh");
/// std::fs::write(&path, b"old")?;
/// std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o750))?;
/// let old = std::fs::metadata(&path)?.permissions();
/// durable_fs::put_with(&path, |file| {
///     file.set_permissions(old)?;
///     file.write_all(b"#!/bin/sh\n")
/// })?;
/// assert_eq!(std::fs::metadata(&path)?.permissions().mode() & 0o777, 0o750);
/// # Ok(()) }
/// ```
pub fn put_with(
    path: impl AsRef<Path>,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<()> {
    let path = path.as_ref();
    let (dir, name) = sys::split("put", path)?;
    let dirfd = sys::open_dir(&dir)?;
    let stem = name.to_string_lossy();
    let mut last = None;
    for _ in 0..NAME_ATTEMPTS {
        let temp = temp_name(&stem);
        match create_temp(&dirfd, &dir, &temp) {
            Ok(file) => return write_and_publish(file, &dirfd, &dir, &temp, &name, path, write),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        Error::new(
            "create temp file",
            dir.join(&name),
            io::ErrorKind::AlreadyExists,
        )
    }))
}

/// Test seam: [`put_with`] with a caller-chosen temp name, so a test can plant an entry at it.
#[cfg(feature = "test-seams")]
pub(crate) fn put_with_temp_name(path: &Path, temp: &OsStr, bytes: &[u8]) -> Result<()> {
    let (dir, name) = sys::split("put", path)?;
    let dirfd = sys::open_dir(&dir)?;
    let file = create_temp(&dirfd, &dir, temp)?;
    write_and_publish(file, &dirfd, &dir, temp, &name, path, |f| {
        f.write_all(bytes)
    })
}

pub(crate) fn create_temp(dirfd: &OwnedFd, dir: &Path, temp: &OsStr) -> Result<File> {
    let fd = rustix::fs::openat(
        dirfd,
        temp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o666),
    )
    .map_err(|e| Error::new("create temp file", dir.join(temp), e))?;
    Ok(File::from(fd))
}

fn write_and_publish(
    mut file: File,
    dirfd: &OwnedFd,
    dir: &Path,
    temp: &OsStr,
    name: &OsString,
    target: &Path,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<()> {
    let temp_path: PathBuf = dir.join(temp);
    let ticket = registry::global().register(temp_path.clone(), TempKind::File);
    let remove_temp = |err: Error| -> Error {
        // Best effort: the error that matters is `err`; a cleanup by remove_live_temps may
        // already have removed the temp (ENOENT).
        let _ = rustix::fs::unlinkat(dirfd, temp, AtFlags::empty());
        err
    };
    // A live writer holds the lock for the temp's whole life, so a sweep (which removes only
    // what it can lock) never removes it. It cannot be held by anyone else: the file is new.
    rustix::fs::flock(file.as_fd(), FlockOperation::NonBlockingLockExclusive)
        .map_err(|e| remove_temp(Error::new("lock temp file", &temp_path, e)))?;
    write(&mut file).map_err(|e| remove_temp(Error::new("write temp file", &temp_path, e)))?;
    // Never retried: see fsync_path.
    rustix::fs::fsync(file.as_fd()).map_err(|e| remove_temp(Error::new("fsync", &temp_path, e)))?;
    if !ticket.begin_publish() {
        return Err(remove_temp(Error::new(
            "publish",
            &temp_path,
            io::Error::new(
                io::ErrorKind::Interrupted,
                "the temp file was removed by remove_live_temps",
            ),
        )));
    }
    if let Err(e) = rustix::fs::renameat(dirfd, temp, dirfd, name) {
        ticket.abort_publish();
        return Err(remove_temp(Error::two("rename", &temp_path, target, e)));
    }
    drop(ticket);
    drop(file);
    sys::fsync_dir_fd(dirfd, dir)
}
