//! One host's NFS client, as the kernel's FUSE client plus this daemon: the kernel caches
//! attributes, entries and negative entries for `actimeo`; data is read from the server on
//! every read (direct I/O), so a reader sees what a writer closed (close-to-open).
//!
//! Attributes follow NFS's close-to-open rule too. A plain `stat` is answered from the kernel's
//! cache while it is fresh, and `statx(AT_STATX_FORCE_SYNC)` always reaches this daemon (the
//! kernel's FUSE client sends GETATTR for it), as on NFS. An `open` does not refresh FUSE's
//! cached attributes, where an NFS client asks the server at every open of a file or directory
//! (`nfs_lookup_verify_inode`, unless mounted `nocto`): the daemon drops them itself
//! (`HostFs::revalidate`), so the next `stat` or `fstat` fetches them (at that stat, not at the
//! open: see the crate's limitations), and an open of a file the server no longer links is
//! stale, so the kernel looks its name up again (`Store::opened`).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, Notifier, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};

use crate::locks::Locks;
use crate::store::{Body, Ino, Lock, Node, Store};

pub(crate) struct HostFs {
    pub(crate) host: usize,
    pub(crate) store: Arc<Mutex<Store>>,
    pub(crate) actimeo: Duration,
    pub(crate) locks: Locks,
    /// This host's remembered misses and when each expires. The kernel's FUSE client revalidates
    /// a negative entry for a rename target (`LOOKUP_RENAME_TARGET`), where Linux's NFS client
    /// keeps it (`nfs_neg_need_reval`): the client's memory of a miss is kept here too, so a
    /// loser's failed rename does not reveal the winner before `actimeo` ends (DeepEP #684).
    pub(crate) negatives: Mutex<HashMap<(Ino, OsString), Instant>>,
    /// This host's channel for notifications to its kernel, set once the mount's handshake is
    /// done and before the first request is read.
    pub(crate) notifier: Arc<OnceLock<Notifier>>,
}

