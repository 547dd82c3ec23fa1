//! Creating missing directories durably, top-down, each new one fsynced with its parent.

use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, CWD};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::sys;

/// Creates `path` and its missing ancestors with `mode` (less the umask), durably.
///
/// Missing directories are created top-down; then each new directory is fsynced, deepest first,
/// and finally the existing ancestor that received the first new entry (as neon's
/// `crashsafe.rs`). A directory that another process creates concurrently counts as created and
/// is fsynced too, since its creator may not have finished. When `path` already is a directory
/// nothing is done; when it is something else, the error's kind is `AlreadyExists` or
/// `NotADirectory`.
pub fn create_dir_all_durable(path: impl AsRef<Path>, mode: u32) -> Result<()> {
    let path = path.as_ref();
    let mut missing: Vec<PathBuf> = Vec::new();
    let mut cursor = path.to_path_buf();
    loop {
        match std::fs::metadata(&cursor) {
            Ok(meta) if meta.is_dir() => break,
            Ok(_) => {
                return Err(Error::new(
                    "create directory",
                    &cursor,
                    io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        "exists and is not a directory",
                    ),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing.push(cursor.clone());
                match cursor.parent() {
                    Some(p) if !p.as_os_str().is_empty() => cursor = p.to_path_buf(),
                    _ => {
                        cursor = PathBuf::from(".");
                        break;
                    }
                }
            }
            Err(e) => return Err(Error::new("stat", &cursor, e)),
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let existing_ancestor = cursor;
    for dir in missing.iter().rev() {
        match rustix::fs::mkdirat(CWD, dir, Mode::from_raw_mode(mode)) {
            Ok(()) => {}
            // A concurrent creator won; it is still a directory we must make durable.
            Err(Errno::EXIST) if dir.is_dir() => {}
            Err(e) => return Err(Error::new("create directory", dir, e)),
        }
    }
    for dir in &missing {
        sys::fsync_dir_path(dir)?;
    }
    sys::fsync_dir_path(&existing_ancestor)
}
