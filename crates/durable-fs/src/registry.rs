//! The in-process registry of live temps, so that an exit path can remove what this process left.
//!
//! Every temp file and staging directory this crate creates is registered until it is published
//! or removed. [`remove_live_temps`] removes the registered ones that are not being published.
//! The race that matters is between that cleanup and a writer about to rename its temp into
//! place: the writer must never publish a temp that the cleanup has removed (it would rename a
//! name that no longer exists, or worse, publish a half-removed staging directory), and the
//! cleanup must never remove a temp that is being renamed. Each entry therefore moves
//! `Live -> Publishing` (by the writer) or `Live -> reclaimed` (by the cleanup) under one lock,
//! and whoever moves it first owns it. The loom models at the bottom check this protocol.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use std::sync::Mutex;

/// What a registered temp is, which decides how the cleanup removes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TempKind {
    File,
    Dir,
}

#[derive(Debug)]
struct Entry {
    path: PathBuf,
    kind: TempKind,
    publishing: bool,
    /// The process that created the temp. A forked child inherits a copy of the registry but
    /// not the temps' writers: its cleanup must leave the parent's temps alone.
    pid: u32,
}

/// A set of live temps; one global instance serves the process, models build their own.
#[derive(Debug)]
pub(crate) struct Registry {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    entries: HashMap<u64, Entry>,
}

/// A registered temp. Dropping it forgets the entry (the owner has published or removed it).
#[derive(Debug)]
pub(crate) struct Ticket<'r> {
    registry: &'r Registry,
    id: u64,
}

impl Registry {
    pub(crate) fn new() -> Self {
        Registry {
            inner: Mutex::new(Inner::default()),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        // A panic while holding this lock cannot leave the map half-updated (every critical
        // section is one map operation), so a poisoned lock is still usable.
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    /// Registers a temp the caller has just created.
    pub(crate) fn register(&self, path: PathBuf, kind: TempKind) -> Ticket<'_> {
        let id = self.with(|inner| {
            let id = inner.next_id;
            inner.next_id += 1;
            inner.entries.insert(
                id,
                Entry {
                    path,
                    kind,
                    publishing: false,
                    pid: std::process::id(),
                },
            );
            id
        });
        Ticket { registry: self, id }
    }

    /// Removes every live (not publishing) temp this process created with `remove`, and forgets
    /// it. Returns how many.
    pub(crate) fn remove_live_with(&self, mut remove: impl FnMut(&Path, TempKind)) -> usize {
        let me = std::process::id();
        let taken: Vec<Entry> = self.with(|inner| {
            let ids: Vec<u64> = inner
                .entries
                .iter()
                .filter(|(_, e)| !e.publishing && e.pid == me)
                .map(|(&id, _)| id)
                .collect();
            ids.iter()
                .filter_map(|id| inner.entries.remove(id))
                .collect()
        });
        // The removal runs outside the lock: the entries are already ours, and a writer that
        // now tries to publish one finds it gone and fails instead of renaming.
        for entry in &taken {
            remove(&entry.path, entry.kind);
        }
        taken.len()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.with(|inner| inner.entries.len())
    }
}

impl Ticket<'_> {
    /// Claims the temp for publishing. `false` means a cleanup has already removed it: the
    /// caller must not rename it into place.
    pub(crate) fn begin_publish(&self) -> bool {
        self.registry
            .with(|inner| match inner.entries.get_mut(&self.id) {
                Some(entry) => {
                    entry.publishing = true;
                    true
                }
                None => false,
            })
    }

    /// Returns a claimed temp to the live state after a failed publish, so a cleanup may remove
    /// it again. Returns `false` when the entry is gone.
    pub(crate) fn abort_publish(&self) -> bool {
        self.registry
            .with(|inner| match inner.entries.get_mut(&self.id) {
                Some(entry) => {
                    entry.publishing = false;
                    true
                }
                None => false,
            })
    }

    /// Whether a cleanup has taken this temp (and removed or is removing it).
    pub(crate) fn reclaimed(&self) -> bool {
        self.registry
            .with(|inner| !inner.entries.contains_key(&self.id))
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.registry.with(|inner| {
            inner.entries.remove(&self.id);
        });
    }
}

pub(crate) fn global() -> &'static Registry {
    static GLOBAL: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    GLOBAL.get_or_init(Registry::new)
}

