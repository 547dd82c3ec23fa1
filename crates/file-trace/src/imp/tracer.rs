//! [`Tracer::spawn`]: a `std::process::Command` started under the filter, with a supervisor
//! thread serving it (its [`TraceHandle`] is `handle.rs`).

use crate::error::Error;
use crate::imp::filter::Program;
use crate::imp::handle::{setup, TraceHandle};
use crate::imp::hook;
use crate::imp::probe::probe;
use crate::imp::supervisor::Failure;
use crate::support::{Support, SyncWakeUp, Unsupported};
use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// Starts programs traced. Cheap to clone; one tracer can start any number of traces, in any
/// number of threads at once.
#[derive(Clone, Debug)]
pub struct Tracer {
    program: Arc<Program>,
    sync: SyncWakeUp,
    support: Support,
}

impl Tracer {
    /// A tracer, after [`probe`] said this system can trace.
    ///
    /// # Errors
    /// Why tracing is not possible here (see [`Unsupported`]).
    pub fn new() -> Result<Tracer, Unsupported> {
        let support = probe()?;
        Ok(Tracer {
            program: Arc::new(Program::build()),
            sync: SyncWakeUp::IfSupported,
            support,
        })
    }

    /// Whether to ask for synchronous wake-ups (the default asks where the kernel has them).
    pub fn sync_wake_up(mut self, sync: SyncWakeUp) -> Tracer {
        self.sync = sync;
        self
    }

    /// What the probe found.
    pub fn support(&self) -> Support {
        self.support
    }

    /// Spawns `command` traced: it and every process it starts.
    ///
    /// Adds a `pre_exec` hook to `command`, after any the caller added (so the filter is
    /// installed just before `exec`): `PR_SET_NO_NEW_PRIVS`, the filter with a listener, the
    /// listener passed to this process's supervisor thread over a socket pair, and a wait for
    /// the supervisor's go. The hook does nothing once this call returns: spawning the same
    /// `Command` again with `spawn()` runs it untraced, and again through this method traces it.
    ///
    /// The caller waits for and reaps the child as it would without a trace, then calls
    /// [`TraceHandle::finish`].
    ///
    /// # Errors
    /// [`Error::Spawn`] when `spawn` fails (its `io::Error` is kept); [`Error::Hook`] when the
    /// child could not install the filter; [`Error::Setup`] when the socket pair, eventfd or
    /// thread could not be made. The supervisor has ended in every case.
    pub fn spawn(&self, command: &mut Command) -> Result<(Child, TraceHandle), Error> {
        let program_name = PathBuf::from(command.get_program());
        let (parent_end, child_end) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|errno| setup("create the handshake socket pair", errno))?;
        let slot = Arc::new(Slot {
            child_end: AtomicI32::new(child_end.as_raw_fd()),
            parent_end: AtomicI32::new(parent_end.as_raw_fd()),
        });
        let handle = TraceHandle::start(parent_end, self.sync, program_name.clone())?;
        let program = Arc::clone(&self.program);
        let hook_slot = Arc::clone(&slot);
        // SAFETY: the closure runs in the forked child before exec. It reads two atomics (plain
        // loads of memory copied by fork) and calls hook::install_in_child, which makes only
        // raw system calls on stack memory and on the program allocated before fork: no
        // allocation, no locks.
        unsafe {
            command.pre_exec(move || {
                let child_end = hook_slot.child_end.load(Ordering::Relaxed);
                let parent_end = hook_slot.parent_end.load(Ordering::Relaxed);
                if child_end < 0 {
                    return Ok(());
                }
                hook::install_in_child(&program, child_end, parent_end)
            });
        }
        let spawned = command.spawn();
        // From here on the hook is inert, and the supervisor sees end of file if the child
        // never said hello.
        slot.child_end.store(-1, Ordering::Relaxed);
        drop(child_end);
        match spawned {
            Ok(child) => Ok((child, handle)),
            Err(source) => {
                handle.request_stop();
                match handle.join() {
                    Err(Failure::Hook { step, errno }) => Err(Error::Hook {
                        program: program_name,
                        step: step.name(),
                        errno,
                    }),
                    _ => Err(Error::Spawn {
                        program: program_name,
                        source,
                    }),
                }
            }
        }
    }
}

/// The descriptor numbers the `pre_exec` hook reads in the child; -1 once the spawn is over.
struct Slot {
    child_end: AtomicI32,
    parent_end: AtomicI32,
}
