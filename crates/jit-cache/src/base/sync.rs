//! The synchronisation primitives, swapped for loom's under `--cfg loom` so the models check the
//! same code that ships.

#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex};

/// The guard type returned by `Mutex::lock`, for either implementation.
#[cfg(loom)]
pub(crate) type MutexGuardOf<'a, T> = loom::sync::MutexGuard<'a, T>;
#[cfg(not(loom))]
pub(crate) type MutexGuardOf<'a, T> = std::sync::MutexGuard<'a, T>;

/// Locks a mutex, recovering from poisoning: every critical section in this crate leaves its
/// data valid, so a panic elsewhere never stops the others.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuardOf<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
