//! What each host sees: client caching, close-to-open, rename flags, ESTALE, locks, crashes.

use crate::support::*;
use nfs_sim::Locks;
use rustix::fs::{FlockOperation, Mode, OFlags, RenameFlags, CWD};
use rustix::io::Errno;
use std::time::Duration;

#[test]
fn a_miss_stays_cached_until_actimeo_and_closed_data_is_seen_at_the_next_open() {
    let Some(c) = cluster(2, Duration::from_secs(2), Locks::Shared) else {
        return;
    };
    let file = c.root().join("late");
    let (f0, f1) = (file.clone(), file.clone());
    assert!(
        c.on(0, move || std::fs::metadata(&f0).is_err()),
        "absent at first"
    );
    c.on(1, move || {
        std::fs::write(&f1, b"written on host 1").expect("write on host 1")
    });
    let f0 = file.clone();
    assert!(
        c.on(0, move || std::fs::metadata(&f0).is_err()),
        "host 0's negative entry hides the new file (lookupcache=all)"
    );
    let f0 = file.clone();
    wait_until(
        "the negative entry to expire",
        Duration::from_secs(10),
        || {
            let f0 = f0.clone();
            c.on(0, move || std::fs::read(&f0).ok()) == Some(b"written on host 1".to_vec())
        },
    );
    // Close-to-open: host 1 rewrites and closes; host 0's next open reads the new bytes.
    let f1 = file.clone();
    c.on(1, move || {
        std::fs::write(&f1, b"second version, longer").expect("rewrite")
    });
    let f0 = file.clone();
    assert_eq!(
        c.on(0, move || std::fs::read(&f0).expect("read")),
        b"second version, longer"
    );
}

#[test]
fn with_actimeo_zero_a_new_name_is_seen_at_once() {
    let Some(c) = cluster(2, Duration::ZERO, Locks::Shared) else {
        return;
    };
    let file = c.root().join("x");
    let f0 = file.clone();
    assert!(c.on(0, move || std::fs::metadata(&f0).is_err()));
    let f1 = file.clone();
    c.on(1, move || std::fs::write(&f1, b"x").expect("write"));
    let f0 = file.clone();
    assert!(
        c.on(0, move || std::fs::metadata(&f0).is_ok()),
        "no cache, no delay"
    );
}

#[test]
fn renameat2_flags_are_refused_with_einval_and_durable_fs_falls_back() {
    let Some(c) = cluster(1, Duration::from_secs(3), Locks::Shared) else {
        return;
    };
    let root = c.root().to_path_buf();
    c.on(0, move || {
        std::fs::write(root.join("a"), b"a").expect("write a");
        std::fs::write(root.join("b"), b"b").expect("write b");
        let refused = rustix::fs::renameat_with(
            CWD,
            root.join("a"),
            CWD,
            root.join("c"),
            RenameFlags::NOREPLACE,
        );
        assert_eq!(refused, Err(Errno::INVAL), "RENAME_NOREPLACE is refused");
        let refused = rustix::fs::renameat_with(
            CWD,
            root.join("a"),
            CWD,
            root.join("b"),
            RenameFlags::EXCHANGE,
        );
        assert_eq!(refused, Err(Errno::INVAL), "RENAME_EXCHANGE is refused");
        // durable-fs's promise holds through its fallbacks.
        durable_fs::put(root.join("target"), b"one").expect("put");
        std::fs::write(root.join("src"), b"two").expect("write src");
        let first =
            durable_fs::rename_noreplace(root.join("src"), root.join("fresh")).expect("noreplace");
        assert_eq!(first, durable_fs::PublishOutcome::Published);
        std::fs::write(root.join("src2"), b"three").expect("write src2");
        let second =
            durable_fs::rename_noreplace(root.join("src2"), root.join("fresh")).expect("noreplace");
        assert_eq!(
            second,
            durable_fs::PublishOutcome::AlreadyExisted,
            "the winner stays"
        );
        assert_eq!(std::fs::read(root.join("fresh")).expect("read"), b"two");
    });
}

#[test]
fn a_directory_another_host_removed_gives_estale() {
    let Some(c) = cluster(2, Duration::from_secs(3), Locks::Shared) else {
        return;
    };
    let dir = c.root().join("d");
    let d1 = dir.clone();
    c.on(1, move || std::fs::create_dir(&d1).expect("mkdir"));
    let d0 = dir.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    c.on(0, move || {
        let fd = rustix::fs::open(&d0, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .expect("open d");
        tx.send(fd).expect("keep the descriptor");
    });
    let held = rx.recv().expect("descriptor");
    let d1 = dir.clone();
    c.on(1, move || {
        std::fs::remove_dir(&d1).expect("rmdir on host 1")
    });
    let looked = c.on(0, move || {
        rustix::fs::statat(&held, "child", rustix::fs::AtFlags::empty()).err()
    });
    assert_eq!(
        looked,
        Some(Errno::STALE),
        "a removed directory is stale on host 0"
    );
}

fn try_flock(path: std::path::PathBuf) -> Result<rustix::fd::OwnedFd, Errno> {
    let flags = if path.is_dir() {
        OFlags::RDONLY | OFlags::DIRECTORY
    } else {
        OFlags::RDWR
    };
    let fd = rustix::fs::open(&path, flags, Mode::empty())?;
    rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive)?;
    Ok(fd)
}

