//! What a trace records: one [`Event`] per path lookup, in the order the supervisor saw them.

use std::fmt;
use std::path::PathBuf;

/// Everything one traced run looked up, changed or could not be seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// Every lookup and change, in the order the supervisor received the notifications (a
    /// task's own calls are in its program order; calls of different tasks interleave as the
    /// kernel delivered them).
    pub events: Vec<Event>,
    /// Calls that were made but could not be recorded as an event. A cache must not trust a
    /// trace with gaps (see [`Trace::is_complete`]).
    pub gaps: Vec<Gap>,
    /// Whether the listener ran with `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6+): the
    /// tracee and the supervisor hand the CPU to each other directly, which makes tracing
    /// nearly free. Without it the trace is the same, only slower.
    pub sync_wake_up: bool,
    /// Whether the filter was installed with `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` (Linux
    /// 5.19+): a notified call that the supervisor has received is not interrupted (and then
    /// restarted and notified again) by a non-fatal signal.
    pub killable_wait: bool,
    /// How the trace ended.
    pub end: End,
    /// How many notifications the supervisor answered, recorded or not (a call whose task died
    /// or was interrupted by a signal before its answer is counted but leaves no event).
    pub notifications: u64,
}

impl Trace {
    /// Whether the trace saw everything: no [`Gap`] and every traced task was gone when it
    /// ended ([`End::AllExited`]).
    pub fn is_complete(&self) -> bool {
        self.gaps.is_empty() && self.end == End::AllExited
    }
}

/// How a trace ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// No task held the filter any more: every traced task had exited and been reaped.
    AllExited,
    /// The trace was stopped while some task still held the filter (a process that left the
    /// group and outlived the run, or a zombie nobody reaped within the grace period). What such
    /// a task does later is not recorded, and its later traced calls fail with `ENOSYS`.
    Stopped,
}

/// One path lookup or change made by a traced task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The thread id of the calling task (its process id when it has one thread), in the
    /// supervisor's pid namespace.
    pub pid: u32,
    /// What the call does with the path.
    pub op: Op,
    /// The path as the kernel starts resolving it, made absolute: an absolute argument as
    /// given; a relative one joined to the task's working directory (`AT_FDCWD`) or to its
    /// directory descriptor, as `/proc` names them. Never normalised: `..`, `.`, repeated and
    /// trailing slashes are kept as the task wrote them (`/a/b/../c`).
    pub path: PathBuf,
    /// What was at `path` just before the kernel looked it up.
    pub found: Found,
}

/// What a call does with its path.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// `open`, `openat`, `openat2`, `creat`.
    Open {
        /// The call may create or change the file: `O_WRONLY`, `O_RDWR`, `O_CREAT` or
        /// `O_TRUNC` (`O_TMPFILE` implies one of the first two).
        write: bool,
        /// `O_DIRECTORY` (also part of `O_TMPFILE`, whose path is a directory).
        directory: bool,
        /// The last component is not followed if it is a symlink: `O_NOFOLLOW`, `O_CREAT` with
        /// `O_EXCL`, or `openat2`'s `RESOLVE_NO_SYMLINKS`.
        nofollow: bool,
        /// `O_PATH`: the path is looked up and the file is not opened for reading.
        path_only: bool,
    },
    /// `stat`, `lstat`, `newfstatat`/`fstatat`, `statx` (each with a path), `name_to_handle_at`.
    Stat {
        /// `lstat`, `AT_SYMLINK_NOFOLLOW` (for `name_to_handle_at`: without `AT_SYMLINK_FOLLOW`).
        nofollow: bool,
    },
    /// `access`, `faccessat`, `faccessat2`.
    Access {
        /// `faccessat2`'s `AT_SYMLINK_NOFOLLOW`.
        nofollow: bool,
    },
    /// `execve`, `execveat`: the program the task asked to run (one event per attempt, so a
    /// `PATH` search shows each directory tried).
    Exec,
    /// `getdents64`, `getdents`: one event per call on the directory descriptor (a listing
    /// takes at least two calls, the last returning nothing).
    ListDir,
    /// `chdir`, `fchdir`.
    Chdir,
    /// `unlink`, `unlinkat` without `AT_REMOVEDIR`.
    Unlink,
    /// `rmdir`, `unlinkat` with `AT_REMOVEDIR`.
    Rmdir,
    /// `rename`, `renameat`, `renameat2`: [`Event::path`] is the old name.
    Rename {
        /// The new name, resolved like [`Event::path`].
        to: PathBuf,
        /// `RENAME_EXCHANGE`: the two names swap.
        exchange: bool,
    },
    /// `mkdir`, `mkdirat`.
    Mkdir,
    /// `mknod`, `mknodat`.
    Mknod,
    /// `link`, `linkat`: [`Event::path`] is the existing file.
    Link {
        /// The new name, resolved like [`Event::path`].
        to: PathBuf,
    },
    /// `symlink`, `symlinkat`: [`Event::path`] is the new link.
    Symlink {
        /// The link's content, exactly as given (not resolved).
        target: PathBuf,
    },
    /// `readlink`, `readlinkat`: a symlink's target read. [`Event::found`] is what `lstat`
    /// found there: a [`Found::Symlink`], or what makes the call fail (anything else is not a
    /// link: `EINVAL`).
    Readlink,
    /// `truncate` (by path).
    Truncate,
    /// `chmod`, `fchmodat`, `fchmodat2`, `chown`, `lchown`, `fchownat`, `utime`, `utimes`,
    /// `futimesat`, `utimensat` (each by path, or `utimensat`/`futimesat` on a descriptor with a
    /// null path).
    SetAttr {
        /// Which attribute.
        attr: Attr,
        /// The last component is not followed if it is a symlink.
        nofollow: bool,
    },
}

