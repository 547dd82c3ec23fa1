//! Crash-safe file writes: put, fsync, atomic rename, staged directory commits, temp sweeps and
//! file locks, for Linux.
//!
//! Every write goes to a uniquely named temp beside its target, is fsynced, renamed into place,
//! and the directory is fsynced: the sequence that ext4, xfs, btrfs and tmpfs make durable, and
//! that `close()` alone does not (an NFS client's write-behind cache, ext4's delayed allocation).
//!
//! | function | what it does |
//! | --- | --- |
//! | [`put`], [`put_with`] | temp file (`O_EXCL`), write, fsync, rename over target, fsync directory |
//! | [`fsync_path`], [`fsync_dir`], [`fsync_parent`] | fsync a file, a tree bottom-up, a parent |
//! | [`atomic_rename`] | rename, fsync both parents |
//! | [`rename_noreplace`] | publish unless the target exists ([`Published`]); `linkat` fallback |
//! | [`exchange`] | `RENAME_EXCHANGE` two entries |
//! | [`StagingDir`] | build a tree, publish it with one rename or replace a live tree |
//! | [`create_dir_all_durable`] | create missing directories, fsync each and its parent |
//! | [`temp_name`], [`is_temp_name`], [`sweep`] | unique temp names; remove abandoned ones |
//! | [`remove_live_temps`] | remove this process's unpublished temps on the way out |
//! | [`lock`], [`lock_file_for_key`] | `flock` locks with a wait policy, bounded lock files |
//!
//! # Guarantees
//! - **Concurrent readers** of a path written with [`put`] see the old file or the whole new
//!   one, never a partial file, because the new bytes arrive by `rename(2)`. A [`StagingDir`]
//!   committed with [`StagingDir::commit_noreplace`] appears whole or not at all; with
//!   [`StagingDir::commit_replace`] a reader sees the old tree or the new one (on filesystems with
//!   `RENAME_EXCHANGE`).
//! - **kill -9** of a writer at any point leaves the target as it was or fully replaced, plus at
//!   most a temp entry, which [`sweep`] removes once it is older than the policy's age and no
//!   live writer holds its `flock`. Locks taken with [`lock`] vanish with their holder.
//! - **Power loss** after a function returned `Ok`: the data and the directory entry were
//!   fsynced, so the new contents survive on filesystems that honour `fsync` (ext4, xfs, btrfs;
//!   local disks whose write cache honours flushes). After an `Err`, the target holds either the
//!   old or the new contents; the error names the operation and the path.
//! - An fsync error is returned and never retried into a success (after a writeback error the
//!   kernel may drop the dirty pages, so a second fsync can succeed without the data).
//!
//! # Limitations
//! - **Linux only**; macOS would need `F_FULLFSYNC` for the same promise and is not supported.
//! - **NFS**: renames are atomic for the client that made them; other clients may keep seeing an
//!   old entry or a missing one for as long as their attribute and negative-lookup caches last
//!   (seconds to a minute). `RENAME_NOREPLACE` and `RENAME_EXCHANGE` are refused: the no-replace
//!   publish falls back to `linkat` + `unlinkat`, and [`StagingDir::commit_replace`] to moving the
//!   old tree aside, during which the target is briefly absent. `flock` is emulated with `fcntl`
//!   locks on NFS.
//! - **FUSE** filesystems vary: some lack hard links (the no-replace fallback then fails) or
//!   ignore fsync.
//! - **tmpfs** keeps nothing across a reboot; fsync there only orders operations.
//! - Readers must treat a missing entry (`ENOENT`, `ESTALE`) as a miss.
//!
//! # Example
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use durable_fs::{lock, put, sweep, LockMode, SweepPolicy, Wait};
//!
//! let dir = tempfile::tempdir()?;
//! let target = dir.path().join("artifact.bin");
//! let _guard = lock(dir.path().join("artifact.lock"), LockMode::Exclusive, Wait::Forever)?;
//! put(&target, b"contents")?;
//! assert_eq!(std::fs::read(&target)?, b"contents");
//! // Nothing abandoned here: the sweep removes nothing.
//! assert!(sweep(dir.path(), &SweepPolicy::default())?.removed.is_empty());
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod create_dir;
mod error;
mod fsync;
mod lock;
mod put;
mod registry;
mod rename;
mod staging;
mod sweep;
mod sys;
mod temp_name;

pub use create_dir::create_dir_all_durable;
pub use error::{Error, Result};
pub use fsync::{fsync_dir, fsync_parent, fsync_path};
pub use lock::{lock, lock_file_for_key, LockGuard, LockMode, Wait};
pub use put::{put, put_with};
pub use registry::remove_live_temps;
pub use rename::{atomic_rename, exchange, rename_noreplace, Published};
pub use staging::StagingDir;
pub use sweep::{sweep, SweepPolicy, SweepReport};
pub use temp_name::{is_temp_name, temp_name, TEMP_PREFIX};

/// Test seams: not part of the API, no stability promise.
#[doc(hidden)]
pub mod testing {
    pub use crate::put::put_with_temp_name;
    pub use crate::rename::with_rename_flags_unsupported;
}
