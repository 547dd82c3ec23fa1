//! Advisory file locks on `flock(2)`: shared or exclusive, with a wait policy, released on drop.

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, Mode, OFlags, CWD};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::fnv::fnv1a_fresh;

/// Which lock to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// Many holders at once, none exclusive (`LOCK_SH`).
    Shared,
    /// One holder, no shared ones (`LOCK_EX`).
    Exclusive,
}

/// How long [`lock`] waits for a lock that someone else holds. (To try once and carry on
/// without the lock, call [`try_lock`], which says so in its type.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Block in the kernel until the lock is granted.
    Forever,
    /// Retry with `LOCK_NB` and a sleep that doubles from 100 µs up to 20 ms between tries,
    /// until the duration has passed; then [`lock`] fails with `ErrorKind::TimedOut`. It polls
    /// because `flock` has no timed form; the sleeps keep it off the CPU.
    Timeout(Duration),
}

/// How one acquisition proceeds: [`Wait`] plus the single try behind [`try_lock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    Once,
    Timeout(Duration),
    Forever,
}

impl From<Wait> for Attempt {
    fn from(wait: Wait) -> Attempt {
        match wait {
            Wait::Forever => Attempt::Forever,
            Wait::Timeout(limit) => Attempt::Timeout(limit),
        }
    }
}

/// A held `flock`. Dropping it unlocks with an explicit `LOCK_UN` (a forked child shares the
/// open file description, so closing our descriptor alone would not release it) and closes the
/// file. The lock file is never deleted: a holder that deleted it would let the next locker
/// create and lock a new inode while a waiter locks the old one.
///
/// A guard a forked child inherited (made by another process) never unlocks: the lock is its
/// parent's, and an explicit `LOCK_UN` from the child would release it under the parent.
#[must_use = "the lock is released when the guard is dropped"]
#[derive(Debug)]
pub struct LockGuard {
    held: Held<OwnedFd>,
    path: PathBuf,
    mode: LockMode,
    /// The process that took the lock.
    pid: u32,
}

impl LockGuard {
    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mode the lock is held in.
    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// Unlocks now and reports an error, which dropping the guard would ignore. In a forked
    /// child, whose guard is its parent's, it only forgets the guard.
    pub fn unlock(mut self) -> Result<()> {
        self.forget_if_inherited();
        self.held
            .release()
            .map_err(|e| Error::new("unlock", &self.path, e))
    }

    /// Forgets the descriptor (before it is closed, so a fork never sees a reused number) and,
    /// in a process that did not take the lock, marks it released so no `LOCK_UN` is sent.
    fn forget_if_inherited(&mut self) {
        if !self.held.released {
            forget_held(self.held.flock.as_raw_fd());
        }
        if self.pid != std::process::id() {
            self.held.released = true;
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // `held` unlocks when it is dropped right after this, unless this marked it released.
        self.forget_if_inherited();
    }
}

/// The descriptors whose `flock` this process holds (every [`LockGuard`] and staging
/// directory), so that a forked child can let go of its copies (see [`prepare_fork`]).
fn held_descriptors() -> &'static Mutex<HashSet<RawFd>> {
    static HELD: OnceLock<Mutex<HashSet<RawFd>>> = OnceLock::new();
    HELD.get_or_init(|| Mutex::new(HashSet::new()))
}

fn held_set() -> MutexGuard<'static, HashSet<RawFd>> {
    // Every critical section is one set operation: a poisoned lock still holds a valid set.
    held_descriptors().lock().unwrap_or_else(|p| p.into_inner())
}

/// Notes a descriptor whose `flock` this process now holds.
pub(crate) fn note_held(fd: impl AsFd) {
    held_set().insert(fd.as_fd().as_raw_fd());
}

/// Forgets a held descriptor; call it before the descriptor is closed.
pub(crate) fn forget_held(fd: RawFd) {
    held_set().remove(&fd);
}

/// The lock descriptors' fork rule, taken just before `fork` (a `pthread_atfork` prepare
/// handler) and handed to the parent's or the child's side after it.
///
/// A child forked without exec inherits a copy of every descriptor, and with it every `flock`
/// this process holds (a lock belongs to the open file description, which the copies share):
/// a producer killed -9 would keep its key locked for as long as any child it forked lives.
/// `O_CLOEXEC` does not help without exec. Holding this from before the fork to after it means
/// no thread is inside the registry at the fork, so the child's copy is whole.
#[must_use = "hand it to in_parent or in_child after the fork"]
#[derive(Debug)]
pub struct ForkPrepared {
    held: MutexGuard<'static, HashSet<RawFd>>,
}

/// Takes the registry of held lock descriptors for a `fork` (see [`ForkPrepared`]). Call it
/// from a `pthread_atfork` prepare handler; `jit-cache` registers one.
pub fn prepare_fork() -> ForkPrepared {
    ForkPrepared { held: held_set() }
}

