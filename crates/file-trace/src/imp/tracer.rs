//! [`Tracer::spawn`]: a `std::process::Command` started under the filter, with a supervisor
//! thread serving it, and the [`TraceHandle`] that ends the session.

use crate::error::Error;
use crate::imp::filter::Program;
use crate::imp::hook::{self, Step};
use crate::imp::probe::probe;
use crate::imp::supervisor::{supervise, Failure};
use crate::support::{Support, SyncWakeUp, Unsupported};
use crate::trace::{Errno, Trace};
use rustix::event::{eventfd, EventfdFlags};
use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

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
                        step: step_name(step),
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

/// A running trace's supervisor.
///
/// Dropping it stops the supervisor at once (calls still waiting are answered; later calls of
/// any surviving tracee fail with `ENOSYS`) and discards the trace.
#[must_use = "call finish() after reaping the child to get the trace"]
#[derive(Debug)]
pub struct TraceHandle {
    stop: Arc<OwnedFd>,
    done: mpsc::Receiver<Result<Trace, Failure>>,
    thread: Option<JoinHandle<()>>,
    program: PathBuf,
}

impl TraceHandle {
    /// Starts the supervisor thread on the parent's end of the socket pair.
    pub(crate) fn start(
        socket: OwnedFd,
        sync: SyncWakeUp,
        program: PathBuf,
    ) -> Result<TraceHandle, Error> {
        let stop = Arc::new(
            eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
                .map_err(|errno| setup("create the stop eventfd", errno))?,
        );
        let (sender, done) = mpsc::channel();
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("file-trace".into())
            .spawn(move || {
                let result = supervise(socket, &thread_stop, sync);
                // The receiver is gone only when the handle was dropped: nobody wants the trace.
                let _ = sender.send(result);
            })
            .map_err(|source| Error::Setup {
                op: "start the supervisor thread",
                source,
            })?;
        Ok(TraceHandle {
            stop,
            done,
            thread: Some(thread),
            program,
        })
    }

    /// Ends the trace and returns it. Call it after the child was reaped (and, if it was
    /// killed, its process group too).
    ///
    /// The trace ends by itself once no task holds the filter: at once after a normal run,
    /// since the kernel releases a task's filter when it is reaped. If some task still holds it
    /// after `grace` (a process that left the group, a zombie no one reaps), the supervisor
    /// answers what is already waiting and stops: [`End::Stopped`](crate::End::Stopped).
    ///
    /// # Errors
    /// [`Error::Supervisor`] when the supervisor failed mid-trace, [`Error::Panicked`].
    pub fn finish(mut self, grace: Duration) -> Result<Trace, Error> {
        let program = std::mem::take(&mut self.program);
        match self.wait(grace) {
            Some(Ok(trace)) => Ok(trace),
            Some(Err(failure)) => Err(failure_error(failure, program)),
            None => Err(Error::Panicked),
        }
    }

    /// [`TraceHandle::finish`] without the error mapping; `None` when the supervisor panicked.
    pub(crate) fn wait(mut self, grace: Duration) -> Option<Result<Trace, Failure>> {
        let result = match self.done.recv_timeout(grace) {
            Ok(result) => Some(result),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.request_stop();
                self.done.recv().ok()
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
        };
        self.join_thread();
        result
    }

    /// Asks the supervisor to stop.
    pub(crate) fn request_stop(&self) {
        // Writing 1 to an eventfd can fail only if the counter would overflow, which a few
        // writes of 1 never do; the supervisor polls it for readability.
        let _ = rustix::io::write(&*self.stop, &1u64.to_ne_bytes());
    }

    /// Waits for the supervisor's result (after a stop request or the child's end).
    pub(crate) fn join(mut self) -> Result<Trace, Failure> {
        let result = self.done.recv();
        self.join_thread();
        result.unwrap_or(Err(Failure::NotStarted))
    }

    fn join_thread(&mut self) {
        if let Some(thread) = self.thread.take() {
            // A panic was reported as a disconnected channel already.
            let _ = thread.join();
        }
    }
}

impl Drop for TraceHandle {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.request_stop();
            self.join_thread();
        }
    }
}

fn setup(op: &'static str, errno: rustix::io::Errno) -> Error {
    Error::Setup {
        op,
        source: io::Error::from_raw_os_error(errno.raw_os_error()),
    }
}

pub(crate) fn step_name(step: Step) -> &'static str {
    match step {
        Step::Installed => "install",
        Step::NoNewPrivs => "prctl(PR_SET_NO_NEW_PRIVS)",
        Step::Seccomp => "seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER)",
    }
}

fn failure_error(failure: Failure, program: PathBuf) -> Error {
    match failure {
        Failure::Hook { step, errno } => Error::Hook {
            program,
            step: step_name(step),
            errno,
        },
        Failure::Io { op, errno } => Error::Supervisor { op, errno },
        Failure::NotStarted => Error::Supervisor {
            op: "handshake: the child ended before installing the filter",
            errno: Errno(libc::ECHILD),
        },
        Failure::Protocol => Error::Supervisor {
            op: "handshake: the child sent no listener",
            errno: Errno(libc::EPROTO),
        },
    }
}
