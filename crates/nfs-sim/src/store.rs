//! The server: one in-memory tree every host's mount reads and writes, and its lock manager.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::time::SystemTime;

use fuser::ReplyEmpty;

pub(crate) type Ino = u64;
pub(crate) const ROOT: Ino = 1;

#[derive(Debug)]
pub(crate) enum Body {
    File(Vec<u8>),
    Dir(BTreeMap<OsString, Ino>),
}

#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) body: Body,
    pub(crate) perm: u16,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) atime: SystemTime,
    pub(crate) mtime: SystemTime,
    pub(crate) ctime: SystemTime,
    pub(crate) nlink: u32,
    /// Open handles per host: a file unlinked while open stays readable on the hosts that hold
    /// it (NFS's silly rename); every other host gets ESTALE.
    pub(crate) open_by: HashMap<usize, u32>,
}

impl Node {
    pub(crate) fn is_dir(&self) -> bool {
        matches!(self.body, Body::Dir(_))
    }
    pub(crate) fn size(&self) -> u64 {
        match &self.body {
            Body::File(bytes) => bytes.len() as u64,
            Body::Dir(entries) => entries.len() as u64,
        }
    }
}

/// The permission bits and owner of a new node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owner {
    pub(crate) perm: u16,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// A byte-range lock held on the server, or asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lock {
    pub(crate) host: usize,
    pub(crate) owner: u64,
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// `F_RDLCK` or `F_WRLCK`.
    pub(crate) typ: i32,
    pub(crate) pid: u32,
}

impl Lock {
    fn conflicts(&self, other: &Lock) -> bool {
        let same_owner = self.host == other.host && self.owner == other.owner;
        let overlap = self.start <= other.end && other.start <= self.end;
        !same_owner && overlap && (self.typ == libc::F_WRLCK || other.typ == libc::F_WRLCK)
    }
}

pub(crate) struct Waiter {
    pub(crate) ino: Ino,
    pub(crate) lock: Lock,
    pub(crate) reply: ReplyEmpty,
}

/// The server's state.
pub(crate) struct Store {
    pub(crate) nodes: HashMap<Ino, Node>,
    next: Ino,
    pub(crate) locks: HashMap<Ino, Vec<Lock>>,
    pub(crate) waiters: Vec<Waiter>,
    cookies: HashMap<(Ino, OsString), u64>,
    next_cookie: u64,
}

/// Readdir cookies 1 and 2 are `.` and `..`; names get larger ones.
pub(crate) const FIRST_COOKIE: u64 = 3;

