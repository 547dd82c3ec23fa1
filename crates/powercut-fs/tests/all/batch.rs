//! `durable_fs::Batch` on the power-loss filesystem: a cut at every operation of a batch of 24
//! files loses nothing after `commit` returned and tears nothing before; its flaws are caught.
//!
//! The mount is FUSE, so `Batch` chooses per-file `fsync` and one `fsync` per directory: what
//! this filesystem models (its `fsync`/`fsyncdir` layers). `syncfs(2)` never reaches a FUSE
//! daemon, and the forced-`syncfs` control below shows the consequence.

use std::io;
use std::path::Path;

use durable_fs::testing::{with_batch_flaw, BatchFlaw};
use durable_fs::{Batch, BatchReport, DirMode, FlushStrategy};
use powercut_fs::{Content, CutMode, Faults, Ledger, Options};

use crate::util::{payload, sweep, Outcome};

/// Enough files that the batch spans both directories many times over, with new and replaced
/// targets; every one of their operations is a cut, so the sweep grows with the square of this.
const FILES: usize = 24;
const DIRS: [&str; 2] = ["d1", "d2"];

/// Target `i`: alternating between two directories, so the batch spans several.
fn target(i: usize) -> String {
    format!("{}/f{i:02}", DIRS[i % DIRS.len()])
}

/// Every third target exists before the batch (version 1), the others are new.
fn preexisting(i: usize) -> bool {
    i.is_multiple_of(3)
}

/// A size per file, most of them over one 512-byte sector, so torn writes show.
fn new_bytes(i: usize) -> Vec<u8> {
    payload(100 + (i % 100) as u8, 600 + 37 * i)
}

fn setup(ledger: &mut Ledger, root: &Path) -> io::Result<()> {
    for dir in DIRS {
        durable_fs::create_dir_all_durable(root.join(dir), DirMode::DEFAULT)?;
    }
    for i in (0..FILES).filter(|&i| preexisting(i)) {
        let name = target(i);
        let old = payload(1, 900 + i);
        ledger.attempt(&name, Content::File(old.clone()));
        durable_fs::put(root.join(&name), &old)?;
        ledger.succeeded(&name);
    }
    Ok(())
}

/// Stages `FILES` files and commits them; every file succeeds only when `commit` returned `Ok`.
fn batch_workload(ledger: &mut Ledger, root: &Path) -> durable_fs::Result<BatchReport> {
    let mut batch = Batch::new();
    for i in 0..FILES {
        let name = target(i);
        let bytes = new_bytes(i);
        ledger.attempt(&name, Content::File(bytes.clone()));
        batch.put(root.join(&name), &bytes)?;
    }
    let report = batch.commit()?;
    for i in 0..FILES {
        ledger.succeeded(target(i));
    }
    Ok(report)
}

fn violations(outcomes: &[Outcome]) -> Vec<&Outcome> {
    outcomes.iter().filter(|o| !o.verdict.is_clean()).collect()
}

#[test]
fn heavy_batch_of_24_survives_a_cut_at_every_operation() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let root = mount.root().to_path_buf();
        let before = mount.counters();
        let mut ledger = Ledger::new();
        setup(&mut ledger, &root).expect("setup");
        let after_setup = mount.counters();
        let report = batch_workload(&mut ledger, &root).expect("a batch without a cut");
        let after = mount.counters();
        assert_eq!(
            report.strategy,
            FlushStrategy::PerFile,
            "on FUSE the batch must not rely on syncfs"
        );
        assert_eq!(
            (report.files, report.directories, report.flushes),
            (FILES, DIRS.len(), FILES + DIRS.len()),
            "{FILES} file fsyncs and one per directory: {report:?}"
        );
        assert_eq!(
            after.fsync - after_setup.fsync,
            FILES as u64,
            "every file fsync reached the daemon (setup made {})",
            after_setup.fsync - before.fsync
        );
        assert_eq!(
            after.fsyncdir - after_setup.fsyncdir,
            DIRS.len() as u64,
            "one directory fsync per directory reached the daemon"
        );

        let modes = [
            CutMode::DropUnsynced,
            CutMode::RandomSubset { seed: 7 },
            CutMode::TornWrites { seed: 11 },
        ];
        let outcomes = sweep(mount, &modes, setup, |ledger, root| {
            batch_workload(ledger, root)
                .map(drop)
                .map_err(io::Error::from)
        });
        let points = outcomes.len() / modes.len();
        assert!(
            points > 4 * FILES,
            "every create, write, fsync and rename of the {FILES} files is a crash point: {points}"
        );
        let bad = violations(&outcomes);
        assert!(
            bad.is_empty(),
            "no crash point loses a committed file or tears one: {:#?}",
            &bad[..bad.len().min(3)]
        );
        let checked: u64 = outcomes.iter().map(|o| o.verdict.operations_checked).sum();
        assert!(
            checked > 0,
            "the cuts after commit returned checked the files"
        );
    });
}

