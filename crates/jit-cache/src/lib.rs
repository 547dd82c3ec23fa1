//! A content-keyed, crash-safe, single-flight cache of compiled GPU kernels.
//!
//! ```no_compile
//! let cache = Cache::open(root)?;
//! let answer = cache.get_or_build(&KernelSpec::from_file("kernels/gemm.cu").include_dir("include"))?;
//! println!("{}: {}", answer.outcome, answer.artifact.path().display()); // hit, built or rebuilt (why)
//! ```
//!
//! # Guarantees
//! - **Never partial.** An entry becomes visible with one rename of a staging directory whose
//!   files were written and fsynced, `meta.json` last; a reader opens the entry directory once and
//!   reads everything relative to it, so it sees no entry or a whole one, never a mix of two.
//! - **Never stale, never another request's.** A request is resolved once, when it is made
//!   (the working directory of that moment, every argument read by nvcc's and GCC's option
//!   tables; an unknown or refused one is an [`Error::InvalidSpec`] naming it). Keys are content
//!   digests of the source and its spelling, the flags as spelled, defines, arch list, output
//!   kind, the search lists as spelled and GCC's merge of them, compiler identity (binary,
//!   companions, version), the identity of the host compiler the request uses (`-ccbin`), the
//!   environment that changes nvcc's output, and the caller's extra components; never mtimes.
//!   Each entry also records what its compile depended on: the files it read or ran, by content,
//!   and every place it looked and found nothing, by GCC's search rules and by a trace of the
//!   compile and all its programs. A hit revalidates both (a `stat` each, through settled stamps
//!   and the stat cache).
//! - **Never guesses.** A compile the cache cannot vouch for is answered with its own output,
//!   uncached, with a warning, and counted ([`Stats::not_cached`]): its inputs changed while it
//!   ran, it changed files outside its own directories, it used `__DATE__`/`__TIME__` without
//!   `SOURCE_DATE_EPOCH`, its trace is incomplete or missed a read its dependency file names,
//!   or, untraced (`JIT_CACHE_TRACE=0`), it read what the include model cannot account for.
//! - **Durable.** Nothing is reported built before its data and directory entries are fsynced
//!   (`durable-fs`); an fsync error is returned, never retried into success, never published.
//! - **Compiled once.** Threads of one process share one build for an identical request (same
//!   key and search path); processes share one build through a per-key `flock` held from the
//!   re-check through publication. A failure of the source's own is recorded with what it depended
//!   on, so the next callers get its diagnostics at once until an input changes or they
//!   [`Cache::retry`]; a timeout, a signal or a full disk is never recorded.
//! - **kill -9 safe.** Locks die with their holders; staging directories of dead builders are
//!   swept; a half-built entry is never visible.
//! - **Never fails the application for the cache's sake.** A full, read-only or failing cache
//!   compiles privately and says so in [`Answer::warning`].
//! - **Pinned artifacts.** An [`Artifact`]'s path stays valid while it lives: it holds a shared
//!   lock on its entry, and eviction skips pinned entries.
//!
//! # Limitations
//! - NFS: `flock` is emulated with `fcntl` locks and needs the lock file open for writing (it is);
//!   a loser that cannot see the winner's entry yet (negative lookup cache) uses a private copy.
//! - Toolkit headers and the host compiler's built-in directories are revalidated once per
//!   process; everything else on every hit. A header whose stat tuple (device, inode, size,
//!   mtime, ctime) is unchanged since it was hashed is taken as unchanged without re-hashing when
//!   the tuple was settled then: older than a reading of the kernel's coarse clock taken before
//!   the file was read, on a local filesystem with nanosecond timestamps (a second older with
//!   whole-second timestamps); older than two seconds on NFS, FUSE or an unknown filesystem,
//!   whose timestamps may come from a server's clock (git's racy-timestamp problem).
//! - Every lookup the trace saw is recorded by what it found (a file by its content, a
//!   directory by its existence, a symlink by its target text, nothing as an absence). A
//!   directory a compile listed is recorded by its stamp, which no other host can check: such a
//!   variant is never fetched from a remote tier. See ARCHITECTURE.md, "The include model".
//! - A stale or corrupt entry is moved aside before its replacement is renamed in, so a reader
//!   may briefly find the entry absent (never partial).
//! - A team cache (`RootMode::Team`, CLI `--team`) needs its root prepared by an administrator:
//!   group-owned, `chmod 2770`.
//! - Counts of how requests were answered are saved per host when a handle is dropped (or
//!   [`Cache::save_state`]); a process killed before that loses its counts, never an entry.
//!
//! # Example
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use jit_cache::{Cache, KernelSpec, Outcome};
//! let dir = tempfile::tempdir()?;
//! let cache = Cache::open(dir.path().join("cache"))?;
//! let spec = KernelSpec::from_text("scale", "scale.cu",
//!     "extern \"C\" __global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }");
//! assert_eq!(cache.get_or_build(&spec)?.outcome, Outcome::Built);
//! let again = cache.get_or_build(&spec)?;
//! assert_eq!(again.outcome, Outcome::Hit);
//! assert_eq!(&again.artifact.bytes()[..4], b"\x7fELF"); // a cubin is an ELF file
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod base;
mod batch;
mod build;
mod cache;
mod context;
#[cfg(feature = "cuda")]
pub mod cuda;
mod error;
mod fleet;
mod lookup;
mod maintenance;
mod memo;
mod miss;
mod pack;
mod publication;
mod storage;
pub mod store;

pub use base::fstype::{Sharing, SHARING_ENV};
pub use base::redact::redact_url;
/// The crash harness's names of the protocol's points: not part of the API.
#[doc(hidden)]
pub use base::words::UnknownWord;
pub use batch::Progress;
pub use build::compiler_record::{CompilerRecord, Prerequisite};
pub use build::entry::Artifact;
pub use build::key::CACHE_FORMAT;
pub use build::spec::{Extra, KernelSpec, Source, MAX_NAME_LEN};
pub use cache::{Action, Answer, Cache, CacheOptions, Explanation, Outcome, RebuildReason};
pub use error::{CompileFailed, Error, FailureCause, Result, ToolchainError};
pub use fleet::manifest_artifacts;
pub use maintenance::{EntryInfo, GcPolicy, GcReport, Stats, VerifyReport, SWEEP_MIN_AGE};
pub use nvcc::OutputKind;
pub use pack::{
    list_pack, ExportReport, ImportReport, PackEntry, PackEntryKind, PackFilter, PackKind,
};
#[doc(hidden)]
pub use storage::hooks::Failpoint;
pub use storage::layout::{default_root, RootMode, FORMAT_DIR};
/// The test harnesses' knob that scales the shared protocol's periods: not part of the API.
#[doc(hidden)]
pub use storage::liveness::SHARED_GRACE_ENV;
pub use storage::liveness::{FOREIGN_GRACE, HEARTBEAT_INTERVAL, PIN_GRACE, PIN_REFRESH};
pub use store::tier::{
    Expected, Remote, RemoteMode, RemotePolicy, RemoteStats, RemoteTier, TierError, TierErrorKind,
};

/// The README's examples compile (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
