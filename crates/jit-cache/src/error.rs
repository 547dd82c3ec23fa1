//! The cache's error type: every variant names what was being done and to which path or kernel.

use serde::{Deserialize, Serialize};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// An error from the cache.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel spec is unusable (a hostile name, an empty arch list, a NUL in a flag, ...).
    #[error("invalid kernel spec `{name}`: {reason}")]
    InvalidSpec {
        /// The spec's name as given.
        name: String,
        /// The rule it breaks.
        reason: String,
    },
    /// A pack filter would take nothing by mistake (an arch not of the form `sm_NN`).
    #[error("invalid pack filter: {reason}")]
    InvalidPackFilter {
        /// The rule it breaks.
        reason: String,
    },
    /// The cache root is not safe to use (owned by another user, writable by others, a symlink).
    #[error("refusing cache root {path}: {reason}")]
    UnsafeRoot {
        /// The root.
        path: PathBuf,
        /// Why it is refused and what to do.
        reason: String,
    },
    /// An I/O operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// The operation, such as "read meta.json".
        op: &'static str,
        /// The path it was applied to.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A durable filesystem operation failed.
    #[error(transparent)]
    Fs(#[from] durable_fs::Error),
    /// Fingerprinting an input failed (an unreadable source, a FIFO among the headers, ...).
    #[error(transparent)]
    Fingerprint(#[from] fingerprint::Error),
    /// The compiler could not be found, identified or run, or it misbehaved (success without
    /// an output). Shared: every request of a handle gets its one probe's answer.
    #[error("toolchain: {0}")]
    Toolchain(Arc<ToolchainError>),
    /// The kernel failed to compile: the compiler's diagnostics, a timeout or a signal (see
    /// [`CompileFailed::cause`]).
    #[error("{0}")]
    Compile(Arc<CompileFailed>),
    /// Loading an artifact on a GPU failed (feature `cuda`).
    #[error("load `{name}` on the GPU: {reason}")]
    Gpu {
        /// The kernel or function.
        name: String,
        /// The driver's message, or why no driver could be used.
        reason: String,
    },
    /// The same error, received by a thread that waited for another thread's build.
    #[error("{0}")]
    Shared(Arc<Error>),
    /// A stored entry's namespace, key or file name breaks the store's rules.
    #[error("invalid stored entry {what}: {reason}")]
    InvalidStoreKey {
        /// What was given (`namespace "x"`, `key "y"`, `file "z"`).
        what: String,
        /// The rule it breaks.
        reason: &'static str,
    },
    /// Another thread, process or host was producing the stored entry for longer than the
    /// caller said to wait.
    #[error("stored entry {namespace}/{key}: still being produced elsewhere after {waited:?} (lock {lock})")]
    Busy {
        /// The entry's namespace.
        namespace: String,
        /// The caller's key.
        key: String,
        /// The key's lock file.
        lock: PathBuf,
        /// How long this call waited.
        waited: std::time::Duration,
    },
    /// A kernel pack is truncated, corrupt or of another format: refused at the first damage
    /// found, and nothing from the damaged part was published.
    #[error(
        "refusing pack {path}: {reason} at offset {offset}{}",
        entry_suffix(entry)
    )]
    Pack {
        /// The pack file.
        path: PathBuf,
        /// Where the damage was found (bytes from the start of the file).
        offset: u64,
        /// The entry the damaged bytes belong to, when they belong to one.
        entry: Option<String>,
        /// What is wrong there.
        reason: String,
    },
    /// The caller's producer of a stored entry failed; nothing was published.
    #[error("produce stored entry {namespace}/{key}: {source}")]
    Produce {
        /// The entry's namespace.
        namespace: String,
        /// The caller's key.
        key: String,
        /// The producer's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn entry_suffix(entry: &Option<String>) -> String {
    entry
        .as_deref()
        .map(|e| format!(" (entry {e})"))
        .unwrap_or_default()
}