fn attr(ino: Ino, node: &Node) -> FileAttr {
    let size = node.size();
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: node.atime,
        mtime: node.mtime,
        ctime: node.ctime,
        crtime: SystemTime::UNIX_EPOCH,
        kind: if node.is_dir() {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: node.perm,
        nlink: node.nlink,
        uid: node.uid,
        gid: node.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// A negative entry: inode 0 with a timeout makes the kernel cache the miss (NFS's
/// `lookupcache=all`) until it expires.
fn negative() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn errno(e: i32) -> Errno {
    Errno::from_i32(e)
}

impl HostFs {
    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn negatives(&self) -> MutexGuard<'_, HashMap<(Ino, OsString), Instant>> {
        self.negatives.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This host created or moved `name` into `parent` itself: its own miss is forgotten.
    fn forget_miss(&self, parent: Ino, name: &OsStr) {
        self.negatives().remove(&(parent, name.to_owned()));
    }

    /// Close-to-open for attributes: drops this host's cached attributes of `ino` before an open
    /// of it is answered, so the opener's `fstat`, and every `stat` after it, fetch them from
    /// the server. The notification is written to `/dev/fuse` from this handler and applied by
    /// the kernel before the write returns, hence before the open does. It names attributes
    /// only (offset -1: no page-cache range), which the kernel drops under no lock an open holds
    /// and without waiting on any request of this daemon: sent from inside the OPEN handler, it
    /// cannot deadlock.
    fn revalidate(&self, ino: Ino) -> Result<(), Errno> {
        if self.actimeo.is_zero() {
            // Nothing is cached beyond the request that fetched it.
            return Ok(());
        }
        let Some(notifier) = self.notifier.get() else {
            return Err(Errno::EIO);
        };
        // An open that cannot revalidate fails rather than quietly serve the cache (fuser
        // ignores ENOENT: the kernel had no attributes of it to drop).
        notifier
            .inval_inode(INodeNo(ino), -1, 0)
            .map_err(|e| errno(e.raw_os_error().unwrap_or(libc::EIO)))
    }

    fn entry_of(&self, store: &Store, ino: Ino, reply: ReplyEntry) {
        match store.node(self.host, ino) {
            Ok(node) => reply.entry(&self.actimeo, &attr(ino, node), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }
}

impl Filesystem for HostFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if self.locks == Locks::Shared {
            // The lock manager: `flock` and `fcntl` on regular files reach this daemon and are
            // seen by every host. Directories have no `.flock` in the kernel's FUSE (as in its
            // NFS client), so a `flock` on a directory stays local to the host's mount.
            let _ =
                config.add_capabilities(InitFlags::FUSE_POSIX_LOCKS | InitFlags::FUSE_FLOCK_LOCKS);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let store = self.store();
        let key = (parent.0, name.to_owned());
        let now = Instant::now();
        let remembered = self.negatives().get(&key).copied();
        if let Some(until) = remembered.filter(|until| *until > now) {
            // Still within this host's memory of the miss: absent, whatever the server has.
            return reply.entry(&(until - now), &negative(), Generation(0));
        }
        match store.lookup(self.host, parent.0, name) {
            Ok(ino) => {
                self.negatives().remove(&key);
                self.entry_of(&store, ino, reply)
            }
            Err(libc::ENOENT) => {
                if !self.actimeo.is_zero() {
                    self.negatives().insert(key, now + self.actimeo);
                }
                reply.entry(&self.actimeo, &negative(), Generation(0))
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let store = self.store();
        match store.node(self.host, ino.0) {
            Ok(node) => reply.attr(&self.actimeo, &attr(ino.0, node)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut store = self.store();
        let host = self.host;
        let node = match store.node_mut(host, ino.0) {
            Ok(node) => node,
            Err(e) => return reply.error(errno(e)),
        };
        let at = |t: TimeOrNow| match t {
            TimeOrNow::SpecificTime(t) => t,
            // The server's clock, as NFS's SET_TO_SERVER_TIME.
            TimeOrNow::Now => SystemTime::now(),
        };
        if let Some(mode) = mode {
            node.perm = (mode & 0o7777) as u16;
        }
        if let Some(len) = size {
            match &mut node.body {
                Body::File(bytes) => bytes.resize(len as usize, 0),
                Body::Dir(_) => return reply.error(Errno::EISDIR),
            }
            node.mtime = SystemTime::now();
        }
        if let Some(t) = atime {
            node.atime = at(t);
        }
        if let Some(t) = mtime {
            node.mtime = at(t);
        }
        node.ctime = SystemTime::now();
        reply.attr(&self.actimeo, &attr(ino.0, node));
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut store = self.store();
        let perm = (mode & !umask & 0o7777) as u16;
        self.forget_miss(parent.0, name);
        match store.create(
            self.host,
            parent.0,
            name,
            true,
            crate::store::Owner {
                perm,
                uid: req.uid(),
                gid: req.gid(),
            },
        ) {
            Ok(ino) => self.entry_of(&store, ino, reply),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.store().remove(self.host, parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.store().remove(self.host, parent.0, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            // NFS has no RENAME_NOREPLACE or RENAME_EXCHANGE.
            return reply.error(Errno::EINVAL);
        }
        match self
            .store()
            .rename(self.host, parent.0, name, newparent.0, newname)
        {
            Ok(()) => {
                self.forget_miss(newparent.0, newname);
                reply.ok()
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut store = self.store();
        match store.link(self.host, ino.0, newparent.0, newname) {
            Ok(()) => {
                self.forget_miss(newparent.0, newname);
                self.entry_of(&store, ino.0, reply)
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let opened = self
            .revalidate(ino.0)
            .and_then(|()| self.store().opened(self.host, ino.0).map_err(errno));
        match opened {
            // Direct I/O: every read asks the server, so data closed by another host is seen at
            // the next open (close-to-open) whatever the cached size says.
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let store = self.store();
        match store.node(self.host, ino.0).map(|n| &n.body) {
            Ok(Body::File(bytes)) => {
                let start = (offset as usize).min(bytes.len());
                let end = (start + size as usize).min(bytes.len());
                reply.data(&bytes[start..end]);
            }
            Ok(Body::Dir(_)) => reply.error(Errno::EISDIR),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut store = self.store();
        let node = match store.node_mut(self.host, ino.0) {
            Ok(node) => node,
            Err(e) => return reply.error(errno(e)),
        };
        match &mut node.body {
            Body::File(bytes) => {
                let end = offset as usize + data.len();
                if bytes.len() < end {
                    bytes.resize(end, 0);
                }
                bytes[offset as usize..end].copy_from_slice(data);
                node.mtime = SystemTime::now();
                reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX));
            }
            Body::Dir(_) => reply.error(Errno::EISDIR),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Closing any descriptor drops the owner's POSIX locks on the file (fcntl semantics).
        self.store()
            .release_owner(self.host, Some(lock_owner.0), Some(ino.0));
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut store = self.store();
        if let Some(owner) = lock_owner {
            // The last close of an open file description drops its `flock`.
            store.release_owner(self.host, Some(owner.0), Some(ino.0));
        }
        store.closed(self.host, ino.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _d: bool, reply: ReplyEmpty) {
        // Every write already reached the server.
        match self.store().node(self.host, ino.0) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _d: bool, reply: ReplyEmpty) {
        match self.store().node(self.host, ino.0) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let is_dir = self.store().node(self.host, ino.0).map(Node::is_dir);
        match is_dir {
            // NFS revalidates a directory at open as it does a file.
            Ok(true) => match self.revalidate(ino.0) {
                Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
                Err(e) => reply.error(e),
            },
            Ok(false) => reply.error(Errno::ENOTDIR),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.store().entries(self.host, ino.0) {
            Ok(entries) => entries,
            Err(e) => return reply.error(errno(e)),
        };
        // `.` and `..` have cookies 1 and 2, names their own stable cookies.
        let dots = [
            (OsStr::new(".").to_owned(), ino.0, true, 1),
            (OsStr::new("..").to_owned(), ino.0, true, 2),
        ];
        for (name, child, is_dir, cookie) in dots
            .into_iter()
            .chain(entries)
            .filter(|entry| entry.3 > offset)
        {
            let kind = if is_dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
            if reply.add(INodeNo(child), cookie, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 20, 1 << 19, 1 << 19, 1 << 20, 1 << 19, 4096, 255, 4096);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut store = self.store();
        let perm = (mode & !umask & 0o7777) as u16;
        self.forget_miss(parent.0, name);
        let created = store
            .create(
                self.host,
                parent.0,
                name,
                false,
                crate::store::Owner {
                    perm,
                    uid: req.uid(),
                    gid: req.gid(),
                },
            )
            .and_then(|ino| {
                store.opened(self.host, ino)?;
                Ok(attr(ino, store.node(self.host, ino)?))
            });
        match created {
            Ok(attr) => reply.created(
                &self.actimeo,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let asked = Lock {
            host: self.host,
            owner: lock_owner.0,
            start,
            end,
            typ,
            pid,
        };
        match self.store().conflicting(ino.0, &asked) {
            Some(held) => reply.locked(held.start, held.end, held.typ, held.pid),
            None => reply.locked(start, end, libc::F_UNLCK, 0),
        }
    }

    fn setlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let lock = Lock {
            host: self.host,
            owner: lock_owner.0,
            start,
            end,
            typ,
            pid,
        };
        let mut store = self.store();
        if let Err(e) = store.node(self.host, ino.0) {
            return reply.error(errno(e));
        }
        match store.set_lock(ino.0, lock) {
            Ok(()) => {
                if typ == libc::F_UNLCK {
                    store.grant_waiters();
                }
                reply.ok();
            }
            // A blocking request waits on the server without holding up this host's daemon:
            // its reply is sent when the lock is granted (or the waiter's host goes away).
            Err(libc::EAGAIN) if sleep => store.waiters.push(crate::store::Waiter {
                ino: ino.0,
                lock,
                reply,
            }),
            Err(e) => reply.error(errno(e)),
        }
    }
}
