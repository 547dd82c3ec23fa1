//! fsync of a path, of one directory, of a directory tree bottom-up, and of a path's parent.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags, CWD};

use crate::error::{Error, Result};
use crate::sys;

/// Opens `path` read-only and fsyncs it: a regular file or a directory.
///
/// This is `open(O_RDONLY | O_NONBLOCK | O_CLOEXEC)` then `fsync(2)`; fsync does not care about
/// the open mode. A FIFO, socket or device is refused with `ErrorKind::InvalidInput` (checked on
/// the opened descriptor, and `O_NONBLOCK` keeps a FIFO's open from blocking). Symlinks are
/// followed. An fsync error is returned as is and never retried: after a writeback error the
/// kernel may have dropped the dirty pages, so a second fsync could succeed without the data.
pub fn fsync_path(path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let fd = rustix::fs::openat(
        CWD,
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::new("open", path, e))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| Error::new("stat", path, e))?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => rustix::fs::fsync(&fd).map_err(|e| Error::new("fsync", path, e)),
        FileType::Directory => sys::fsync_dir_fd(&fd, path),
        _ => Err(Error::new(
            "fsync",
            path,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file or directory",
            ),
        )),
    }
}

/// Opens the directory `dir` (`O_RDONLY | O_DIRECTORY | O_CLOEXEC`) and fsyncs it, which makes
/// the creates, renames and unlinks of entries *in* `dir` durable (not its files' data, and not
/// `dir`'s own entry in its parent: see [`fsync_parent`]). Fails with `NotADirectory` on a file.
pub fn fsync_dir(dir: impl AsRef<Path>) -> Result<()> {
    sys::fsync_dir_path(dir.as_ref())
}

/// fsyncs a directory tree bottom-up: each regular file, then each subdirectory (after its own
/// contents), then `dir` itself.
///
/// Entries are opened relative to their directory's descriptor with `O_NOFOLLOW`, so symlinks are
/// never followed (a symlink's own entry is made durable by its directory's fsync). FIFOs,
/// sockets and devices are never opened. This makes a freshly built tree durable before it is
/// renamed into place; it is not the tool for making a rename durable, which needs the
/// *parent's* fsync ([`fsync_parent`]).
pub fn fsync_tree(dir: impl AsRef<Path>) -> Result<()> {
    let dir = dir.as_ref();
    let fd = sys::open_dir(dir)?;
    walk(fd, dir)
}

fn walk(fd: OwnedFd, path: &Path) -> Result<()> {
    let mut entries =
        rustix::fs::Dir::read_from(&fd).map_err(|e| Error::new("read directory", path, e))?;
    while let Some(entry) = entries.read() {
        let entry = entry.map_err(|e| Error::new("read directory", path, e))?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let child = path.join(name);
        let kind = match entry.file_type() {
            FileType::Unknown => {
                match rustix::fs::statat(&fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => FileType::from_raw_mode(st.st_mode),
                    // Removed since the listing: nothing to make durable.
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(e) => return Err(Error::new("stat", child, e)),
                }
            }
            known => known,
        };
        match kind {
            FileType::Directory => {
                let sub = match sys::open_dir_at(&fd, name) {
                    Ok(sub) => sub,
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(e) => return Err(Error::new("open directory", child, e)),
                };
                walk(sub, &child)?;
            }
            FileType::RegularFile => {
                let file = match rustix::fs::openat(
                    &fd,
                    name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                ) {
                    Ok(file) => file,
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(e) => return Err(Error::new("open", child, e)),
                };
                rustix::fs::fsync(file.as_fd()).map_err(|e| Error::new("fsync", child, e))?;
            }
            // Symlinks, FIFOs, sockets and devices: never opened.
            _ => {}
        }
    }
    sys::fsync_dir_fd(&fd, path)
}

/// fsyncs the directory that contains `path` (`.` for a bare name), which makes a create,
/// rename or unlink of `path` durable.
pub fn fsync_parent(path: impl AsRef<Path>) -> Result<()> {
    sys::fsync_dir_path(&sys::parent_of(path.as_ref()))
}
