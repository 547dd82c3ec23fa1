//! Two engines behind one interface, io_uring and a pool of `pread` threads, and the automatic
//! choice between them with its reason recorded.

use crate::op::{Done, Op};
use crate::threads::ThreadPool;
use crate::uring::UringBackend;
use crate::Error;
use std::fmt;

/// Which engine performs reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EngineKind {
    /// io_uring.
    IoUring,
    /// A pool of threads calling `pread`.
    Threads,
}

impl EngineKind {
    /// A short name for messages.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::IoUring => "io_uring",
            EngineKind::Threads => "threads",
        }
    }
}

/// Which engine to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum EngineChoice {
    /// io_uring where the kernel allows it, else threads.
    #[default]
    Auto,
    /// io_uring or an error.
    IoUring,
    /// Threads.
    Threads,
}

/// Engine settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// io_uring submission queue entries.
    pub queue_depth: u32,
    /// Reader threads for the thread engine (and for io_uring's EOPNOTSUPP fallback).
    pub threads: usize,
    /// Register the slot buffers with io_uring (falls back to plain reads on ENOMEM).
    pub registered_buffers: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            queue_depth: 32,
            threads: 4,
            registered_buffers: true,
        }
    }
}

/// Why the engine in use was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EngineReason {
    /// The caller asked for it.
    Requested,
    /// Auto: `io_uring_setup` succeeded.
    IoUringAvailable,
    /// Auto: `/proc/sys/kernel/io_uring_disabled` is 2, so io_uring is off for everyone.
    IoUringDisabledSysctl,
    /// Auto: `io_uring_setup` failed with this errno (EPERM in containers and under seccomp,
    /// ENOSYS on kernels without it).
    IoUringSetupFailed {
        /// The errno.
        errno: i32,
        /// Its description.
        message: String,
    },
}

impl fmt::Display for EngineReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineReason::Requested => f.write_str("requested by the caller"),
            EngineReason::IoUringAvailable => f.write_str("io_uring_setup succeeded"),
            EngineReason::IoUringDisabledSysctl => {
                f.write_str("kernel.io_uring_disabled is 2: io_uring is off on this machine")
            }
            EngineReason::IoUringSetupFailed { errno, message } => {
                write!(f, "io_uring_setup failed with errno {errno} ({message})")
            }
        }
    }
}

enum Backend {
    Uring(Box<UringBackend>),
    Threads(ThreadPool),
}

/// A read engine: io_uring or a thread pool, with the reason it was chosen.
pub struct Engine {
    backend: Backend,
    kind: EngineKind,
    reason: EngineReason,
    config: EngineConfig,
    poisoned: bool,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("kind", &self.kind)
            .field("reason", &self.reason)
            .field("config", &self.config)
            .finish()
    }
}

impl Engine {
    /// Sets up an engine. With [`EngineChoice::Auto`], io_uring is used unless
    /// `kernel.io_uring_disabled` is 2 or `io_uring_setup` fails (EPERM, ENOSYS, anything),
    /// in which case threads are used and the reason recorded. [`EngineChoice::IoUring`]
    /// returns [`Error::EngineSetup`] instead of falling back.
    pub fn new(choice: EngineChoice, config: EngineConfig) -> Result<Engine, Error> {
        let threads = |reason| {
            ThreadPool::new(config.threads)
                .map(|pool| Engine {
                    backend: Backend::Threads(pool),
                    kind: EngineKind::Threads,
                    reason,
                    config,
                    poisoned: false,
                })
                .map_err(|e| Error::EngineSetup {
                    engine: "threads",
                    reason: format!("spawn reader threads: {e}"),
                })
        };
        let uring = |reason| {
            UringBackend::new(config.queue_depth, config.threads).map(|b| Engine {
                backend: Backend::Uring(Box::new(b)),
                kind: EngineKind::IoUring,
                reason,
                config,
                poisoned: false,
            })
        };
        match choice {
            EngineChoice::Threads => threads(EngineReason::Requested),
            EngineChoice::IoUring => {
                uring(EngineReason::Requested).map_err(|e| Error::EngineSetup {
                    engine: "io_uring",
                    reason: format!("io_uring_setup: {e}"),
                })
            }
            EngineChoice::Auto => {
                if io_uring_disabled() == Some(2) {
                    return threads(EngineReason::IoUringDisabledSysctl);
                }
                match uring(EngineReason::IoUringAvailable) {
                    Ok(e) => Ok(e),
                    Err(e) => threads(EngineReason::IoUringSetupFailed {
                        errno: e.raw_os_error().unwrap_or(0),
                        message: e.to_string(),
                    }),
                }
            }
        }
    }

    /// The engine in use.
    pub fn kind(&self) -> EngineKind {
        self.kind
    }

    /// Why this engine is in use.
    pub fn reason(&self) -> &EngineReason {
        &self.reason
    }

    /// The settings it was built with.
    pub fn config(&self) -> EngineConfig {
        self.config
    }

    /// Operations the io_uring engine resubmitted on its thread pool after EOPNOTSUPP.
    pub fn resubmitted_on_pool(&self) -> u64 {
        match &self.backend {
            Backend::Uring(u) => u.resubmitted_on_pool,
            Backend::Threads(_) => 0,
        }
    }

    /// Registers buffers with io_uring. Returns Ok(false) when not applicable (threads, or
    /// disabled in the config) and the error (ENOMEM when over RLIMIT_MEMLOCK) when refused.
    pub(crate) fn register(&mut self, bufs: &[(*mut u8, usize)]) -> std::io::Result<bool> {
        match &mut self.backend {
            Backend::Uring(u) if self.config.registered_buffers => u.register(bufs).map(|_| true),
            _ => Ok(false),
        }
    }

    pub(crate) fn unregister(&mut self) {
        if let Backend::Uring(u) = &mut self.backend {
            u.unregister();
        }
    }

    /// Marks the engine unusable: reads may still be in flight that no one will reap.
    pub(crate) fn poison(&mut self) {
        self.poisoned = true;
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    pub(crate) fn submit(&mut self, op: Op) -> std::io::Result<()> {
        match &mut self.backend {
            Backend::Uring(u) => u.submit(op),
            Backend::Threads(t) => t.submit(op),
        }
    }

    pub(crate) fn complete(&mut self) -> std::io::Result<Done> {
        match &mut self.backend {
            Backend::Uring(u) => u.complete(),
            Backend::Threads(t) => t.complete(),
        }
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn inject_eopnotsupp(&mut self, n: usize) {
        if let Backend::Uring(u) = &mut self.backend {
            u.inject_eopnotsupp = n;
        }
    }
}

/// The value of `/proc/sys/kernel/io_uring_disabled`, when readable.
fn io_uring_disabled() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()?
        .trim()
        .parse()
        .ok()
}