#[test]
fn shared_locks_reach_every_host_but_directory_flocks_stay_local_and_a_crash_frees_them() {
    let Some(c) = cluster(2, Duration::from_secs(1), Locks::Shared) else {
        return;
    };
    let (file, dir) = (c.root().join("lock"), c.root().join("dir"));
    let (f, d) = (file.clone(), dir.clone());
    let held = c.on(0, move || {
        std::fs::write(&f, b"").expect("create lock file");
        std::fs::create_dir(&d).expect("mkdir");
        (
            try_flock(f).expect("host 0 locks the file"),
            try_flock(d).expect("host 0 locks the dir"),
        )
    });
    let (f, d) = (file.clone(), dir.clone());
    let (on_file, on_dir) = c.on(1, move || (try_flock(f).err(), try_flock(d).is_ok()));
    assert_eq!(
        on_file,
        Some(Errno::WOULDBLOCK),
        "a file flock is seen by host 1"
    );
    assert!(
        on_dir,
        "a directory flock is local to host 0 (as Linux's NFS client)"
    );
    // fcntl locks too.
    let f = file.clone();
    let posix = c.on(1, move || {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&f)
            .expect("open");
        rustix::fs::fcntl_lock(&file, FlockOperation::NonBlockingLockExclusive).err()
    });
    assert_eq!(
        posix,
        Some(Errno::WOULDBLOCK),
        "host 0's flock conflicts with host 1's fcntl lock, as NFS's emulation"
    );
    c.crash(0).expect("crash host 0");
    drop(held);
    let f = file.clone();
    let _host1_holds = c
        .on(1, move || try_flock(f))
        .expect("the server dropped the crashed host's lock");
    c.restart(0).expect("host 0 comes back");
    let f = file.clone();
    assert_eq!(
        c.on(0, move || try_flock(f).err()),
        Some(Errno::WOULDBLOCK),
        "host 1 holds it now"
    );
}

#[test]
fn local_locks_are_local_to_each_host() {
    let Some(c) = cluster(2, Duration::from_secs(1), Locks::Local) else {
        return;
    };
    let file = c.root().join("lock");
    let f = file.clone();
    let _held = c.on(0, move || {
        std::fs::write(&f, b"").expect("create lock file");
        try_flock(f).expect("host 0 locks")
    });
    let f = file.clone();
    assert!(
        c.on(1, move || try_flock(f).is_ok()),
        "nolock/local_lock=all: host 1 never sees host 0's lock"
    );
}

/// Host 0 looked at host 1's staging directory; host 1 then published it by renaming it to
/// `entries/t`. Host 0's own no-replace rename to `entries/t` meets that directory under its
/// old name in the kernel's cache: the lookup under the rename lock cannot move the alias
/// (`d_splice_alias`) and gives ESTALE. durable-fs answers that the target existed.
#[test]
fn a_rename_onto_a_directory_another_host_renamed_there_is_already_existed() {
    let Some(c) = cluster(2, Duration::ZERO, Locks::Local) else {
        return;
    };
    let root = c.root().to_path_buf();
    let (staging, entries) = (root.join("staging"), root.join("entries"));
    let (s, e) = (staging.clone(), entries.clone());
    c.on(1, move || {
        std::fs::create_dir(&s).expect("mkdir staging");
        std::fs::create_dir(&e).expect("mkdir entries");
        std::fs::create_dir(s.join("s1")).expect("mkdir s1");
        std::fs::write(s.join("s1/artifact"), b"host 1").expect("write");
    });
    let s = staging.clone();
    c.on(0, move || {
        std::fs::create_dir(s.join("s0")).expect("mkdir s0");
        std::fs::write(s.join("s0/artifact"), b"host 0").expect("write");
        assert!(
            std::fs::symlink_metadata(s.join("s1")).is_ok(),
            "host 0 sees s1"
        );
    });
    let (s, e) = (staging.clone(), entries.clone());
    c.on(1, move || {
        std::fs::rename(s.join("s1"), e.join("t")).expect("host 1 publishes")
    });
    let (s, e) = (staging.clone(), entries.clone());
    let outcome = c.on(0, move || {
        durable_fs::rename_noreplace(s.join("s0"), e.join("t"))
    });
    assert_eq!(
        outcome.expect("a lost race, not an error"),
        durable_fs::PublishOutcome::AlreadyExisted
    );
    let e = entries.clone();
    let kept = c.on(0, move || {
        std::fs::read(e.join("t/artifact")).expect("read")
    });
    assert_eq!(kept, b"host 1", "the winner stays");
}
