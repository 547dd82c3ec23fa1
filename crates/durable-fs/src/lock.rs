//! Advisory file locks on `flock(2)`: shared or exclusive, with a wait policy, released on drop.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, Mode, OFlags, CWD};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::temp_name::fnv1a_fresh;

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
#[must_use = "the lock is released when the guard is dropped"]
#[derive(Debug)]
pub struct LockGuard {
    held: Held<OwnedFd>,
    path: PathBuf,
    mode: LockMode,
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

    /// Unlocks now and reports an error, which dropping the guard would ignore.
    pub fn unlock(mut self) -> Result<()> {
        self.held
            .release()
            .map_err(|e| Error::new("unlock", &self.path, e))
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
/// A child inherits the descriptor and with it the lock (one open file description): the lock
/// is released when the guard is dropped in either process, since the guard unlocks with an
/// explicit `LOCK_UN`. Drop or [`std::mem::forget`] the guard in the child deliberately.
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
    Ok(acquired.then(|| LockGuard {
        held: Held::new(fd),
        path: path.to_path_buf(),
        mode,
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
