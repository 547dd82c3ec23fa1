//! The harness proves itself: a correct protocol passes with kills in every phase, each injected
//! bug is caught with the violation it should cause, the fleet tier's server killed mid-run
//! misleads nobody, and the race harness counts one compile per kernel per round (and more than
//! one without the lock).

use serde_json::Value;
use std::process::Command;

/// Runs `crash-harness <args> --json` and returns its exit code and report.
fn harness(args: &[&str]) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_crash-harness"))
        .args(args)
        .arg("--json")
        .output()
        .expect("run crash-harness");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "crash-harness {args:?} printed no JSON report ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (
        out.status.code().expect("crash-harness exited, not killed"),
        report,
    )
}

fn count(report: &Value, field: &str) -> u64 {
    report[field]
        .as_u64()
        .unwrap_or_else(|| panic!("report has a number `{field}`: {report:#}"))
}

/// A run that exits 0 with no violation and every required phase hit.
fn assert_clean(code: i32, report: &Value) {
    assert_eq!(
        (
            code,
            count(report, "violations"),
            report["phases_missed"].clone()
        ),
        (0, 0, serde_json::json!([])),
        "{report:#}"
    );
}

/// A small crash test with an injected bug, seeded so it replays.
fn run_with_bug(bug: &str, extra: &[&str]) -> Value {
    // 160 kills: the injected bugs are caught by chance (a kill at the right instant, a reader
    // meeting what was torn), and at 80 a loaded run here missed one in four full suites.
    let mut args = vec![
        "run",
        "--kills",
        "160",
        "--check-every",
        "20",
        "--seed",
        "11",
        "--inject-bug",
        bug,
    ];
    args.extend_from_slice(extra);
    let (code, report) = harness(&args);
    assert_eq!(
        code, 1,
        "the harness exits non-zero when it catches {bug}: {report:#}"
    );
    assert!(
        count(&report, "violations") > 0,
        "{bug} is caught: {report:#}"
    );
    report
}

#[test]
fn heavy_a_correct_protocol_survives_kills_in_every_phase() {
    let (code, report) = harness(&[
        "run",
        "--kills",
        "200",
        "--check-every",
        "40",
        "--seed",
        "5",
    ]);
    assert_eq!(
        count(&report, "violations"),
        0,
        "no violation on the correct protocol: {report:#}"
    );
    assert_eq!(code, 0, "exit 0 without violations");
    assert!(count(&report, "kills") >= 120, "{report:#}");
    assert!(
        count(&report, "entries_checked") > 0,
        "the checker saw published entries: {report:#}"
    );
    assert!(
        count(&report, "compiles") > 0 && count(&report, "lock_acquires") > 0,
        "{report:#}"
    );
    assert!(
        count(&report, "checks") >= 3,
        "checks ran between kills and at the end: {report:#}"
    );
}

/// Issue 31, item 10: a run too short for its schedule to land a kill in every required phase
/// goes on, aiming its launches at the phases missed, until each is hit; with no time for that
/// (`--phase-deadline-s 0`) the same run fails for the phases it missed.
#[test]
fn heavy_a_short_run_chases_the_phases_its_schedule_missed() {
    let run = ["run", "--kills", "20", "--check-every", "10", "--seed", "3"];
    let (code, report) = harness(&run);
    assert_eq!(
        (code, report["phases_missed"].clone()),
        (0, serde_json::json!([])),
        "every phase hit: {report:#}"
    );
    assert!(count(&report, "chase_kills") > 0, "{report:#}");
    assert_eq!(count(&report, "violations"), 0, "{report:#}");
    let mut no_chase = run.to_vec();
    no_chase.extend(["--phase-deadline-s", "0"]);
    let (code, report) = harness(&no_chase);
    assert!(
        code == 1
            && report["phases_missed"]
                .as_array()
                .is_some_and(|m| !m.is_empty()),
        "20 scheduled kills alone miss phases: {report:#}"
    );
}

/// A chase aimed at eviction on a root its gcs emptied: one kernel and no stored entries leave
/// the normal gc (600 KiB) nothing to evict, and the chase built nothing, so `evicting` stayed
/// missed until the deadline (a full run met it on the run above). Each aimed gc now builds a
/// fresh entry first and evicts all it may.
#[test]
fn heavy_a_chase_reaches_eviction_on_a_root_too_small_to_evict() {
    let (code, report) = harness(&[
        "run",
        "--kills",
        "20",
        "--check-every",
        "10",
        "--seed",
        "3",
        "--kernels",
        "1",
        "--store-keys",
        "0",
        "--phase-deadline-s",
        "30",
    ]);
    assert_clean(code, &report);
}

