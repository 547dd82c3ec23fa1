//! Negative controls: each broken durable write must be caught, or the harness proves nothing.

use powercut_fs::{CutMode, Options};

use crate::util::{
    all_modes, payload, publish_artifact, short_workload, short_workload_baseline, sweep, Flaw,
};

#[test]
fn heavy_a_put_without_the_file_fsync_loses_or_tears_data() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let outcomes = sweep(
            mount,
            &all_modes(),
            short_workload_baseline,
            |ledger, root| short_workload(ledger, root, Flaw::NoFileFsync),
        );
        let caught: Vec<_> = outcomes.iter().filter(|o| !o.verdict.is_clean()).collect();
        assert!(
            !caught.is_empty(),
            "a put without the file fsync must be caught at some crash point"
        );
        assert!(
            caught.iter().any(|o| o.mode == CutMode::DropUnsynced),
            "dropping every unsynced write must catch it"
        );
        assert!(
            caught
                .iter()
                .any(|o| matches!(o.mode, CutMode::TornWrites { .. }) && !o.verdict.torn.is_empty()),
            "torn writes must show as torn files"
        );
    });
}

#[test]
fn heavy_a_put_without_the_directory_fsync_loses_the_new_name() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let outcomes = sweep(
            mount,
            &[CutMode::DropUnsynced],
            short_workload_baseline,
            |ledger, root| short_workload(ledger, root, Flaw::NoDirFsync),
        );
        assert!(
            outcomes
                .iter()
                .any(|o| o.verdict.lost.iter().any(|l| l.starts_with("b:"))),
            "the new name b must be lost at some crash point: {outcomes:#?}"
        );
    });
}

#[test]
fn heavy_publishing_meta_before_the_artifact_fsync_is_caught() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let outcomes = sweep(
            mount,
            &all_modes(),
            |_, _| Ok(()),
            |ledger, root| publish_artifact(ledger, root, &payload(9, 3000), true),
        );
        assert!(
            outcomes.iter().any(|o| o
                .verdict
                .torn
                .iter()
                .chain(&o.verdict.lost)
                .any(|v| v.starts_with("artifact"))),
            "a meta file visible before its artifact is durable must be caught"
        );
    });
}
