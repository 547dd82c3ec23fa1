//! Test support: a FUSE filesystem in memory that forgets what was not fsynced when the power is cut.
//!
//! `kill -9` never tests fsync: the page cache survives a killed process. This crate mounts a
//! filesystem (with `fuser`, no libfuse, inside a private mount namespace) that keeps two layers
//! for file data and for directory entries: the volatile layer the kernel was told about and the
//! durable layer a power cut leaves. [`PowercutMount::power_cut`] unmounts, keeps only what
//! survived and remounts at the same path, so a test can check that every operation that
//! reported success is still there, whole ([`Ledger`]). [`run_random_cuts`] runs `durable-fs`
//! puts, staged commits and `jit-cache` builds (with a deterministic fake nvcc) through random
//! cuts and checks every cut ([`Totals`], [`BuildTotals`]); the `power-loss-test` binary wraps it.
//!
//! # Guarantees
//! - `fsync`/`fdatasync` on a file make that file's data and size durable, nothing else.
//! - `fsync` on a directory makes that directory's entry changes durable, in the order they were
//!   made. A rename is one unit: after a cut it happened wholly or not at all, and it is durable
//!   once both directories were synced after it.
//! - A new file's name is not durable until its directory is synced (stricter than ext4, which
//!   commits it with the file's fsync: a program correct here is correct there).
//! - Cut modes ([`CutMode`]): drop every unsynced change; keep a random subset (seeded); tear
//!   writes into 512-byte sectors that survive independently (seeded). A cut can be armed to
//!   fire right after the k-th changing operation ([`PowercutMount::arm_cut_after`]), which makes
//!   every crash point of a short workload reachable by sweeping k.
//! - `fsync`, `fsyncdir` and `flush` reach the daemon and are counted ([`Counters`]); the daemon
//!   never answers ENOSYS to them, which would make the kernel skip every later fsync.
//! - `syncfs(2)` never reaches the daemon, as on every FUSE filesystem but virtiofs (the kernel's
//!   `fuse_sync_fs` returns at once unless the connection set `sync_fs`): it makes nothing
//!   durable here, and a test shows a batch that relied on it losing every file. This is what
//!   `durable_fs::Batch` assumes when it fsyncs per file on FUSE.
//! - Faults ([`Faults`]): EIO on the n-th fsync (dropping the data, as the kernel drops dirty
//!   pages after a writeback error), EIO on the n-th directory fsync, ENOSPC after n bytes.
//! - Modification times can be set (`utimensat`), so a test can age leftovers for a sweep
//!   instead of sleeping; they are never made durable.
//! - `renameat2` `RENAME_NOREPLACE` and `RENAME_EXCHANGE` work, or are refused with EINVAL as on
//!   NFS ([`RenameFlags::RefuseWithEinval`]) so callers' fallbacks run.
//! - The mount is visible only to the thread that mounted it and the processes it spawns.
//!
//! # Limitations
//! - Needs root and `/dev/fuse`; [`run_or_skip`] prints why it skips (and panics under
//!   `FS_TESTBED_REQUIRE=1`).
//! - Regular files and directories only (no symlinks, devices, xattrs); locks are left to the
//!   kernel; timestamps are not made durable.
//! - Close every file before [`PowercutMount::power_cut`]: descriptors still open are cut off.
//! - One request at a time: the daemon is single-threaded and slower than a real filesystem.
//!
//! # Example
//! ```
//! use std::io::Write;
//!
//! powercut_fs::run_or_skip(powercut_fs::Options::default(), |mount| {
//!     let path = mount.root().join("unsynced");
//!     std::fs::write(&path, b"gone after the cut").expect("write through the mount");
//!     mount.power_cut().expect("cut the power and remount");
//!     assert!(!path.exists(), "a name whose directory was never synced does not survive");
//! });
//! ```
#![deny(missing_docs)]

mod control;
mod daemon;
mod error;
mod jit_builds;
mod ledger;
mod model;
mod mount;
mod random_cuts;
mod rng;

pub use control::{Counters, CutReport, Faults, RenameFlags};
pub use error::Error;
pub use jit_builds::BuildTotals;
pub use ledger::{Content, Ledger, Verdict};
pub use model::{CutMode, SECTOR};
pub use mount::{run_or_skip, with_mount, Options, PowercutMount, Skipped};
pub use random_cuts::{run_random_cuts, RandomCuts, Totals, Writer};
pub use rng::SplitMix64;