impl ForkPrepared {
    /// After the fork, in the parent: nothing changes.
    pub fn in_parent(self) {}

    /// After the fork, in the child: forgets every lock descriptor the parent held and returns
    /// them. The caller must make each number stop referring to the parent's open file
    /// description without unlocking it (`dup2` of `/dev/null` onto it: closes the copy and
    /// keeps the number owned by the guard that holds it, whose drop then sends no `LOCK_UN`
    /// since the child did not take the lock). Closing them is the caller's because this
    /// crate has no `unsafe`.
    pub fn in_child(mut self) -> Vec<RawFd> {
        self.held.drain().collect()
    }
}

/// Takes a `flock` on `path`, creating the lock file when missing, waiting as `wait` says.
///
/// Returns the held lock, or an error: `ErrorKind::TimedOut` when [`Wait::Timeout`] ran out
/// while someone else held it, or the error of opening or locking the file. There is no way to
/// get past this call without the lock; to try once and carry on, use [`try_lock`].
///
/// The file is opened `O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW` with mode 0644 (read-write
/// because NFS emulates `flock` with whole-file `fcntl` locks, which need a writable
/// descriptor), falling back to read-only on `EACCES`/`EROFS`. Locks are per open file
/// description, so two `lock` calls in one process exclude each other like two processes do,
/// and a lock vanishes with its holder (no stale lock after `kill -9`).
///
/// # Lock files do not grow without bound
/// Lock files are never deleted (see [`LockGuard`]), so a caller must lock a fixed set of
/// paths, not one file per key: [`lock_file_for_key`] maps any key to one of a fixed number of
/// bucket files. Two keys that share a bucket merely serialise.
///
/// # After `fork`
/// A child inherits the descriptor and with it the lock (one open file description). The lock
/// is released when the guard is dropped in the process that took it (an explicit `LOCK_UN`,
/// which ends it for every copy); the child's copy of the guard never unlocks. The child's
/// copy of the descriptor keeps the lock alive after the parent dies unless it is closed at
/// the fork: [`prepare_fork`] is the fork rule that does it (`jit-cache` registers it).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use durable_fs::{lock, LockMode, Wait};
/// let dir = tempfile::tempdir()?;
/// let guard = lock(dir.path().join("build.lock"), LockMode::Exclusive, Wait::Forever)?;
/// // ... work under the lock ...
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[must_use = "the lock is held only while the returned guard lives"]
pub fn lock(path: impl AsRef<Path>, mode: LockMode, wait: Wait) -> Result<LockGuard> {
    let path = path.as_ref();
    match acquire_at(path, mode, wait.into())? {
        Some(guard) => Ok(guard),
        None => Err(Error::new(
            "lock",
            path,
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("still held by another holder after {wait:?}"),
            ),
        )),
    }
}

/// Tries once to take a `flock` on `path` (`LOCK_NB`): `Ok(None)` when someone else holds a
/// conflicting lock, so the caller must decide what to do without it.
///
/// Opens the file as [`lock`] does. Use it where skipping the work is the right answer to a
/// held lock (an eviction that should not wait for a builder).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use durable_fs::{lock, try_lock, LockMode, Wait};
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("key.lock");
/// let held = lock(&path, LockMode::Exclusive, Wait::Forever)?;
/// assert!(try_lock(&path, LockMode::Exclusive)?.is_none(), "a second holder is refused");
/// drop(held);
/// let Some(_guard) = try_lock(&path, LockMode::Exclusive)? else {
///     unreachable!("free after the first guard was dropped");
/// };
/// # Ok(()) }
/// ```
#[must_use = "None means the lock is NOT held; Some(guard) holds it only while the guard lives"]
pub fn try_lock(path: impl AsRef<Path>, mode: LockMode) -> Result<Option<LockGuard>> {
    acquire_at(path.as_ref(), mode, Attempt::Once)
}

fn acquire_at(path: &Path, mode: LockMode, attempt: Attempt) -> Result<Option<LockGuard>> {
    let open = |flags: OFlags| {
        rustix::fs::openat(
            CWD,
            path,
            flags | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o644),
        )
    };
    let fd = match open(OFlags::RDWR) {
        Err(Errno::ACCESS | Errno::ROFS) => open(OFlags::RDONLY),
        other => other,
    }
    .map_err(|e| Error::new("open lock file", path, e))?;
    let acquired =
        acquire(&fd, mode, attempt, BackoffPacer::new).map_err(|e| Error::new("lock", path, e))?;
    Ok(acquired.then(|| {
        note_held(&fd);
        LockGuard {
            held: Held::new(fd),
            path: path.to_path_buf(),
            mode,
            pid: std::process::id(),
        }
    }))
}

