//! Stamps of many paths in one check, each directory resolved once.
//!
//! A hit revalidates hundreds of headers, most of them a few to a directory, with a `stat` of
//! each whole path: the kernel walks every component of every path again. From the second path
//! of a directory on, [`Pass`] opens the directory (`O_PATH`, following symlinks as the walk
//! does) and looks each name up under it: one component instead of the whole path, which on
//! this project's 2-core VM is 1.0 us in place of 1.4-1.8 us for a toolkit header.
//!
//! A pass is one check: it opens nothing it keeps. A directory renamed or replaced while the
//! pass runs is not seen by the names looked up under it afterwards, as it would not be by a
//! `stat` of those paths made a moment earlier; the check stands for the state its lookups saw,
//! as any check made of many `stat`s does.

use crate::base::stamp::{Look, StatStamp};
use rustix::fd::OwnedFd;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The most directories a pass tracks (and so holds open at once): past it, paths are looked up
/// whole. The library runs inside its callers' processes, whose other threads may be near their
/// descriptor limit: a pass borrows a few dozen descriptors for a moment, never hundreds.
const MAX_DIRS: usize = 64;

/// One check's lookups (see the module's documentation).
pub(crate) struct Pass {
    look: Look,
    /// Directories met, in the order met, with what is known of them.
    dirs: Vec<(Box<OsStr>, Dir)>,
    /// Where each directory is in `dirs`.
    index: HashMap<Box<OsStr>, usize>,
    /// The index in `dirs` of the directory of the last path: consecutive paths often share one,
    /// and comparing with it costs less than hashing.
    last: usize,
}

enum Dir {
    /// Met once, looked up by whole path: opened if met again.
    Once,
    Open(OwnedFd),
    /// Could not be opened (gone, not a directory, refused): its paths are looked up whole, and
    /// find what a whole lookup finds.
    Unopened,
}

impl Pass {
    pub(crate) fn new(look: Look) -> Pass {
        Pass {
            look,
            dirs: Vec::new(),
            index: HashMap::new(),
            last: 0,
        }
    }

    /// The stamp of `path` now, as [`Look::stamp`] gives it.
    pub(crate) fn stamp(&mut self, path: &Path) -> Option<StatStamp> {
        let Some((dir, name)) = split(path) else {
            return self.look.stamp(path);
        };
        let index = match self.find(dir) {
            Some(index) => index,
            None => {
                if self.dirs.len() < MAX_DIRS {
                    self.index.insert(dir.into(), self.dirs.len());
                    self.dirs.push((dir.into(), Dir::Once));
                    self.last = self.dirs.len() - 1;
                }
                return self.look.stamp(path);
            }
        };
        self.last = index;
        let entry = &mut self.dirs[index].1;
        if let Dir::Once = entry {
            *entry = match open_dir(dir) {
                Some(fd) => Dir::Open(fd),
                None => Dir::Unopened,
            };
        }
        match entry {
            Dir::Open(fd) => self.look.stamp_at(fd, name),
            Dir::Once | Dir::Unopened => self.look.stamp(path),
        }
    }

    fn find(&self, dir: &OsStr) -> Option<usize> {
        if self
            .dirs
            .get(self.last)
            .is_some_and(|(known, _)| known.as_bytes() == dir.as_bytes())
        {
            return Some(self.last);
        }
        self.index.get(dir).copied()
    }
}

/// `path` as its directory and its last name, when a lookup of that name under the directory
/// finds what a lookup of the whole path finds: an absolute path whose last component is a
/// plain name written last (no trailing `/`, which asks for a directory; no `..` or `.`).
fn split(path: &Path) -> Option<(&OsStr, &OsStr)> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.first() != Some(&b'/') || bytes.last() == Some(&b'/') {
        return None;
    }
    let cut = bytes.iter().rposition(|&b| b == b'/')?;
    let name = &bytes[cut + 1..];
    if name == b"." || name == b".." {
        return None;
    }
    // The directory keeps its bytes as written (`bin/..` stays, resolved by the kernel); `/`
    // for a name at the root.
    let dir = if cut == 0 { &bytes[..1] } else { &bytes[..cut] };
    Some((OsStr::from_bytes(dir), OsStr::from_bytes(name)))
}

