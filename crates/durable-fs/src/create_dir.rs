//! Creating missing directories durably, top-down, each new one fsynced with its parent.

use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, CWD};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::sys;

/// The permission bits for directories that [`create_dir_all_durable`] creates; the process's
/// umask still applies, as for `mkdir(2)`.
///
/// A type rather than a bare `u32`, so that `755` (decimal, a nonsense mode) cannot be passed by
/// accident where `0o755` was meant: [`DirMode::from_mode`] keeps only the permission bits and
/// the constants cover the usual cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DirMode(u16);

impl DirMode {
    /// `0o777`: what `mkdir -p` and `std::fs::create_dir_all` use; the umask decides the rest.
    pub const DEFAULT: DirMode = DirMode(0o777);
    /// `0o700`: only the owner may list or enter.
    pub const PRIVATE: DirMode = DirMode(0o700);
    /// `0o2775`: setgid, so new entries take the directory's group (a team-shared tree).
    pub const GROUP_SHARED: DirMode = DirMode(0o2775);

    /// The mode from permission bits, for example `0o750`; bits outside `0o7777` (the file-type
    /// bits of `st_mode`) are dropped.
    pub const fn from_mode(mode: u32) -> DirMode {
        DirMode((mode & 0o7777) as u16)
    }

    /// The permission bits.
    pub const fn mode(self) -> u32 {
        self.0 as u32
    }
}

impl Default for DirMode {
    fn default() -> DirMode {
        DirMode::DEFAULT
    }
}

/// Creates `path` and its missing ancestors with `mode` (less the umask), durably.
///
/// Missing directories are created top-down; then each new directory is fsynced, deepest first,
/// and finally the existing ancestor that received the first new entry (as neon's
/// `crashsafe.rs`). A directory that another process creates concurrently counts as created and
/// is fsynced too, since its creator may not have finished. When `path` already is a directory
/// nothing is done; when it is something else, the error's kind is `AlreadyExists` or
/// `NotADirectory`.
pub fn create_dir_all_durable(path: impl AsRef<Path>, mode: DirMode) -> Result<()> {
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
        match rustix::fs::mkdirat(CWD, dir, Mode::from_raw_mode(mode.mode())) {
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
