//! In-process single flight: of the threads that ask for one key at once, one (the leader) does
//! the work and the others wait for its result.
//!
//! A leader that panics does not strand its followers: a guard marks the flight abandoned as the
//! leader unwinds, and each follower then tries again, one of them becoming the new leader.
//! Results, including errors, are handed to every follower of that flight; a later call starts a
//! new flight (the caller keeps its own memo of successes).
//!
//! Fork rule: a flight records the process its leader runs in. A child forked while a parent
//! thread led a flight inherits the table with that flight in it, but not the thread, which
//! would never finish it there; a caller in another process than a flight's leader takes the
//! flight for abandoned and leads a new one.

use crate::base::sync::{lock, Arc, Condvar, Mutex};
use std::collections::HashMap;
use std::hash::Hash;

/// A table of flights in progress, one per key.
pub(crate) struct SingleFlight<K, V> {
    flights: Mutex<HashMap<K, Arc<Flight<V>>>>,
}

struct Flight<V> {
    state: Mutex<State<V>>,
    finished: Condvar,
    /// The process the leader runs in (see the fork rule above).
    pid: u32,
}

enum State<V> {
    Running,
    Done(V),
    Abandoned,
}

/// Whether a call did the work or waited for another thread's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// This thread ran the closure.
    Leader,
    /// Another thread ran it; this one received a clone of its result.
    Follower,
}

impl<K: Eq + Hash + Clone, V: Clone> SingleFlight<K, V> {
    pub(crate) fn new() -> Self {
        SingleFlight {
            flights: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `work` for `key` unless a flight for it is in progress, in which case waits for that
    /// flight's result.
    pub(crate) fn run(&self, key: &K, work: impl FnOnce() -> V) -> (V, Role) {
        let mut work = Some(work);
        loop {
            let (flight, leader) = {
                let mut flights = lock(&self.flights);
                let me = std::process::id();
                match flights.get(key) {
                    Some(flight) if flight.pid == me => (Arc::clone(flight), false),
                    // None, or a flight a forked parent's thread leads: this process leads.
                    _ => {
                        let flight = Arc::new(Flight {
                            state: Mutex::new(State::Running),
                            finished: Condvar::new(),
                            pid: me,
                        });
                        flights.insert(key.clone(), Arc::clone(&flight));
                        (flight, true)
                    }
                }
            };
            if leader {
                let guard = LeaderGuard {
                    table: self,
                    key,
                    flight: &flight,
                    finished: false,
                };
                // `work` is taken at most once: a thread only leads once, then returns.
                let Some(work) = work.take() else {
                    unreachable_work()
                };
                let value = work();
                guard.finish(value.clone());
                return (value, Role::Leader);
            }
            let mut state = lock(&flight.state);
            loop {
                match &*state {
                    State::Running => {
                        state = match flight.finished.wait(state) {
                            Ok(s) => s,
                            Err(poisoned) => poisoned.into_inner(),
                        }
                    }
                    State::Done(value) => return (value.clone(), Role::Follower),
                    // The leader panicked: try again, perhaps as the new leader.
                    State::Abandoned => break,
                }
            }
        }
    }
}

/// A panic-free stand-in for `unreachable!`: library code never panics, and this path cannot run.
fn unreachable_work() -> ! {
    std::process::abort()
}

/// Removes the flight and wakes its followers, with the result or, when dropped while unwinding,
/// as abandoned.
struct LeaderGuard<'a, K: Eq + Hash, V> {
    table: &'a SingleFlight<K, V>,
    key: &'a K,
    flight: &'a Arc<Flight<V>>,
    finished: bool,
}

impl<K: Eq + Hash, V> LeaderGuard<'_, K, V> {
    fn finish(mut self, value: V) {
        self.settle(State::Done(value));
        self.finished = true;
    }

    fn settle(&self, outcome: State<V>) {
        // Unpublish first, so a thread arriving now starts a new flight instead of joining a
        // finished one; then publish the outcome to the followers already waiting.
        lock(&self.table.flights).remove(self.key);
        *lock(&self.flight.state) = outcome;
        self.flight.finished.notify_all();
    }
}

