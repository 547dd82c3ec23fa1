//! Attribute caching as an NFS client's: a plain `stat` is answered from the host's cache for
//! `actimeo` whatever another host changed, `statx(AT_STATX_FORCE_SYNC)` asks the server, and an
//! `open` revalidates (close-to-open).

use crate::support::*;
use nfs_sim::Locks;
use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags, CWD};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Long enough that each scenario ends well within it, short enough for a test.
const ACTIMEO: Duration = Duration::from_secs(5);

/// How host 0 changes a file host 1 has looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rewrite {
    /// In place, new bytes of the same length (only the times tell).
    SameSize,
    /// In place, longer.
    Resize,
    /// A new file renamed over it (a new inode), as editors and `git checkout` do.
    Replace,
}

const REWRITES: [Rewrite; 3] = [Rewrite::SameSize, Rewrite::Resize, Rewrite::Replace];

const OLD: &[u8] = b"#define WIDTH 16\n";

fn new_bytes(how: Rewrite) -> &'static [u8] {
    match how {
        Rewrite::SameSize | Rewrite::Replace => b"#define WIDTH 32\n",
        Rewrite::Resize => b"#define WIDTH 32 /* wider */\n",
    }
}

fn rewrite(path: &Path, how: Rewrite) {
    match how {
        Rewrite::SameSize | Rewrite::Resize => {
            std::fs::write(path, new_bytes(how)).expect("rewrite in place")
        }
        Rewrite::Replace => {
            let temp = path.with_extension("tmp");
            std::fs::write(&temp, new_bytes(how)).expect("write the replacement");
            std::fs::rename(&temp, path).expect("rename over");
        }
    }
}

/// What host 1 saw before the change and what the server holds after it.
struct Changed {
    path: PathBuf,
    old: Seen,
    new: Seen,
    /// A descriptor host 1 opened before the change.
    held: std::fs::File,
}

/// Host 0 creates the file; host 1 opens it, then looks at it (its attributes cached from
/// then: an open only drops them, see the crate's limitations); host 0 rewrites it and reads the
/// server's attributes back.
fn changed_behind_host_1(c: &nfs_sim::Cluster, name: &str, how: Rewrite) -> Changed {
    let path = c.root().join(name);
    let p = path.clone();
    c.on(0, move || {
        std::fs::write(&p, OLD).expect("create on host 0")
    });
    let p = path.clone();
    let (old, held) = c.on(1, move || {
        let held = std::fs::File::open(&p).expect("open on host 1");
        (plain_stat(&p), held)
    });
    let p = path.clone();
    let new = c.on(0, move || {
        rewrite(&p, how);
        forced_statx(&p)
    });
    assert_ne!(new.mtime, old.mtime, "setup: the rewrite has a new mtime");
    match how {
        Rewrite::SameSize => assert_eq!(new.size, old.size, "setup: same size"),
        Rewrite::Resize => assert_ne!(new.size, old.size, "setup: a new size"),
        Rewrite::Replace => assert_ne!(new.ino, old.ino, "setup: a new inode"),
    }
    Changed {
        path,
        old,
        new,
        held,
    }
}