/// The issue's own command line: three simulated hosts, shared locks, 200 kills, seed 77 (it
/// once exited 1 with no kill in `evicting` and `import-staging`, before the chase; CI later
/// caught a double compile here, when one note per lock file let a key's note be overwritten
/// by another key of its bucket: `jit-cache`'s `storage/notes.rs`).
#[test]
fn heavy_the_documented_multi_host_run_passes_on_a_clean_protocol() {
    // The simulated hosts are FUSE mounts in the harness's own mount namespace: root only.
    if !fs_testbed_available() {
        return;
    }
    let (code, report) = harness(&[
        "run", "--hosts", "3", "--fs", "nfs-sim", "--locks", "shared", "--kills", "200", "--seed",
        "77",
    ]);
    assert_clean(code, &report);
}

#[test]
fn heavy_a_correct_protocol_survives_kills_on_xfs() {
    // The harness mounts xfs privately itself (fs-testbed); workers inherit the mount.
    if !fs_testbed_available() {
        return;
    }
    let (code, report) = harness(&[
        "run",
        // 200 kills: at 60 the store's five phases joined the kernel's and a run could end with
        // two of them never hit (exit 1 with 0 violations, twice in two runs); at 120 a loaded
        // run still missed store-published and import-locked once.
        "--kills",
        "200",
        "--check-every",
        "40",
        "--seed",
        "6",
        "--fs",
        "xfs",
    ]);
    assert_eq!(
        (code, count(&report, "violations")),
        (0, 0),
        "no violation on xfs: {report:#}"
    );
    assert_eq!(report["fs"], "xfs");
}

/// Mounting needs root; under `cargo xtask test` (FS_TESTBED_REQUIRE=1) a skip is a failure.
fn fs_testbed_available() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        assert!(
            !fs_testbed_skips_are_failures(),
            "FS_TESTBED_REQUIRE=1 but not root: cannot mount xfs or simulated NFS hosts"
        );
        eprintln!("skipped: mounting xfs or simulated NFS hosts needs root");
    }
    root
}

fn fs_testbed_skips_are_failures() -> bool {
    std::env::var_os("FS_TESTBED_REQUIRE").is_some_and(|v| v == "1")
}

#[test]
fn heavy_injected_in_place_write_is_caught_as_partial_entries() {
    let report = run_with_bug("in-place", &[]);
    assert!(
        count(&report, "partial") + count(&report, "corrupt_found_by_builders") > 0,
        "an entry written in place is seen partial: {report:#}"
    );
}

#[test]
fn heavy_injected_meta_first_publish_is_caught_as_an_entry_without_its_artifact() {
    let report = run_with_bug(
        "meta-first",
        &["--points", "published", "--failpoint-percent", "60"],
    );
    assert!(
        count(&report, "partial") + count(&report, "corrupt_found_by_builders") > 0,
        "an entry published before its artifact is seen partial: {report:#}"
    );
}

#[test]
fn heavy_injected_skip_lock_is_caught_as_overlapping_holders_and_double_compiles() {
    // Two kernels: every gc makes the same few keys cold for every worker at once, so builders
    // meet on one key (with six, a loaded run here once saw 37 overlaps and no double compile;
    // with two, runs here saw 7 to 13).
    let report = run_with_bug("skip-lock", &["--kernels", "2"]);
    assert!(
        count(&report, "lock_overlaps") > 0,
        "holders overlap without the lock: {report:#}"
    );
    assert!(
        count(&report, "double_compiles") > 0,
        "a key compiles twice at once: {report:#}"
    );
}

#[test]
fn heavy_injected_lock_file_deletion_is_caught_as_replaced_lock_files() {
    let report = run_with_bug("delete-lock-file", &[]);
    assert!(
        count(&report, "lock_files_replaced") > 0,
        "a deleted lock file is seen replaced: {report:#}"
    );
}

/// The remote's part of a report.
fn remote_count(report: &Value, field: &str) -> u64 {
    let remote = &report["remote"];
    remote[field]
        .as_u64()
        .or_else(|| remote["stats"][field].as_u64())
        .unwrap_or_else(|| panic!("report has a number `remote.{field}`: {report:#}"))
}

/// After the run, the cold reader asked for each kernel through a fresh root and got its bytes.
fn cold_reader_got_every_kernel(report: &Value, kernels: u64) {
    let cold = &report["remote"]["cold_reader"];
    assert_eq!(
        (cold["reads"].as_u64(), &cold["bad_answers"]),
        (Some(kernels), &serde_json::json!([])),
        "the cold reader got every kernel's bytes: {report:#}"
    );
}

