//! Test seams (feature `test-seams`): not part of the API, no stability promise. Enable the
//! feature only in dev-dependencies; a build without it has none of this.

use std::ffi::OsStr;
use std::path::Path;

use crate::error::Result;

/// A deliberate break of the batch commit, so a test can show its checker catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BatchFlaw {
    /// Rename every file into place before flushing any data (the torn-file bug).
    RenameBeforeFlush,
    /// Use `syncfs(2)` whatever the filesystem, even where it does not reach the disk (FUSE).
    ForceSyncfs,
    /// Return after the renames without flushing them (the lost-rename bug).
    SkipEntryFlush,
}

/// Runs `f` with `RENAME_NOREPLACE` and `RENAME_EXCHANGE` treated as unsupported on this thread,
/// as on NFS, so the `linkat`/plain-rename fallbacks and the staged-commit fallback can be
/// tested on any filesystem.
pub fn with_rename_flags_unsupported<R>(f: impl FnOnce() -> R) -> R {
    crate::seams::with_rename_flags_unsupported(f)
}

/// Runs `f` with [`crate::Batch::commit`] broken as `flaw` says, on this thread.
pub fn with_batch_flaw<R>(flaw: BatchFlaw, f: impl FnOnce() -> R) -> R {
    let flaw = match flaw {
        BatchFlaw::RenameBeforeFlush => crate::seams::BatchFlaw::RenameBeforeFlush,
        BatchFlaw::ForceSyncfs => crate::seams::BatchFlaw::ForceSyncfs,
        BatchFlaw::SkipEntryFlush => crate::seams::BatchFlaw::SkipEntryFlush,
    };
    crate::seams::with_batch_flaw(flaw, f)
}

/// [`crate::put`] with a caller-chosen temp name, so a test can plant an entry at it.
pub fn put_with_temp_name(path: &Path, temp: &OsStr, bytes: &[u8]) -> Result<()> {
    crate::put::put_with_temp_name(path, temp, bytes)
}