impl Error {
    /// The same error naming other paths (its I/O paths; other variants name none of a
    /// process's own): see `durable_fs::Error::map_paths`.
    pub(crate) fn map_paths(self, mut map: impl FnMut(&std::path::Path) -> PathBuf) -> Error {
        match self {
            Error::Io { op, path, source } => Error::Io {
                op,
                path: map(&path),
                source,
            },
            Error::Fs(e) => Error::Fs(e.map_paths(map)),
            other => other,
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// The compile failure behind this error, if it is one.
    pub fn compile_failure(&self) -> Option<&CompileFailed> {
        match self {
            Error::Compile(failure) => Some(failure),
            Error::Shared(inner) => inner.compile_failure(),
            _ => None,
        }
    }

    /// Whether the error comes from the cache's storage (full, read-only or failing filesystem,
    /// unsafe root) rather than from the kernel or the compiler. Such errors never fail a build:
    /// the kernel is compiled uncached instead.
    pub(crate) fn is_storage(&self) -> bool {
        match self {
            Error::Io { .. } | Error::Fs(_) | Error::UnsafeRoot { .. } => true,
            Error::Shared(inner) => inner.is_storage(),
            _ => false,
        }
    }
}

/// Why the compiler could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolchainError {
    /// No nvcc was found: every place searched, in order.
    #[error(transparent)]
    NotFound(#[from] nvcc::LocateError),
    /// nvcc could not be run, or misbehaved.
    #[error(transparent)]
    Nvcc(#[from] nvcc::Error),
    /// nvcc or a companion could not be identified (hashed, or its `--version` read).
    #[error(transparent)]
    Identity(#[from] fingerprint::Error),
    /// `nvcc --version` names no release.
    #[error("no `release X.Y` in {} --version: {version}", path.display())]
    NoRelease {
        /// The compiler.
        path: PathBuf,
        /// What `--version` printed.
        version: String,
    },
    /// Another part of the cache failed while identifying the compiler.
    #[error(transparent)]
    Cache(Box<Error>),
    /// A batch's worker thread ended without answering its kernel (it panicked).
    #[error("a batch worker stopped before answering")]
    WorkerStopped,
}

impl From<ToolchainError> for Error {
    fn from(e: ToolchainError) -> Error {
        Error::Toolchain(Arc::new(e))
    }
}

/// Why a compile failed. Only [`FailureCause::Source`] is the source's fault: only such a
/// failure is recorded and given to later callers without compiling again.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureCause {
    /// The compiler rejected the inputs; its diagnostics say why.
    #[default]
    Source,
    /// The compile ran past its timeout and was killed with everything it started.
    Timeout {
        /// The timeout, in milliseconds.
        after_ms: u64,
    },
    /// The compiler was killed by a signal (the OOM killer, an operator).
    Signal {
        /// The signal number.
        signal: i32,
    },
    /// The compiler could not write its outputs or temporaries (a full, read-only or failing
    /// disk): the environment's fault, not the source's.
    Environment {
        /// The compiler's words for it.
        reason: String,
    },
}

/// A failed compile, as reported to every caller that asked for the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompileFailed {
    /// The kernel's name.
    pub name: String,
    /// The compiler's command line.
    pub command: Vec<String>,
    /// The exit code, if the compiler exited (None when killed, for example at a timeout).
    pub exit_code: Option<i32>,
    /// The parsed diagnostics.
    pub diagnostics: Vec<nvcc::Diagnostic>,
    /// The end of the compiler's standard error.
    pub stderr_tail: String,
    /// True when this failure was answered from the cache's failure record, not a fresh compile.
    #[serde(default)]
    pub from_record: bool,
    /// Why it failed.
    #[serde(default)]
    pub cause: FailureCause,
    /// The headers the failed compile read (from its dependency file, when it wrote one).
    #[serde(skip)]
    pub(crate) headers_read: Option<Vec<PathBuf>>,
}

impl std::fmt::Display for CompileFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let code = match (&self.cause, self.exit_code) {
            (FailureCause::Timeout { after_ms }, _) => {
                format!("killed after the {} s timeout", *after_ms as f64 / 1000.0)
            }
            (FailureCause::Signal { signal }, _) => format!("killed by signal {signal}"),
            (FailureCause::Environment { reason }, _) => {
                format!("the environment failed: {reason}")
            }
            (_, Some(c)) => format!("exit code {c}"),
            (_, None) => "killed".to_string(),
        };
        let recorded = if self.from_record {
            ", recorded earlier; retry to recompile"
        } else {
            ""
        };
        writeln!(f, "compile of `{}` failed ({code}{recorded})", self.name)?;
        for diagnostic in &self.diagnostics {
            writeln!(f, "  {diagnostic}")?;
        }
        if self.diagnostics.is_empty() {
            write!(f, "{}", self.stderr_tail)?;
        }
        Ok(())
    }
}

impl std::error::Error for CompileFailed {}

/// The cache's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
