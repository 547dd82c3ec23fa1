//! One notification becomes one event: read the path arguments, resolve them, look at the path.
//!
//! Runs while the tracee waits, so it does only what the event needs: one `process_vm_readv`
//! per path argument, one `readlink` of `/proc` for a relative path, one `stat`.

use crate::imp::arch::Call;
use crate::imp::look::{look, Follow};
use crate::imp::memory::{Reader, Text};
use crate::imp::notify::Notification;
use crate::imp::resolve::{resolve, resolve_start, Resolved, Start, Unresolved};
use crate::trace::{Attr, Event, Gap, GapReason, Op};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// What a notification amounts to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Event(Event),
    Gap(Gap),
    /// The kernel will look nothing up (a bad pointer, an empty path, a closed descriptor), or
    /// the task is gone.
    Nothing,
}

/// Why decoding stopped early.
enum Stop {
    Nothing,
    Gap(GapReason),
}

impl From<Unresolved> for Stop {
    fn from(unresolved: Unresolved) -> Stop {
        match unresolved {
            Unresolved::NoLookup => Stop::Nothing,
            Unresolved::Unreadable(errno) => Stop::Gap(GapReason::Unreadable(errno)),
        }
    }
}

const O_TMPFILE: u64 = libc::O_TMPFILE as u64;

/// Decodes `notification`, a call of kind `call` named `name`.
pub(crate) fn decode(
    notification: &Notification,
    call: Call,
    name: &'static str,
    reader: &mut Reader,
) -> Outcome {
    if notification.pid == 0 {
        return gap(notification, name, GapReason::UnknownTask);
    }
    let mut args = Args {
        pid: notification.pid,
        raw: notification.args,
        reader,
    };
    match event(call, &mut args) {
        Ok((op, resolved, follow)) => Outcome::Event(Event {
            pid: notification.pid,
            op,
            found: look(&resolved.lookup, follow),
            path: path_buf(resolved.shown),
        }),
        Err(Stop::Nothing) => Outcome::Nothing,
        Err(Stop::Gap(reason)) => gap(notification, name, reason),
    }
}

fn gap(notification: &Notification, name: &'static str, reason: GapReason) -> Outcome {
    Outcome::Gap(Gap {
        pid: notification.pid,
        syscall: name,
        reason,
    })
}

