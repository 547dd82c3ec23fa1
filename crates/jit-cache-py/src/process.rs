//! What a forked child may use of its parent's objects: nothing that holds a lock, a temp or a
//! half-made build.
//!
//! vLLM and SGLang start workers with multiprocessing's fork start method. A child is a copy of
//! the parent with one thread: a cache handle, a batch or a lock guard it inherits may be in the
//! middle of another thread's work (a mutex held, a staging directory half written, a key lock
//! taken). So an inherited object is never used nor dropped in the child: [`PerProcess`] gives
//! each process a value of its own (the parent's is leaked in the child, never touched), and
//! [`ForkOwned`] refuses a value to any process but its maker's and forgets it when dropped
//! elsewhere (dropping a batch would remove the parent's temps; a lock guard's `LOCK_UN` would
//! release the parent's lock, since both share one open file description).

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

/// This process's id (a system call each time, so a forked child sees its own).
pub(crate) fn pid() -> u32 {
    std::process::id()
}

/// A value made once per process: the first use in a forked child makes the child its own.
///
/// Lock-free, so that a child never waits on a mutex another thread of the parent held at the
/// fork. A value made by another process is leaked, never dropped: its drop could release the
/// parent's locks or remove its temps.
pub(crate) struct PerProcess<T> {
    slot: AtomicPtr<(u32, T)>,
}

impl<T> PerProcess<T> {
    /// An empty slot.
    pub(crate) const fn new() -> Self {
        PerProcess {
            slot: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// This process's value, made by `init` on first use (in this process).
    pub(crate) fn get_or_try_init<E>(&self, init: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        let me = pid();
        let mut init = Some(init);
        let mut made: Option<Box<(u32, T)>> = None;
        loop {
            let current = self.slot.load(Ordering::Acquire);
            // SAFETY: a non-null slot was made by `Box::into_raw` below and is freed only by
            // `Drop` (which has `&mut self`, so no `&T` from this method is alive then).
            if let Some((owner, value)) = unsafe { current.as_ref() } {
                if *owner == me {
                    // Another thread of this process may have won a race: ours is dropped.
                    drop(made);
                    return Ok(value);
                }
            }
            let fresh = match made.take() {
                Some(fresh) => fresh,
                None => match init.take() {
                    Some(init) => Box::new((me, init()?)),
                    None => continue,
                },
            };
            let fresh = Box::into_raw(fresh);
            match self
                .slot
                .compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                // The replaced slot (another process's, or null) is leaked on purpose: see the
                // type's documentation.
                // SAFETY: `fresh` is now published; it lives until `Drop`.
                Ok(_) => return Ok(unsafe { &(*fresh).1 }),
                // SAFETY: `fresh` was never published, so it is still ours alone.
                Err(_) => made = Some(unsafe { Box::from_raw(fresh) }),
            }
        }
    }
}

impl<T> Drop for PerProcess<T> {
    fn drop(&mut self) {
        let current = *self.slot.get_mut();
        // SAFETY: see `get_or_try_init`; `&mut self` means no borrow of the value is alive.
        if let Some((owner, _)) = unsafe { current.as_ref() } {
            if *owner == pid() {
                drop(unsafe { Box::from_raw(current) });
            }
        }
    }
}

// SAFETY: the slot is only ever read through `&T` (shared) and freed with `&mut self`; a
// `PerProcess<T>` is as thread-safe as `T` itself is.
unsafe impl<T: Send + Sync> Sync for PerProcess<T> {}
unsafe impl<T: Send> Send for PerProcess<T> {}

/// A value usable only in the process that made it, and forgotten (never dropped) elsewhere.
pub(crate) struct ForkOwned<T> {
    owner: u32,
    value: Option<T>,
}

impl<T> ForkOwned<T> {
    /// Owned by this process.
    pub(crate) fn new(value: T) -> Self {
        ForkOwned {
            owner: pid(),
            value: Some(value),
        }
    }

    /// Whether this process made it.
    pub(crate) fn is_ours(&self) -> bool {
        self.owner == pid()
    }

    /// The value, in the process that made it; `None` in a forked child or once taken.
    pub(crate) fn get_mut(&mut self) -> Option<&mut T> {
        if self.is_ours() {
            self.value.as_mut()
        } else {
            None
        }
    }

    /// The value, in the process that made it.
    pub(crate) fn get(&self) -> Option<&T> {
        if self.is_ours() {
            self.value.as_ref()
        } else {
            None
        }
    }

    /// Takes the value out, in the process that made it.
    pub(crate) fn take(&mut self) -> Option<T> {
        if self.is_ours() {
            self.value.take()
        } else {
            None
        }
    }
}

impl<T> Drop for ForkOwned<T> {
    fn drop(&mut self) {
        if !self.is_ours() {
            if let Some(value) = self.value.take() {
                std::mem::forget(value);
            }
        }
    }
}
