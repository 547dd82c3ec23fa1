//! `Batch` on every filesystem fs-testbed provides, and the `syncfs` path against a real crash:
//! an xfs shut down without flushing its log (`xfs_io -x -c shutdown`), then remounted, which
//! replays only what reached the on-disk log.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use durable_fs::testing::{with_batch_flaw, BatchFlaw};
use durable_fs::{Batch, Flush, FlushStrategy};
use fs_testbed::{run_or_skip, FsKind};

use crate::common::temps;

const FILES: usize = 50;

fn bytes(version: u8, i: usize) -> Vec<u8> {
    (0..1000 + 97 * i)
        .map(|k| (k as u8).wrapping_mul(31) ^ version)
        .collect()
}

/// Targets spread over two directories; every third one exists beforehand (version 1).
fn setup(root: &Path) -> Vec<PathBuf> {
    let dirs = [root.join("d1"), root.join("d2")];
    for dir in &dirs {
        std::fs::create_dir_all(dir).expect("test dirs");
    }
    let targets: Vec<PathBuf> = (0..FILES)
        .map(|i| dirs[i % 2].join(format!("f{i:02}")))
        .collect();
    for (i, t) in targets.iter().enumerate().filter(|(i, _)| i % 3 == 0) {
        durable_fs::put(t, &bytes(1, i)).expect("old version");
    }
    durable_fs::fsync_tree(root).expect("make the setup durable");
    targets
}

fn stage_all(batch: &mut Batch, targets: &[PathBuf]) {
    for (i, t) in targets.iter().enumerate() {
        batch.put(t, &bytes(2, i)).expect("stage");
    }
}

fn assert_new(targets: &[PathBuf], fs: &str) {
    for (i, t) in targets.iter().enumerate() {
        assert_eq!(
            std::fs::read(t).ok(),
            Some(bytes(2, i)),
            "{fs}: {} holds the new version",
            t.display()
        );
    }
}

fn exercise(root: &Path, fs: &str, expected: Option<FlushStrategy>) {
    let targets = setup(root);
    let mut batch = Batch::new();
    assert!(batch.is_empty());
    stage_all(&mut batch, &targets);
    assert_eq!(batch.len(), FILES);
    for (i, t) in targets.iter().enumerate() {
        let before = std::fs::read(t).ok();
        let old = (i % 3 == 0).then(|| bytes(1, i));
        assert_eq!(before, old, "{fs}: nothing is published before commit");
    }
    let report = batch.commit().expect("commit");
    assert_eq!(
        (report.files, report.directories),
        (FILES, 2),
        "{fs}: {report:?}"
    );
    if let Some(expected) = expected {
        assert_eq!(
            report.strategy, expected,
            "{fs}: the flush chosen for this filesystem"
        );
    }
    let flushes = match report.strategy {
        FlushStrategy::Syncfs => 2,
        _ => FILES + 2,
    };
    assert_eq!(
        report.flushes, flushes,
        "{fs}: two flushes, or one per file and directory"
    );
    assert_new(&targets, fs);
    for dir in ["d1", "d2"] {
        assert!(
            temps(&root.join(dir)).is_empty(),
            "{fs}: no temp left in {dir}"
        );
    }

    // Forced per-file flushing: 50 fsyncs and one per directory.
    let mut per_file = Batch::with_flush(Flush::PerFile);
    stage_all(&mut per_file, &targets);
    let report = per_file.commit().expect("per-file commit");
    assert_eq!(
        (report.strategy, report.flushes),
        (FlushStrategy::PerFile, FILES + 2),
        "{fs}: forced per-file"
    );

    // A writer error stages nothing for that path and leaves the batch usable; dropping an
    // uncommitted batch removes its temps and publishes nothing.
    let mut dropped = Batch::new();
    dropped.put(&targets[1], b"never published").expect("stage");
    let err = dropped
        .put_with(&targets[2], |f| {
            f.write_all(b"half")?;
            Err(io::Error::other("the producer failed"))
        })
        .expect_err("the writer's error");
    assert_eq!(err.op(), "write temp file", "{fs}: {err}");
    assert_eq!(dropped.len(), 1, "{fs}: the failed file is not staged");
    drop(dropped);
    assert_new(&targets, fs);
    for dir in ["d1", "d2"] {
        assert!(
            temps(&root.join(dir)).is_empty(),
            "{fs}: a dropped batch leaves no temp"
        );
    }
    let empty = Batch::new().commit().expect("an empty batch");
    assert_eq!(
        (empty.files, empty.flushes),
        (0, 0),
        "{fs}: an empty batch does nothing"
    );
}

#[test]
fn batch_on_default_tmp() {
    run_or_skip(FsKind::DefaultTmp, |root| {
        exercise(root, "default-tmp", None)
    });
}

#[test]
fn batch_on_ext4_uses_syncfs() {
    run_or_skip(FsKind::Ext4, |root| {
        exercise(root, "ext4", Some(FlushStrategy::Syncfs))
    });
}

