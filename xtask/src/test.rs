//! `cargo xtask test`: the project's one test command; `.ci/run` calls it.
//!
//! Steps, each timed: setup, `cargo fmt --check`, clippy with warnings denied (all features, then
//! the production crates on their default features), rustdoc with warnings denied, the tests under
//! nextest (or `cargo test` where nextest is absent), doctests, the Python package (`python.rs`:
//! its wheel built, smoke-tested without Rust and type-checked, then its pytest suite), the
//! packaged `durable-fs` built
//! and run outside the workspace (`package_check.rs`), the loom models in their own target
//! directory, and quick crash-test, race and power-loss runs (on the debug binaries the test step
//! built). The production crates' never-guesses, release and pipeline tests run again on each
//! earlier CUDA 13 release setup installs (13.0, 13.3); `cargo xtask test --releases` runs all
//! their tests there. `--from STEP` skips the steps before the first whose name starts with STEP.
//!
//! The module graph check (`layers.rs`, also `cargo xtask layers`) runs first after setup.
//!
//! The production crates (`selection.rs`) are tested on their own: the test-support crates
//! switch on `jit-cache/failpoints`, and Cargo's feature unification would carry it into any build
//! that selects them too. So the workspace run (all features) leaves them out, one run tests them on
//! their default features (what users get), and one runs only their tests that need the failpoints
//! (those whose names contain `failpoint`, compiled only with the feature).
//! Tests that need root, loop devices or FUSE run with `FS_TESTBED_REQUIRE=1`, which turns each of
//! their skips into a failure: a test these machines can run must run.

use crate::crash_test::Build;
use crate::selection::{production_packages, workspace_selection};
use crate::util;
use anyhow::{bail, Result};
use std::process::Command;
use std::time::{Duration, Instant};

/// Crates that carry loom models (`#[cfg(loom)]` tests); each is run with `--cfg loom`.
const LOOM_CRATES: &[&str] = &["durable-fs", "jit-cache", "direct-io"];

/// The production crates' tests that need jit-cache's failpoints: a name filter, and the feature.
const FAILPOINT_TESTS: &str = "failpoint";
const FAILPOINT_FEATURES: &str = "jit-cache/failpoints,jit-cache-cli/failpoints";

/// The production tests run on every other CUDA 13 release (a name filter): the never-guesses
/// tests, the release check, DeepGEMM's command lines and CMake's build.
const RELEASE_TESTS: &str = "never_guesses|releases::|fresh_uuid|pipelines_cmake";

/// A test run under nextest, or `cargo test` where nextest is absent: `selection` picks packages
/// and features, `filter` (a substring of the test's name) narrows the tests.
fn test_command(selection: &[&str], filter: Option<&str>) -> Command {
    let mut cmd = util::cargo();
    if util::have_program("cargo-nextest") {
        cmd.args(["nextest", "run", "--no-fail-fast"])
            .args(selection);
        if let Some(filter) = filter {
            cmd.args(["-E", &format!("test(/{filter}/)")]);
        }
    } else {
        eprintln!("cargo-nextest is absent: falling back to `cargo test`");
        cmd.args(["test", "--no-fail-fast", "--lib", "--bins", "--tests"])
            .args(selection);
        if let Some(filter) = filter {
            cmd.args(["--", filter]);
        }
    }
    cmd
}

