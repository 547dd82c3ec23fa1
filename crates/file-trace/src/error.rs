//! Errors of starting and running a trace.

use crate::trace::Errno;
use std::io;
use std::path::PathBuf;

/// Why a traced run could not be started, or its trace not recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A resource the trace needs (a socket pair, an eventfd, a thread) could not be made.
    #[error("start a trace: {op}: {source}")]
    Setup {
        /// What was being made.
        op: &'static str,
        /// The error.
        source: io::Error,
    },
    /// `Command::spawn` failed (the program does not exist, is busy, a `pre_exec` hook
    /// failed, ...). Its `execve` attempts, if any, were traced, but no trace is returned.
    #[error("spawn {program} traced: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// The error `spawn` returned.
        source: io::Error,
    },
    /// The child could not install the filter (its `spawn` failed with this error too).
    #[error("install the seccomp filter in the child of {program}: {step}: {errno}")]
    Hook {
        /// The program.
        program: PathBuf,
        /// The step that failed: `prctl(PR_SET_NO_NEW_PRIVS)` or `seccomp(SET_MODE_FILTER)`.
        step: &'static str,
        /// Its error (`EBUSY` for `seccomp`: another filter of this process already has a
        /// listener, so the caller itself is traced).
        errno: Errno,
    },
    /// The supervisor could not go on serving the listener; the calls still waiting failed
    /// with `ENOSYS` in the tracee.
    #[error("trace supervisor: {op}: {errno}")]
    Supervisor {
        /// The operation that failed.
        op: &'static str,
        /// Its error.
        errno: Errno,
    },
    /// The supervisor thread panicked (a bug in this crate).
    #[error("the trace supervisor thread panicked")]
    Panicked,
}

impl Error {
    /// The error `Command::spawn` returned, for [`Error::Spawn`]: a caller that retries
    /// `ETXTBSY` reads it here.
    pub fn spawn_error(&self) -> Option<&io::Error> {
        match self {
            Error::Spawn { source, .. } => Some(source),
            _ => None,
        }
    }
}
