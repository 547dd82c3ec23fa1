//! Where a path argument points: the absolute path an event reports, and the path the
//! supervisor looks at, which reaches the same directory through `/proc` even when the task's
//! working directory was renamed or removed.

use crate::trace::Errno;
use std::ffi::CString;

/// The directory a relative path starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// `AT_FDCWD`, or a call without a directory argument: the task's working directory.
    Cwd,
    /// A directory descriptor of the task.
    Fd(i32),
}

impl Start {
    /// The `*at` calls' directory argument (an `int`: the low 32 bits).
    pub(crate) fn from_dirfd(arg: u64) -> Start {
        match arg as i32 {
            libc::AT_FDCWD => Start::Cwd,
            fd => Start::Fd(fd),
        }
    }

    fn proc_link(self, pid: u32) -> Vec<u8> {
        match self {
            Start::Cwd => format!("/proc/{pid}/cwd").into_bytes(),
            Start::Fd(fd) => format!("/proc/{pid}/fd/{fd}").into_bytes(),
        }
    }
}

/// A resolved path argument.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// Absolute, for the event: the start directory's name joined with the argument's bytes.
    pub(crate) shown: Vec<u8>,
    /// What the supervisor `stat`s: the argument itself when absolute, else
    /// `/proc/PID/cwd/ARG` or `/proc/PID/fd/N/ARG`.
    pub(crate) lookup: CString,
}

/// Why a path resolves to nothing an event could report.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unresolved {
    /// The kernel looks nothing up either: the task or descriptor is gone, or the descriptor
    /// is not a directory of any filesystem (a pipe, a socket).
    NoLookup,
    /// The task's `/proc` entries could not be read.
    Unreadable(Errno),
}

/// Resolves `path` (the bytes before its NUL, non-empty) against `start` for task `pid`.
pub(crate) fn resolve(pid: u32, start: Start, path: &[u8]) -> Result<Resolved, Unresolved> {
    if path.first() == Some(&b'/') {
        return Ok(Resolved {
            shown: path.to_vec(),
            lookup: c_string(path.to_vec()),
        });
    }
    let link = start.proc_link(pid);
    let base = read_link(&link)?;
    let mut shown = base;
    if shown != b"/" {
        shown.push(b'/');
    }
    shown.extend_from_slice(path);
    let mut lookup = link;
    lookup.push(b'/');
    lookup.extend_from_slice(path);
    Ok(Resolved {
        shown,
        lookup: c_string(lookup),
    })
}

/// The start directory or descriptor itself (`fchdir`, `getdents`, `AT_EMPTY_PATH`).
pub(crate) fn resolve_start(pid: u32, start: Start) -> Result<Resolved, Unresolved> {
    let link = start.proc_link(pid);
    let shown = read_link(&link)?;
    Ok(Resolved {
        shown,
        lookup: c_string(link),
    })
}

/// The target of a `/proc` magic link, when it names a path.
fn read_link(link: &[u8]) -> Result<Vec<u8>, Unresolved> {
    match rustix::fs::readlink(link, Vec::new()) {
        Ok(target) => {
            let target = target.into_bytes();
            // "pipe:[123]", "socket:[..]", "anon_inode:[..]": not a directory to start from.
            if target.first() == Some(&b'/') {
                Ok(target)
            } else {
                Err(Unresolved::NoLookup)
            }
        }
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::SRCH) => Err(Unresolved::NoLookup),
        Err(errno) => Err(Unresolved::Unreadable(errno.into())),
    }
}

fn c_string(bytes: Vec<u8>) -> CString {
    // The bytes come from before a NUL in the tracee's string, or from /proc and format!: none
    // contains a NUL.
    CString::new(bytes).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn me() -> u32 {
        // The test thread's own tid: /proc/TID works for any thread.
        // SAFETY: gettid has no arguments and cannot fail.
        unsafe { libc::gettid() as u32 }
    }

    #[test]
    fn an_absolute_path_is_kept_byte_for_byte() {
        let resolved = resolve(me(), Start::Cwd, b"/a//b/../c/").expect("absolute");
        assert_eq!(resolved.shown, b"/a//b/../c/", "never normalised");
        assert_eq!(resolved.lookup.as_bytes(), b"/a//b/../c/");
    }

    #[test]
    fn a_relative_path_joins_the_working_directory_and_looks_through_proc() {
        let cwd = std::env::current_dir().expect("cwd");
        let resolved = resolve(me(), Start::Cwd, b"../x/./y").expect("relative");
        let mut expected = cwd.into_os_string().into_encoded_bytes();
        expected.extend_from_slice(b"/../x/./y");
        assert_eq!(resolved.shown, expected, "joined, `..` kept");
        assert_eq!(
            resolved.lookup.as_bytes(),
            format!("/proc/{}/cwd/../x/./y", me()).as_bytes()
        );
    }

    #[test]
    fn a_directory_descriptor_is_a_start() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fd = std::fs::File::open(dir.path()).expect("open dir");
        let start = Start::from_dirfd(fd.as_raw_fd() as u64);
        let resolved = resolve(me(), start, b"f.h").expect("relative to fd");
        assert_eq!(
            resolved.shown,
            dir.path().join("f.h").into_os_string().into_encoded_bytes()
        );
        let own = resolve_start(me(), start).expect("the descriptor itself");
        assert_eq!(own.shown, dir.path().as_os_str().as_encoded_bytes());
    }

    #[test]
    fn at_fdcwd_is_the_working_directory_and_a_closed_descriptor_is_no_lookup() {
        assert_eq!(Start::from_dirfd(libc::AT_FDCWD as u32 as u64), Start::Cwd);
        assert_eq!(
            Start::from_dirfd(libc::AT_FDCWD as i64 as u64),
            Start::Cwd,
            "sign-extended or not, the low 32 bits decide"
        );
        assert_eq!(
            resolve(me(), Start::Fd(1_000_000), b"x"),
            Err(Unresolved::NoLookup)
        );
    }

    #[test]
    fn a_pipe_is_no_directory_to_start_from() {
        let (reader, _writer) = std::io::pipe().expect("pipe");
        assert_eq!(
            resolve(me(), Start::Fd(reader.as_raw_fd()), b"x"),
            Err(Unresolved::NoLookup)
        );
    }
}
