//! Every operation on every filesystem fs-testbed provides.

use std::io::Write;
use std::path::Path;

use durable_fs::{
    atomic_rename, create_dir_all_durable, exchange, fsync_dir, fsync_parent, fsync_path,
    fsync_tree, lock, put, put_with, rename_noreplace, sweep, testing, try_lock, DirMode, LockMode,
    PublishOutcome, StagingDir, SweepPolicy, Wait,
};
use fs_testbed::{run_or_skip, FsKind};

use crate::common::{names, temps};

fn exercise_everything(root: &Path, fs: &str) {
    let dir = root.join("work");
    // Durable directory creation, several levels deep, and a no-op when it exists.
    create_dir_all_durable(dir.join("a/b/c"), DirMode::from_mode(0o755))
        .expect("create nested dirs");
    assert!(dir.join("a/b/c").is_dir(), "{fs}: nested dirs exist");
    create_dir_all_durable(dir.join("a/b/c"), DirMode::from_mode(0o755))
        .expect("existing dir is fine");

    // put, overwrite, streaming put.
    let target = dir.join("artifact.bin");
    put(&target, b"first").expect("put a new file");
    put(&target, &vec![7u8; 300_000]).expect("overwrite with a bigger file");
    assert_eq!(
        std::fs::read(&target).expect("read"),
        vec![7u8; 300_000],
        "{fs}: overwrite"
    );
    put_with(&target, |f| {
        for i in 0..100u8 {
            f.write_all(&[i; 1000])?;
        }
        Ok(())
    })
    .expect("streaming put");
    let streamed = std::fs::read(&target).expect("read streamed");
    assert_eq!(streamed.len(), 100_000, "{fs}: streamed length");
    assert_eq!(streamed[99_999], 99, "{fs}: streamed tail");
    assert!(temps(&dir).is_empty(), "{fs}: no temp left by put");

    // fsync variants: a file, a tree containing a FIFO and a symlink (neither opened; a FIFO open
    // without O_NONBLOCK would hang here), a parent.
    fsync_path(&target).expect("fsync a file");
    fsync_path(&dir).expect("fsync a directory by path");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        dir.join("a/fifo"),
        rustix::fs::Mode::from_raw_mode(0o644),
    )
    .expect("make a fifo");
    std::os::unix::fs::symlink("/nonexistent", dir.join("a/b/dangling")).expect("symlink");
    fsync_tree(&dir).expect("fsync a tree with a fifo and a dangling symlink");
    fsync_dir(&dir).expect("fsync one directory");
    let not_dir = fsync_dir(&target).expect_err("fsync_dir refuses a file");
    assert_eq!(
        not_dir.path(),
        target,
        "{fs}: the error names the file: {not_dir}"
    );
    assert_eq!(
        fsync_path(dir.join("a/fifo"))
            .expect_err("fsync_path refuses a fifo")
            .kind(),
        std::io::ErrorKind::InvalidInput
    );
    fsync_parent(&target).expect("fsync parent");

    // atomic_rename within a directory and across directories.
    put(dir.join("x"), b"x").expect("put x");
    atomic_rename(dir.join("x"), dir.join("y")).expect("rename in one dir");
    atomic_rename(dir.join("y"), dir.join("a/b/y")).expect("rename across dirs");
    assert_eq!(
        std::fs::read(dir.join("a/b/y")).expect("read"),
        b"x",
        "{fs}: renamed"
    );

    // No-replace publish of files, native and through the linkat fallback.
    for (label, forced) in [("native", false), ("fallback", true)] {
        let run = || {
            let src = dir.join(format!("src-{label}"));
            let dst = dir.join(format!("dst-{label}"));
            put(&src, b"one").expect("put source");
            assert_eq!(
                rename_noreplace(&src, &dst).expect("publish"),
                PublishOutcome::Published
            );
            assert!(!src.exists(), "{fs} {label}: source moved");
            put(&src, b"two").expect("put second source");
            assert_eq!(
                rename_noreplace(&src, &dst).expect("second publish"),
                PublishOutcome::AlreadyExisted,
                "{fs} {label}: the loser learns the target existed"
            );
            assert_eq!(
                std::fs::read(&dst).expect("read"),
                b"one",
                "{fs} {label}: winner kept"
            );
            assert_eq!(
                std::fs::read(&src).expect("read"),
                b"two",
                "{fs} {label}: loser kept"
            );
            // Directories: onto nothing, then onto a non-empty winner.
            let sd = dir.join(format!("sd-{label}"));
            let dd = dir.join(format!("dd-{label}"));
            std::fs::create_dir(&sd).expect("mkdir");
            put(sd.join("f"), b"f").expect("put in dir");
            assert_eq!(
                rename_noreplace(&sd, &dd).expect("publish dir"),
                PublishOutcome::Published
            );
            std::fs::create_dir(&sd).expect("mkdir again");
            put(sd.join("g"), b"g").expect("put in dir");
            assert_eq!(
                rename_noreplace(&sd, &dd).expect("publish dir again"),
                PublishOutcome::AlreadyExisted,
                "{fs} {label}: a non-empty directory is never replaced"
            );
            assert!(
                dd.join("f").exists() && !dd.join("g").exists(),
                "{fs} {label}: winner intact"
            );
        };
        if forced {
            testing::with_rename_flags_unsupported(run);
        } else {
            run();
        }
    }

    // Exchange of two non-empty directories.
    let (ea, eb) = (dir.join("ea"), dir.join("eb"));
    for (d, n) in [(&ea, "a"), (&eb, "b")] {
        std::fs::create_dir(d).expect("mkdir");
        put(d.join(n), n.as_bytes()).expect("put");
    }
    exchange(&ea, &eb).expect("exchange two directories");
    assert!(
        ea.join("b").exists() && eb.join("a").exists(),
        "{fs}: swapped"
    );
    let unsupported = testing::with_rename_flags_unsupported(|| exchange(&ea, &eb))
        .expect_err("forced unsupported exchange");
    assert_eq!(
        unsupported.kind(),
        std::io::ErrorKind::Unsupported,
        "{fs}: kind Unsupported"
    );

    // Staged directory commits: no-replace (win, then lose), replace (exchange and fallback).
    let entry = dir.join("entry");
    let staging = StagingDir::new_in(&dir).expect("staging dir");
    put(staging.path().join("kernel.cubin"), b"v1").expect("stage a file");
    std::fs::create_dir(staging.path().join("sub")).expect("stage a subdir");
    put(staging.path().join("sub/meta.json"), b"{}").expect("stage a nested file");
    assert_eq!(
        staging.commit_noreplace(&entry).expect("commit"),
        PublishOutcome::Published
    );
    let loser = StagingDir::new_in(&dir).expect("staging dir");
    put(loser.path().join("kernel.cubin"), b"v2").expect("stage");
    let loser_path = loser.path().to_path_buf();
    assert_eq!(
        loser.commit_noreplace(&entry).expect("losing commit"),
        PublishOutcome::AlreadyExisted
    );
    assert!(
        !loser_path.exists(),
        "{fs}: the losing staging dir is removed"
    );
    assert_eq!(
        std::fs::read(entry.join("kernel.cubin")).expect("read"),
        b"v1",
        "{fs}: winner"
    );

    for (version, forced) in [(&b"v3"[..], false), (&b"v4"[..], true)] {
        let run = || {
            let staging = StagingDir::new_in(&dir).expect("staging dir");
            put(staging.path().join("kernel.cubin"), version).expect("stage");
            staging.commit_replace(&entry).expect("replace live dir");
        };
        if forced {
            testing::with_rename_flags_unsupported(run);
        } else {
            run();
        }
        assert_eq!(
            std::fs::read(entry.join("kernel.cubin")).expect("read"),
            version,
            "{fs}: replaced (fallback {forced})"
        );
        assert!(
            !entry.join("sub").exists(),
            "{fs}: the old tree is gone, not merged"
        );
    }
    // Replace onto a missing target publishes it.
    let fresh = dir.join("fresh");
    let staging = StagingDir::new_in(&dir).expect("staging dir");
    put(staging.path().join("f"), b"f").expect("stage");
    staging
        .commit_replace(&fresh)
        .expect("replace onto nothing");
    assert!(fresh.join("f").exists(), "{fs}: published onto nothing");

    // A dropped staging dir removes itself.
    let dropped = StagingDir::new_in(&dir).expect("staging dir");
    put(dropped.path().join("f"), b"f").expect("stage");
    let dropped_path = dropped.path().to_path_buf();
    drop(dropped);
    assert!(!dropped_path.exists(), "{fs}: drop removes the staging dir");
    assert!(
        temps(&dir).is_empty(),
        "{fs}: no temps left: {:?}",
        names(&dir)
    );

    // A live staging dir is skipped by a sweep with no age limit; after its drop there is nothing.
    let live = StagingDir::new_in(&dir).expect("staging dir");
    let report = sweep(
        &dir,
        &SweepPolicy {
            max_age: std::time::Duration::ZERO,
        },
    )
    .expect("sweep");
    assert!(
        report.removed.is_empty(),
        "{fs}: a live staging dir is not swept"
    );
    assert_eq!(report.skipped_live, 1, "{fs}: counted as live");
    drop(live);

    // Locks: exclusive excludes, shared shares, dropping releases, the file stays.
    let lock_path = dir.join("lock");
    let held = try_lock(&lock_path, LockMode::Exclusive)
        .expect("lock")
        .expect("free lock granted");
    assert!(
        try_lock(&lock_path, LockMode::Shared)
            .expect("try")
            .is_none(),
        "{fs}: exclusive excludes shared"
    );
    drop(held);
    let s1 = try_lock(&lock_path, LockMode::Shared).expect("lock");
    let s2 = lock(&lock_path, LockMode::Shared, Wait::Forever)
        .map(Some)
        .expect("lock");
    assert!(s1.is_some() && s2.is_some(), "{fs}: two shared holders");
    drop((s1, s2));
    assert!(lock_path.exists(), "{fs}: the lock file is never deleted");
}

#[test]
fn every_operation_on_default_tmp() {
    run_or_skip(FsKind::DefaultTmp, |root| {
        exercise_everything(root, "default-tmp")
    });
}

#[test]
fn every_operation_on_ext4() {
    run_or_skip(FsKind::Ext4, |root| exercise_everything(root, "ext4"));
}

#[test]
fn every_operation_on_xfs() {
    run_or_skip(FsKind::Xfs, |root| exercise_everything(root, "xfs"));
}

#[test]
fn every_operation_on_xfs_4k_sectors() {
    run_or_skip(FsKind::Xfs4k, |root| exercise_everything(root, "xfs-4k"));
}

#[test]
fn every_operation_on_btrfs() {
    run_or_skip(FsKind::Btrfs, |root| exercise_everything(root, "btrfs"));
}

#[test]
fn every_operation_on_tmpfs() {
    run_or_skip(FsKind::Tmpfs, |root| exercise_everything(root, "tmpfs"));
}
