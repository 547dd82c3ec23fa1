//! The lock policy of a cluster's mounts: whether a lock taken on one host is seen by the others.

/// Whether locks reach every host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locks {
    /// NFS with a lock manager: `flock`/`fcntl` on regular files are seen by every host;
    /// directory `flock`s stay local to each host.
    Shared,
    /// `nolock` or `local_lock=all`: every lock is local to its host.
    Local,
}
