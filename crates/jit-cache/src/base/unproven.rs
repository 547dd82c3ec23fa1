//! Why the cache cannot vouch for a compile: its answer is the compiler's own, and it is never
//! published, or replayed as a failure, under records that may not describe it. Each reason has
//! a stable name that `stats` counts.

use std::path::PathBuf;

/// Why the cache cannot vouch for what a compile depended on: its answer is the compiler's own,
/// but nothing is published under records that may not describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unproven {
    /// A file the compile read changed (or vanished) while it ran.
    Moved(PathBuf),
    /// The compile read a file that no include directive's resolution reaches (`#include
    /// MACRO`, or the model disagrees with the compiler), and no trace says where the compiler
    /// looked first.
    Unaccounted(PathBuf),
    /// The trace of the compile is not whole (a lookup it could not record, a process that
    /// outlived it).
    TraceIncomplete,
    /// The dependency file names a file the trace did not see read: the trace missed something.
    TraceMissed(PathBuf),
    /// The compile changed something outside its own directories (a write, a rename, a new
    /// directory): a cached answer would not do it.
    SideEffect(PathBuf),
    /// A file the compile read uses `__DATE__`, `__TIME__` or `__TIMESTAMP__` (and
    /// `SOURCE_DATE_EPOCH` is unset): the output depends on when it was compiled.
    TimeMacro(PathBuf),
    /// An untraced compile read a file that looks a file up by a name only the preprocessor
    /// knows (`#include MACRO`, `__has_include(MACRO)`): where it looked is unknown.
    Computed(PathBuf),
}

crate::base::words::words! {
    /// Why an answer was not cached, by the stable name `stats` counts it under.
    pub(crate) enum NotCached {
        /// [`Unproven::Moved`].
        InputMoved = "input-moved",
        /// [`Unproven::Unaccounted`].
        UnaccountedRead = "unaccounted-read",
        /// [`Unproven::TraceIncomplete`].
        TraceIncomplete = "trace-incomplete",
        /// [`Unproven::TraceMissed`].
        TraceMissedARead = "trace-missed-a-read",
        /// [`Unproven::SideEffect`].
        SideEffect = "side-effect",
        /// [`Unproven::TimeMacro`].
        TimeMacro = "time-macro",
        /// [`Unproven::Computed`].
        ComputedLookup = "computed-lookup",
        /// The root cannot be used (not created, refused): the compile ran privately.
        CacheUnusable = "cache-unusable",
        /// The cache's storage failed during the request (a full disk, an I/O error).
        CacheFailed = "cache-failed",
    }
}

impl Unproven {
    /// The reason's stable name, as `stats` counts it.
    pub(crate) fn kind(&self) -> NotCached {
        match self {
            Unproven::Moved(_) => NotCached::InputMoved,
            Unproven::Unaccounted(_) => NotCached::UnaccountedRead,
            Unproven::TraceIncomplete => NotCached::TraceIncomplete,
            Unproven::TraceMissed(_) => NotCached::TraceMissedARead,
            Unproven::SideEffect(_) => NotCached::SideEffect,
            Unproven::TimeMacro(_) => NotCached::TimeMacro,
            Unproven::Computed(_) => NotCached::ComputedLookup,
        }
    }
}

impl std::fmt::Display for Unproven {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unproven::Moved(path) => write!(f, "{} changed while it compiled", path.display()),
            Unproven::Unaccounted(path) => write!(
                f,
                "the compiler read {}, which no include directive's resolution reaches",
                path.display()
            ),
            Unproven::TraceIncomplete => write!(f, "the trace of the compile is not whole"),
            Unproven::TraceMissed(path) => write!(
                f,
                "the trace did not see {} read, which the dependency file names",
                path.display()
            ),
            Unproven::SideEffect(path) => {
                write!(
                    f,
                    "the compile changed {}, which a hit would not",
                    path.display()
                )
            }
            Unproven::Computed(path) => write!(
                f,
                "{} looks a file up by a name only the preprocessor knows, and the compile ran \
                 untraced",
                path.display()
            ),
            Unproven::TimeMacro(path) => write!(
                f,
                "{} uses __DATE__, __TIME__ or __TIMESTAMP__ (set SOURCE_DATE_EPOCH to cache it)",
                path.display()
            ),
        }
    }
}
