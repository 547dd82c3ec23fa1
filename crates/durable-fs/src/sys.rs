//! Small wrappers over rustix that turn an `Errno` into this crate's [`Error`] with a path.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, CWD};
use rustix::io::Errno;

use crate::error::{Error, Result};

/// Splits `path` into its parent directory (`.` for a bare name) and its final component.
pub(crate) fn split(op: &'static str, path: &Path) -> Result<(PathBuf, std::ffi::OsString)> {
    let name = path.file_name().ok_or_else(|| {
        Error::new(
            op,
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "path has no final component (it ends in `..` or is a root)",
            ),
        )
    })?;
    Ok((parent_of(path), name.to_os_string()))
}

/// The directory that holds `path`'s last component: `.` when the path is a bare name.
pub(crate) fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Opens a directory for `*at` calls and fsync (`O_RDONLY | O_DIRECTORY | O_CLOEXEC`).
pub(crate) fn open_dir(dir: &Path) -> Result<OwnedFd> {
    rustix::fs::openat(
        CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::new("open directory", dir, e))
}

/// Opens the entry `name` of `dir` as a directory without following a symlink.
pub(crate) fn open_dir_at(dir: impl AsFd, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
}

/// fsyncs a directory descriptor; `path` names it in the error.
pub(crate) fn fsync_dir_fd(fd: impl AsFd, path: &Path) -> Result<()> {
    rustix::fs::fsync(fd).map_err(|e| Error::new("fsync directory", path, e))
}

/// Opens and fsyncs the directory `dir`.
pub(crate) fn fsync_dir_path(dir: &Path) -> Result<()> {
    let fd = open_dir(dir)?;
    fsync_dir_fd(&fd, dir)
}

/// Whether an errno means "the filesystem does not know this rename flag".
pub(crate) fn is_unsupported_flag(e: Errno) -> bool {
    e == Errno::INVAL || e == Errno::NOSYS || e == Errno::OPNOTSUPP
}
