//! The fork rule of every process-wide structure: what a child forked without exec keeps of
//! its parent's turns, lock descriptors and heartbeat.
//!
//! After `fork` only the forking thread exists in the child, yet the child holds a copy of all
//! of the parent's memory and descriptors: the turns table lists keys whose producers are the
//! parent's threads (the child could never take those keys), every held `flock` is shared with
//! the child's copy of its descriptor (a parent killed -9 would keep its key locked while the
//! child lives), and the heartbeat thread is gone while the table says it runs (the child's
//! staging directories would get no beat under the shared protocol). One `pthread_atfork`
//! handler, registered once, gives each its rule. The prepare side takes each structure's mutex
//! so that no other thread is inside one at the fork (the child's copy is whole and unlocked);
//! the child side then resets the turns, closes the inherited lock and staging descriptors
//! without unlocking them, and lets the heartbeat restart on the child's next staging
//! directory. The parent side only lets go. A foundation: each structure registers its own
//! rule ([`rule`]), so this module names none of them. Per-handle tables (a `Cache`'s single-flight and
//! memo tables) are the handle's: a child that uses its parent's handle gets the rule of
//! `single_flight.rs`.
//!
//! Read pins (the shared `flock` an entry value holds on its directory, `pin.rs`) are left to
//! the child on purpose: the child's copy of the `Artifact` or `StoredEntry` relies on its entry
//! staying while it reads the files, and dropping that copy closes the child's descriptor.
//! Eviction waits for the last holder, as it waits for a thread's.

use std::cell::RefCell;
use std::sync::{Mutex, MutexGuard, Once};

/// One structure's side of a fork, taken by the prepare handler (holding its mutex) and handed
/// to the parent's or the child's handler.
pub(crate) trait Held {
    /// In the child: the structure becomes the child's own.
    fn in_child(self: Box<Self>);
}

/// Takes a structure for a fork (its mutex, held until the matching [`Held`] is dropped).
pub(crate) type Prepare = fn() -> Box<dyn Held>;

/// The structures' rules, in registration order (a structure registers when first used).
fn rules() -> &'static Mutex<Vec<Prepare>> {
    static RULES: Mutex<Vec<Prepare>> = Mutex::new(Vec::new());
    &RULES
}

/// What the prepare handler took, held on the forking thread until the parent's or the
/// child's handler.
struct Prepared {
    /// Held too, so that no registration is half done at the fork.
    _rules: MutexGuard<'static, Vec<Prepare>>,
    locks: durable_fs::ForkPrepared,
    held: Vec<Box<dyn Held>>,
}

thread_local! {
    static PREPARED: RefCell<Option<Prepared>> = const { RefCell::new(None) };
}

/// Registers the fork rule of the lock and staging descriptors, once per process (everything
/// that takes a key's lock or makes a staging directory calls this first).
pub(crate) fn register() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: the three handlers are `extern "C"` functions with no arguments, as
        // `pthread_atfork` requires, and live for the whole program. A failure (ENOMEM) leaves
        // forked children as they were before this rule: nothing to undo.
        let _ = unsafe { libc::pthread_atfork(Some(prepare), Some(in_parent), Some(in_child)) };
    });
}

/// Registers a process-wide structure's rule (call it once, when the structure is made).
pub(crate) fn rule(prepare: Prepare) {
    register();
    rules()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(prepare);
}

extern "C" fn prepare() {
    let rules = rules().lock().unwrap_or_else(|p| p.into_inner());
    let held = rules.iter().map(|prepare| prepare()).collect();
    let prepared = Prepared {
        _rules: rules,
        locks: durable_fs::prepare_fork(),
        held,
    };
    PREPARED.with(|p| *p.borrow_mut() = Some(prepared));
}

extern "C" fn in_parent() {
    if let Some(prepared) = PREPARED.with(|p| p.borrow_mut().take()) {
        prepared.locks.in_parent();
    }
}

extern "C" fn in_child() {
    let Some(prepared) = PREPARED.with(|p| p.borrow_mut().take()) else {
        return;
    };
    close_without_unlocking(&prepared.locks.in_child());
    for held in prepared.held {
        held.in_child();
    }
}
/// Makes each descriptor number refer to `/dev/null` instead of the parent's lock: `dup2`
/// closes the child's copy of the open file description (which does not unlock it: the parent
/// holds its own copy) and leaves the number valid for the guard that owns it, which closes it
/// when dropped, as any descriptor.
fn close_without_unlocking(fds: &[std::os::fd::RawFd]) {
    if fds.is_empty() {
        return;
    }
    let Ok(null) = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return;
    };
    for &fd in fds {
        // SAFETY: `fd` is a descriptor this process holds open (the registry lists only open
        // lock descriptors, forgotten before they are closed) and `null` is open; `dup2`
        // replaces `fd` atomically and touches no memory.
        unsafe {
            libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), fd);
            // `dup2` leaves the new number without `O_CLOEXEC`; the original had it.
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}