fn open_dir(dir: &OsStr) -> Option<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn a_path_splits_only_where_a_name_lookup_finds_the_same() {
        let split = |p: &str| {
            split(Path::new(p)).map(|(d, n)| {
                (
                    d.to_string_lossy().into_owned(),
                    n.to_string_lossy().into_owned(),
                )
            })
        };
        let pair = |d: &str, n: &str| Some((d.to_string(), n.to_string()));
        assert_eq!(split("/a/b/c.h"), pair("/a/b", "c.h"));
        assert_eq!(
            split("/a/bin/../include/c.h"),
            pair("/a/bin/../include", "c.h")
        );
        assert_eq!(split("/c.h"), pair("/", "c.h"));
        assert_eq!(
            split("/a//c.h"),
            pair("/a/", "c.h"),
            "the kernel reads `//` as `/`"
        );
        for whole in ["/a/b/", "/a/..", "/a/.", "relative/c.h", "c.h", "/"] {
            assert_eq!(split(whole), None, "{whole} is looked up whole");
        }
    }

    /// Whatever each path is (a file, a link to one, a directory, nothing, a name under a file),
    /// a pass finds what a whole `stat` finds, on every lookup of a directory.
    #[test]
    fn a_pass_finds_what_whole_lookups_find() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let d = tmp.path();
        std::fs::create_dir_all(d.join("inc/sub")).expect("mkdir");
        std::fs::write(d.join("inc/a.h"), "a").expect("write");
        std::fs::write(d.join("inc/b.h"), "bb").expect("write");
        std::fs::write(d.join("inc/sub/c.h"), "ccc").expect("write");
        std::os::unix::fs::symlink("a.h", d.join("inc/link.h")).expect("symlink");
        std::os::unix::fs::symlink("inc", d.join("via")).expect("symlink");
        let names = ["a.h", "b.h", "link.h", "missing.h", "sub", "a.h/under"];
        let mut paths: Vec<PathBuf> = Vec::new();
        for dir in ["inc", "via", "inc/sub/..", "gone", "inc/a.h"] {
            for name in names {
                paths.push(d.join(dir).join(name));
            }
        }
        for look in [Look::Cached, Look::Fresh] {
            let mut pass = Pass::new(look);
            // Twice over: the second round finds every directory open.
            for path in paths.iter().chain(&paths) {
                assert_eq!(pass.stamp(path), look.stamp(path), "{}", path.display());
            }
        }
    }

    /// Past [`MAX_DIRS`] directories a pass holds no more open and still finds what whole
    /// lookups find.
    #[test]
    fn a_pass_holds_at_most_its_share_of_descriptors() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mut paths = Vec::new();
        for d in 0..MAX_DIRS + 6 {
            let dir = tmp.path().join(format!("d{d}"));
            std::fs::create_dir(&dir).expect("mkdir");
            for f in 0..3 {
                std::fs::write(dir.join(format!("f{f}.h")), format!("{d} {f}")).expect("write");
                paths.push(dir.join(format!("f{f}.h")));
            }
        }
        let mut pass = Pass::new(Look::Cached);
        for path in &paths {
            assert_eq!(pass.stamp(path), StatStamp::of(path), "{}", path.display());
        }
        let open = pass
            .dirs
            .iter()
            .filter(|(_, dir)| matches!(dir, Dir::Open(_)))
            .count();
        assert_eq!(open, MAX_DIRS, "every tracked directory opened, no more");
    }

    /// A file changed after a pass opened its directory is seen changed by the pass.
    #[test]
    fn a_pass_sees_a_file_changed_under_an_open_directory() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let (a, b) = (tmp.path().join("a.h"), tmp.path().join("b.h"));
        std::fs::write(&a, "a").expect("write");
        std::fs::write(&b, "b").expect("write");
        let mut pass = Pass::new(Look::Cached);
        pass.stamp(&a);
        let before = pass.stamp(&b).expect("stamp");
        assert!(
            matches!(pass.dirs[0].1, Dir::Open(_)),
            "opened on its second path"
        );
        std::fs::remove_file(&b).expect("remove");
        std::fs::write(&b, "changed").expect("rewrite");
        let after = pass.stamp(&b).expect("stamp");
        assert_ne!(before, after, "the replaced file's stamp");
        assert_eq!(Some(after), StatStamp::of(&b));
    }
}
