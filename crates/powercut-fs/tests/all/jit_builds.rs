//! jit-cache builds on powercut-fs through random cuts: every entry whose publication was
//! reported is present, whole and a hit; every visible entry is whole; verify and the sweep find
//! nothing left. The same harness catches jit-cache's injected `in-place` and `meta-first` bugs.

use powercut_fs::{Options, RandomCuts, Writer};

#[test]
fn heavy_jit_cache_builds_survive_random_cuts() {
    let totals = powercut_fs::run_or_skip(Options::default(), |mount| {
        let plan = RandomCuts {
            cuts: 120,
            seed: 1,
            writer: Writer::DurableFs,
            jit_builds: true,
        };
        powercut_fs::run_random_cuts(mount, plan).expect("cut, remount and check")
    });
    let Some(totals) = totals else {
        return;
    };
    let builds = &totals.builds;
    assert!(
        totals.is_clean(),
        "{}: {:#?}",
        totals.summary(),
        totals.violations
    );
    assert!(
        builds.checked >= 8 && builds.entry_checks > builds.checked,
        "published builds were checked, and again after later cuts: {}",
        totals.summary()
    );
    assert!(
        builds.hits > 0 && builds.not_published > 0,
        "the workload had hits and builds the cut interrupted: {}",
        totals.summary()
    );
    assert!(
        builds.swept > 0,
        "the sweep removed what interrupted builds left: {}",
        totals.summary()
    );
    assert!(
        builds.fsync_errors_returned > 0,
        "an injected fsync error reached a build, which did not report a publication: {}",
        totals.summary()
    );
}

/// Runs the `power-loss-test` binary with jit-cache's injected bug `bug` and returns its JSON
/// report, or `None` when it skipped (no root or no /dev/fuse).
fn run_with_bug(bug: &str) -> Option<serde_json::Value> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_power-loss-test"))
        .args(["--cuts", "60", "--seed", "1", "--json"])
        .env("JIT_CACHE_INJECT_BUG", bug)
        .output()
        .expect("run power-loss-test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    if stdout.trim().is_empty() {
        assert!(
            output.status.success(),
            "power-loss-test failed without a report: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!("skipped: {}", String::from_utf8_lossy(&output.stderr));
        return None;
    }
    assert!(
        !output.status.success(),
        "a run that finds violations exits non-zero: {stdout}"
    );
    Some(serde_json::from_str(&stdout).expect("power-loss-test prints one JSON object"))
}

fn build_violations(report: &serde_json::Value) -> (u64, u64) {
    let get = |field: &str| {
        report["builds"][field]
            .as_u64()
            .expect("the report counts build violations")
    };
    (get("lost"), get("torn"))
}

#[test]
fn heavy_random_cuts_catch_a_jit_cache_build_written_in_place() {
    let Some(report) = run_with_bug("in-place") else {
        return;
    };
    let (lost, torn) = build_violations(&report);
    assert!(
        lost + torn > 0,
        "an entry compiled into its final directory without fsync is lost or torn: {report}"
    );
}

#[test]
fn heavy_random_cuts_catch_a_jit_cache_entry_published_before_its_artifact() {
    let Some(report) = run_with_bug("meta-first") else {
        return;
    };
    let (lost, torn) = build_violations(&report);
    assert!(
        lost + torn > 0,
        "an entry whose meta.json went public before its artifact is lost or torn: {report}"
    );
}