/// Removes the temp files and staging directories this process has created and not yet
/// published or removed, and returns how many it removed.
///
/// Call it on the way out of a process that is being told to stop (a SIGTERM handling thread,
/// for example one fed by `signal-hook`'s iterator, or just before `exit`), so a killed build
/// leaves no temps to wait for the age sweep. It takes a mutex and allocates, so it is not
/// async-signal-safe: never call it from inside a signal handler. A temp that is being renamed
/// into place at that moment is left to its writer; a writer whose temp was removed fails its
/// publish with `ErrorKind::Interrupted` instead of renaming.
///
/// # After `fork`
/// A child process inherits a copy of the registry, listing the parent's temps. Each entry
/// records the process id that created it, and this function removes only the calling
/// process's own, so a child never deletes a temp its parent is still writing. The registry sits
/// behind a mutex: in a child forked from a multi-threaded parent, call this only if no other
/// thread could have been inside this crate at the fork (the copied mutex may be held forever).
pub fn remove_live_temps() -> usize {
    global().remove_live_with(|path, kind| {
        // Best effort: the temp may already be gone, and this runs on the way out.
        let _ = match kind {
            TempKind::File => std::fs::remove_file(path),
            TempKind::Dir => std::fs::remove_dir_all(path),
        };
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn cleanup_skips_publishing_and_writer_sees_reclaim() {
        let reg = Registry::new();
        let a = reg.register("/t/a".into(), TempKind::File);
        let b = reg.register("/t/b".into(), TempKind::Dir);
        assert!(b.begin_publish(), "b is claimed for publishing");
        let mut removed = Vec::new();
        let n = reg.remove_live_with(|p, k| removed.push((p.to_path_buf(), k)));
        assert_eq!(n, 1, "only the live entry is removed");
        assert_eq!(removed, vec![(PathBuf::from("/t/a"), TempKind::File)]);
        assert!(
            !a.begin_publish(),
            "a writer cannot publish a reclaimed temp"
        );
        assert!(a.reclaimed());
        drop(b);
        drop(a);
        assert_eq!(reg.len(), 0, "dropped tickets leave nothing behind");
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::Arc;

    /// A writer registers, writes, and publishes; a concurrent cleanup removes live temps. The
    /// temp is published or removed by the cleanup, never both, never neither, and the registry
    /// ends empty.
    #[test]
    fn loom_registry_publish_races_cleanup() {
        loom::model(|| {
            let reg = Arc::new(Registry::new());
            let published = Arc::new(AtomicUsize::new(0));
            let removed = Arc::new(AtomicUsize::new(0));

            let writer = {
                let (reg, published) = (reg.clone(), published.clone());
                loom::thread::spawn(move || {
                    let ticket = reg.register("/d/.dfs-tmp.x".into(), TempKind::File);
                    loom::thread::yield_now();
                    if ticket.begin_publish() {
                        published.fetch_add(1, Ordering::SeqCst);
                    }
                })
            };
            let cleaner = {
                let (reg, removed) = (reg.clone(), removed.clone());
                loom::thread::spawn(move || {
                    reg.remove_live_with(|_, _| {
                        removed.fetch_add(1, Ordering::SeqCst);
                    });
                })
            };
            writer.join().expect("writer thread");
            cleaner.join().expect("cleaner thread");
            let (p, r) = (
                published.load(Ordering::SeqCst),
                removed.load(Ordering::SeqCst),
            );
            assert!(p + r <= 1, "a temp was both published and removed");
            // If the cleanup ran before the writer registered, it found nothing: published.
            assert!(
                p + r == 1,
                "the temp was neither published nor removed: p={p} r={r}"
            );
            assert_eq!(reg.len(), 0, "no entry outlives its ticket");
        });
    }

    /// Two writers and a cleanup: a failed publish returns the temp to the live set, so a cleanup
    /// after it removes it, and one before it prevents the publish.
    #[test]
    fn loom_registry_abort_returns_temp_to_cleanup() {
        loom::model(|| {
            let reg = Arc::new(Registry::new());
            let removed = Arc::new(AtomicUsize::new(0));
            let ticket = reg.register("/d/.dfs-tmp.y".into(), TempKind::Dir);
            let cleaner = {
                let (reg, removed) = (reg.clone(), removed.clone());
                loom::thread::spawn(move || {
                    reg.remove_live_with(|_, kind| {
                        assert_eq!(kind, TempKind::Dir);
                        removed.fetch_add(1, Ordering::SeqCst);
                    });
                })
            };
            let claimed = ticket.begin_publish();
            // The rename "fails": hand the temp back unless the cleanup already took it.
            let handed_back = claimed && ticket.abort_publish();
            cleaner.join().expect("cleaner thread");
            let r = removed.load(Ordering::SeqCst);
            if !claimed {
                assert_eq!(r, 1, "an unclaimable temp was taken by the cleanup");
            }
            if claimed && !handed_back {
                unreachable!("a claimed entry cannot vanish before abort");
            }
            // Whether the cleanup saw it live or not, the ticket still knows if it was reclaimed.
            assert_eq!(
                ticket.reclaimed(),
                r == 1,
                "reclaimed() agrees with the cleanup"
            );
            drop(ticket);
            assert_eq!(reg.len(), 0);
        });
    }
}
