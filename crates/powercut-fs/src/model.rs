//! The in-memory filesystem: a volatile layer (what the kernel was told) and a durable layer (what
//! survives a power cut), for file data and for directory entries alike.
//!
//! Every change lands in the volatile layer at once and is also appended to a log of pending
//! changes. `fsync` moves one file's pending data changes into its durable layer; `fsyncdir`
//! moves one directory's pending entry changes. A rename is one log record that touches two
//! directories: it becomes durable only once both were synced after it, so after a cut it has
//! happened wholly or not at all. A cut resolves the log according to a [`CutMode`] and then makes
//! the durable layer the only one.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::time::SystemTime;

use crate::rng::SplitMix64;

/// An inode number; 1 is the root directory, as FUSE expects.
pub(crate) type Ino = u64;

/// The root directory's inode number.
pub(crate) const ROOT: Ino = 1;

/// The granularity of a torn write: a disk persists whole sectors or nothing of each.
pub const SECTOR: u64 = 512;

/// How a power cut treats what was written but not yet made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CutMode {
    /// Every unsynced change is lost: the strictest filesystem a correct program must survive.
    DropUnsynced,
    /// Each unsynced change (a write, a truncate, a directory entry change, a whole rename)
    /// survives or not by a coin flip drawn from `seed`; survivors are applied in order. Entry
    /// changes survive independently even within one directory (a later rename without an
    /// earlier create), which is weaker than a journaling filesystem and what POSIX allows.
    RandomSubset {
        /// Fixes which changes survive.
        seed: u64,
    },
    /// Like [`CutMode::RandomSubset`], but each unsynced write is torn into 512-byte sectors that
    /// survive independently, and a growing write may extend the file's size with zeros where its
    /// sectors were lost (the zero-filled file ext4 users find after a crash).
    TornWrites {
        /// Fixes which sectors and changes survive.
        seed: u64,
    },
}

/// What kind of inode this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
}

#[derive(Debug, Clone)]
enum Body {
    File {
        volatile: Vec<u8>,
        durable: Vec<u8>,
    },
    Dir {
        volatile: BTreeMap<OsString, Ino>,
        durable: BTreeMap<OsString, Ino>,
    },
}

/// One inode with both layers of its content.
#[derive(Debug, Clone)]
pub(crate) struct Inode {
    body: Body,
    pub(crate) perm: u16,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) mtime: SystemTime,
    /// Links in the volatile layer (recomputed from the durable tree after a cut).
    pub(crate) nlink: u32,
}

impl Inode {
    pub(crate) fn kind(&self) -> Kind {
        match self.body {
            Body::File { .. } => Kind::File,
            Body::Dir { .. } => Kind::Dir,
        }
    }

    /// The size the kernel sees.
    pub(crate) fn size(&self) -> u64 {
        match &self.body {
            Body::File { volatile, .. } => volatile.len() as u64,
            Body::Dir { volatile, .. } => volatile.len() as u64,
        }
    }
}

#[derive(Debug, Clone)]
enum DataOp {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

/// A change to directory entries, with the inode numbers it saw, so it can be replayed onto the
/// durable layer on its own.
#[derive(Debug, Clone)]
enum EntryOp {
    Insert {
        dir: Ino,
        name: OsString,
        ino: Ino,
    },
    Remove {
        dir: Ino,
        name: OsString,
        ino: Ino,
    },
    Rename {
        from_dir: Ino,
        from_name: OsString,
        to_dir: Ino,
        to_name: OsString,
        ino: Ino,
    },
    Exchange {
        a_dir: Ino,
        a_name: OsString,
        a_ino: Ino,
        b_dir: Ino,
        b_name: OsString,
        b_ino: Ino,
    },
}

impl EntryOp {
    fn dirs(&self) -> [Ino; 2] {
        match self {
            EntryOp::Insert { dir, .. } | EntryOp::Remove { dir, .. } => [*dir, *dir],
            EntryOp::Rename {
                from_dir, to_dir, ..
            } => [*from_dir, *to_dir],
            EntryOp::Exchange { a_dir, b_dir, .. } => [*a_dir, *b_dir],
        }
    }
}

#[derive(Debug, Clone)]
enum Pending {
    Data {
        ino: Ino,
        op: DataOp,
    },
    Entry {
        op: EntryOp,
        /// Whether each of `op.dirs()` was fsynced after the change.
        synced: [bool; 2],
    },
}

/// How `rename` treats an existing target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenameMode {
    Replace,
    NoReplace,
    Exchange,
}

