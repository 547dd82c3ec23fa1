//! How the launcher writes a command's output and dependency file: atomically, as a build
//! output, not durably as a cache entry.
//!
//! Each file is written to a temp beside it (`durable_fs::temp_name`: unique per host, process
//! and call; `O_EXCL`, mode 0666 less the umask, as a compiler creates it) and renamed over the
//! target, so a reader, ninja, or a kill -9 at any instant sees the old file or the whole new one,
//! never a partial one. A killed launcher may leave its temp (named `.dfs-tmp.*`); it is never
//! taken for the output.
//!
//! Neither file is fsynced. The cache entry they are copied from was made durable when it was
//! published; the copy in the build directory has the durability nvcc gives the files it writes
//! (none) and ccache gives its outputs (none): a power cut within the kernel's writeback delay
//! may lose the command's output like nvcc's own. Flushing both would cost three fsyncs, several
//! milliseconds on a journalled filesystem, on every hit of every build. On ext4's default
//! `data=ordered` mode with `auto_da_alloc`, a rename over an existing output (a rebuild) still
//! reaches the disk only after the new data.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A file written beside its target, not yet renamed over it, or a target that already holds the
/// bytes. Dropped unpublished, a temp is removed.
pub(super) enum Staged {
    Temp {
        temp: PathBuf,
        target: PathBuf,
        published: bool,
    },
    /// The target is a regular file with these very bytes (a rebuild that hits, a command run
    /// again): publishing sets its mtime to now, which is all a replacement would change for a
    /// build system, without the new inode and the old one's freeing (on a filesystem mounted
    /// with `discard`, a synchronous discard inside the rename).
    Same(std::fs::File, PathBuf),
}

impl Staged {
    /// Writes `bytes` to a new temp file beside `target`, unless `target` already holds them.
    pub(super) fn write(target: &Path, bytes: &[u8]) -> Result<Staged, String> {
        if let Some(file) = holding(target, bytes)? {
            return Ok(Staged::Same(file, target.to_path_buf()));
        }
        let dir = target
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let stem = target
            .file_name()
            .unwrap_or(OsStr::new("output"))
            .to_string_lossy();
        let temp = dir.join(durable_fs::temp_name(&stem));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&temp)
            .map_err(|e| format!("create {}: {e}", temp.display()))?;
        let write = file.write_all(bytes);
        let staged = Staged::Temp {
            temp,
            target: target.to_path_buf(),
            published: false,
        };
        match (write, &staged) {
            (Err(e), Staged::Temp { temp, .. }) => Err(format!("write {}: {e}", temp.display())),
            _ => Ok(staged),
        }
    }

    /// Renames the temp over the target, or sets the mtime of a target that holds the bytes.
    pub(super) fn publish(mut self) -> Result<(), String> {
        match &mut self {
            Staged::Temp {
                temp,
                target,
                published,
            } => {
                std::fs::rename(&*temp, &*target).map_err(|e| {
                    format!("rename {} to {}: {e}", temp.display(), target.display())
                })?;
                *published = true;
                Ok(())
            }
            Staged::Same(file, target) => {
                // The mtime only, to now, as a rewrite would leave it; the file was opened
                // read-only, and UTIME_NOW asks no more than write permission.
                let times = rustix::fs::Timestamps {
                    last_access: rustix::fs::Timespec {
                        tv_sec: 0,
                        tv_nsec: rustix::fs::UTIME_OMIT,
                    },
                    last_modification: rustix::fs::Timespec {
                        tv_sec: 0,
                        tv_nsec: rustix::fs::UTIME_NOW,
                    },
                };
                rustix::fs::futimens(&*file, &times)
                    .map_err(|e| format!("set the mtime of {}: {e}", target.display()))
            }
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Staged::Temp {
            temp,
            published: false,
            ..
        } = self
        {
            // Best effort: an error here leaves a temp that is never taken for the output.
            let _ = std::fs::remove_file(&*temp);
        }
    }
}

/// What is at the target now: nothing (or a regular file with other bytes), or a regular file
/// holding exactly `bytes` (opened, to set its mtime). Anything else (a symlink, a device such
/// as `/dev/null`, a FIFO, a directory) is refused: nvcc would write through it, and a rename
/// would replace it.
fn holding(target: &Path, bytes: &[u8]) -> Result<Option<std::fs::File>, String> {
    let meta = match std::fs::symlink_metadata(target) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("stat {}: {e}", target.display())),
    };
    if !meta.file_type().is_file() {
        return Err(format!(
            "{} is not a regular file; nvcc writes it",
            target.display()
        ));
    }
    if meta.len() != bytes.len() as u64 {
        return Ok(None);
    }
    let Ok(mut file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(target)
    else {
        return Ok(None);
    };
    let mut now = Vec::with_capacity(bytes.len());
    let same = file.read_to_end(&mut now).is_ok() && now == bytes;
    Ok(same.then_some(file))
}