/// The lock file for `key` in `dir`: one of `buckets` fixed files (`dfs-lock-<bucket>.lock`),
/// chosen by a stable hash of the key, so the set of lock files stays bounded however many keys
/// there are. `buckets` of 0 counts as 1.
pub fn lock_file_for_key(dir: impl AsRef<Path>, key: &[u8], buckets: u32) -> PathBuf {
    let mut input = b"durable-fs lock bucket v1\0".to_vec();
    input.extend_from_slice(key);
    let bucket = fnv1a_fresh(&input) % u64::from(buckets.max(1));
    dir.as_ref().join(format!("dfs-lock-{bucket:08x}.lock"))
}

/// The kernel side of a lock, so the acquire loop and the guard can be model-checked with loom
/// against a simulated kernel.
pub(crate) trait Flock {
    /// One non-blocking attempt: `Ok(false)` when someone else holds a conflicting lock.
    fn try_lock(&self, mode: LockMode) -> io::Result<bool>;
    /// Blocks until granted.
    fn lock_blocking(&self, mode: LockMode) -> io::Result<()>;
    /// Releases the lock.
    fn unlock(&self) -> io::Result<()>;
}

/// Paces the retries of a timed wait.
pub(crate) trait Pacer {
    /// Whether the wait is over.
    fn expired(&mut self) -> bool;
    /// Waits a little before the next try.
    fn pause(&mut self);
}

pub(crate) fn acquire<F: Flock, P: Pacer>(
    flock: &F,
    mode: LockMode,
    attempt: Attempt,
    pacer: impl FnOnce(Duration) -> P,
) -> io::Result<bool> {
    match attempt {
        Attempt::Once => flock.try_lock(mode),
        Attempt::Forever => flock.lock_blocking(mode).map(|()| true),
        Attempt::Timeout(limit) => {
            let mut pacer = pacer(limit);
            loop {
                if flock.try_lock(mode)? {
                    return Ok(true);
                }
                if pacer.expired() {
                    return Ok(false);
                }
                pacer.pause();
            }
        }
    }
}

/// A lock held through `F`, released exactly once: by [`Held::release`] or on drop.
#[derive(Debug)]
pub(crate) struct Held<F: Flock> {
    flock: F,
    released: bool,
}

impl<F: Flock> Held<F> {
    pub(crate) fn new(flock: F) -> Self {
        Held {
            flock,
            released: false,
        }
    }

    pub(crate) fn release(&mut self) -> io::Result<()> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        self.flock.unlock()
    }
}

impl<F: Flock> Drop for Held<F> {
    fn drop(&mut self) {
        // Best effort: the descriptor closes right after, which releases the lock anyway unless
        // a forked child shares it.
        let _ = self.release();
    }
}

impl Flock for OwnedFd {
    fn try_lock(&self, mode: LockMode) -> io::Result<bool> {
        let op = match mode {
            LockMode::Shared => FlockOperation::NonBlockingLockShared,
            LockMode::Exclusive => FlockOperation::NonBlockingLockExclusive,
        };
        loop {
            return match rustix::fs::flock(self, op) {
                Ok(()) => Ok(true),
                Err(Errno::WOULDBLOCK) => Ok(false),
                Err(Errno::INTR) => continue,
                Err(e) => Err(e.into()),
            };
        }
    }

    fn lock_blocking(&self, mode: LockMode) -> io::Result<()> {
        let op = match mode {
            LockMode::Shared => FlockOperation::LockShared,
            LockMode::Exclusive => FlockOperation::LockExclusive,
        };
        loop {
            return match rustix::fs::flock(self, op) {
                Ok(()) => Ok(()),
                Err(Errno::INTR) => continue,
                Err(e) => Err(e.into()),
            };
        }
    }

    fn unlock(&self) -> io::Result<()> {
        rustix::fs::flock(self, FlockOperation::Unlock).map_err(Into::into)
    }
}

/// Real-time pacing: sleeps 100 µs, doubling to 20 ms, never past the deadline.
pub(crate) struct BackoffPacer {
    /// `None`: a limit too long to add to the clock, a wait without end.
    deadline: Option<Instant>,
    next: Duration,
}

impl BackoffPacer {
    fn new(limit: Duration) -> Self {
        BackoffPacer {
            deadline: Instant::now().checked_add(limit),
            next: Duration::from_micros(100),
        }
    }
}