#[test]
fn batch_on_xfs_uses_syncfs() {
    run_or_skip(FsKind::Xfs, |root| {
        exercise(root, "xfs", Some(FlushStrategy::Syncfs))
    });
}

#[test]
fn batch_on_btrfs_uses_syncfs() {
    run_or_skip(FsKind::Btrfs, |root| {
        exercise(root, "btrfs", Some(FlushStrategy::Syncfs))
    });
}

#[test]
fn batch_on_tmpfs_fsyncs_per_file() {
    run_or_skip(FsKind::Tmpfs, |root| {
        exercise(root, "tmpfs", Some(FlushStrategy::PerFile))
    });
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Shuts the xfs at `root` down without flushing its log, as a power cut would leave it, then
/// unmounts it and mounts its image again: log recovery replays only what reached the disk.
/// (fs-testbed keeps the image beside the mount point; the namespace is this thread's.)
fn crash_and_remount(root: &Path) {
    run(Command::new("xfs_io")
        .args(["-x", "-c", "shutdown"])
        .arg(root));
    run(Command::new("umount").arg(root));
    let image = root.parent().expect("scratch dir").join("image");
    run(Command::new("mount")
        .args(["-t", "xfs", "-o", "loop"])
        .arg(&image)
        .arg(root));
}

fn have_xfs_io() -> bool {
    Command::new("xfs_io")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Commits a batch (with `flaw`, if any), crashes the xfs right after `commit` returned and
/// remounts; returns how many targets hold their new version.
fn crash_after_commit(root: &Path, flaw: Option<BatchFlaw>) -> usize {
    let targets = setup(root);
    let mut batch = Batch::new();
    stage_all(&mut batch, &targets);
    let report = match flaw {
        Some(flaw) => with_batch_flaw(flaw, || batch.commit()),
        None => batch.commit(),
    }
    .expect("commit");
    assert_eq!(
        report.strategy,
        FlushStrategy::Syncfs,
        "xfs takes the syncfs path"
    );
    crash_and_remount(root);
    let mut new = 0;
    for (i, t) in targets.iter().enumerate() {
        let found = std::fs::read(t).ok();
        let old = (i % 3 == 0).then(|| bytes(1, i));
        if found == Some(bytes(2, i)) {
            new += 1;
        } else {
            assert_eq!(found, old, "{}: old or whole new, never torn", t.display());
        }
    }
    new
}

#[test]
fn heavy_batch_on_xfs_survives_a_shutdown_right_after_commit() {
    if !have_xfs_io() {
        assert!(!fs_testbed::skips_are_failures(), "xfs_io is missing");
        eprintln!("skipped: xfs_io is missing");
        return;
    }
    run_or_skip(FsKind::Xfs, |root| {
        assert_eq!(
            crash_after_commit(root, None),
            FILES,
            "every file of a committed batch survives the crash"
        );
    });
}

/// Negative control: without the second `syncfs` the renames are still in the in-memory log,
/// and the crash loses them. This shows the shutdown really drops what was not flushed.
#[test]
fn heavy_batch_on_xfs_without_the_entry_flush_loses_files() {
    if !have_xfs_io() {
        assert!(!fs_testbed::skips_are_failures(), "xfs_io is missing");
        eprintln!("skipped: xfs_io is missing");
        return;
    }
    run_or_skip(FsKind::Xfs, |root| {
        let survived = crash_after_commit(root, Some(BatchFlaw::SkipEntryFlush));
        eprintln!("without the entry flush, {survived} of {FILES} files survived the crash");
        assert!(
            survived < FILES,
            "a batch whose renames were never flushed must lose some after a crash ({survived})"
        );
    });
}

/// A `syncfs` error fails the whole batch: on a shut-down xfs the data flush fails, nothing is
/// renamed, and after remounting every target holds its old state.
#[test]
fn heavy_batch_syncfs_error_publishes_nothing() {
    if !have_xfs_io() {
        assert!(!fs_testbed::skips_are_failures(), "xfs_io is missing");
        eprintln!("skipped: xfs_io is missing");
        return;
    }
    run_or_skip(FsKind::Xfs, |root| {
        let targets = setup(root);
        let mut batch = Batch::new();
        stage_all(&mut batch, &targets);
        run(Command::new("xfs_io")
            .args(["-x", "-c", "shutdown"])
            .arg(root));
        let err = batch.commit().expect_err("syncfs on a shut-down xfs fails");
        assert_eq!(err.op(), "syncfs", "the first flush failed: {err}");
        run(Command::new("umount").arg(root));
        let image = root.parent().expect("scratch dir").join("image");
        run(Command::new("mount")
            .args(["-t", "xfs", "-o", "loop"])
            .arg(&image)
            .arg(root));
        for (i, t) in targets.iter().enumerate() {
            let old = (i % 3 == 0).then(|| bytes(1, i));
            assert_eq!(std::fs::read(t).ok(), old, "{}: untouched", t.display());
        }
    });
}
