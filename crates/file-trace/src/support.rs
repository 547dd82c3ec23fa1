//! What tracing can do on this system, and why it cannot.

use crate::trace::Errno;

/// What this system's tracing can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Support {
    /// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` works (Linux 6.6+): tracing costs little.
    /// Without it every traced call costs two cross-CPU wake-ups (about +18% on a compile).
    pub sync_wake_up: bool,
    /// `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` works (Linux 5.19+).
    pub killable_wait: bool,
}

/// Why tracing is not possible here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unsupported {
    /// Not Linux on x86_64 or aarch64.
    #[error("file tracing needs Linux on x86_64 or aarch64")]
    Platform,
    /// The kernel or a sandbox refused the filter: `EINVAL` before Linux 5.0 (no listeners),
    /// `EACCES`/`EPERM` under a sandbox that forbids `seccomp`, `ENOSYS` without seccomp.
    #[error("the kernel refused the seccomp filter: {step}: {errno}")]
    Refused {
        /// The failing step.
        step: &'static str,
        /// Its error.
        errno: Errno,
    },
    /// This process runs under a seccomp filter that already has a listener (it is itself
    /// traced, by this crate or a container runtime): listeners do not nest (`EBUSY`).
    #[error("this process is already under a seccomp listener; listeners do not nest (EBUSY)")]
    AlreadyTraced,
    /// `SECCOMP_USER_NOTIF_FLAG_CONTINUE` is refused: Linux before 5.5.
    #[error("the kernel cannot let a notified call continue (SECCOMP_USER_NOTIF_FLAG_CONTINUE needs Linux 5.5)")]
    NoContinue,
    /// A step of the probe itself failed.
    #[error("file-trace probe: {op}: {errno}")]
    Probe {
        /// The failing step.
        op: &'static str,
        /// Its error.
        errno: Errno,
    },
    /// The probe ran, but its trace did not record the one call it made, as expected.
    #[error("file-trace probe: the trace of faccessat(\"/\") was {found}")]
    Mismatch {
        /// What the trace held instead.
        found: String,
    },
}

/// Whether to ask for synchronous wake-ups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncWakeUp {
    /// Ask for `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`; run without it where the kernel refuses.
    #[default]
    IfSupported,
    /// Do not ask (to measure, or to test the slower path).
    Off,
}