impl Op {
    /// Whether the call can change the filesystem (a side effect a cache cannot replay): a
    /// writing open, and every operation but `Stat`, `Access`, `Readlink`, `Exec`, `ListDir`
    /// and `Chdir`.
    pub fn is_write(&self) -> bool {
        match self {
            Op::Open { write, .. } => *write,
            Op::Stat { .. }
            | Op::Access { .. }
            | Op::Readlink
            | Op::Exec
            | Op::ListDir
            | Op::Chdir => false,
            Op::Unlink
            | Op::Rmdir
            | Op::Rename { .. }
            | Op::Mkdir
            | Op::Mknod
            | Op::Link { .. }
            | Op::Symlink { .. }
            | Op::Truncate
            | Op::SetAttr { .. } => true,
        }
    }
}

/// The attribute an [`Op::SetAttr`] changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attr {
    /// Permission bits (`chmod` family).
    Mode,
    /// Owner and group (`chown` family).
    Owner,
    /// Access and modification times (`utime` family).
    Times,
}

/// What the supervisor found at a path just before the kernel looked it up: `stat(2)`, or
/// `lstat(2)` for a call that does not follow a final symlink, with the supervisor's
/// credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// Nothing: `ENOENT` or `ENOTDIR` (a component that is not a directory).
    Missing,
    /// A regular file.
    File {
        /// `st_dev`.
        dev: u64,
        /// `st_ino`.
        ino: u64,
        /// `st_size`.
        size: u64,
        /// `st_mtime`.
        mtime: Timestamp,
        /// `st_ctime`.
        ctime: Timestamp,
        /// `st_mode`, type bits included.
        mode: u32,
    },
    /// A directory.
    Dir {
        /// `st_dev`.
        dev: u64,
        /// `st_ino`.
        ino: u64,
        /// `st_mtime`: changes when an entry is added or removed.
        mtime: Timestamp,
        /// `st_ctime`.
        ctime: Timestamp,
    },
    /// A symlink (only for calls that do not follow one).
    Symlink {
        /// `st_dev`.
        dev: u64,
        /// `st_ino`.
        ino: u64,
        /// `st_mtime`.
        mtime: Timestamp,
        /// `st_ctime`.
        ctime: Timestamp,
    },
    /// A FIFO, socket, character or block device.
    Other {
        /// `st_dev`.
        dev: u64,
        /// `st_ino`.
        ino: u64,
        /// `st_mode`, type bits included.
        mode: u32,
    },
    /// The look failed with another error (`EACCES`, `ELOOP`, `ENAMETOOLONG`, ...).
    Error(Errno),
}

impl Found {
    /// Whether something was there (anything but [`Found::Missing`] and [`Found::Error`]).
    pub fn exists(&self) -> bool {
        !matches!(self, Found::Missing | Found::Error(_))
    }
}

/// A time from `stat(2)`: seconds since the epoch and nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    /// Whole seconds since 1970-01-01 UTC (negative before).
    pub secs: i64,
    /// Nanoseconds, below one billion.
    pub nanos: u32,
}

/// A raw `errno` value, printed as the system describes it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// The `errno` value.
    pub fn raw(self) -> i32 {
        self.0
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Errno({}: {})", self.0, self)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        std::io::Error::from_raw_os_error(self.0).fmt(f)
    }
}

impl From<rustix::io::Errno> for Errno {
    fn from(errno: rustix::io::Errno) -> Errno {
        Errno(errno.raw_os_error())
    }
}

/// A call that was made and could not be recorded as an [`Event`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    /// The thread id of the calling task (0 when the kernel could not name it in the
    /// supervisor's pid namespace).
    pub pid: u32,
    /// The system call's name.
    pub syscall: &'static str,
    /// Why it is not an event.
    pub reason: GapReason,
}

/// Why a call is a [`Gap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GapReason {
    /// The task's memory (its path argument) or its `/proc` entries (working directory,
    /// descriptors) could not be read: `EPERM` or `EACCES` for a task that made itself
    /// undumpable while the supervisor lacks `CAP_SYS_PTRACE`.
    Unreadable(Errno),
    /// The call changes what paths mean for the task (`chroot`, `pivot_root`, `mount`,
    /// `umount2`, `move_mount`, `setns`): the supervisor resolves and looks at paths in its own
    /// root and mount namespace, so later events of that task may not describe what it saw.
    ChangesView,
    /// The call opens a file without a path (`open_by_handle_at`).
    NoPath,
    /// The kernel named no task (pid 0: it runs in a pid namespace the supervisor cannot see).
    UnknownTask,
}

impl fmt::Display for GapReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GapReason::Unreadable(errno) => {
                write!(f, "its memory or /proc entries could not be read: {errno}")
            }
            GapReason::ChangesView => f.write_str("it changes the task's root or mounts"),
            GapReason::NoPath => f.write_str("it opens a file by handle, without a path"),
            GapReason::UnknownTask => {
                f.write_str("its task is outside the supervisor's pid namespace")
            }
        }
    }
}