/// Negative control: renaming before the data is flushed must be caught (a rename survives a
/// cut without the data it points to, as on ext4 without `auto_da_alloc`, xfs or btrfs).
#[test]
fn heavy_batch_that_renames_before_the_flush_is_caught() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let modes = [
            CutMode::RandomSubset { seed: 7 },
            CutMode::TornWrites { seed: 11 },
        ];
        let outcomes = sweep(mount, &modes, setup, |ledger, root| {
            with_batch_flaw(BatchFlaw::RenameBeforeFlush, || {
                batch_workload(ledger, root)
                    .map(drop)
                    .map_err(io::Error::from)
            })
        });
        let bad = violations(&outcomes);
        assert!(
            bad.iter().any(|o| !o.verdict.torn.is_empty()),
            "a renamed file whose data was not durable shows up torn at some crash point"
        );
    });
}

/// Negative control: `syncfs` is no barrier on FUSE. Forcing it, `commit` returns `Ok` while
/// nothing reached the daemon, and a cut right after loses the batch. This is why `Batch`
/// chooses per-file `fsync` there.
#[test]
fn heavy_batch_forced_to_syncfs_on_fuse_loses_committed_files() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let root = mount.root().to_path_buf();
        let mut ledger = Ledger::new();
        setup(&mut ledger, &root).expect("setup");
        mount.power_cut().expect("make the setup durable");
        assert!(ledger.check(&root).expect("check").is_clean());
        let before = mount.counters();
        let report = with_batch_flaw(BatchFlaw::ForceSyncfs, || {
            batch_workload(&mut ledger, &root)
        })
        .expect("the forced-syncfs commit returns Ok");
        assert_eq!(report.strategy, FlushStrategy::Syncfs);
        let after = mount.counters();
        assert_eq!(
            (after.fsync - before.fsync, after.fsyncdir - before.fsyncdir),
            (0, 0),
            "syncfs never reached the daemon"
        );
        mount.power_cut().expect("cut right after commit returned");
        let verdict = ledger.check(&root).expect("check");
        assert!(
            verdict.lost.len() >= FILES,
            "every file of the 'committed' batch is lost: {verdict:?}"
        );
    });
}

/// An fsync error fails the whole batch: nothing is renamed, the temps are removed, and the
/// failed fsync is not retried.
#[test]
fn heavy_batch_fsync_error_publishes_nothing_and_is_not_retried() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let root = mount.root().to_path_buf();
        let mut ledger = Ledger::new();
        setup(&mut ledger, &root).expect("setup");
        let before = mount.counters();
        mount.set_faults(Faults {
            eio_on_fsync: Some(20),
            ..Faults::default()
        });
        let err = batch_workload(&mut ledger, &root).expect_err("the 20th fsync fails");
        let after = mount.counters();
        assert_eq!(
            err.raw_os_error(),
            Some(libc::EIO),
            "EIO reaches the caller: {err}"
        );
        assert!(
            err.to_string().starts_with("fsync "),
            "the error names the fsync: {err}"
        );
        assert_eq!(
            after.fsync - before.fsync,
            20,
            "the batch stopped at the failed fsync and never retried it"
        );
        assert_eq!(after.fsyncdir, before.fsyncdir, "no directory was synced");
        for i in 0..FILES {
            let found = std::fs::read(root.join(target(i))).ok();
            let expected = preexisting(i).then(|| payload(1, 900 + i));
            assert_eq!(found, expected, "target {i} is untouched");
        }
        for dir in DIRS {
            let leftovers: Vec<_> = std::fs::read_dir(root.join(dir))
                .expect("list")
                .map(|e| e.expect("entry").file_name())
                .filter(|n| durable_fs::is_temp_name(n))
                .collect();
            assert!(
                leftovers.is_empty(),
                "no temp is left in {dir}: {leftovers:?}"
            );
        }
    });
}

/// A directory fsync error after the renames is returned (never retried); the renamed files are
/// visible and whole.
#[test]
fn heavy_batch_directory_fsync_error_is_returned_once() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let root = mount.root().to_path_buf();
        let mut ledger = Ledger::new();
        setup(&mut ledger, &root).expect("setup");
        let before = mount.counters();
        mount.set_faults(Faults {
            eio_on_fsyncdir: Some(1),
            ..Faults::default()
        });
        let err = batch_workload(&mut ledger, &root).expect_err("the directory fsync fails");
        assert_eq!(err.op(), "fsync directory", "{err}");
        assert_eq!(
            mount.counters().fsyncdir - before.fsyncdir,
            1,
            "the failed directory fsync ends the commit, without a retry or the next directory"
        );
        for i in 0..FILES {
            assert_eq!(
                std::fs::read(root.join(target(i))).ok(),
                Some(new_bytes(i)),
                "target {i} is whole and new (the renames came after the data flush)"
            );
        }
    });
}
