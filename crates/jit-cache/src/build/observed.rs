//! What a traced compile did (`file_trace`), reduced to what the records need: the files it read
//! or ran, the paths it looked up and did not find, and whatever it did that the cache cannot
//! replay or vouch for.
//!
//! The compiler's own behaviour is the record: every path nvcc and every program it started
//! (gcc, cc1plus, cicc, ptxas, fatbinary, sh, the dynamic loader's searches) looked up. The
//! include model (`inputs.rs`) still derives the records of the search path and must agree with
//! the trace: every file nvcc's dependency file names must be among what the trace saw read.
//!
//! Left out, because they are the compile's own or describe the running system rather than the
//! inputs: the compile's private directories (its staging directory, its text source's copy, its
//! `TMPDIR`), and `/proc`, `/sys` and `/dev` (devices, the process's own state, CPU counts).

use crate::base::unproven::Unproven;
use file_trace::{Found, Op, Trace};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Pseudo-filesystems: what is read there describes the running system, not an input. (Devices
/// elsewhere are left out by their type; `/dev/shm`'s files are files.)
const PSEUDO: &[&str] = &["/proc", "/sys"];

/// Directories the compile may use as its own, colon-separated (a logging wrapper's log, a
/// harness's control files): what it writes there is no side effect and what it reads or looks
/// for there no input. A compile that writes there is still cached, and a hit does not write
/// there.
pub(crate) const IGNORED_PATHS_ENV: &str = "JIT_CACHE_IGNORED_PATHS";

/// The directories [`IGNORED_PATHS_ENV`] names (absolute ones; a relative one would depend on
/// the working directory), then `declared`.
pub(crate) fn ignored_paths(declared: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os(IGNORED_PATHS_ENV)
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    dirs.extend(declared.iter().cloned());
    dirs.retain(|p| p.is_absolute());
    dirs
}

/// A traced compile, digested.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Regular files opened for reading or executed, with their identity (device, inode), in the
    /// order first seen.
    pub(crate) read: Vec<(PathBuf, (u64, u64))>,
    /// Paths looked up (opened, stat'ed, tested, executed) that were not there.
    pub(crate) absent: Vec<PathBuf>,
    /// Directories listed: their entries may decide what the compile does.
    pub(crate) listed: Vec<PathBuf>,
    /// Directories found by a lookup (`stat`, `access`, an open of a directory): their being
    /// there may decide what the compile does (a wrapper's `[ -d DIR ]`).
    pub(crate) dirs: Vec<PathBuf>,
    /// Symlinks found as links (`readlink`, `lstat`, a wrapper's `[ -L LINK ]`), with the
    /// link's identity when found (inode, ctime): a link is replaced, never changed, so a link
    /// found there later with another identity was put there during or after the compile.
    pub(crate) links: Vec<(PathBuf, (u64, file_trace::Timestamp))>,
    /// Why the trace cannot vouch for the compile, if it cannot.
    pub(crate) unproven: Option<Unproven>,
}

impl Seen {
    /// Whether the trace saw the file of identity `id` read.
    pub(crate) fn saw_read(&self, id: (u64, u64)) -> bool {
        self.read.iter().any(|(_, i)| *i == id)
    }
}

fn under(path: &Path, dirs: &[PathBuf]) -> bool {
    dirs.iter().any(|d| path.starts_with(d))
}

/// Directories, as given and resolved: a compile names a place by any spelling
/// (`<toolkit>/bin/../ctl/log`), and the kernel's resolution decides where it is.
struct Places {
    spelled: Vec<PathBuf>,
    resolved: Vec<PathBuf>,
}

impl Places {
    fn new(dirs: &[PathBuf]) -> Places {
        Places {
            spelled: dirs.to_vec(),
            resolved: dirs
                .iter()
                .filter_map(|d| std::fs::canonicalize(d).ok())
                .collect(),
        }
    }

    /// Whether `path` is in one of the places: by its spelling, else by its directory's
    /// resolution now (a written file's directory outlives the write).
    fn hold(&self, path: &Path) -> bool {
        if under(path, &self.spelled) {
            return true;
        }
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return false;
        };
        std::fs::canonicalize(dir).is_ok_and(|dir| under(&dir.join(name), &self.resolved))
    }
}

/// A character device or a FIFO: what is written there is passed on, never kept.
fn device(found: &Found) -> bool {
    matches!(found, Found::Other { mode, .. } if matches!(mode & 0o170000, 0o020000 | 0o010000))
}