impl Pacer for BackoffPacer {
    fn expired(&mut self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    fn pause(&mut self) {
        let left = self
            .deadline
            .map_or(self.next, |d| d.saturating_duration_since(Instant::now()));
        std::thread::sleep(self.next.min(left));
        self.next = (self.next * 2).min(Duration::from_millis(20));
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::{Arc, Mutex};

    /// A simulated kernel lock on one inode: shared holders by descriptor id, or one exclusive.
    #[derive(Default)]
    struct Inode {
        state: Mutex<(Vec<usize>, Option<usize>)>,
        unlocks: AtomicUsize,
    }

    /// One open file description on the simulated inode.
    struct SimFd {
        inode: Arc<Inode>,
        id: usize,
    }

    impl Flock for SimFd {
        fn try_lock(&self, mode: LockMode) -> io::Result<bool> {
            let mut st = self.inode.state.lock().expect("sim lock");
            let (shared, excl) = &mut *st;
            let others_shared = shared.iter().any(|&h| h != self.id);
            let others_excl = excl.is_some_and(|h| h != self.id);
            match mode {
                LockMode::Shared if !others_excl => {
                    *excl = None;
                    if !shared.contains(&self.id) {
                        shared.push(self.id);
                    }
                    Ok(true)
                }
                LockMode::Exclusive if !others_excl && !others_shared => {
                    shared.retain(|&h| h != self.id);
                    *excl = Some(self.id);
                    Ok(true)
                }
                _ => Ok(false),
            }
        }

        fn lock_blocking(&self, mode: LockMode) -> io::Result<()> {
            while !self.try_lock(mode)? {
                loom::thread::yield_now();
            }
            Ok(())
        }

        fn unlock(&self) -> io::Result<()> {
            let mut st = self.inode.state.lock().expect("sim lock");
            st.0.retain(|&h| h != self.id);
            if st.1 == Some(self.id) {
                st.1 = None;
            }
            self.inode.unlocks.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    /// Gives up after a few tries. It does not yield: the tries are bounded, and a yield would
    /// let loom skip the schedules where another holder stays inside across all of them.
    struct TriesPacer(usize);

    impl Pacer for TriesPacer {
        fn expired(&mut self) -> bool {
            self.0 == 0
        }
        fn pause(&mut self) {
            self.0 -= 1;
        }
    }

    /// Two threads take the exclusive lock with a timed wait through the real acquire loop: never
    /// both inside; a guard's drop releases, so the lock ends free.
    #[test]
    fn loom_lock_exclusive_timeout_excludes() {
        loom::model(|| {
            let inode = Arc::new(Inode::default());
            let inside = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..2)
                .map(|id| {
                    let (inode, inside) = (inode.clone(), inside.clone());
                    loom::thread::spawn(move || {
                        let fd = SimFd { inode, id };
                        let got = acquire(
                            &fd,
                            LockMode::Exclusive,
                            Attempt::Timeout(Duration::ZERO),
                            |_| TriesPacer(1),
                        )
                        .expect("sim acquire");
                        if got {
                            let held = Held::new(fd);
                            assert_eq!(
                                inside.fetch_add(1, Ordering::SeqCst),
                                0,
                                "two exclusive holders"
                            );
                            inside.fetch_sub(1, Ordering::SeqCst);
                            drop(held);
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().expect("locker thread");
            }
            let st = inode.state.lock().expect("sim lock");
            assert!(
                st.0.is_empty() && st.1.is_none(),
                "every guard released its lock"
            );
        });
    }

    /// A shared guard in an `Arc` used by two threads while a third waits forever for the
    /// exclusive lock: the exclusive holder gets in only after both users let go, and the shared
    /// lock is released exactly once.
    #[test]
    fn loom_lock_guard_shared_between_threads() {
        loom::model(|| {
            let inode = Arc::new(Inode::default());
            let shared_fd = SimFd {
                inode: inode.clone(),
                id: 0,
            };
            assert!(acquire(&shared_fd, LockMode::Shared, Attempt::Once, |_| {
                TriesPacer(0)
            })
            .expect("sim acquire"));
            let guard = Arc::new(Held::new(shared_fd));
            let users = Arc::new(AtomicUsize::new(2));
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let (guard, users) = (guard.clone(), users.clone());
                    loom::thread::spawn(move || {
                        users.fetch_sub(1, Ordering::SeqCst);
                        drop(guard);
                    })
                })
                .collect();
            drop(guard);
            let waiter = {
                let (inode, users) = (inode.clone(), users.clone());
                loom::thread::spawn(move || {
                    let fd = SimFd { inode, id: 1 };
                    assert!(acquire(&fd, LockMode::Exclusive, Attempt::Forever, |_| {
                        TriesPacer(0)
                    })
                    .expect("sim acquire"));
                    assert_eq!(
                        users.load(Ordering::SeqCst),
                        0,
                        "exclusive granted while shared users remain"
                    );
                    drop(Held::new(fd));
                })
            };
            for h in handles {
                h.join().expect("user thread");
            }
            waiter.join().expect("waiter thread");
            assert_eq!(
                inode.unlocks.load(Ordering::SeqCst),
                2,
                "one unlock per guard, not per user"
            );
        });
    }
}
