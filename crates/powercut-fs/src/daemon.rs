//! The FUSE daemon: answers the kernel's requests from the shared model.
//!
//! Every reply carries a zero TTL, so the kernel asks again for each lookup and attribute and a
//! cut is visible at once; the kernel is not offered a writeback cache, so each `write` reaches
//! the daemon before the system call returns. Locks are not implemented here: the kernel then
//! keeps `flock` and `fcntl` locks itself, and a blocking lock cannot stall the request loop.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::control::{Inner, RenameFlags, Shared};
use crate::model::{Ino, Inode, Kind, RenameMode};

/// Nothing is cached by the kernel: every lookup and attribute is asked for again.
const TTL: Duration = Duration::ZERO;

pub(crate) struct Daemon {
    pub(crate) shared: Arc<Shared>,
}

fn attr(ino: Ino, inode: &Inode) -> FileAttr {
    let size = inode.size();
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: inode.mtime,
        mtime: inode.mtime,
        ctime: inode.mtime,
        crtime: SystemTime::UNIX_EPOCH,
        kind: match inode.kind() {
            Kind::File => FileType::RegularFile,
            Kind::Dir => FileType::Directory,
        },
        perm: inode.perm,
        nlink: inode.nlink,
        uid: inode.uid,
        gid: inode.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn errno(e: i32) -> Errno {
    Errno::from_i32(e)
}

impl Daemon {
    /// Locks the state, or answers EIO when the power is out.
    fn live(&self) -> Result<std::sync::MutexGuard<'_, Inner>, Errno> {
        let inner = self.shared.lock();
        if inner.fired.is_some() {
            return Err(Errno::EIO);
        }
        Ok(inner)
    }

    fn create_node(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: Kind,
        mode: u32,
        umask: u32,
    ) -> Result<FileAttr, Errno> {
        let mut inner = self.live()?;
        let perm = (mode & !umask & 0o7777) as u16;
        let result = inner
            .model
            .create(parent.0, name, kind, perm, req.uid(), req.gid())
            .and_then(|ino| Ok(attr(ino, inner.model.inode(ino)?)));
        // The attributes are taken before counting: a cut fired by this operation answers it as
        // done, as the kernel had been told before the power went.
        inner.count_operation();
        result.map_err(errno)
    }
}

