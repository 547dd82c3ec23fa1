//! Runs a program under a seccomp user-notification filter and records every path lookup it and
//! all its descendants make.
//!
//! A [`Tracer`] spawns a [`std::process::Command`] whose child installs, just before `exec`, a
//! seccomp filter that notifies a supervisor thread of this process of every call that looks up
//! a path by name: opens (`open`, `openat`, `openat2`, `creat`), stats (`stat`, `lstat`,
//! `newfstatat`, `statx`), `readlink`/`readlinkat`, `access`/`faccessat`/`faccessat2`,
//! `execve`/`execveat`, `chdir`/`fchdir`, directory listings (`getdents64`, `getdents`), and
//! every change:
//! `unlink`, `rmdir`, `rename*`, `mkdir*`, `mknod*`, `link*`, `symlink*`, `truncate`, the
//! `chmod`, `chown` and `utime` families. For each one the supervisor reads the path out of the
//! task (`process_vm_readv`), makes it absolute as the kernel will start resolving it (the task's
//! working directory or directory descriptor, through `/proc`), `stat`s it, records an
//! [`Event`], and lets the call go on (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`). The result is a
//! [`Trace`]: which files were read, which paths were probed and absent ([`Found::Missing`],
//! `__has_include` included), which programs ran, which directories were listed, and which
//! changes were made ([`Op::is_write`]).
//!
//! With `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6+) the tracee and the supervisor hand the
//! CPU to each other directly and a traced `nvcc` compile costs about what an untraced one does;
//! without it (older kernels) the trace is the same and slower. [`probe`] says which.
//!
//! The crate knows nothing of compilers or caches.
//!
//! # Guarantees
//! - Every listed call of the spawned program and of every task descending from it (`fork`,
//!   `vfork`, `clone`, threads; the filter survives `exec` and cannot be removed) reaches the
//!   supervisor before the kernel performs it, and is either an [`Event`], a [`Gap`], or a call
//!   that looks nothing up (a bad pointer, an empty path, a closed descriptor). A task's events
//!   are in its program order; [`Trace::events`] is in the order the supervisor received them.
//! - Nothing runs unseen: a call of a foreign ABI (i386 through `int 0x80`, x32, arm32) kills its
//!   process with `SIGSYS`; `io_uring_setup` fails with `ENOSYS`, so programs fall back to plain
//!   calls; a path that cannot be read, and a call that changes what paths mean (`chroot`,
//!   `mount`, `setns`, ...), is a [`Gap`]; once the supervisor is gone, a surviving tracee's
//!   listed calls fail with `ENOSYS` instead of running untraced. [`Trace::is_complete`] tells a
//!   caller whether to trust a trace.
//! - [`Event::found`] is what was at the path just before the call: for a change, the state it
//!   changed.
//! - Paths are never normalised: `..` and symlinks are left to the reader (`/a/b/../c`).
//! - Other processes are not disturbed: only the spawned child carries the filter. Traces in
//!   several threads at once stay separate.
//! - Nothing hangs: a child that dies before the handshake ends its supervisor (end of file on
//!   the socket pair), and [`TraceHandle::finish`] ends after its grace period even if a task
//!   still holds the filter.
//!
//! # Limitations
//! - Time of check to time of use: the supervisor looks at a path just before the kernel does. A
//!   file created and removed in between, or replaced by another process, is recorded as the
//!   supervisor saw it; a thread of the tracee that rewrites the path string after it was read
//!   can make the kernel look up another path. This is a record for a cache, not a security
//!   boundary (see `seccomp_unotify(2)`).
//! - Not traced: `statfs`, the `xattr` calls, `inotify`/`fanotify` marks, `bind`/`connect` on
//!   Unix sockets, `uselib`, `swapon`, `acct`, `quotactl`, and changes made through a descriptor
//!   (`write`, `ftruncate`,
//!   `fchmod`, `fchown`, `fallocate`, shared `mmap`): the [`Op::Open`] that made the descriptor
//!   is the record (with `write` set for a writable one; `fchmod` works on a read-only
//!   descriptor and is not seen).
//! - `newfstatat` and `statx` with `AT_EMPTY_PATH` are let through unseen by the filter: that is
//!   glibc's `fstat`. A program that passes `AT_EMPTY_PATH` together with a non-empty path (glibc
//!   never does) makes a lookup the trace misses.
//! - Files the kernel opens itself during `execve` are not events: the ELF interpreter
//!   (`PT_INTERP`, e.g. `/lib64/ld-linux-x86-64.so.2`), a script's `#!` interpreter, a
//!   `binfmt_misc` handler. The [`Op::Exec`] of the program is.
//! - `openat2`'s `RESOLVE_BENEATH` and `RESOLVE_IN_ROOT` are not modelled: the event shows the
//!   path as a plain `openat` would resolve it (`RESOLVE_NO_SYMLINKS` counts as `nofollow`).
//! - `io_uring` is refused inside a trace (`ENOSYS`); a program that cannot do without it fails.
//! - The child runs with `PR_SET_NO_NEW_PRIVS`: set-user-ID programs and file capabilities do
//!   not raise privileges inside a trace (`sudo` fails).
//! - Seccomp listeners do not nest: a traced program cannot start a listener of its own
//!   (`EBUSY`), and a process that is itself under one cannot trace
//!   ([`Unsupported::AlreadyTraced`]).
//! - The supervisor looks with its own credentials, root directory and mount namespace: a tracee
//!   that lacks a permission gets `EACCES` where the event shows the file; a task that changes
//!   its root or mounts leaves a [`Gap`] (later events may not describe what it saw).
//! - One supervisor thread answers the calls of all tracees in turn, and `stat`s each path
//!   itself: a tracee that serves a filesystem (a FUSE daemon) whose paths a tracee looks up can
//!   deadlock with it (the supervisor waits for the daemon, whose next traced call waits for
//!   the supervisor).
//! - [`Event::pid`] is the calling thread's id. A relative path of a task whose working directory
//!   was removed is shown under `/proc`'s name for it (`/x/y (deleted)/name`).
//! - A process that leaves the process group and outlives the run is traced until
//!   [`TraceHandle::finish`] gives up on it ([`End::Stopped`]); after that its listed calls fail
//!   with `ENOSYS`.
//! - Linux 5.5 or later (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`), x86_64 or aarch64; elsewhere
//!   [`probe`] and [`Tracer::new`] return [`Unsupported`].
//!
//! # Example
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use file_trace::{Found, Op, Tracer};
//! use std::path::Path;
//! use std::process::Command;
//! use std::time::Duration;
//!
//! let tracer = match Tracer::new() {
//!     Ok(tracer) => tracer,
//!     Err(why) => {
//!         eprintln!("running untraced: {why}");
//!         return Ok(());
//!     }
//! };
//! let mut command = Command::new("/bin/sh");
//! command.args(["-c", "test -e /no/such/file; cat /dev/null"]);
//! let (mut child, handle) = tracer.spawn(&mut command)?;
//! child.wait()?;
//! let trace = handle.finish(Duration::from_secs(1))?;
//! assert!(trace.is_complete());
//! assert!(trace.events.iter().any(|e| e.op == Op::Exec && e.path == Path::new("/bin/sh")));
//! assert!(trace
//!     .events
//!     .iter()
//!     .any(|e| e.path == Path::new("/no/such/file") && e.found == Found::Missing));
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod error;
mod support;
mod trace;

#[cfg(all(
    target_os = "linux",
    target_endian = "little",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod imp {
    pub(crate) mod arch;
    pub(crate) mod decode;
    pub(crate) mod filter;
    pub(crate) mod handle;
    pub(crate) mod hook;
    pub(crate) mod look;
    pub(crate) mod memory;
    pub(crate) mod notify;
    pub(crate) mod probe;
    pub(crate) mod resolve;
    pub(crate) mod supervisor;
    pub(crate) mod tracer;
}

#[cfg(not(all(
    target_os = "linux",
    target_endian = "little",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
#[path = "unsupported.rs"]
mod imp;

pub use error::Error;
pub use imp::handle::TraceHandle;
pub use imp::probe::probe;
pub use imp::tracer::Tracer;
pub use support::{Support, SyncWakeUp, Unsupported};
pub use trace::{Attr, End, Errno, Event, Found, Gap, GapReason, Op, Timestamp, Trace};