/// The call's operation, its main path, and how to look at it.
fn event(call: Call, args: &mut Args<'_>) -> Result<(Op, Resolved, Follow), Stop> {
    use Call::*;
    let nofollow_at = |flags: u64| flags & libc::AT_SYMLINK_NOFOLLOW as u64 != 0;
    Ok(match call {
        Open => open(args.path(Start::Cwd, 0)?, args.raw[1], 0),
        OpenAt => open(args.at(0, 1, 0)?, args.raw[2], 0),
        OpenAt2 => {
            // struct open_how { u64 flags; u64 mode; u64 resolve; }, `size` bytes long.
            if args.raw[3] < 24 {
                return Err(Stop::Nothing);
            }
            let how = args.bytes(args.raw[2], 24)?;
            let word =
                |i: usize| u64::from_ne_bytes(how[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
            let (flags, resolve_flags) = (word(0), word(2));
            open(args.at(0, 1, 0)?, flags, resolve_flags)
        }
        Creat => open(
            args.path(Start::Cwd, 0)?,
            (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64,
            0,
        ),
        Stat => stat(args.path(Start::Cwd, 0)?, false),
        Lstat => stat(args.path(Start::Cwd, 0)?, true),
        FstatAt => stat(args.at(0, 1, args.raw[3])?, nofollow_at(args.raw[3])),
        Statx => stat(args.at(0, 1, args.raw[2])?, nofollow_at(args.raw[2])),
        NameToHandleAt => {
            let flags = args.raw[4];
            let follow = flags & libc::AT_SYMLINK_FOLLOW as u64 != 0;
            stat(args.at(0, 1, flags)?, !follow)
        }
        Access => access(args.path(Start::Cwd, 0)?, false),
        FaccessAt => access(args.at(0, 1, 0)?, false),
        FaccessAt2 => access(args.at(0, 1, args.raw[3])?, nofollow_at(args.raw[3])),
        Execve => (Op::Exec, args.path(Start::Cwd, 0)?, Follow::Yes),
        ExecveAt => {
            let flags = args.raw[4];
            (
                Op::Exec,
                args.at(0, 1, flags)?,
                Follow::unless(nofollow_at(flags)),
            )
        }
        Chdir => (Op::Chdir, args.path(Start::Cwd, 0)?, Follow::Yes),
        Fchdir => (Op::Chdir, args.descriptor(0)?, Follow::Yes),
        Getdents => (Op::ListDir, args.descriptor(0)?, Follow::Yes),
        Unlink => (Op::Unlink, args.path(Start::Cwd, 0)?, Follow::No),
        UnlinkAt => {
            let op = if args.raw[2] & libc::AT_REMOVEDIR as u64 != 0 {
                Op::Rmdir
            } else {
                Op::Unlink
            };
            (op, args.at(0, 1, 0)?, Follow::No)
        }
        Rmdir => (Op::Rmdir, args.path(Start::Cwd, 0)?, Follow::No),
        Rename => rename(args.path(Start::Cwd, 0)?, args.path(Start::Cwd, 1)?, 0),
        RenameAt => rename(args.at(0, 1, 0)?, args.at(2, 3, 0)?, 0),
        RenameAt2 => rename(args.at(0, 1, 0)?, args.at(2, 3, 0)?, args.raw[4]),
        Mkdir => (Op::Mkdir, args.path(Start::Cwd, 0)?, Follow::No),
        MkdirAt => (Op::Mkdir, args.at(0, 1, 0)?, Follow::No),
        Mknod => (Op::Mknod, args.path(Start::Cwd, 0)?, Follow::No),
        MknodAt => (Op::Mknod, args.at(0, 1, 0)?, Follow::No),
        Link => link(args.path(Start::Cwd, 0)?, args.path(Start::Cwd, 1)?, false),
        LinkAt => {
            let flags = args.raw[4];
            let old = args.at(0, 1, flags)?;
            let new = args.at(2, 3, 0)?;
            link(old, new, flags & libc::AT_SYMLINK_FOLLOW as u64 != 0)
        }
        Symlink => {
            let target = args.text(args.raw[0])?;
            (
                Op::Symlink { target },
                args.path(Start::Cwd, 1)?,
                Follow::No,
            )
        }
        SymlinkAt => {
            let target = args.text(args.raw[0])?;
            (Op::Symlink { target }, args.at(1, 2, 0)?, Follow::No)
        }
        // The final component is the link read, not followed; an empty path names the
        // descriptor's own link (an `O_PATH | O_NOFOLLOW` descriptor).
        Readlink => (Op::Readlink, args.path(Start::Cwd, 0)?, Follow::No),
        ReadlinkAt => (
            Op::Readlink,
            args.at(0, 1, libc::AT_EMPTY_PATH as u64)?,
            Follow::No,
        ),
        Truncate => (Op::Truncate, args.path(Start::Cwd, 0)?, Follow::Yes),
        Chmod => set_attr(Attr::Mode, args.path(Start::Cwd, 0)?, false),
        FchmodAt => set_attr(Attr::Mode, args.at(0, 1, 0)?, false),
        FchmodAt2 => set_attr(
            Attr::Mode,
            args.at(0, 1, args.raw[3])?,
            nofollow_at(args.raw[3]),
        ),
        Chown => set_attr(Attr::Owner, args.path(Start::Cwd, 0)?, false),
        Lchown => set_attr(Attr::Owner, args.path(Start::Cwd, 0)?, true),
        FchownAt => set_attr(
            Attr::Owner,
            args.at(0, 1, args.raw[4])?,
            nofollow_at(args.raw[4]),
        ),
        Utime | Utimes => set_attr(Attr::Times, args.path(Start::Cwd, 0)?, false),
        FutimesAt => set_attr(Attr::Times, args.at_or_descriptor(0, 1)?, false),
        UtimensAt => set_attr(
            Attr::Times,
            args.at_or_descriptor(0, 1)?,
            nofollow_at(args.raw[3]),
        ),
        ChangesView => return Err(Stop::Gap(GapReason::ChangesView)),
        OpenByHandleAt => return Err(Stop::Gap(GapReason::NoPath)),
        // Denied by the filter, never notified.
        IoUringSetup => return Err(Stop::Nothing),
    })
}

fn open(resolved: Resolved, flags: u64, resolve_flags: u64) -> (Op, Resolved, Follow) {
    let has = |flag: libc::c_int| flags & flag as u64 != 0;
    let tmpfile = flags & O_TMPFILE == O_TMPFILE;
    let nofollow = has(libc::O_NOFOLLOW)
        || (has(libc::O_CREAT) && has(libc::O_EXCL))
        || resolve_flags & libc::RESOLVE_NO_SYMLINKS != 0;
    let op = Op::Open {
        write: has(libc::O_WRONLY) || has(libc::O_RDWR) || has(libc::O_CREAT) || has(libc::O_TRUNC),
        directory: has(libc::O_DIRECTORY) || tmpfile,
        nofollow,
        path_only: has(libc::O_PATH),
    };
    (op, resolved, Follow::unless(nofollow))
}

fn stat(resolved: Resolved, nofollow: bool) -> (Op, Resolved, Follow) {
    (Op::Stat { nofollow }, resolved, Follow::unless(nofollow))
}

fn access(resolved: Resolved, nofollow: bool) -> (Op, Resolved, Follow) {
    (Op::Access { nofollow }, resolved, Follow::unless(nofollow))
}

fn rename(old: Resolved, new: Resolved, flags: u64) -> (Op, Resolved, Follow) {
    let op = Op::Rename {
        to: path_buf(new.shown),
        exchange: flags & u64::from(libc::RENAME_EXCHANGE) != 0,
    };
    (op, old, Follow::No)
}

fn link(old: Resolved, new: Resolved, follow: bool) -> (Op, Resolved, Follow) {
    let op = Op::Link {
        to: path_buf(new.shown),
    };
    (op, old, Follow::unless(!follow))
}

fn set_attr(attr: Attr, resolved: Resolved, nofollow: bool) -> (Op, Resolved, Follow) {
    (
        Op::SetAttr { attr, nofollow },
        resolved,
        Follow::unless(nofollow),
    )
}

fn path_buf(bytes: Vec<u8>) -> PathBuf {
    PathBuf::from(OsString::from_vec(bytes))
}

/// A notification's arguments, read out of the task on demand.
struct Args<'a> {
    pid: u32,
    raw: [u64; 6],
    reader: &'a mut Reader,
}

impl Args<'_> {
    /// The string at `addr`.
    fn string(&mut self, addr: u64) -> Result<Vec<u8>, Stop> {
        match self.reader.string(self.pid, addr) {
            Ok(Text::Found(bytes)) => Ok(bytes.to_vec()),
            Ok(Text::Invalid) => Err(Stop::Nothing),
            Err(errno) if errno.raw() == libc::ESRCH => Err(Stop::Nothing),
            Err(errno) => Err(Stop::Gap(GapReason::Unreadable(errno))),
        }
    }

    /// A string argument kept as given (a symlink's target).
    fn text(&mut self, addr: u64) -> Result<PathBuf, Stop> {
        self.string(addr).map(path_buf)
    }

    /// `len` bytes at `addr` (a struct argument).
    fn bytes(&mut self, addr: u64, len: usize) -> Result<Vec<u8>, Stop> {
        match self.reader.bytes(self.pid, addr, len) {
            Ok(Some(bytes)) => Ok(bytes.to_vec()),
            Ok(None) => Err(Stop::Nothing),
            Err(errno) if errno.raw() == libc::ESRCH => Err(Stop::Nothing),
            Err(errno) => Err(Stop::Gap(GapReason::Unreadable(errno))),
        }
    }

    /// The path in argument `path_arg`, relative to `start`. An empty path looks nothing up.
    fn path(&mut self, start: Start, path_arg: usize) -> Result<Resolved, Stop> {
        let path = self.string(self.raw[path_arg])?;
        if path.is_empty() {
            return Err(Stop::Nothing);
        }
        Ok(resolve(self.pid, start, &path)?)
    }

    /// An `*at` call's path: directory in `dir_arg`, path in `path_arg`; with `AT_EMPTY_PATH`
    /// in `flags` an empty path names the descriptor itself.
    fn at(&mut self, dir_arg: usize, path_arg: usize, flags: u64) -> Result<Resolved, Stop> {
        let start = Start::from_dirfd(self.raw[dir_arg]);
        let path = self.string(self.raw[path_arg])?;
        if path.is_empty() {
            if flags & libc::AT_EMPTY_PATH as u64 != 0 {
                return Ok(resolve_start(self.pid, start)?);
            }
            return Err(Stop::Nothing);
        }
        Ok(resolve(self.pid, start, &path)?)
    }

    /// `utimensat`/`futimesat`: a null path means the descriptor itself.
    fn at_or_descriptor(&mut self, dir_arg: usize, path_arg: usize) -> Result<Resolved, Stop> {
        if self.raw[path_arg] == 0 {
            return match Start::from_dirfd(self.raw[dir_arg]) {
                // The kernel refuses AT_FDCWD without a path.
                Start::Cwd => Err(Stop::Nothing),
                start => Ok(resolve_start(self.pid, start)?),
            };
        }
        self.at(dir_arg, path_arg, 0)
    }

    /// The descriptor in argument `fd_arg`.
    fn descriptor(&mut self, fd_arg: usize) -> Result<Resolved, Stop> {
        Ok(resolve_start(self.pid, Start::Fd(self.raw[fd_arg] as i32))?)
    }
}