/// Every plain form of stat on host 1: `stat`, `lstat`, `fstatat` on a directory descriptor,
/// `statx` without sync flags, std's `metadata` (a `statx` asking for the birth time too), and
/// `fstat` of a descriptor opened before the change.
fn plain_stats(path: &Path, held: &std::fs::File) -> Vec<(&'static str, Seen)> {
    use std::os::unix::fs::MetadataExt;
    let dir = rustix::fs::open(
        path.parent().expect("a parent"),
        OFlags::PATH | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .expect("open the parent (O_PATH)");
    let name = path.file_name().expect("a name");
    let statx =
        rustix::fs::statx(CWD, path, AtFlags::empty(), StatxFlags::BASIC_STATS).expect("statx");
    let meta = std::fs::metadata(path).expect("metadata");
    vec![
        ("stat", plain_stat(path)),
        (
            "lstat",
            Seen::of_stat(&rustix::fs::lstat(path).expect("lstat")),
        ),
        (
            "fstatat",
            Seen::of_stat(&rustix::fs::statat(&dir, name, AtFlags::empty()).expect("fstatat")),
        ),
        ("statx", Seen::of_statx(&statx)),
        (
            "fstat",
            Seen::of_stat(&rustix::fs::fstat(held).expect("fstat")),
        ),
        (
            "metadata",
            Seen {
                ino: meta.ino(),
                size: meta.size(),
                mtime: (meta.mtime(), meta.mtime_nsec()),
                ctime: (meta.ctime(), meta.ctime_nsec()),
            },
        ),
    ]
}

#[test]
fn a_plain_stat_keeps_another_hosts_change_hidden_for_actimeo_and_a_forced_statx_sees_it() {
    let Some(c) = cluster(2, ACTIMEO, Locks::Shared) else {
        return;
    };
    for how in REWRITES {
        within_actimeo(ACTIMEO, |attempt, window| {
            let changed = changed_behind_host_1(&c, &format!("forced-{how:?}-{attempt}"), how);
            let (p, held) = (changed.path.clone(), changed.held);
            let plain = c.on(1, move || plain_stats(&p, &held));
            if !window.is_open() {
                return None;
            }
            for (form, seen) in plain {
                assert_eq!(
                    seen, changed.old,
                    "{how:?}: host 1's {form} is answered from its cache within actimeo"
                );
            }
            let p = changed.path.clone();
            let (forced, after) = c.on(1, move || (forced_statx(&p), plain_stat(&p)));
            assert_eq!(
                forced, changed.new,
                "{how:?}: statx(AT_STATX_FORCE_SYNC) on host 1 asks the server"
            );
            assert_eq!(
                after, changed.new,
                "{how:?}: the forced fetch refreshed host 1's cache"
            );
            Some(())
        });
    }
}

#[test]
fn an_open_revalidates_the_attributes_another_host_changed() {
    let Some(c) = cluster(2, ACTIMEO, Locks::Shared) else {
        return;
    };
    for how in REWRITES {
        within_actimeo(ACTIMEO, |attempt, window| {
            // Host 1 still holds the old file open (`changed.held`): after a Replace its new
            // open must still get the file the name now names.
            let changed = changed_behind_host_1(&c, &format!("opened-{how:?}-{attempt}"), how);
            let p = changed.path.clone();
            let (stale, opened, after, bytes) = c.on(1, move || {
                use std::io::Read;
                let stale = plain_stat(&p);
                let (opened, mut file) = opened_stat(&p);
                // Before any read, which would drop the cached attributes on its own.
                let after = plain_stat(&p);
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes).expect("read");
                (stale, opened, after, bytes)
            });
            if !window.is_open() {
                return None;
            }
            assert_eq!(
                stale, changed.old,
                "{how:?}: before its open, host 1's stat is answered from its cache"
            );
            assert_eq!(
                opened, changed.new,
                "{how:?}: fstat after the open shows the server's attributes"
            );
            assert_eq!(bytes, new_bytes(how), "{how:?}: close-to-open data");
            assert_eq!(
                after, changed.new,
                "{how:?}: the open refreshed host 1's cache, within actimeo of the old fetch"
            );
            Some(())
        });
    }
}

#[test]
fn each_host_caches_for_its_own_actimeo() {
    let Some(c) = cluster_with(&[Duration::ZERO, ACTIMEO, Duration::ZERO], Locks::Shared) else {
        return;
    };
    within_actimeo(ACTIMEO, |attempt, window| {
        let path = c.root().join(format!("mixed-{attempt}"));
        let p = path.clone();
        c.on(0, move || {
            std::fs::write(&p, OLD).expect("create on host 0")
        });
        let (p1, p2) = (path.clone(), path.clone());
        let old = c.on(1, move || plain_stat(&p1));
        assert_eq!(c.on(2, move || plain_stat(&p2)), old, "setup: one file");
        let p = path.clone();
        let new = c.on(0, move || {
            rewrite(&p, Rewrite::Resize);
            forced_statx(&p)
        });
        let (p1, p2) = (path.clone(), path.clone());
        let on_1 = c.on(1, move || plain_stat(&p1));
        if !window.is_open() {
            return None;
        }
        assert_eq!(
            on_1, old,
            "host 1 (actimeo {ACTIMEO:?}) still shows its cache"
        );
        assert_eq!(
            c.on(2, move || plain_stat(&p2)),
            new,
            "host 2 (actimeo 0) asks the server at every stat"
        );
        Some(())
    });
}

#[test]
fn an_opendir_revalidates_a_directory_another_host_changed() {
    let Some(c) = cluster(2, ACTIMEO, Locks::Shared) else {
        return;
    };
    within_actimeo(ACTIMEO, |attempt, window| {
        let dir = c.root().join(format!("dir-{attempt}"));
        let d = dir.clone();
        c.on(0, move || std::fs::create_dir(&d).expect("mkdir on host 0"));
        let d = dir.clone();
        let old = c.on(1, move || plain_stat(&d));
        let d = dir.clone();
        let new = c.on(0, move || {
            std::fs::write(d.join("added"), b"").expect("add an entry");
            forced_statx(&d)
        });
        assert_ne!(new.mtime, old.mtime, "setup: a new entry changes the mtime");
        let d = dir.clone();
        let (stale, opened, after) = c.on(1, move || {
            let stale = plain_stat(&d);
            let fd = rustix::fs::open(&d, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
                .expect("opendir");
            let opened = Seen::of_stat(&rustix::fs::fstat(&fd).expect("fstat"));
            (stale, opened, plain_stat(&d))
        });
        if !window.is_open() {
            return None;
        }
        assert_eq!(
            stale, old,
            "host 1's stat of the directory is answered from its cache"
        );
        assert_eq!(
            opened, new,
            "an opendir revalidates, as NFS's close-to-open"
        );
        assert_eq!(after, new, "and refreshes host 1's cache");
        Some(())
    });
}