#[test]
fn heavy_a_fleet_tier_killed_mid_run_misleads_no_worker() {
    let (code, report) = harness(&[
        "run",
        "--kills",
        "120",
        "--seed",
        "5",
        "--kernels",
        "12",
        "--remote",
        "--remote-kill-every",
        "30",
        // Workers that live a few hundred milliseconds, not tens: at the default pace most were
        // killed between their compile and its upload, and each server kill disabled the tier for
        // the workers it met, so a run could end with no fetch at all (0 hits in 2 runs of 3 on
        // S3, and once on Redis in CI); at 250 ms every run fetched dozens.
        "--max-delay-ms",
        "250",
    ]);
    assert_eq!(code, 0, "no violation: {report:#}");
    assert_eq!(count(&report, "violations"), 0, "{report:#}");
    assert!(
        remote_count(&report, "server_kills") >= 3,
        "the server was killed mid-run: {report:#}"
    );
    assert!(
        remote_count(&report, "hits") > 0 && remote_count(&report, "uploads") > 0,
        "workers fetched and uploaded: {report:#}"
    );
    assert!(
        remote_count(&report, "audits") >= 3,
        "every check audited the server: {report:#}"
    );
    cold_reader_got_every_kernel(&report, 12);
}

#[test]
fn heavy_an_s3_fleet_tier_killed_mid_run_misleads_no_worker() {
    let (code, report) = harness(&[
        "run",
        "--kills",
        "120",
        "--seed",
        "5",
        "--kernels",
        "12",
        "--remote",
        "--remote-store",
        "s3",
        "--remote-kill-every",
        "30",
        // As above: lives long enough for uploads and fetches between kills.
        "--max-delay-ms",
        "250",
    ]);
    assert_eq!(code, 0, "no violation: {report:#}");
    assert_eq!(count(&report, "violations"), 0, "{report:#}");
    assert_eq!(report["remote"]["store"], "s3", "{report:#}");
    assert!(
        remote_count(&report, "server_kills") >= 3,
        "the server was killed mid-run: {report:#}"
    );
    assert!(
        remote_count(&report, "hits") > 0 && remote_count(&report, "uploads") > 0,
        "workers fetched and uploaded: {report:#}"
    );
    assert!(
        remote_count(&report, "audits") >= 3,
        "every check audited the server: {report:#}"
    );
    cold_reader_got_every_kernel(&report, 12);
}

#[test]
fn heavy_injected_corrupt_upload_is_caught_by_the_audit_and_never_read() {
    let report = run_with_bug(
        "remote-corrupt-upload",
        &["--kernels", "12", "--remote", "--remote-kill-every", "1000"],
    );
    assert!(
        remote_count(&report, "corrupt_blobs") > 0,
        "the audit finds blobs that do not hash to their names: {report:#}"
    );
    // The workers' refusals are chance (a kill may come first); the cold reader asks for every
    // kernel through a fresh root, so each variant the server holds is read and refused.
    assert!(
        report["remote"]["cold_reader"]["rejected"].as_u64() > Some(0),
        "readers refused them: {report:#}"
    );
    cold_reader_got_every_kernel(&report, 12);
    assert_eq!(
        count(&report, "worker_violations"),
        0,
        "no worker read a wrong byte: {report:#}"
    );
}

#[test]
fn heavy_race_compiles_each_kernel_once_per_round_and_not_without_the_lock() {
    let (code, report) = harness(&["race", "--procs", "6", "--kernels", "3", "--rounds", "2"]);
    assert_eq!(
        report["compiler_calls_per_round"],
        serde_json::json!([3, 3]),
        "one compile per kernel per round: {report:#}"
    );
    assert_eq!(
        (
            count(&report, "wrong_reads"),
            count(&report, "artifacts_differing")
        ),
        (0, 0),
        "{report:#}"
    );
    assert_eq!(code, 0, "{report:#}");
    // Negative control: the same race without the key lock compiles some kernel more than once.
    let (code, report) = harness(&[
        "race",
        "--procs",
        "6",
        "--kernels",
        "3",
        "--rounds",
        "2",
        "--inject-bug",
        "skip-lock",
    ]);
    let calls: u64 = report["compiler_calls_per_round"]
        .as_array()
        .expect("calls")
        .iter()
        .filter_map(Value::as_u64)
        .sum();
    assert!(
        calls > 6,
        "without the lock, processes compile the same kernel: {report:#}"
    );
    assert_eq!(code, 1, "and the harness says so: {report:#}");
}
