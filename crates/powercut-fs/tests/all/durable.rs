//! durable-fs on powercut-fs through random cuts: every put that returned Ok is fully present,
//! every visible entry is whole; the same harness catches broken writers.

use powercut_fs::{Options, RandomCuts, Writer};

fn run(writer: Writer, cuts: u64, seed: u64) -> Option<powercut_fs::Totals> {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let plan = RandomCuts {
            cuts,
            seed,
            writer,
            jit_builds: false,
        };
        powercut_fs::run_random_cuts(mount, plan).expect("cut, remount and check")
    })
}

#[test]
fn heavy_durable_fs_puts_and_staged_commits_survive_random_cuts() {
    let Some(totals) = run(Writer::DurableFs, 150, 11) else {
        return;
    };
    assert!(
        totals.is_clean(),
        "{}: {:#?}",
        totals.summary(),
        totals.violations
    );
    assert!(
        totals.operations_checked >= 50,
        "enough successful operations were checked: {}",
        totals.summary()
    );
    assert!(
        totals.fsync_errors_returned > 0,
        "injected fsync errors reached the caller and published nothing"
    );
}

#[test]
fn heavy_random_cuts_catch_a_put_without_the_file_fsync() {
    let Some(totals) = run(Writer::NoFileFsync, 150, 11) else {
        return;
    };
    assert!(
        totals.torn > 0,
        "empty or torn files must be found: {}",
        totals.summary()
    );
}

#[test]
fn heavy_random_cuts_catch_a_put_without_the_directory_fsync() {
    let Some(totals) = run(Writer::NoDirFsync, 150, 11) else {
        return;
    };
    assert!(
        totals.lost > 0,
        "lost names must be found: {}",
        totals.summary()
    );
}
