//! [`TraceHandle`]: a running trace's supervisor thread, and the handle that waits for its
//! trace or stops it; [`Tracer::spawn`](crate::Tracer::spawn) and the probe each start one.

use crate::error::Error;
use crate::imp::supervisor::{supervise, Failure};
use crate::support::SyncWakeUp;
use crate::trace::{Errno, Trace};
use rustix::event::{eventfd, EventfdFlags};
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

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

/// A setup step's failure as [`Error::Setup`].
pub(crate) fn setup(op: &'static str, errno: rustix::io::Errno) -> Error {
    Error::Setup {
        op,
        source: io::Error::from_raw_os_error(errno.raw_os_error()),
    }
}

fn failure_error(failure: Failure, program: PathBuf) -> Error {
    match failure {
        Failure::Hook { step, errno } => Error::Hook {
            program,
            step: step.name(),
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