impl<K: Eq + Hash, V> Drop for LeaderGuard<'_, K, V> {
    fn drop(&mut self) {
        if !self.finished {
            self.settle(State::Abandoned);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    #[test]
    fn concurrent_callers_share_one_computation() {
        let table = SingleFlight::<u32, usize>::new();
        let computed = AtomicUsize::new(0);
        let barrier = Barrier::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    barrier.wait();
                    let (v, _) = table.run(&7, || {
                        computed.fetch_add(1, Ordering::SeqCst);
                        42
                    });
                    assert_eq!(v, 42, "every caller sees the leader's value");
                });
            }
        });
        assert!(computed.load(Ordering::SeqCst) >= 1, "someone computed");
    }

    /// Issue 31, item 7: a child forked while a parent thread leads a flight leads its own
    /// (before the rule it waited forever on the parent's flight: the child exited by timeout).
    #[test]
    fn a_forked_child_leads_the_flight_its_parents_thread_was_leading() {
        let table = SingleFlight::<u32, u32>::new();
        let (started, wait_started) = std::sync::mpsc::channel();
        let (release, wait_release) = std::sync::mpsc::channel::<()>();
        let shared = &table;
        std::thread::scope(|s| {
            s.spawn(move || {
                shared.run(&9, || {
                    let _ = started.send(());
                    let _ = wait_release.recv();
                    1
                })
            });
            wait_started.recv().expect("the parent's leader started");
            // SAFETY: the child only runs the table's code and `_exit`s; glibc's malloc and
            // std's mutexes are usable after fork (no table lock is held: the leader is inside
            // its work, outside the table's mutex).
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork");
            if pid == 0 {
                // A watchdog: a child stuck on the parent's flight ends with status 2.
                // SAFETY: alarm has no preconditions; SIGALRM's default action ends the child.
                unsafe { libc::alarm(20) };
                let (v, role) = table.run(&9, || 2);
                let ok = v == 2 && role == Role::Leader;
                // SAFETY: ends the child at once, running no parent's destructors.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) };
            }
            let mut status = 0;
            // SAFETY: waits for the child just forked, with a valid status pointer.
            let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
            let _ = release.send(());
            assert_eq!(waited, pid);
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "the child led its own flight (wait status {status})"
            );
        });
    }

    #[test]
    fn a_panicking_leader_hands_over_to_the_next_caller() {
        let table = SingleFlight::<u32, u32>::new();
        let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            table.run(&1, || panic!("builder crashed"))
        }));
        assert!(
            first.is_err(),
            "the leader's panic propagates to the leader"
        );
        let (v, role) = table.run(&1, || 5);
        assert_eq!(
            (v, role),
            (5, Role::Leader),
            "the flight was unpublished, so the next caller leads"
        );
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::{AtomicUsize, Ordering};

    /// Two callers at once: each gets the value, and the work runs once unless the second came
    /// after the first finished (then twice, each a leader).
    #[test]
    fn loom_waiters_get_the_leaders_value() {
        loom::model(|| {
            let table = Arc::new(SingleFlight::<u8, u32>::new());
            let computed = Arc::new(AtomicUsize::new(0));
            let spawn = |table: Arc<SingleFlight<u8, u32>>, computed: Arc<AtomicUsize>| {
                loom::thread::spawn(move || {
                    table.run(&0, || {
                        computed.fetch_add(1, Ordering::SeqCst);
                        7
                    })
                })
            };
            let a = spawn(Arc::clone(&table), Arc::clone(&computed));
            let b = spawn(Arc::clone(&table), Arc::clone(&computed));
            let (ra, rb) = (a.join().expect("thread a"), b.join().expect("thread b"));
            assert_eq!((ra.0, rb.0), (7, 7));
            let leaders = [ra.1, rb.1].iter().filter(|r| **r == Role::Leader).count();
            assert_eq!(
                leaders,
                computed.load(Ordering::SeqCst),
                "each leader computed exactly once"
            );
            assert!(leaders >= 1);
        });
    }

    /// A failing builder: its error is the value every follower of that flight receives.
    #[test]
    fn loom_waiters_receive_the_leaders_error() {
        loom::model(|| {
            let table = Arc::new(SingleFlight::<u8, Result<u32, String>>::new());
            let t = Arc::clone(&table);
            let a = loom::thread::spawn(move || t.run(&0, || Err("compile failed".to_string())));
            let (rb, _) = table.run(&0, || Err("compile failed".to_string()));
            let (ra, _) = a.join().expect("thread a");
            assert_eq!(ra, Err("compile failed".to_string()));
            assert_eq!(rb, Err("compile failed".to_string()));
        });
    }

    /// A panicking builder: the follower is never stranded; it becomes the leader and computes.
    #[test]
    fn loom_a_panicking_leader_never_strands_a_waiter() {
        loom::model(|| {
            let table = Arc::new(SingleFlight::<u8, u32>::new());
            let t = Arc::clone(&table);
            let a = loom::thread::spawn(move || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    t.run(&0, || panic!("boom"))
                }))
                .is_err()
            });
            let (v, _) = table.run(&0, || 9);
            // The follower either led itself or joined a flight that then completed with 9; it
            // can never receive the panicking leader's (absent) value.
            assert_eq!(v, 9);
            let _panicked = a.join().expect("thread a");
        });
    }
}
