//! Test support: one in-memory filesystem exported to several simulated hosts, each through its
//! own FUSE mount in its own mount namespace, with the semantics of Linux's NFS client.
//!
//! Every host mounts the same store at the same path, as NFS clients mount one export. What a
//! host sees follows what an NFS client shows its programs:
//! - **Client caching** by the kernel, per mount: attributes and directory entries are cached for
//!   `actimeo` ([`Options::actimeo`], default 3 s, 0 to 60 s), and so are misses (negative
//!   entries, NFS's `lookupcache=all`): a name another host created stays invisible here until
//!   the miss expires.
//! - **Close-to-open**: file data is read from the server on every read (direct I/O), so data a
//!   host wrote and closed is seen by any host's next open and read.
//! - **`renameat2` flags** (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`) are refused with EINVAL.
//! - **ESTALE** for any operation on a file or directory another host removed (a file this host
//!   still holds open stays readable here, as after NFS's silly rename).
//! - **Locks** ([`Locks`]): `Shared` is NFS with a lock manager: `flock` and `fcntl` locks on
//!   regular files are kept by the server and seen by every host (a blocking request waits on
//!   the server); a `flock` on a directory stays local to its host, as on Linux (the kernel's NFS
//!   and FUSE directory operations have no `.flock`). `Local` is `nolock`/`local_lock=all`:
//!   every lock is local to its host.
//! - **Host crash** ([`Cluster::crash`], after the caller SIGKILLed the processes it started
//!   there): the mount is detached and its connection aborted, and the server drops the host's
//!   locks and open files, as a lock manager does when a client reboots. [`Cluster::restart`]
//!   mounts it again (empty caches).
//!
//! # Limitations
//! - Needs root and `/dev/fuse`; [`Cluster::start`] returns [`Skipped`] otherwise.
//! - Regular files and directories only; no symlinks, xattrs or mmap of written data.
//! - Locks are whole-owner over overlapping ranges (no splitting of byte ranges).
//! - The host identity other crates see (durable-fs's `DURABLE_FS_HOST_ID`) is an environment
//!   variable of the processes a test starts on a host ([`Cluster::spawn`] sets it).
#![deny(missing_docs)]

mod cluster;
mod fs;
mod store;

pub use cluster::{host_id_of, Cluster, Options, Skipped};

/// Whether locks reach every host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locks {
    /// NFS with a lock manager: `flock`/`fcntl` on regular files are seen by every host;
    /// directory `flock`s stay local to each host.
    Shared,
    /// `nolock` or `local_lock=all`: every lock is local to its host.
    Local,
}