impl Filesystem for Daemon {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let inner = match self.live() {
            Ok(inner) => inner,
            Err(e) => return reply.error(e),
        };
        match inner
            .model
            .lookup(parent.0, name)
            .and_then(|ino| Ok(attr(ino, inner.model.inode(ino)?)))
        {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let inner = match self.live() {
            Ok(inner) => inner,
            Err(e) => return reply.error(e),
        };
        match inner.model.inode(ino.0) {
            Ok(inode) => reply.attr(&TTL, &attr(ino.0, inode)),
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
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut inner = match self.live() {
            Ok(inner) => inner,
            Err(e) => return reply.error(e),
        };
        let mut result = Ok(());
        if let Some(mode) = mode {
            result = inner.model.set_perm(ino.0, (mode & 0o7777) as u16);
        }
        if let (Some(len), Ok(())) = (size, result) {
            result = inner.model.set_len(ino.0, len);
        }
        // Sweeps decide by age: a test forges an old mtime instead of sleeping.
        if let (Some(time), Ok(())) = (mtime, result) {
            let time = match time {
                TimeOrNow::SpecificTime(time) => time,
                TimeOrNow::Now => SystemTime::now(),
            };
            result = inner.model.set_mtime(ino.0, time);
        }
        let result = result.and_then(|()| Ok(attr(ino.0, inner.model.inode(ino.0)?)));
        if size.is_some() {
            inner.count_operation();
        }
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            // Only regular files are simulated; device nodes, fifos and sockets are refused.
            return reply.error(Errno::EPERM);
        }
        match self.create_node(req, parent, name, Kind::File, mode, umask) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
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
        match self.create_node(req, parent, name, Kind::Dir, mode, umask) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut inner = match self.live() {
            Ok(inner) => inner,
            Err(e) => return reply.error(e),
        };
        let result = inner.model.remove(parent.0, name, Kind::File);
        inner.count_operation();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut inner = match self.live() {
            Ok(inner) => inner,
            Err(e) => return reply.error(e),
        };
        let result = inner.model.remove(parent.0, name, Kind::Dir);
        inner.count_operation();
        match result {
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
        let mut inner = match self.live() {
            Ok(inner) => inner,
            Err(e) => return reply.error(e),
        };
        let noreplace = fuser::RenameFlags::RENAME_NOREPLACE;
        let exchange = fuser::RenameFlags::RENAME_EXCHANGE;
        let mode = if flags.is_empty() {
            Ok(RenameMode::Replace)
        } else if inner.rename_flags == RenameFlags::RefuseWithEinval {
            Err(Errno::EINVAL)
        } else if flags == noreplace {
            Ok(RenameMode::NoReplace)
        } else if flags == exchange {
            Ok(RenameMode::Exchange)
        } else {
            // Both flags together, or RENAME_WHITEOUT: Linux refuses these with EINVAL.
            Err(Errno::EINVAL)
        };
        let result = match mode {
            Ok(mode) => inner
                .model
                .rename(parent.0, name, newparent.0, newname, mode)
                .map_err(errno),
            Err(e) => Err(e),
        };
        inner.count_operation();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
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
        let mut inner = match self.live() {
            Ok(inner) => inner,
            Err(e) => return reply.error(e),
        };
        let result = inner
            .model
            .link(ino.0, newparent.0, newname)
            .and_then(|()| Ok(attr(ino.0, inner.model.inode(ino.0)?)));
        inner.count_operation();
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let inner = match self.live() {
            Ok(inner) => inner,
            Err(e) => return reply.error(e),
        };
        match inner.model.inode(ino.0) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
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
        let inner = match self.live() {
            Ok(inner) => inner,
            Err(e) => return reply.error(e),
        };
        match inner.model.read(ino.0, offset, size) {
            Ok(bytes) => reply.data(bytes),
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
        let mut inner = match self.live() {
            Ok(inner) => inner,
            Err(e) => return reply.error(e),
        };
        inner.counters.writes += 1;
        let len = data.len() as u64;
        let full = inner
            .faults
            .enospc_at_bytes
            .is_some_and(|limit| inner.counters.bytes_written + len > limit);
        let result = if full {
            Err(libc::ENOSPC)
        } else {
            inner.model.write(ino.0, offset, data)
        };
        if result.is_ok() {
            inner.counters.bytes_written += len;
        }
        inner.count_operation();
        match result {
            // A FUSE write answers with a 32-bit count; the kernel never sends more than max_write.
            Ok(()) => reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let mut inner = self.shared.lock();
        inner.counters.flush += 1;
        if inner.fired.is_some() {
            return reply.error(Errno::EIO);
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut inner = self.shared.lock();
        inner.counters.fsync += 1;
        if datasync {
            inner.counters.fdatasync += 1;
        }
        if inner.fired.is_some() {
            return reply.error(Errno::EIO);
        }
        let result = if inner.faults.eio_at_fsync == Some(inner.counters.fsync) {
            inner.model.fsync_failed(ino.0);
            Err(libc::EIO)
        } else {
            inner.model.fsync(ino.0)
        };
        inner.count_operation();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut inner = self.shared.lock();
        inner.counters.fsyncdir += 1;
        if inner.fired.is_some() {
            return reply.error(Errno::EIO);
        }
        let result = if inner.faults.eio_at_fsyncdir == Some(inner.counters.fsyncdir) {
            Err(libc::EIO)
        } else {
            inner.model.fsyncdir(ino.0)
        };
        inner.count_operation();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let inner = match self.live() {
            Ok(inner) => inner,
            Err(e) => return reply.error(e),
        };
        match inner.model.inode(ino.0).map(Inode::kind) {
            Ok(Kind::Dir) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Ok(Kind::File) => reply.error(Errno::ENOTDIR),
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
        let inner = match self.live() {
            Ok(inner) => inner,
            Err(e) => return reply.error(e),
        };
        let entries = match inner.model.entries(ino.0) {
            Ok(entries) => entries,
            Err(e) => return reply.error(errno(e)),
        };
        let dots = [
            (OsStr::new(".").to_owned(), ino.0, Kind::Dir),
            // The parent's number does not matter to the kernel, which resolves ".." itself.
            (OsStr::new("..").to_owned(), ino.0, Kind::Dir),
        ];
        let all = dots.into_iter().chain(entries);
        for (i, (name, child, kind)) in all.enumerate().skip(offset as usize) {
            let kind = match kind {
                Kind::File => FileType::RegularFile,
                Kind::Dir => FileType::Directory,
            };
            if reply.add(INodeNo(child), i as u64 + 1, kind, &name) {
                break;
            }
        }
        reply.ok();
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
        match self.create_node(req, parent, name, Kind::File, mode, umask) {
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }
}
