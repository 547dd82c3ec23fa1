//! Test support: one in-memory filesystem exported to several simulated hosts, each through its
//! own FUSE mount in its own mount namespace, with the semantics of Linux's NFS client.
//!
//! Every host mounts the same store at the same path, as NFS clients mount one export. What a
//! host sees follows what an NFS client shows its programs:
//! - **Client caching** by the kernel, per mount: attributes and directory entries are cached for
//!   `actimeo` ([`Options::actimeo`], default 3 s, 0 to 60 s; one per host with
//!   [`Cluster::start_with_actimeos`]), and so are misses (negative entries, NFS's
//!   `lookupcache=all`): a name another host created stays invisible here until the miss
//!   expires.
//! - **Attributes**: a plain `stat`, `lstat`, `fstatat`, `fstat` or `statx` of a file whose
//!   attributes this host fetched within `actimeo` answers from the cache, whatever another host
//!   changed since (its size, times, or the inode a name now points to);
//!   `statx(AT_STATX_FORCE_SYNC)` asks the server every time.
//! - **Close-to-open**: an `open` (and an `opendir`) revalidates the attributes with the server,
//!   so `fstat` on the new descriptor and later `stat`s show the server's; file data is read
//!   from the server on every read (direct I/O), so data a host wrote and closed is seen by any
//!   host's next open and read.
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
//! - An open or a data read drops the host's cached attributes of the file (a read: FUSE marks
//!   the access time stale), and its next `stat` or `fstat` fetches them from the server then.
//!   NFS fetches them at the open (or takes them from the READ reply) and keeps those for
//!   `actimeo`: when another host changes the file between this host's open or read and its
//!   next stat, that stat shows the change here and not on NFS. A test that needs a stale stat
//!   makes the host's last access before the change a plain stat. This cannot be closed from
//!   the daemon: FUSE has no notification that pushes attributes to the kernel, and the GETATTR
//!   the kernel sends after the drop cannot be told from the one `AT_STATX_FORCE_SYNC` sends,
//!   which must get the server's.
//! - `actimeo` is fixed (NFS grows the timeout from `acregmin` to `acregmax`; with `actimeo=`
//!   set both are equal).
//! - An open's permission check runs on the cached mode and owner (the attributes are dropped
//!   when the open itself is answered), where NFS revalidates them during the lookup, before the
//!   check: another host's `chmod` within `actimeo` is not seen by it.
//! - A miss stays cached for its own `actimeo` even when this host sees its directory change,
//!   where NFS drops a directory's cached lookups once it notices the change.
//! - Regular files and directories only; no symlinks, xattrs or mmap of written data.
//! - Locks are whole-owner over overlapping ranges (no splitting of byte ranges).
//! - The host identity other crates see (durable-fs's `DURABLE_FS_HOST_ID`) is an environment
//!   variable of the processes a test starts on a host ([`Cluster::spawn`] sets it).
#![deny(missing_docs)]

mod cluster;
mod fs;
mod locks;
mod store;

pub use cluster::{host_id_of, Cluster, Options, Skipped};
pub use locks::Locks;