fn climbs(path: &Path) -> bool {
    path.components()
        .any(|c| c == std::path::Component::ParentDir)
}

fn pseudo(path: &Path) -> bool {
    PSEUDO.iter().any(|p| path.starts_with(p))
}

/// Digests `trace`. `private` are the compile's own directories (its staging and temporary
/// directories, and [`ignored_paths`]).
pub(crate) fn digest(trace: &Trace, private: &[PathBuf]) -> Seen {
    let mut seen = Seen::default();
    if !trace.is_complete() {
        seen.unproven = Some(Unproven::TraceIncomplete);
        return seen;
    }
    let private_places = Places::new(private);
    let mut read_paths: BTreeSet<&Path> = BTreeSet::new();
    let mut absent: BTreeSet<&Path> = BTreeSet::new();
    let mut listed: Vec<&Path> = Vec::new();
    let mut dirs: BTreeSet<&Path> = BTreeSet::new();
    let mut link_paths: BTreeSet<&Path> = BTreeSet::new();
    for event in &trace.events {
        let path = event.path.as_path();
        let write = event.op.is_write();
        // Reads are many and mostly spelled as the compile was told: only a write, or a path
        // that climbs (`bin/../ctl`), is worth resolving.
        let private = if write || climbs(path) {
            private_places.hold(path)
        } else {
            under(path, private)
        };
        if private || pseudo(path) {
            if let Op::Rename { to, .. } | Op::Link { to } = &event.op {
                if !private_places.hold(to) && !pseudo(to) && seen.unproven.is_none() {
                    seen.unproven = Some(Unproven::SideEffect(to.clone()));
                }
            }
            continue;
        }
        if write {
            // A device or FIFO written (`/dev/null`, `/dev/tty`, a make jobserver's FIFO) keeps
            // no state a hit would lack.
            if device(&event.found) {
                continue;
            }
            if seen.unproven.is_none() {
                seen.unproven = Some(Unproven::SideEffect(path.to_path_buf()));
            }
            continue;
        }
        let lookup = match &event.op {
            Op::ListDir => {
                // What a listing shows can decide the output: recorded as the directory's
                // stamp (`headers::LISTING`).
                if !listed.contains(&path) {
                    listed.push(path);
                }
                continue;
            }
            Op::Open {
                directory,
                path_only,
                ..
            } => Some(!directory && !path_only),
            // A file only tested for (`stat`, `access`) may decide the output by being there:
            // it is recorded by content as a read is (nvcc's own compiles test almost none).
            Op::Exec | Op::Stat { .. } | Op::Access { .. } | Op::Readlink => Some(true),
            _ => None,
        };
        let Some(reads) = lookup else { continue };
        match event.found {
            // Not found by the compile, whether missing or refused (`EACCES`, `ELOOP`): an
            // absence, which holds while a lookup still finds nothing.
            Found::Missing | Found::Error(_) => {
                absent.insert(path);
            }
            // Only a regular file is an input: a device (`/dev/urandom`) is not one.
            Found::File { dev, ino, mode, .. }
                if reads && mode & 0o170000 == 0o100000 && read_paths.insert(path) =>
            {
                seen.read.push((path.to_path_buf(), (dev, ino)));
            }
            // A `readlink` that finds a directory learns only that it is no link: gcc's
            // `realpath` asks that of every directory of every path it opens, whose files are
            // recorded by place and content. Other lookups' directories are recorded.
            Found::Dir { .. } if event.op != Op::Readlink => {
                dirs.insert(path);
            }
            // Only a lookup that does not follow a final link finds one: recorded with its
            // target (`inputs.rs`), checked when its directory changes.
            Found::Symlink { ino, ctime, .. } if link_paths.insert(path) => {
                seen.links.push((path.to_path_buf(), (ino, ctime)));
            }
            _ => {}
        }
    }
    seen.absent = absent.into_iter().map(Path::to_path_buf).collect();
    seen.listed = listed.into_iter().map(Path::to_path_buf).collect();
    seen.dirs = dirs.into_iter().map(Path::to_path_buf).collect();
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use file_trace::{End, Event, Timestamp};

    fn file(ino: u64) -> Found {
        let t = Timestamp { secs: 0, nanos: 0 };
        Found::File {
            dev: 1,
            ino,
            size: 1,
            mtime: t,
            ctime: t,
            mode: 0o100644,
        }
    }

    fn dir(ino: u64) -> Found {
        let t = Timestamp { secs: 0, nanos: 0 };
        Found::Dir {
            dev: 1,
            ino,
            mtime: t,
            ctime: t,
        }
    }

    fn char_device(ino: u64) -> Found {
        Found::Other {
            dev: 5,
            ino,
            mode: 0o020666,
        }
    }

    fn event(op: Op, path: &str, found: Found) -> Event {
        Event {
            pid: 1,
            op,
            path: path.into(),
            found,
        }
    }

    fn trace(events: Vec<Event>) -> Trace {
        Trace {
            events,
            gaps: Vec::new(),
            sync_wake_up: true,
            killable_wait: true,
            end: End::AllExited,
            notifications: 0,
        }
    }

    const READ: Op = Op::Open {
        write: false,
        directory: false,
        nofollow: false,
        path_only: false,
    };
    const WRITE: Op = Op::Open {
        write: true,
        directory: false,
        nofollow: false,
        path_only: false,
    };

    #[test]
    fn reads_and_misses_are_kept_and_the_compiles_own_places_left_out() {
        let private = vec![PathBuf::from("/tmp/priv"), PathBuf::from("/p/wrapper-log")];
        let seen = digest(
            &trace(vec![
                event(READ, "/p/inc/x.h", file(2)),
                event(READ, "/p/inc/x.h", file(2)),
                event(Op::Exec, "/usr/bin/gcc", file(3)),
                event(Op::Stat { nofollow: false }, "/p/src/x.h", Found::Missing),
                event(Op::Exec, "/root/bin/gcc", Found::Missing),
                event(WRITE, "/tmp/priv/tmpxft_1.ii", Found::Missing),
                event(READ, "/tmp/priv/tmpxft_1.ii", file(9)),
                event(Op::ListDir, "/tmp/priv", Found::Missing),
                event(READ, "/dev/urandom", char_device(4)),
                event(WRITE, "/dev/tty", char_device(5)),
                event(WRITE, "/p/wrapper-log/calls", file(6)),
                event(
                    Op::Stat { nofollow: false },
                    "/p/wrapper-log/gate",
                    Found::Missing,
                ),
                event(Op::Stat { nofollow: false }, "/p/inc", dir(5)),
                event(Op::Access { nofollow: false }, "/p/flag", file(7)),
                event(
                    Op::Stat { nofollow: false },
                    "/p/locked/x.h",
                    Found::Error(file_trace::Errno(libc::EACCES)),
                ),
            ]),
            &private,
        );
        assert_eq!(
            seen.unproven, None,
            "a terminal or a declared log written is no side effect"
        );
        assert_eq!(
            seen.read,
            vec![
                ("/p/inc/x.h".into(), (1, 2)),
                ("/usr/bin/gcc".into(), (1, 3)),
                ("/p/flag".into(), (1, 7)),
            ],
            "a file tested for is recorded as a read is; a directory or a device is no input"
        );
        assert_eq!(
            seen.absent,
            vec![
                PathBuf::from("/p/locked/x.h"),
                PathBuf::from("/p/src/x.h"),
                PathBuf::from("/root/bin/gcc")
            ],
            "missing or refused, not found"
        );
    }

    #[test]
    fn what_the_cache_cannot_replay_or_vouch_for_is_said() {
        let private = vec![PathBuf::from("/tmp/priv")];
        let side = digest(
            &trace(vec![event(WRITE, "/p/out.ii", Found::Missing)]),
            &private,
        );
        assert_eq!(
            side.unproven,
            Some(Unproven::SideEffect("/p/out.ii".into()))
        );
        let moved_out = digest(
            &trace(vec![event(
                Op::Rename {
                    to: "/p/k.o".into(),
                    exchange: false,
                },
                "/tmp/priv/x",
                file(1),
            )]),
            &private,
        );
        assert_eq!(
            moved_out.unproven,
            Some(Unproven::SideEffect("/p/k.o".into()))
        );
        let listed = digest(
            &trace(vec![event(Op::ListDir, "/p/inc", file(1))]),
            &private,
        );
        assert_eq!(listed.unproven, None);
        assert_eq!(
            listed.listed,
            vec![PathBuf::from("/p/inc")],
            "a listing is recorded"
        );
        let mut stopped = trace(Vec::new());
        stopped.end = End::Stopped;
        assert_eq!(
            digest(&stopped, &private).unproven,
            Some(Unproven::TraceIncomplete)
        );
    }
}