impl Store {
    pub(crate) fn new() -> Store {
        let now = SystemTime::now();
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                body: Body::Dir(BTreeMap::new()),
                perm: 0o755,
                uid: 0,
                gid: 0,
                atime: now,
                mtime: now,
                ctime: now,
                nlink: 2,
                open_by: HashMap::new(),
            },
        );
        Store {
            nodes,
            next: ROOT + 1,
            locks: HashMap::new(),
            waiters: Vec::new(),
            cookies: HashMap::new(),
            next_cookie: FIRST_COOKIE,
        }
    }

    /// The node `ino` as `host` may see it: ESTALE once it is gone from the server, or unlinked
    /// and not held open by that host.
    pub(crate) fn node(&self, host: usize, ino: Ino) -> Result<&Node, i32> {
        match self.nodes.get(&ino) {
            Some(node) if node.nlink > 0 || node.open_by.get(&host).is_some_and(|n| *n > 0) => {
                Ok(node)
            }
            _ => Err(libc::ESTALE),
        }
    }

    pub(crate) fn node_mut(&mut self, host: usize, ino: Ino) -> Result<&mut Node, i32> {
        self.node(host, ino)?;
        self.nodes.get_mut(&ino).ok_or(libc::ESTALE)
    }

    fn dir(&self, host: usize, ino: Ino) -> Result<&BTreeMap<OsString, Ino>, i32> {
        match &self.node(host, ino)?.body {
            Body::Dir(entries) => Ok(entries),
            Body::File(_) => Err(libc::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, host: usize, ino: Ino) -> Result<&mut BTreeMap<OsString, Ino>, i32> {
        let now = SystemTime::now();
        let node = self.node_mut(host, ino)?;
        node.mtime = now;
        node.ctime = now;
        match &mut node.body {
            Body::Dir(entries) => Ok(entries),
            Body::File(_) => Err(libc::ENOTDIR),
        }
    }

    pub(crate) fn lookup(&self, host: usize, parent: Ino, name: &OsStr) -> Result<Ino, i32> {
        self.dir(host, parent)?
            .get(name)
            .copied()
            .ok_or(libc::ENOENT)
    }

    /// A directory's entries with their readdir cookies, in cookie order: a cookie is given once,
    /// when the name is linked in, so a listing that resumes after a cookie neither skips nor
    /// repeats names while others are removed (as NFS cookies; positions would shift).
    pub(crate) fn entries(
        &self,
        host: usize,
        dir: Ino,
    ) -> Result<Vec<(OsString, Ino, bool, u64)>, i32> {
        let mut listed: Vec<(OsString, Ino, bool, u64)> = self
            .dir(host, dir)?
            .iter()
            .map(|(name, ino)| {
                let is_dir = self.nodes.get(ino).is_some_and(Node::is_dir);
                let cookie = self
                    .cookies
                    .get(&(dir, name.clone()))
                    .copied()
                    .unwrap_or(FIRST_COOKIE);
                (name.clone(), *ino, is_dir, cookie)
            })
            .collect();
        listed.sort_by_key(|entry| entry.3);
        Ok(listed)
    }

    fn insert_entry(&mut self, host: usize, dir: Ino, name: &OsStr, ino: Ino) -> Result<(), i32> {
        self.dir_mut(host, dir)?.insert(name.to_owned(), ino);
        self.next_cookie += 1;
        self.cookies
            .insert((dir, name.to_owned()), self.next_cookie);
        Ok(())
    }

    fn remove_entry(&mut self, host: usize, dir: Ino, name: &OsStr) -> Result<(), i32> {
        self.dir_mut(host, dir)?.remove(name);
        self.cookies.remove(&(dir, name.to_owned()));
        Ok(())
    }

    pub(crate) fn create(
        &mut self,
        host: usize,
        parent: Ino,
        name: &OsStr,
        dir: bool,
        owner: Owner,
    ) -> Result<Ino, i32> {
        if self.dir(host, parent)?.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next;
        self.next += 1;
        let now = SystemTime::now();
        self.nodes.insert(
            ino,
            Node {
                body: if dir {
                    Body::Dir(BTreeMap::new())
                } else {
                    Body::File(Vec::new())
                },
                perm: owner.perm,
                uid: owner.uid,
                gid: owner.gid,
                atime: now,
                mtime: now,
                ctime: now,
                nlink: if dir { 2 } else { 1 },
                open_by: HashMap::new(),
            },
        );
        self.insert_entry(host, parent, name, ino)?;
        Ok(ino)
    }

    fn unref(&mut self, ino: Ino) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.nlink = node.nlink.saturating_sub(if node.is_dir() { 2 } else { 1 });
            node.ctime = SystemTime::now();
            if node.nlink == 0 && node.open_by.values().all(|n| *n == 0) {
                self.nodes.remove(&ino);
                self.locks.remove(&ino);
            }
        }
    }

    pub(crate) fn remove(
        &mut self,
        host: usize,
        parent: Ino,
        name: &OsStr,
        dir: bool,
    ) -> Result<(), i32> {
        let ino = self.lookup(host, parent, name)?;
        let node = self.nodes.get(&ino).ok_or(libc::ESTALE)?;
        match (&node.body, dir) {
            (Body::Dir(entries), true) if !entries.is_empty() => return Err(libc::ENOTEMPTY),
            (Body::Dir(_), false) => return Err(libc::EISDIR),
            (Body::File(_), true) => return Err(libc::ENOTDIR),
            _ => {}
        }
        self.remove_entry(host, parent, name)?;
        self.unref(ino);
        Ok(())
    }

    /// A plain rename (NFS has no `renameat2` flags: the mount refuses them before this).
    pub(crate) fn rename(
        &mut self,
        host: usize,
        from: Ino,
        name: &OsStr,
        to: Ino,
        newname: &OsStr,
    ) -> Result<(), i32> {
        let ino = self.lookup(host, from, name)?;
        let moving_dir = self.nodes.get(&ino).is_some_and(Node::is_dir);
        if let Ok(old) = self.lookup(host, to, newname) {
            if old == ino {
                return Ok(());
            }
            let old_node = self.nodes.get(&old).ok_or(libc::ESTALE)?;
            match (&old_node.body, moving_dir) {
                (Body::Dir(entries), true) if !entries.is_empty() => return Err(libc::ENOTEMPTY),
                (Body::Dir(_), false) => return Err(libc::EISDIR),
                (Body::File(_), true) => return Err(libc::ENOTDIR),
                _ => {}
            }
            self.remove_entry(host, to, newname)?;
            self.unref(old);
        }
        self.remove_entry(host, from, name)?;
        self.insert_entry(host, to, newname, ino)?;
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.ctime = SystemTime::now();
        }
        Ok(())
    }

    pub(crate) fn link(
        &mut self,
        host: usize,
        ino: Ino,
        parent: Ino,
        name: &OsStr,
    ) -> Result<(), i32> {
        if self.node(host, ino)?.is_dir() {
            return Err(libc::EPERM);
        }
        if self.dir(host, parent)?.contains_key(name) {
            return Err(libc::EEXIST);
        }
        self.insert_entry(host, parent, name, ino)?;
        let node = self.node_mut(host, ino)?;
        node.nlink += 1;
        node.ctime = SystemTime::now();
        Ok(())
    }

    /// `host` opens `ino`. A file no longer linked on the server is stale to a new open even
    /// where this host still holds it open: an NFS client revalidates at open (its GETATTR of the
    /// old file handle fails, or NFSv4 opens by name), and on ESTALE the kernel looks the name up
    /// again, so the opener gets the file the name now names.
    pub(crate) fn opened(&mut self, host: usize, ino: Ino) -> Result<(), i32> {
        let node = self.node_mut(host, ino)?;
        if node.nlink == 0 {
            return Err(libc::ESTALE);
        }
        *node.open_by.entry(host).or_insert(0) += 1;
        Ok(())
    }

    pub(crate) fn closed(&mut self, host: usize, ino: Ino) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            if let Some(n) = node.open_by.get_mut(&host) {
                *n = n.saturating_sub(1);
            }
            if node.nlink == 0 && node.open_by.values().all(|n| *n == 0) {
                self.nodes.remove(&ino);
                self.locks.remove(&ino);
            }
        }
    }

    /// Tries to take `lock` on `ino` (an unlock when `typ` is `F_UNLCK`); `Err(EAGAIN)` on a
    /// conflict.
    pub(crate) fn set_lock(&mut self, ino: Ino, lock: Lock) -> Result<(), i32> {
        let held = self.locks.entry(ino).or_default();
        if lock.typ != libc::F_UNLCK && held.iter().any(|h| h.conflicts(&lock)) {
            return Err(libc::EAGAIN);
        }
        // Whole-owner replacement over the range: what the kernel's flock emulation and
        // this project's whole-file locks need (no byte-range splitting).
        held.retain(|h| {
            !(h.host == lock.host
                && h.owner == lock.owner
                && h.start <= lock.end
                && lock.start <= h.end)
        });
        if lock.typ != libc::F_UNLCK {
            held.push(lock);
        }
        Ok(())
    }

    pub(crate) fn conflicting(&self, ino: Ino, lock: &Lock) -> Option<Lock> {
        self.locks
            .get(&ino)
            .and_then(|held| held.iter().find(|h| h.conflicts(lock)).copied())
    }

    /// Drops every lock (and pending wait) of `owner` on `host` (of the whole host with `None`),
    /// on one inode or on all.
    pub(crate) fn release_owner(&mut self, host: usize, owner: Option<u64>, on: Option<Ino>) {
        let mine = |h: usize, o: u64, ino: Ino| {
            h == host && owner.is_none_or(|owner| owner == o) && on.is_none_or(|on| on == ino)
        };
        for (ino, held) in self.locks.iter_mut() {
            held.retain(|l| !mine(l.host, l.owner, *ino));
        }
        let (gone, kept): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|w| mine(w.lock.host, w.lock.owner, w.ino));
        self.waiters = kept;
        for waiter in gone {
            waiter.reply.error(fuser::Errno::EINTR);
        }
        self.grant_waiters();
    }

    /// Grants every waiter whose lock no longer conflicts, in arrival order.
    pub(crate) fn grant_waiters(&mut self) {
        let mut i = 0;
        while i < self.waiters.len() {
            let (ino, lock) = (self.waiters[i].ino, self.waiters[i].lock);
            if self.set_lock(ino, lock).is_ok() {
                let waiter = self.waiters.remove(i);
                waiter.reply.ok();
            } else {
                i += 1;
            }
        }
    }
}

impl Store {
    /// A host crashed: the lock manager drops its locks and waits, and its open files close.
    pub(crate) fn host_gone(&mut self, host: usize) {
        self.release_owner(host, None, None);
        let orphans: Vec<Ino> = self
            .nodes
            .iter_mut()
            .filter_map(|(ino, node)| {
                node.open_by.remove(&host);
                (node.nlink == 0 && node.open_by.values().all(|n| *n == 0)).then_some(*ino)
            })
            .collect();
        for ino in orphans {
            self.nodes.remove(&ino);
            self.locks.remove(&ino);
        }
    }
}
