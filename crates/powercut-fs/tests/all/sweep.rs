//! Positive controls: the correct put survives a cut after every one of its operations.

use powercut_fs::Options;

use crate::util::{
    all_modes, payload, publish_artifact, short_workload, short_workload_baseline, sweep, Flaw,
};

#[test]
fn heavy_a_correct_put_is_whole_or_absent_with_the_old_intact_at_every_crash_point() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let outcomes = sweep(
            mount,
            &all_modes(),
            short_workload_baseline,
            |ledger, root| short_workload(ledger, root, Flaw::None),
        );
        for o in &outcomes {
            assert!(
                o.verdict.is_clean(),
                "k={} {:?}: a correct put lost or tore data: {:?}",
                o.k,
                o.mode,
                o.verdict
            );
        }
        // The sweep must land on both sides of the replacement, or it proved little.
        let (old, new) = (payload(1, 1000), payload(4, 2100));
        assert!(
            outcomes.iter().any(|o| o.a.as_deref() == Some(&old[..])),
            "some crash point leaves the old version of a"
        );
        assert!(
            outcomes.iter().any(|o| o.a.as_deref() == Some(&new[..])),
            "some crash point leaves the new version of a"
        );
        eprintln!(
            "swept {} crash points, {} operations checked",
            outcomes.len(),
            outcomes
                .iter()
                .map(|o| o.verdict.operations_checked)
                .sum::<u64>()
        );
    });
}

#[test]
fn heavy_publishing_meta_after_the_artifact_fsync_passes_at_every_crash_point() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let outcomes = sweep(
            mount,
            &all_modes(),
            |_, _| Ok(()),
            |ledger, root| publish_artifact(ledger, root, &payload(9, 3000), false),
        );
        for o in &outcomes {
            assert!(
                o.verdict.is_clean(),
                "k={} {:?}: the right publish order failed the check: {:?}",
                o.k,
                o.mode,
                o.verdict
            );
        }
    });
}