/// What a cut did to the pending log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CutOutcome {
    pub(crate) pending: usize,
    pub(crate) kept: usize,
}

/// The whole filesystem.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    inodes: HashMap<Ino, Inode>,
    next_ino: Ino,
    pending: Vec<Pending>,
}

type Errno = i32;

impl Model {
    /// An empty filesystem whose root is already durable.
    pub(crate) fn new() -> Self {
        let mut inodes = HashMap::new();
        inodes.insert(ROOT, Self::new_inode(Kind::Dir, 0o755, 0, 0));
        Model {
            inodes,
            next_ino: ROOT + 1,
            pending: Vec::new(),
        }
    }

    fn new_inode(kind: Kind, perm: u16, uid: u32, gid: u32) -> Inode {
        let body = match kind {
            Kind::File => Body::File {
                volatile: Vec::new(),
                durable: Vec::new(),
            },
            Kind::Dir => Body::Dir {
                volatile: BTreeMap::new(),
                durable: BTreeMap::new(),
            },
        };
        Inode {
            body,
            perm,
            uid,
            gid,
            mtime: SystemTime::now(),
            nlink: if kind == Kind::Dir { 2 } else { 1 },
        }
    }

    pub(crate) fn inode(&self, ino: Ino) -> Result<&Inode, Errno> {
        self.inodes.get(&ino).ok_or(libc::ENOENT)
    }

    fn inode_mut(&mut self, ino: Ino) -> Result<&mut Inode, Errno> {
        self.inodes.get_mut(&ino).ok_or(libc::ENOENT)
    }

