//! The front end and the include model: a caller's spec resolved into a request, the compiler's
//! identity, the key, the compile, and the records that let a hit be proven again (what the
//! compile read and where it looked). It uses `base` and `storage` (an entry is a directory
//! that storage pins); nothing here publishes, and nothing knows the store or the fleet.
//!
//! # The include model (`search.rs`, `scan.rs`, `inputs.rs`, `headers.rs`, `base/stamp.rs`)
//! nvcc preprocesses with the host compiler, so GCC's rules decide what is read. `search.rs` builds
//! the chains as GCC's `merge_include_chains` does: the quote chain (`-iquote`), the bracket chain
//! (`-I`, `CPATH`, then nvcc's toolkit `include`), the system chain (`-isystem`,
//! `CPLUS_INCLUDE_PATH`, the toolkit's CCCL directory, the host compiler's built-in directories
//! from `<host> -xc++ -E -v`), `-idirafter`; a missing directory or one that is not a directory is
//! dropped, a directory given as `-I` and as a system directory is searched only where the system
//! chain has it, and a duplicate is dropped by identity. `#include "x"` looks in the including
//! file's directory first, `#include_next` continues after the directory that resolved the current
//! file, and a forced include (GCC's `<stdc-predef.h>`, nvcc's `cuda_runtime.h`, `-include x`) is
//! searched in the working directory first.
//!
//! What is recorded, after a successful compile:
//! - **Headers**: every file in the dependency file (paths as bytes, never normalised: the kernel
//!   resolves `..` after a symlink, as the compiler's `open` did), relative to the most specific
//!   project directory that spells a prefix of it (source directory, `-iquote`, `-I`, `-isystem`,
//!   `-idirafter`; `../common/p.cuh` stays relative to the source), an absolute `-include` file by
//!   its index, the toolkit's by its root, the host compiler's and the system's by absolute path.
//! - **Absences**: every file read (and the source, and the forced includes) is scanned for include
//!   directives and `__has_include` probes; each is resolved again along its real chain. For a
//!   directive, the first candidate the compile read marks it active and every candidate before it
//!   was looked for and absent; for a probe, every candidate up to the first that exists (which is
//!   recorded by content). Absences are grouped by their nearest existing directory with that
//!   directory's settled stamp, the toolkit's and the installation's included. A candidate before
//!   the active one that exists but was not read (GCC's `#pragma once` merges byte-identical files)
//!   is recorded by content. A directive that resolves to nothing the compile read was inactive
//!   (`#if`) and leaves nothing.
//! - **What the trace saw** (`observed.rs`): every regular file read or executed that no directive
//!   names (nvcc's tools, the host compiler's programs and libraries, response files, a computed
//!   include's target) by content, every path looked up and missing (the loader's library search,
//!   `PATH` lookups, `__has_include`, a computed include's misses), and every directory listed (its
//!   stamp; a changed listing is a rebuild). Left out: the compile's own directories (staging, the
//!   text source's copy, `TMPDIR`, and those `JIT_CACHE_IGNORED_PATHS` or
//!   `CacheOptions::ignore_paths_under` declare), `/proc`, `/sys` and devices.
//! - **Moved inputs**: a file read that is gone or has a ctime at or after the compile's start (on
//!   the kernel's coarse clock), a path the trace saw missing that exists after the compile, or a
//!   source whose content or ctime changed since it was hashed for the key, publishes nothing: one
//!   more compile, then an uncached answer with a warning. The start is a value of that clock after
//!   the build was asked for (a reading of the fine clock taken before anything of the request is
//!   read: with multigrain timestamps a file may carry a fine ctime past the coarse clock; waited
//!   for, one tick at most, unless preparing the key took that long), so that a file written just
//!   before (a JIT library writes its kernel, then builds it) is not taken for an edit during the
//!   compile.
//! - **Settled stamps** (`base/stamp.rs`): each header and absence directory is recorded with its stat
//!   tuple when no later write could leave that tuple unchanged: on a local filesystem with
//!   nanosecond timestamps (ext4, XFS, btrfs, tmpfs, ZFS, f2fs, overlayfs) when its mtime and ctime
//!   precede a reading of the coarse clock taken before the walk read anything (a write after it
//!   gets a ctime at or after it); with whole-second timestamps, a second before it; elsewhere
//!   (NFS, Lustre, FUSE, unknown) two seconds before this host's clock. A compile's inputs passed
//!   the moved check, so their stamps are settled when recorded even when written just before.
//!
//! What is never cached (answered with the compile's own output and counted by reason in
//! `jit-cache stats`; `inputs::Unproven`): a compile whose trace is incomplete, that read a file the
//! dependency file names but the trace did not see, that changed anything outside its own
//! directories (a write, a rename, a new directory; a device or FIFO written is no change), whose
//! inputs moved twice, that read `__DATE__`, `__TIME__` or `__TIMESTAMP__` without
//! `SOURCE_DATE_EPOCH`, and, untraced (`JIT_CACHE_TRACE=0`, or no seccomp user notification), one
//! that read a file the model's directives do not reach or a lookup by a macro name
//! (`#include MACRO`, `__has_include(MACRO)`).
//!
//! What a hit revalidates: project headers (a `stat` against the recorded settled stamp, else a
//! hash through the stat cache, loaded only then) and every project absence group (its directory's
//! settled stamp unchanged, else a `stat` per name, or one listing of the directory for a group of
//! more than 8 names) on every hit; the toolkit's and the installation's records once per process
//! (`stamp::Look::Cached`; under the shared protocol `statx(AT_STATX_FORCE_SYNC)` makes each look
//! fresh). A repeated request in one process uses a precomputed check (one `stat` per header and
//! per absence directory), stamped before the full check it replaces.
//!
//! A failure of the source's own is recorded with the same records (its dependency file's and its
//! trace's, or, when the preprocessor failed before writing one, a walk of the source's includes
//! that records every candidate of the missing header as absent), so adding the header anywhere
//! retires it; a failure whose records cannot be proven is not recorded. Timeouts, signals and
//! environment errors (told by the filesystem the compile wrote: read-only, out of space or inodes,
//! a probe write that fails; the message text only as extra evidence) are never recorded; an
//! environment error while compiling into the cache compiles privately instead.
//!
//! Limits of the model and the trace:
//! - Every lookup the trace saw is recorded by what it found: a file (opened, executed, or only
//!   tested with `stat` or `access`) by its content; nothing, as an absence; a directory, by its
//!   existence (with its parent directory's stamp: once that changes, the name must still be a
//!   directory: a wrapper's `[ -d DIR ]` then `rmdir DIR` rebuilds); a listed directory by its stamp.
//! - A lookup that found a symlink itself (an `lstat`, `O_NOFOLLOW`, a `readlink`, a wrapper's
//!   `[ -L LINK ]`) records the link with its target text in its parent directory's absence group
//!   (text form `%>name%>target`): once that directory's stamp changes, the name must still be the
//!   same link with the same target, or the hit is refused (`LinkChanged`). nvcc's own compiles
//!   find ten links (`/usr/bin/gcc` and its target chain) among about 23,000 `readlink`s of 1,700
//!   distinct paths per CUB `-c` compile: gcc's `realpath` of every header and directory (each
//!   traced `readlink` costs a notification: measured, a traced CUB `-c` miss went from 0.995x to
//!   1.084x of bare nvcc's CPU, see `crates/file-trace` above; a hit pays nothing). A
//!   `readlink` that finds a file records the file by its content (as any lookup); one that finds a
//!   directory records nothing (it learns only that the name is no link, and the directory itself
//!   is looked up by the calls that follow).
//! - The toolkit's and the installation's files are checked once per process (an installation
//!   changes between runs, not during one).
//! - Timestamps on a network filesystem come from the server: a skewed server clock can hide a change
//!   made during a compile from the moved-input check (the content checks still hold) or cost one
//!   more compile.
//! - A directory listed by the compile (a wrapper's `ls`, not nvcc) is recorded by its stat stamp,
//!   which another host cannot check: such a variant is never fetched from a remote tier.

pub(crate) mod answer;
pub(crate) mod compile;
pub(crate) mod compiler_record;
pub(crate) mod entry;
pub(crate) mod headers;
pub(crate) mod inputs;
pub(crate) mod key;
pub(crate) mod observed;
pub(crate) mod record_text;
pub(crate) mod records;
pub(crate) mod request;
pub(crate) mod search;
pub(crate) mod single_flight;
pub(crate) mod source_bound;
pub(crate) mod spec;
pub(crate) mod toolchain;
