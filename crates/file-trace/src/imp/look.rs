//! Looking at a path the way the traced call will: `stat`, or `lstat` when the call does not
//! follow a final symlink.

use crate::trace::{Errno, Found, Timestamp};
use std::ffi::CStr;

/// Whether the call follows a symlink in the last component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Follow {
    Yes,
    No,
}

impl Follow {
    pub(crate) fn unless(nofollow: bool) -> Follow {
        if nofollow {
            Follow::No
        } else {
            Follow::Yes
        }
    }
}

/// What is at `path` now.
pub(crate) fn look(path: &CStr, follow: Follow) -> Found {
    let stat = match follow {
        Follow::Yes => rustix::fs::stat(path),
        Follow::No => rustix::fs::lstat(path),
    };
    match stat {
        Ok(stat) => found(&stat),
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => Found::Missing,
        Err(errno) => Found::Error(Errno::from(errno)),
    }
}

fn found(stat: &rustix::fs::Stat) -> Found {
    let dev = stat.st_dev;
    let ino = stat.st_ino;
    let mode = stat.st_mode;
    let mtime = Timestamp {
        secs: stat.st_mtime,
        nanos: stat.st_mtime_nsec as u32,
    };
    let ctime = Timestamp {
        secs: stat.st_ctime,
        nanos: stat.st_ctime_nsec as u32,
    };
    match mode & libc::S_IFMT {
        libc::S_IFREG => Found::File {
            dev,
            ino,
            size: stat.st_size as u64,
            mtime,
            ctime,
            mode,
        },
        libc::S_IFDIR => Found::Dir {
            dev,
            ino,
            mtime,
            ctime,
        },
        libc::S_IFLNK => Found::Symlink {
            dev,
            ino,
            mtime,
            ctime,
        },
        _ => Found::Other { dev, ino, mode },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    fn c(path: &std::path::Path) -> CString {
        CString::new(path.as_os_str().as_bytes()).expect("no NUL")
    }

    #[test]
    fn files_dirs_links_and_absences_are_told_apart() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("f");
        std::fs::write(&file, b"12345").expect("write");
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        let meta = std::fs::metadata(&file).expect("metadata");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            look(&c(&file), Follow::Yes),
            Found::File {
                dev: meta.dev(),
                ino: meta.ino(),
                size: 5,
                mtime: Timestamp {
                    secs: meta.mtime(),
                    nanos: meta.mtime_nsec() as u32
                },
                ctime: Timestamp {
                    secs: meta.ctime(),
                    nanos: meta.ctime_nsec() as u32
                },
                mode: meta.mode(),
            }
        );
        assert!(matches!(
            look(&c(dir.path()), Follow::Yes),
            Found::Dir { .. }
        ));
        assert!(
            matches!(look(&c(&link), Follow::No), Found::Symlink { .. }),
            "lstat sees the link"
        );
        assert!(
            matches!(look(&c(&link), Follow::Yes), Found::File { size: 5, .. }),
            "stat follows it"
        );
        assert_eq!(
            look(&c(&dir.path().join("none")), Follow::Yes),
            Found::Missing
        );
        assert_eq!(
            look(&c(&file.join("below")), Follow::Yes),
            Found::Missing,
            "ENOTDIR is an absence"
        );
        assert!(matches!(
            look(c"/dev/null", Follow::Yes),
            Found::Other { .. }
        ));
        let mut long = vec![b'a'; 300];
        long.insert(0, b'/');
        assert_eq!(
            look(&CString::new(long).expect("no NUL"), Follow::Yes),
            Found::Error(Errno(libc::ENAMETOOLONG)),
            "other errors are kept"
        );
    }
}
