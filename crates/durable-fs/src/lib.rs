//! Crash-safe file writes for Linux: atomic puts, batch commits with one flush, staged directory
//! commits, temp sweeps and file locks.
//!
//! Every write goes to a uniquely named temp beside its target, is fsynced, renamed into place,
//! and the directory is fsynced: the sequence that ext4, xfs, btrfs and tmpfs make durable, and
//! that `close()` alone does not (an NFS client's write-behind cache, ext4's delayed allocation).
//! Unlike `tempfile`'s `persist`, which is a plain rename and never fsyncs, every publishing
//! call here returns only after the data and the directory entry were flushed.
//!
//! # Choosing an operation
//! - Use [`put`] (or [`put_with`] to stream) to replace **one file** so that readers and a crash
//!   see the old or the whole new contents. It is what other crates call `write_atomic` or
//!   `atomic_write`.
//! - Use [`Batch`] to write **many independent files** at once: each is still old-or-new on its
//!   own, but the whole batch costs two flushes (`syncfs` on ext4, xfs, btrfs) instead of two
//!   per file.
//! - Use [`StagingDir`] when **several files must appear together** (an artifact and the
//!   metadata that names it): build a directory privately, publish it with one rename, with
//!   [`StagingDir::commit_noreplace`] (first writer wins) or [`StagingDir::commit_replace`].
//! - Use [`rename_noreplace`] to publish something you built yourself without clobbering a
//!   winner ([`PublishOutcome::AlreadyExisted`] is an answer, not an error); [`atomic_rename`]
//!   to move with replacement; [`exchange`] to swap two trees.
//! - Use [`fsync_path`], [`fsync_dir`], [`fsync_parent`] or [`fsync_tree`] when you wrote files
//!   yourself and need them durable; [`create_dir_all_durable`] for `mkdir -p` that survives a
//!   crash.
//! - Use [`lock`] to wait for a `flock` (forever or with a timeout that is an error), and
//!   [`try_lock`] to take it only if it is free; [`lock_file_for_key`] keeps lock files bounded.
//! - Call [`sweep`] at start-up or from a janitor to remove temps abandoned by killed writers,
//!   and [`remove_live_temps`] on the way out of a process told to stop.
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
//! - An fsync (or `syncfs`) error is returned and never retried into a success (after a
//!   writeback error the kernel may drop the dirty pages, so a second fsync can succeed without
//!   the data), and nothing is published after it.
//!
//! # Traps
//! - **Symlinks are replaced, not followed**: [`put`] over a symlink renames a regular file over
//!   the link itself; the file it pointed to is untouched. Resolve the path first
//!   (`std::fs::canonicalize`) to write through a link.
//! - **Mode and owner are not kept**: the new file is created with mode 0666 less the umask and
//!   belongs to the caller; the old file's mode, owner, ACLs and xattrs are gone. To keep the
//!   mode, set it inside [`put_with`] (`file.set_permissions(old.permissions())`), as the
//!   example of [`put_with`] shows.
//! - **`fork`**: a child inherits the registry of live temps; [`remove_live_temps`] removes only
//!   the calling process's own temps, so a child never deletes its parent's. A child also
//!   inherits every [`LockGuard`]'s descriptor: dropping the guard in either process releases
//!   the lock for both.
//!
//! # Limitations
//! - **Linux only**; macOS would need `F_FULLFSYNC` for the same promise and is not supported.
//! - **NFS**: renames are atomic for the client that made them; other clients may keep seeing an
//!   old entry or a missing one for as long as their attribute and negative-lookup caches last
//!   (seconds to a minute). `RENAME_NOREPLACE` and `RENAME_EXCHANGE` are refused: the no-replace
//!   publish falls back to `linkat` + `unlinkat`, and [`StagingDir::commit_replace`] to moving the
//!   old tree aside, during which the target is briefly absent.
//! - **Locks across hosts** (NFS, Lustre): [`lock`] on a *regular file* is emulated by the client
//!   with a whole-file `fcntl` lock, which the server's lock manager shows to every host, unless
//!   the share is mounted `nolock` or `local_lock=all` (then every lock is local to its host). A
//!   lock on a *directory* is always local to its host (Linux's NFS client has no `flock` for
//!   directories). So [`sweep`]'s rule (remove only what it can lock) protects a live writer only
//!   from processes of the same host on a shared filesystem: give other hosts' temps a longer
//!   [`SweepPolicy::max_age`] than any writer lives, or a liveness record of your own.
//! - **FUSE** filesystems vary: some lack hard links (the no-replace fallback then fails) or
//!   ignore fsync; `syncfs` never reaches a FUSE daemon (except virtiofs), so [`Batch`] uses
//!   per-file fsync there.
//! - **tmpfs** keeps nothing across a reboot; fsync there only orders operations.
//! - Readers must treat a missing entry (`ENOENT`, `ESTALE`) as a miss.
//!
//! # Example
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use durable_fs::{lock, put, sweep, Batch, LockMode, SweepPolicy, Wait};
//!
//! let dir = tempfile::tempdir()?;
//! // `lock` returns the guard or an error: there is no way past it without the lock.
//! let _guard = lock(dir.path().join("artifact.lock"), LockMode::Exclusive, Wait::Forever)?;
//! let target = dir.path().join("artifact.bin");
//! put(&target, b"contents")?;
//! assert_eq!(std::fs::read(&target)?, b"contents");
//!
//! let mut batch = Batch::new();
//! batch.put(dir.path().join("a.json"), b"{}")?;
//! batch.put(dir.path().join("b.json"), b"[]")?;
//! batch.commit()?;
//! assert_eq!(std::fs::read(dir.path().join("b.json"))?, b"[]");
//! // Nothing abandoned here: the sweep removes nothing.
//! assert!(sweep(dir.path(), &SweepPolicy::default())?.removed.is_empty());
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod batch;
mod create_dir;
mod error;
mod flush;
mod fnv;
mod fsync;
mod host;
mod lock;
mod put;
mod registry;
mod rename;
mod seams;
mod staging;
mod staging_batch;
mod sweep;
mod sys;
mod temp_name;

pub use batch::{Batch, BatchReport};
pub use create_dir::{create_dir_all_durable, DirMode};
pub use error::{Error, Result};
pub use flush::{Flush, FlushStrategy};
pub use fsync::{fsync_dir, fsync_parent, fsync_path, fsync_tree};
pub use host::{host_id, HOST_ID_ENV};
pub use lock::{
    lock, lock_file_for_key, prepare_fork, try_lock, ForkPrepared, LockGuard, LockMode, Wait,
};
pub use put::{put, put_with};
pub use registry::remove_live_temps;
pub use rename::{atomic_rename, exchange, rename_noreplace, PublishOutcome};
pub use staging::StagingDir;
pub use staging_batch::{StagingBatch, StagingBatchReport};
pub use sweep::{sweep, SweepPolicy, SweepReport};
pub use temp_name::{is_temp_name, temp_name, temp_name_host, TEMP_PREFIX};

/// Test seams (feature `test-seams`, off by default): not part of the API, no stability promise.
#[cfg(feature = "test-seams")]
#[doc(hidden)]
pub mod testing;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