    fn dir(&self, ino: Ino) -> Result<&BTreeMap<OsString, Ino>, Errno> {
        match &self.inode(ino)?.body {
            Body::Dir { volatile, .. } => Ok(volatile),
            Body::File { .. } => Err(libc::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> Result<&mut BTreeMap<OsString, Ino>, Errno> {
        match &mut self.inode_mut(ino)?.body {
            Body::Dir { volatile, .. } => Ok(volatile),
            Body::File { .. } => Err(libc::ENOTDIR),
        }
    }

    /// The volatile entries of a directory, in name order.
    pub(crate) fn entries(&self, dir: Ino) -> Result<Vec<(OsString, Ino, Kind)>, Errno> {
        let entries = self.dir(dir)?;
        Ok(entries
            .iter()
            .map(|(name, ino)| {
                let kind = self.inodes.get(ino).map_or(Kind::File, Inode::kind);
                (name.clone(), *ino, kind)
            })
            .collect())
    }

    pub(crate) fn lookup(&self, dir: Ino, name: &OsStr) -> Result<Ino, Errno> {
        self.dir(dir)?.get(name).copied().ok_or(libc::ENOENT)
    }

    /// Creates a file or directory named `name` in `dir` (EEXIST if the name is taken).
    pub(crate) fn create(
        &mut self,
        dir: Ino,
        name: &OsStr,
        kind: Kind,
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Result<Ino, Errno> {
        if self.dir(dir)?.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes
            .insert(ino, Self::new_inode(kind, perm, uid, gid));
        self.dir_mut(dir)?.insert(name.to_owned(), ino);
        self.touch(dir);
        self.log_entry(EntryOp::Insert {
            dir,
            name: name.to_owned(),
            ino,
        });
        Ok(ino)
    }

    /// Adds the name `name` in `dir` for the existing file `ino`.
    pub(crate) fn link(&mut self, ino: Ino, dir: Ino, name: &OsStr) -> Result<(), Errno> {
        if self.inode(ino)?.kind() == Kind::Dir {
            return Err(libc::EPERM);
        }
        if self.dir(dir)?.contains_key(name) {
            return Err(libc::EEXIST);
        }
        self.dir_mut(dir)?.insert(name.to_owned(), ino);
        self.inode_mut(ino)?.nlink += 1;
        self.touch(dir);
        self.log_entry(EntryOp::Insert {
            dir,
            name: name.to_owned(),
            ino,
        });
        Ok(())
    }

    /// Removes a name: a non-directory for `unlink`, an empty directory for `rmdir`.
    pub(crate) fn remove(&mut self, dir: Ino, name: &OsStr, want: Kind) -> Result<(), Errno> {
        let ino = self.lookup(dir, name)?;
        let inode = self.inode(ino)?;
        match (want, inode.kind()) {
            (Kind::File, Kind::Dir) => return Err(libc::EISDIR),
            (Kind::Dir, Kind::File) => return Err(libc::ENOTDIR),
            (Kind::Dir, Kind::Dir) if inode.size() > 0 => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        self.dir_mut(dir)?.remove(name);
        let inode = self.inode_mut(ino)?;
        inode.nlink = inode.nlink.saturating_sub(1);
        self.touch(dir);
        self.log_entry(EntryOp::Remove {
            dir,
            name: name.to_owned(),
            ino,
        });
        Ok(())
    }

    /// `renameat2` with the given mode, with the errors Linux gives.
    pub(crate) fn rename(
        &mut self,
        from_dir: Ino,
        from_name: &OsStr,
        to_dir: Ino,
        to_name: &OsStr,
        mode: RenameMode,
    ) -> Result<(), Errno> {
        let src = self.lookup(from_dir, from_name)?;
        let dst = match self.lookup(to_dir, to_name) {
            Ok(ino) => Some(ino),
            Err(libc::ENOENT) => None,
            Err(e) => return Err(e),
        };
        let src_kind = self.inode(src)?.kind();
        match (mode, dst) {
            (RenameMode::NoReplace, Some(_)) => return Err(libc::EEXIST),
            (RenameMode::Exchange, None) => return Err(libc::ENOENT),
            (RenameMode::Exchange, Some(dst)) => {
                self.dir_mut(from_dir)?.insert(from_name.to_owned(), dst);
                self.dir_mut(to_dir)?.insert(to_name.to_owned(), src);
                self.touch(from_dir);
                self.touch(to_dir);
                self.log_entry(EntryOp::Exchange {
                    a_dir: from_dir,
                    a_name: from_name.to_owned(),
                    a_ino: src,
                    b_dir: to_dir,
                    b_name: to_name.to_owned(),
                    b_ino: dst,
                });
                return Ok(());
            }
            (_, Some(dst)) if dst == src => return Ok(()),
            (_, Some(dst)) => {
                let dst_inode = self.inode(dst)?;
                match (src_kind, dst_inode.kind()) {
                    (Kind::Dir, Kind::File) => return Err(libc::ENOTDIR),
                    (Kind::File, Kind::Dir) => return Err(libc::EISDIR),
                    (Kind::Dir, Kind::Dir) if dst_inode.size() > 0 => {
                        return Err(libc::ENOTEMPTY);
                    }
                    _ => {}
                }
                let dst_inode = self.inode_mut(dst)?;
                dst_inode.nlink = dst_inode.nlink.saturating_sub(1);
            }
            (_, None) => {}
        }
        self.dir_mut(from_dir)?.remove(from_name);
        self.dir_mut(to_dir)?.insert(to_name.to_owned(), src);
        self.touch(from_dir);
        self.touch(to_dir);
        self.log_entry(EntryOp::Rename {
            from_dir,
            from_name: from_name.to_owned(),
            to_dir,
            to_name: to_name.to_owned(),
            ino: src,
        });
        Ok(())
    }

    pub(crate) fn read(&self, ino: Ino, offset: u64, size: u32) -> Result<&[u8], Errno> {
        match &self.inode(ino)?.body {
            Body::File { volatile, .. } => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(volatile.len());
                let end = start.saturating_add(size as usize).min(volatile.len());
                Ok(&volatile[start..end])
            }
            Body::Dir { .. } => Err(libc::EISDIR),
        }
    }

    pub(crate) fn write(&mut self, ino: Ino, offset: u64, bytes: &[u8]) -> Result<(), Errno> {
        let inode = self.inode_mut(ino)?;
        match &mut inode.body {
            Body::File { volatile, .. } => write_at(volatile, offset, bytes)?,
            Body::Dir { .. } => return Err(libc::EISDIR),
        }
        inode.mtime = SystemTime::now();
        self.pending.push(Pending::Data {
            ino,
            op: DataOp::Write {
                offset,
                bytes: bytes.to_vec(),
            },
        });
        Ok(())
    }

    pub(crate) fn set_len(&mut self, ino: Ino, len: u64) -> Result<(), Errno> {
        let inode = self.inode_mut(ino)?;
        match &mut inode.body {
            Body::File { volatile, .. } => {
                volatile.resize(usize::try_from(len).map_err(|_| libc::EFBIG)?, 0);
            }
            Body::Dir { .. } => return Err(libc::EISDIR),
        }
        inode.mtime = SystemTime::now();
        self.pending.push(Pending::Data {
            ino,
            op: DataOp::SetLen(len),
        });
        Ok(())
    }

    pub(crate) fn set_perm(&mut self, ino: Ino, perm: u16) -> Result<(), Errno> {
        self.inode_mut(ino)?.perm = perm;
        Ok(())
    }

    /// `utimensat`: sets the modification time (timestamps are never made durable, so this is
    /// no change a cut can lose, and it is not counted as an operation).
    pub(crate) fn set_mtime(&mut self, ino: Ino, mtime: SystemTime) -> Result<(), Errno> {
        self.inode_mut(ino)?.mtime = mtime;
        Ok(())
    }

    /// `fsync`: the file's pending data changes become durable, in order.
    pub(crate) fn fsync(&mut self, ino: Ino) -> Result<(), Errno> {
        self.inode(ino)?;
        let mut ops = Vec::new();
        self.pending.retain(|p| match p {
            Pending::Data { ino: i, op } if *i == ino => {
                ops.push(op.clone());
                false
            }
            _ => true,
        });
        for op in &ops {
            self.apply_data(ino, op, None);
        }
        Ok(())
    }

    /// A failed `fsync`: like the kernel after a writeback error, the pending data is dropped
    /// (never to become durable) while the volatile layer still shows it, so a retried fsync
    /// "succeeds" without the data (PostgreSQL's fsyncgate).
    pub(crate) fn fsync_failed(&mut self, ino: Ino) {
        self.pending
            .retain(|p| !matches!(p, Pending::Data { ino: i, .. } if *i == ino));
    }

    /// `fsyncdir`: the directory's pending entry changes become durable, in order. A change that
    /// also touches another directory (a rename) waits until that one was synced too, and a
    /// waiting change holds back later changes of its directories, so each directory's entries
    /// become durable in the order they were made.
    pub(crate) fn fsyncdir(&mut self, dir: Ino) -> Result<(), Errno> {
        self.dir(dir)?;
        for p in &mut self.pending {
            if let Pending::Entry { op, synced } = p {
                for (i, d) in op.dirs().iter().enumerate() {
                    if *d == dir {
                        synced[i] = true;
                    }
                }
            }
        }
        let mut blocked: HashSet<Ino> = HashSet::new();
        let pending = std::mem::take(&mut self.pending);
        for p in pending {
            match p {
                Pending::Entry { op, synced }
                    if synced.iter().all(|s| *s)
                        && op.dirs().iter().all(|d| !blocked.contains(d)) =>
                {
                    self.apply_entry(&op);
                }
                Pending::Entry { op, synced } => {
                    blocked.extend(op.dirs());
                    self.pending.push(Pending::Entry { op, synced });
                }
                data @ Pending::Data { .. } => self.pending.push(data),
            }
        }
        Ok(())
    }

    /// How many changes are not yet durable.
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// A power cut: resolves the pending log by `mode`, then the durable layer becomes the only
    /// one; inodes no durable name reaches are freed and link counts recomputed.
    pub(crate) fn power_cut(&mut self, mode: CutMode) -> CutOutcome {
        let pending = std::mem::take(&mut self.pending);
        let mut outcome = CutOutcome {
            pending: pending.len(),
            kept: 0,
        };
        let (mut rng, torn) = match mode {
            CutMode::DropUnsynced => (None, false),
            CutMode::RandomSubset { seed } => (Some(SplitMix64::new(seed)), false),
            CutMode::TornWrites { seed } => (Some(SplitMix64::new(seed)), true),
        };
        if let Some(rng) = rng.as_mut() {
            for p in pending {
                match p {
                    Pending::Data {
                        ino,
                        op: DataOp::Write { offset, bytes },
                    } if torn => {
                        outcome.kept += 1;
                        self.apply_data(ino, &DataOp::Write { offset, bytes }, Some(rng));
                    }
                    Pending::Data { ino, op } => {
                        if rng.coin() {
                            outcome.kept += 1;
                            self.apply_data(ino, &op, None);
                        }
                    }
                    Pending::Entry { op, .. } => {
                        if rng.coin() {
                            outcome.kept += 1;
                            self.apply_entry(&op);
                        }
                    }
                }
            }
        }
        self.collapse_to_durable();
        outcome
    }

    /// Makes the durable layer the volatile one, frees unreachable inodes, recounts links.
    fn collapse_to_durable(&mut self) {
        let mut links: HashMap<Ino, u32> = HashMap::new();
        let mut stack = vec![ROOT];
        links.insert(ROOT, 1);
        while let Some(dir) = stack.pop() {
            let Some(Inode {
                body: Body::Dir { durable, .. },
                ..
            }) = self.inodes.get(&dir)
            else {
                continue;
            };
            for ino in durable.values() {
                let seen = links.entry(*ino).or_insert(0);
                *seen += 1;
                let is_dir = matches!(self.inodes.get(ino).map(Inode::kind), Some(Kind::Dir));
                // A directory is walked once even if a lenient replay left two names for it.
                if *seen == 1 && is_dir {
                    stack.push(*ino);
                }
            }
        }
        self.inodes.retain(|ino, _| links.contains_key(ino));
        for (ino, inode) in &mut self.inodes {
            match &mut inode.body {
                Body::File { volatile, durable } => {
                    volatile.clone_from(durable);
                    inode.nlink = links.get(ino).copied().unwrap_or(1);
                }
                Body::Dir { volatile, durable } => {
                    // Entries naming freed inodes cannot survive (the lenient replay can only
                    // name inodes that exist, but stay safe).
                    volatile.clone_from(durable);
                    inode.nlink = 2;
                }
            }
        }
        let live: HashSet<Ino> = self.inodes.keys().copied().collect();
        for inode in self.inodes.values_mut() {
            if let Body::Dir { volatile, durable } = &mut inode.body {
                volatile.retain(|_, ino| live.contains(ino));
                durable.retain(|_, ino| live.contains(ino));
            }
        }
    }

    fn touch(&mut self, ino: Ino) {
        if let Some(inode) = self.inodes.get_mut(&ino) {
            inode.mtime = SystemTime::now();
        }
    }

    fn log_entry(&mut self, op: EntryOp) {
        self.pending.push(Pending::Entry {
            op,
            synced: [false, false],
        });
    }

    /// Replays one data change onto a file's durable layer; with `torn`, each 512-byte sector of a
    /// write survives by a coin flip and a growing write may extend the size with zeros.
    fn apply_data(&mut self, ino: Ino, op: &DataOp, torn: Option<&mut SplitMix64>) {
        let Some(Inode {
            body: Body::File { durable, .. },
            ..
        }) = self.inodes.get_mut(&ino)
        else {
            return;
        };
        match (op, torn) {
            (DataOp::Write { offset, bytes }, None) => {
                // The same write already succeeded on the volatile layer, so it cannot fail here.
                let _ = write_at(durable, *offset, bytes);
            }
            (DataOp::Write { offset, bytes }, Some(rng)) => {
                let end = offset + bytes.len() as u64;
                let mut start = *offset;
                while start < end {
                    let sector_end = ((start / SECTOR + 1) * SECTOR).min(end);
                    if rng.coin() {
                        let from = (start - offset) as usize;
                        let to = (sector_end - offset) as usize;
                        let _ = write_at(durable, start, &bytes[from..to]);
                    }
                    start = sector_end;
                }
                if rng.coin() && (durable.len() as u64) < end {
                    durable.resize(end as usize, 0);
                }
            }
            (DataOp::SetLen(len), _) => durable.resize(*len as usize, 0),
        }
    }

    /// Replays one entry change onto the durable layer, leniently: a change whose earlier
    /// context was lost in a cut still does what it can (a rename still names its inode).
    fn apply_entry(&mut self, op: &EntryOp) {
        let inodes = &mut self.inodes;
        match op {
            EntryOp::Insert { dir, name, ino } => {
                if let Some(d) = durable_entries(inodes, *dir) {
                    d.insert(name.clone(), *ino);
                }
            }
            EntryOp::Remove { dir, name, ino } => {
                if let Some(d) = durable_entries(inodes, *dir) {
                    if d.get(name) == Some(ino) {
                        d.remove(name);
                    }
                }
            }
            EntryOp::Rename {
                from_dir,
                from_name,
                to_dir,
                to_name,
                ino,
            } => {
                if let Some(d) = durable_entries(inodes, *from_dir) {
                    if d.get(from_name) == Some(ino) {
                        d.remove(from_name);
                    }
                }
                if let Some(d) = durable_entries(inodes, *to_dir) {
                    d.insert(to_name.clone(), *ino);
                }
            }
            EntryOp::Exchange {
                a_dir,
                a_name,
                a_ino,
                b_dir,
                b_name,
                b_ino,
            } => {
                if let Some(d) = durable_entries(inodes, *a_dir) {
                    d.insert(a_name.clone(), *b_ino);
                }
                if let Some(d) = durable_entries(inodes, *b_dir) {
                    d.insert(b_name.clone(), *a_ino);
                }
            }
        }
    }
}

fn durable_entries(
    inodes: &mut HashMap<Ino, Inode>,
    dir: Ino,
) -> Option<&mut BTreeMap<OsString, Ino>> {
    match inodes.get_mut(&dir) {
        Some(Inode {
            body: Body::Dir { durable, .. },
            ..
        }) => Some(durable),
        _ => None,
    }
}

fn write_at(buf: &mut Vec<u8>, offset: u64, bytes: &[u8]) -> Result<(), Errno> {
    let start = usize::try_from(offset).map_err(|_| libc::EFBIG)?;
    let end = start.checked_add(bytes.len()).ok_or(libc::EFBIG)?;
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[start..end].copy_from_slice(bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_bytes(m: &Model, dir: Ino, name: &str) -> Option<Vec<u8>> {
        let ino = m.lookup(dir, OsStr::new(name)).ok()?;
        Some(m.read(ino, 0, u32::MAX).ok()?.to_vec())
    }

    fn put(m: &mut Model, name: &str, bytes: &[u8], fsync_file: bool, fsync_dir: bool) {
        let tmp = format!("{name}.tmp");
        let ino = m
            .create(ROOT, OsStr::new(&tmp), Kind::File, 0o644, 0, 0)
            .expect("create temp");
        m.write(ino, 0, bytes).expect("write temp");
        if fsync_file {
            m.fsync(ino).expect("fsync temp");
        }
        m.rename(
            ROOT,
            OsStr::new(&tmp),
            ROOT,
            OsStr::new(name),
            RenameMode::Replace,
        )
        .expect("rename into place");
        if fsync_dir {
            m.fsyncdir(ROOT).expect("fsync dir");
        }
    }

    #[test]
    fn a_correct_put_survives_a_cut_and_unsynced_ones_do_not() {
        let mut m = Model::new();
        put(&mut m, "good", b"good bytes", true, true);
        put(&mut m, "no-file-sync", b"lost bytes", false, true);
        put(&mut m, "no-dir-sync", b"named late", true, false);
        m.power_cut(CutMode::DropUnsynced);
        assert_eq!(
            file_bytes(&m, ROOT, "good").as_deref(),
            Some(&b"good bytes"[..]),
            "a put with both fsyncs must survive"
        );
        assert_eq!(
            file_bytes(&m, ROOT, "no-file-sync").as_deref(),
            Some(&b""[..]),
            "without the file fsync the name survives but the data is lost"
        );
        assert_eq!(
            file_bytes(&m, ROOT, "no-dir-sync"),
            None,
            "without the directory fsync the new name is lost"
        );
        assert_eq!(m.pending_len(), 0, "a cut leaves nothing pending");
    }

    #[test]
    fn a_rename_across_directories_needs_both_directories_synced() {
        let mut m = Model::new();
        let a = m
            .create(ROOT, OsStr::new("a"), Kind::Dir, 0o755, 0, 0)
            .expect("mkdir a");
        let b = m
            .create(ROOT, OsStr::new("b"), Kind::Dir, 0o755, 0, 0)
            .expect("mkdir b");
        let f = m
            .create(a, OsStr::new("f"), Kind::File, 0o644, 0, 0)
            .expect("create a/f");
        m.write(f, 0, b"x").expect("write");
        m.fsync(f).expect("fsync");
        m.fsyncdir(a).expect("fsyncdir a");
        m.fsyncdir(ROOT).expect("fsyncdir root");
        m.rename(a, OsStr::new("f"), b, OsStr::new("g"), RenameMode::Replace)
            .expect("rename a/f to b/g");
        m.fsyncdir(b).expect("fsyncdir b");
        let mut half = m.clone();
        half.power_cut(CutMode::DropUnsynced);
        assert!(
            file_bytes(&half, a, "f").is_some() && file_bytes(&half, b, "g").is_none(),
            "with only the target synced the rename did not happen at all"
        );
        m.fsyncdir(a).expect("fsyncdir a");
        m.power_cut(CutMode::DropUnsynced);
        assert!(
            file_bytes(&m, a, "f").is_none() && file_bytes(&m, b, "g").is_some(),
            "with both synced the rename happened wholly"
        );
    }

    #[test]
    fn rename_flags_and_errors_match_linux() {
        let mut m = Model::new();
        let d = m
            .create(ROOT, OsStr::new("d"), Kind::Dir, 0o755, 0, 0)
            .expect("mkdir");
        m.create(d, OsStr::new("x"), Kind::File, 0o644, 0, 0)
            .expect("create d/x");
        m.create(ROOT, OsStr::new("f"), Kind::File, 0o644, 0, 0)
            .expect("create f");
        let n = OsStr::new;
        assert_eq!(
            m.rename(ROOT, n("f"), ROOT, n("d"), RenameMode::Replace),
            Err(libc::EISDIR),
            "file over directory"
        );
        assert_eq!(
            m.rename(ROOT, n("d"), ROOT, n("f"), RenameMode::Replace),
            Err(libc::ENOTDIR),
            "directory over file"
        );
        assert_eq!(
            m.rename(ROOT, n("f"), ROOT, n("d"), RenameMode::NoReplace),
            Err(libc::EEXIST),
            "noreplace onto an existing name"
        );
        assert_eq!(
            m.rename(ROOT, n("f"), ROOT, n("absent"), RenameMode::Exchange),
            Err(libc::ENOENT),
            "exchange with a missing name"
        );
        assert_eq!(m.remove(ROOT, n("d"), Kind::Dir), Err(libc::ENOTEMPTY));
        assert_eq!(m.remove(ROOT, n("d"), Kind::File), Err(libc::EISDIR));
        assert_eq!(m.remove(ROOT, n("f"), Kind::Dir), Err(libc::ENOTDIR));
        assert_eq!(
            m.create(ROOT, n("f"), Kind::File, 0o644, 0, 0),
            Err(libc::EEXIST)
        );
    }

    #[test]
    fn torn_writes_lose_sectors_but_never_invent_bytes() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8 + 1).collect();
        let mut saw_torn = false;
        for seed in 0..32 {
            let mut m = Model::new();
            let f = m
                .create(ROOT, OsStr::new("f"), Kind::File, 0o644, 0, 0)
                .expect("create");
            m.fsyncdir(ROOT).expect("fsyncdir");
            m.write(f, 0, &data).expect("write");
            m.power_cut(CutMode::TornWrites { seed });
            let got = file_bytes(&m, ROOT, "f").expect("the synced name survives");
            for (i, chunk) in got.chunks(SECTOR as usize).enumerate() {
                let want = &data[i * SECTOR as usize..][..chunk.len()];
                assert!(
                    chunk == want || chunk.iter().all(|b| *b == 0),
                    "seed {seed}: sector {i} is either written or zeros"
                );
            }
            saw_torn |= !got.is_empty() && got != data;
        }
        assert!(saw_torn, "some seed must tear the write");
    }

    #[test]
    fn a_failed_fsync_drops_the_data_for_good() {
        let mut m = Model::new();
        let f = m
            .create(ROOT, OsStr::new("f"), Kind::File, 0o644, 0, 0)
            .expect("create");
        m.fsyncdir(ROOT).expect("fsyncdir");
        m.write(f, 0, b"data").expect("write");
        m.fsync_failed(f);
        m.fsync(f).expect("the retried fsync succeeds");
        m.power_cut(CutMode::DropUnsynced);
        assert_eq!(
            file_bytes(&m, ROOT, "f").as_deref(),
            Some(&b""[..]),
            "a retry after a failed fsync does not bring the data back"
        );
    }
}
