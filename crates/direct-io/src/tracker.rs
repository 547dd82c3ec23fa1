//! Counting a slot's copies that finish on another thread, for sinks whose device (or DMA
//! thread) completes copies asynchronously: `wait` returns once every copy begun has finished.

#[cfg(loom)]
use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Per-slot counts of copies begun but not finished. Cloning shares the counts, so the thread
/// that finishes copies holds a clone.
#[derive(Clone, Debug)]
pub struct CopyTracker {
    inner: Arc<(Mutex<Vec<u32>>, Condvar)>,
}

impl CopyTracker {
    /// A tracker for `slots` slots, none with copies pending.
    pub fn new(slots: usize) -> CopyTracker {
        CopyTracker {
            inner: Arc::new((Mutex::new(vec![0; slots]), Condvar::new())),
        }
    }

    fn counts(&self) -> MutexGuard<'_, Vec<u32>> {
        // A panic while holding the lock leaves the counts consistent (each update is one
        // statement), so a poisoned lock is still usable.
        match self.inner.0.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Records that a copy from `slot` has started. Call it before handing the copy over.
    pub fn begin(&self, slot: usize) {
        if let Some(c) = self.counts().get_mut(slot) {
            *c += 1;
        }
    }

    /// Records that a copy from `slot` has finished reading the slot (from any thread).
    pub fn finish(&self, slot: usize) {
        let mut counts = self.counts();
        if let Some(c) = counts.get_mut(slot) {
            *c = c.saturating_sub(1);
        }
        drop(counts);
        self.inner.1.notify_all();
    }

    /// Blocks until every copy begun from `slot` has finished. Everything the finishing
    /// thread did before [`CopyTracker::finish`] happens before this returns.
    pub fn wait(&self, slot: usize) {
        let mut counts = self.counts();
        while counts.get(slot).is_some_and(|&c| c > 0) {
            counts = match self.inner.1.wait(counts) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
    }

    /// Copies from `slot` not yet finished.
    pub fn pending(&self, slot: usize) -> u32 {
        self.counts().get(slot).copied().unwrap_or(0)
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::CopyTracker;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// The producer fills a slot, hands it to a "device" thread that copies it out and calls
    /// `finish`, waits, then refills the slot: the device must see the first fill and the
    /// refill must not race with its read. `wait_before_reuse = false` is the broken ordering.
    fn slot_reuse(wait_before_reuse: bool) {
        loom::model(move || {
            let slot = Arc::new(UnsafeCell::new(0u64));
            let tracker = CopyTracker::new(1);
            // SAFETY (model): only the producer touches the slot before the device thread exists.
            slot.with_mut(|p| unsafe { *p = 1 });
            tracker.begin(0);
            let device = {
                let slot = Arc::clone(&slot);
                let tracker = tracker.clone();
                loom::thread::spawn(move || {
                    // SAFETY (model): loom checks this read against the producer's refill.
                    let seen = slot.with(|p| unsafe { *p });
                    tracker.finish(0);
                    seen
                })
            };
            if wait_before_reuse {
                tracker.wait(0);
            }
            // SAFETY (model): loom reports a data race here if the device may still read.
            slot.with_mut(|p| unsafe { *p = 2 });
            let seen = device.join().expect("device thread");
            assert_eq!(seen, 1, "the device copied the first fill, not the refill");
        });
    }

    #[test]
    fn loom_slot_is_refilled_only_after_its_copy_finished() {
        slot_reuse(true);
    }

    #[test]
    fn loom_negative_control_refill_without_wait_is_caught() {
        let caught = std::panic::catch_unwind(|| slot_reuse(false));
        assert!(
            caught.is_err(),
            "loom must report the race when the producer refills without waiting"
        );
    }

    #[test]
    fn loom_two_copies_from_one_slot_both_finish_before_wait_returns() {
        loom::model(|| {
            let slot = Arc::new(UnsafeCell::new(7u64));
            let tracker = CopyTracker::new(2);
            tracker.begin(1);
            tracker.begin(1);
            let mut devices = Vec::new();
            for _ in 0..2 {
                let slot = Arc::clone(&slot);
                let tracker = tracker.clone();
                devices.push(loom::thread::spawn(move || {
                    // SAFETY (model): loom checks this read against the refill below.
                    let seen = slot.with(|p| unsafe { *p });
                    tracker.finish(1);
                    seen
                }));
            }
            tracker.wait(1);
            // SAFETY (model): both copies finished, so no reader remains.
            slot.with_mut(|p| unsafe { *p = 8 });
            for d in devices {
                assert_eq!(d.join().expect("device thread"), 7, "copies saw the fill");
            }
            assert_eq!(tracker.pending(1), 0, "nothing pending after wait");
        });
    }
}