pub fn run(args: &[String]) -> Result<()> {
    let quick = args.iter().any(|a| a == "--no-lint");
    let all_releases = args.iter().any(|a| a == "--releases");
    // `--from STEP` resumes at a step after fixing what failed there (setup always runs; CI
    // runs every step).
    let mut from = args
        .iter()
        .position(|a| a == "--from")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let mut timings: Vec<(String, Duration)> = Vec::new();
    let mut step = |name: &str, f: &mut dyn FnMut() -> Result<()>| -> Result<()> {
        if name != "setup" && from.as_deref().is_some_and(|from| !name.starts_with(from)) {
            eprintln!("==> xtask test: {name}: skipped (--from)");
            return Ok(());
        }
        if name != "setup" {
            from = None;
        }
        eprintln!("\n==> xtask test: {name}");
        let start = Instant::now();
        let result = f();
        let took = start.elapsed();
        eprintln!(
            "==> {name}: {} in {:.1}s",
            if result.is_ok() { "ok" } else { "FAILED" },
            took.as_secs_f64()
        );
        timings.push((name.to_string(), took));
        result
    };

    let mut nvcc = None;
    step("setup", &mut || {
        nvcc = Some(crate::setup::run(&[])?.nvcc);
        Ok(())
    })?;
    let Some(nvcc) = nvcc else {
        bail!("setup produced no nvcc")
    };
    // Cheap, so first: no import cycle in any crate, and declared layers kept.
    step("layers", &mut || crate::layers::run(&[]))?;

    if !quick {
        step("fmt", &mut || {
            util::run_checked(util::cargo().args(["fmt", "--all", "--", "--check"]))
        })?;
        step("clippy", &mut || {
            util::run_checked(util::cargo().args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--all-features",
                "--",
                "-D",
                "warnings",
            ]))
        })?;
        step("clippy default", &mut || {
            util::run_checked(
                util::cargo()
                    .arg("clippy")
                    .args(production_packages())
                    .args(["--all-targets", "--", "-D", "warnings"]),
            )
        })?;
        step("doc", &mut || {
            util::run_checked(
                util::cargo()
                    .args(["doc", "--workspace", "--no-deps", "--all-features"])
                    .env("RUSTDOCFLAGS", "-D warnings"),
            )
        })?;
    }

    let with_test_env = |cmd: &mut Command| {
        cmd.env("NVCC", &nvcc)
            .env("FS_TESTBED_REQUIRE", "1")
            .env("XTASK_TEST", "1");
    };
    step("tests", &mut || {
        let mut cmd = test_command(&workspace_selection(), None);
        with_test_env(&mut cmd);
        util::run_checked(&mut cmd)
    })?;
    step("tests default", &mut || {
        let mut cmd = test_command(&production_packages(), None);
        with_test_env(&mut cmd);
        util::run_checked(&mut cmd)
    })?;
    // Every CUDA 13 release the suite installs besides the table's own (issue 30): the
    // never-guesses tests, the release check and real pipelines' command lines (DeepGEMM's,
    // CMake's) here; with `--releases`, every production test.
    step("tests releases", &mut || {
        for (release, release_nvcc) in crate::setup::other_releases()? {
            eprintln!(
                "==> xtask test: nvcc {release} ({})",
                release_nvcc.display()
            );
            let filter = (!all_releases).then_some(RELEASE_TESTS);
            let mut cmd = test_command(&production_packages(), filter);
            with_test_env(&mut cmd);
            cmd.env("NVCC", &release_nvcc);
            util::run_checked(&mut cmd)?;
        }
        Ok(())
    })?;
    step("tests failpoints", &mut || {
        let mut selection = production_packages();
        selection.extend(["--features", FAILPOINT_FEATURES]);
        let mut cmd = test_command(&selection, Some(FAILPOINT_TESTS));
        with_test_env(&mut cmd);
        util::run_checked(&mut cmd)
    })?;
    step("doctests", &mut || {
        let mut cmd = util::cargo();
        cmd.args(["test", "--workspace", "--all-features", "--doc"]);
        with_test_env(&mut cmd);
        util::run_checked(&mut cmd)
    })?;
    // The Python package (issue 22): built into its venv, its pytest suite run there.
    step("python", &mut || {
        crate::python::test(&crate::venv::venv_path(), &nvcc)
    })?;
    // durable-fs is adopted on its own: its .crate must build and run outside the workspace.
    step("package durable-fs", &mut crate::package_check::run)?;
    step("loom", &mut || {
        let target = util::workspace_root().join("target").join("loom");
        for krate in LOOM_CRATES {
            let mut cmd = util::cargo();
            cmd.args(["test", "--release", "-p", krate, "--lib", "--", "loom"])
                .env("RUSTFLAGS", "--cfg loom")
                .env("CARGO_TARGET_DIR", &target)
                .env("LOOM_MAX_PREEMPTIONS", "3");
            util::run_checked(&mut cmd)?;
        }
        Ok(())
    })?;

    // Quick fault-injection runs: kill -9 on the default filesystem and on a loop-mounted xfs, the
    // multi-process race harness, and simulated power cuts (cargo xtask crash-test --help).
    let harness = |list: &[&str]| {
        let args: Vec<String> = list.iter().map(|a| a.to_string()).collect();
        crate::crash_test::run_with(&args, Build::Tests)
    };
    step("crash-test", &mut || {
        harness(&["--kills", "200", "--seed", "1"])
    })?;
    step("crash-test xfs", &mut || {
        harness(&["--kills", "200", "--seed", "1", "--fs", "xfs"])
    })?;
    // Three simulated NFS hosts in each lock mode (issue 13): host crashes, cross-host pins,
    // compiles per key per mode, stored entries shared by the hosts. actimeo 0, a 1.5 s grace,
    // a cold start and one check at the end (a check hits every kernel) let entries go idle and
    // be evicted in a short run; 24 stored keys keep producers busy. The run fails unless every
    // phase (compiling, publishing, evicting, each store phase, ...) saw a kill.
    for locks in ["shared", "local"] {
        step(&format!("crash-test nfs-sim {locks}"), &mut || {
            let run = "--kills 150 --seed 1 --fs nfs-sim --hosts 3 --actimeo 0 --grace-ms 1500 \
                       --kernels 60 --store-keys 24 --max-delay-ms 200 --check-every 150 --locks";
            let mut list: Vec<&str> = run.split_whitespace().collect();
            list.push(locks);
            harness(&list)
        })?;
        step(&format!("race nfs-sim {locks}"), &mut || {
            let race = "--race --fs nfs-sim --hosts 3 --procs 6 --kernels 4 --rounds 3 --locks";
            let mut list: Vec<&str> = race.split_whitespace().collect();
            list.push(locks);
            harness(&list)
        })?;
    }
    // The fleet tier (issues 14 and 25): workers share a real redis-server or SeaweedFS S3
    // server, which is killed with SIGKILL and restarted empty every 40 kills; every check
    // audits what it holds.
    for (name, store) in [
        ("crash-test remote", "redis"),
        ("crash-test remote s3", "s3"),
    ] {
        step(name, &mut || {
            harness(&[
                "--kills",
                "160",
                "--seed",
                "1",
                "--remote",
                "--remote-store",
                store,
                "--kernels",
                "12",
            ])
        })?;
    }
    step("race", &mut || {
        harness(&["--race", "--procs", "8", "--kernels", "4", "--rounds", "3"])
    })?;
    step("power-loss", &mut || {
        harness(&["--power-loss", "--cuts", "300", "--seed", "1"])
    })?;

    if let Some(from) = from {
        bail!("--from {from}: no step's name starts so (every step was skipped)");
    }
    eprintln!("\nxtask test: all steps passed");
    for (name, took) in &timings {
        eprintln!("  {name:<16} {:>8.1}s", took.as_secs_f64());
    }
    Ok(())
}
