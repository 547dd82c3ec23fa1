//! Turns at a stored key within this process: of the threads that ask for one key at once, one
//! goes on to the key's `flock` and the others wait here, on a condition variable, until its turn
//! ends (a commit, a drop, a panic unwinding), instead of each polling the `flock` with sleeps.
//! Other processes and hosts still meet at the `flock`; this only orders one process's threads.
//!
//! After `fork` the table is the child's own (`fork.rs`): it starts empty, since the turns it
//! listed belong to the parent's threads, and a turn the child inherited ends nothing.

use crate::base::sync::{lock, Arc, Condvar, Mutex};
use fingerprint::Digest;
use std::collections::HashSet;
use std::hash::Hash;
use std::time::Instant;

/// The keys whose turn some thread of this process holds.
pub(crate) struct Turns<K> {
    taken: Mutex<HashSet<K>>,
    ended: Condvar,
}

/// One thread's turn at a key, held until dropped.
pub(crate) struct Turn<K: Eq + Hash> {
    turns: Arc<Turns<K>>,
    key: K,
    /// The process that took it: a forked child's copy of the turn is not the child's to end.
    pid: u32,
}

/// A turns table held across a `fork`, so that no thread is inside it then (`fork.rs`).
#[cfg(not(loom))]
pub(crate) struct HeldForFork<'a, K>(crate::base::sync::MutexGuardOf<'a, HashSet<K>>);

#[cfg(not(loom))]
impl<K> crate::base::fork::Held for HeldForFork<'static, K> {
    /// In the child: no turn is taken, since every holder was a thread of the parent.
    fn in_child(mut self: Box<Self>) {
        self.0.clear();
    }
}

impl<K: Eq + Hash + Clone> Turns<K> {
    pub(crate) fn new() -> Self {
        Turns {
            taken: Mutex::new(HashSet::new()),
            ended: Condvar::new(),
        }
    }

    /// Waits for `key`'s turn, until `deadline` when there is one; `None` when it passed first.
    pub(crate) fn take(turns: &Arc<Self>, key: K, deadline: Option<Instant>) -> Option<Turn<K>> {
        let mut taken = lock(&turns.taken);
        while taken.contains(&key) {
            taken = match deadline {
                None => turns.ended.wait(taken).unwrap_or_else(|p| p.into_inner()),
                Some(deadline) => {
                    let left = deadline
                        .checked_duration_since(Instant::now())
                        .filter(|left| !left.is_zero())?;
                    turns
                        .ended
                        .wait_timeout(taken, left)
                        .map(|(guard, _)| guard)
                        .unwrap_or_else(|p| p.into_inner().0)
                }
            };
        }
        taken.insert(key.clone());
        Some(Turn {
            turns: Arc::clone(turns),
            key,
            pid: std::process::id(),
        })
    }

    /// Takes the table for a `fork` (the prepare handler), until the returned guard is dropped
    /// or reset.
    #[cfg(not(loom))]
    pub(crate) fn hold_for_fork(&self) -> HeldForFork<'_, K> {
        HeldForFork(lock(&self.taken))
    }
}

impl<K: Eq + Hash> Drop for Turn<K> {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            // Inherited across a fork: the child's table never listed it, and the key may now
            // be another of the child's threads' turn.
            return;
        }
        lock(&self.turns.taken).remove(&self.key);
        self.turns.ended.notify_all();
    }
}

impl<K: Eq + Hash> std::fmt::Debug for Turn<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn").finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_taken_turn_times_out_and_a_dropped_one_passes_on() {
        let turns = Arc::new(Turns::<u8>::new());
        let first = Turns::take(&turns, 1, None).expect("free");
        let soon = Instant::now() + Duration::from_millis(20);
        assert!(Turns::take(&turns, 1, Some(soon)).is_none(), "taken");
        assert!(
            Turns::take(&turns, 2, Some(soon)).is_some(),
            "another key is free"
        );
        drop(first);
        assert!(Turns::take(&turns, 1, Some(soon)).is_some(), "passed on");
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::{AtomicUsize, Ordering};

    /// Two threads take turns at one key: never both inside at once, and both get their
    /// turn (a lost wake-up deadlocks the model).
    #[test]
    fn loom_turns_exclude_and_every_waiter_gets_in() {
        loom::model(|| {
            let turns = Arc::new(Turns::<u8>::new());
            let inside = Arc::new(AtomicUsize::new(0));
            let other = {
                let (turns, inside) = (turns.clone(), inside.clone());
                loom::thread::spawn(move || {
                    let turn = Turns::take(&turns, 7, None).expect("no deadline");
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "both inside");
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(turn);
                })
            };
            let turn = Turns::take(&turns, 7, None).expect("no deadline");
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "both inside");
            inside.fetch_sub(1, Ordering::SeqCst);
            drop(turn);
            other.join().expect("thread");
        });
    }

    /// A turn dropped while its holder unwinds (a producer's panic) still passes on.
    #[test]
    fn loom_a_turn_dropped_by_a_panic_passes_on() {
        loom::model(|| {
            let turns = Arc::new(Turns::<u8>::new());
            let holder = {
                let turns = turns.clone();
                loom::thread::spawn(move || {
                    let _turn = Turns::take(&turns, 1, None).expect("no deadline");
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        let _moved = _turn;
                        panic!("producer crashed");
                    }));
                    assert!(result.is_err());
                })
            };
            let waiter = {
                let turns = turns.clone();
                loom::thread::spawn(move || Turns::take(&turns, 1, None).is_some())
            };
            holder.join().expect("holder");
            assert!(waiter.join().expect("waiter"));
        });
    }
}
/// A stored key of a root, as this process's threads take turns at it.
pub(crate) type TurnKey = ((u64, u64), Digest);

/// This process's turns at stored keys (`turns.rs`).
pub(crate) fn process_turns() -> &'static crate::base::sync::Arc<Turns<TurnKey>> {
    static TURNS: std::sync::OnceLock<crate::base::sync::Arc<Turns<TurnKey>>> =
        std::sync::OnceLock::new();
    TURNS.get_or_init(|| {
        #[cfg(not(loom))]
        crate::base::fork::rule(|| Box::new(process_turns().hold_for_fork()));
        crate::base::sync::Arc::new(Turns::new())
    })
}
