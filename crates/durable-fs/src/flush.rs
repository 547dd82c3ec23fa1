//! Choosing how a [`crate::Batch`] flushes: one `syncfs(2)` per filesystem, or one `fsync(2)` per
//! file and per directory. The choice is made per filesystem, by its `statfs` magic number.
//!
//! # Why `syncfs` only on ext4, xfs and btrfs
//! `syncfs(2)` writes back every dirty inode of the filesystem and then calls the filesystem's
//! `sync_fs` hook, which on ext4 commits the jbd2 journal (with a cache flush), on xfs forces the
//! log synchronously, and on btrfs commits the transaction. After it returns, the data of every
//! file written before the call, and every rename made before it, is on stable storage: one
//! call stands for a hundred `fsync`s. Since Linux 5.8 it also reports writeback errors of the
//! filesystem (the superblock's `s_wb_err`, sampled when the descriptor used was opened), so a
//! failed writeback fails the batch instead of vanishing.
//!
//! Elsewhere it is not a barrier, so the batch falls back to per-file `fsync`:
//! - **FUSE** (other than virtiofs): the kernel's `fuse_sync_fs` returns at once unless the
//!   connection set `sync_fs`, which only virtiofs does, so the daemon never hears of a
//!   `syncfs` and nothing it buffers is made durable. `fsync` and `fsyncdir` do reach it.
//! - **NFS**: `syncfs` writes back dirty pages but the server's stable-storage promise comes with
//!   `COMMIT`, which an `fsync` sends per file; directory operations are synchronous on the
//!   server already, and an `fsync` of the directory is cheap.
//! - Unknown filesystems, and kernels older than 5.8 (whose `syncfs` may return success after a
//!   writeback error): per-file `fsync` makes no assumption beyond what `fsync` promises.
//!
//! Two flushes are the floor for "never torn": the data must be durable before any rename can be,
//! and the renames must be durable before `commit` returns.
//!
//! # Routes not taken
//! - `sync_file_range(SYNC_FILE_RANGE_WRITE)` per file plus one final `fsync` (git's
//!   `core.fsyncMethod=batch`) starts the writeback early, but `sync_file_range` neither waits
//!   for metadata nor flushes the disk's cache, so the final `fsync` must cover every file's data:
//!   true of ext4's and xfs's journals in practice, promised by neither. `syncfs` is documented
//!   to cover the whole filesystem, and it reports errors.
//! - Parallel `fsync`s that the journal groups into one commit would help on FUSE and NFS too, at
//!   the cost of threads in a library that has none; per-file `fsync` stays sequential.

use std::os::fd::AsFd;

use crate::error::{Error, Result};

/// How [`crate::Batch::commit`] may flush, as chosen by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Flush {
    /// `syncfs` where the filesystem makes it a durability barrier (ext4, xfs, btrfs on Linux
    /// 5.8 or later), per-file `fsync` everywhere else. See [`FlushStrategy`].
    #[default]
    Auto,
    /// Always one `fsync` per file and one per distinct directory. Choose it when the filesystem
    /// is shared with heavy writers: `syncfs` waits for *their* dirty data too.
    PerFile,
}

/// How a committed batch was flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlushStrategy {
    /// One `syncfs` per filesystem before the renames, one after.
    Syncfs,
    /// One `fsync` per file before the renames, one `fsync` per distinct directory after.
    PerFile,
}

const EXT4_SUPER_MAGIC: u64 = 0xEF53;
const XFS_SUPER_MAGIC: u64 = 0x5846_5342;
const BTRFS_SUPER_MAGIC: u64 = 0x9123_683E;

/// The first kernel whose `syncfs` reports writeback errors (commit 735e4ae5ba28).
const SYNCFS_REPORTS_ERRORS: (u32, u32) = (5, 8);

/// Whether `syncfs` on the filesystem that holds `dir` is a durability barrier; `path` names it
/// in the error.
pub(crate) fn syncfs_is_barrier(dir: impl AsFd, path: &std::path::Path) -> Result<bool> {
    let stat = rustix::fs::fstatfs(dir).map_err(|e| Error::new("statfs", path, e))?;
    // `f_type` is signed and 32 or 64 bits wide depending on the architecture; the magic
    // numbers are 32-bit values, so compare the low 32 bits.
    #[allow(clippy::unnecessary_cast)]
    let magic = (stat.f_type as u64) & 0xFFFF_FFFF;
    Ok(magic_allows_syncfs(magic) && kernel_reports_syncfs_errors())
}

fn magic_allows_syncfs(magic: u64) -> bool {
    matches!(
        magic,
        EXT4_SUPER_MAGIC | XFS_SUPER_MAGIC | BTRFS_SUPER_MAGIC
    )
}

fn kernel_reports_syncfs_errors() -> bool {
    let uname = rustix::system::uname();
    let release = uname.release().to_string_lossy();
    parse_release(&release).is_some_and(|version| version >= SYNCFS_REPORTS_ERRORS)
}

/// `"6.18.44-fc-v669"` -> `(6, 18)`.
fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn release_strings_parse_to_major_minor() {
        assert_eq!(parse_release("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(parse_release("5.8.0"), Some((5, 8)));
        assert_eq!(parse_release("4.19-rc1"), Some((4, 19)));
        assert_eq!(parse_release("garbage"), None, "unparsable means no syncfs");
        assert!((5, 7) < SYNCFS_REPORTS_ERRORS && (5, 10) >= SYNCFS_REPORTS_ERRORS);
    }

    #[test]
    fn only_journaling_local_filesystems_get_syncfs() {
        assert!(magic_allows_syncfs(0xEF53), "ext4");
        assert!(magic_allows_syncfs(0x5846_5342), "xfs");
        assert!(magic_allows_syncfs(0x9123_683E), "btrfs");
        assert!(
            !magic_allows_syncfs(0x6573_5546),
            "FUSE: syncfs never reaches the daemon"
        );
        assert!(!magic_allows_syncfs(0x6969), "NFS");
        assert!(!magic_allows_syncfs(0x0102_1994), "tmpfs");
    }
}
