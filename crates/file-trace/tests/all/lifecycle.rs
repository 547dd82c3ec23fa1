//! Starting and ending traces: kills, spawn failures, concurrent traces, untraced neighbours,
//! processes that outlive the run.

use crate::support::{exercise, exerciser, marker, temp_dir, tracer, GRACE};
use file_trace::{End, Error, Op};
use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Spawns the exerciser traced with `actions` ending in `ready-and-pause`; returns once it
/// printed "ready".
fn spawn_paused(
    tracer: &file_trace::Tracer,
    dir: &Path,
    actions: &[&str],
) -> (Child, file_trace::TraceHandle) {
    let mut command = Command::new(exerciser());
    command
        .current_dir(dir)
        .args(actions)
        .arg("ready-and-pause")
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let (mut child, handle) = tracer.spawn(&mut command).expect("spawn traced");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("stdout"))
        .read_line(&mut line)
        .expect("read the ready line");
    assert_eq!(line, "ready\n", "the exerciser reached its pause");
    (child, handle)
}

#[test]
fn a_tracee_killed_mid_trace_ends_the_trace() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    let (mut child, handle) = spawn_paused(&tracer, &dir, &["mark", "before-kill"]);
    child.kill().expect("SIGKILL the tracee");
    let status = child.wait().expect("reap");
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let started = Instant::now();
    let trace = handle.finish(GRACE).expect("finish");
    assert_eq!(
        trace.end,
        End::AllExited,
        "reaping the killed tracee released the filter: the trace ended by itself"
    );
    assert!(started.elapsed() < GRACE, "without waiting out the grace");
    assert!(
        trace.events.iter().any(|e| e.path == marker("before-kill")),
        "what it did before the kill is kept"
    );
}

#[test]
fn two_traces_in_two_threads_stay_separate() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    std::fs::write(dir.join("a"), "a").expect("write");
    std::fs::write(dir.join("b"), "b").expect("write");
    let barrier = std::sync::Barrier::new(2);
    let traces = std::thread::scope(|scope| {
        let run = |name: &'static str| {
            let (tracer, dir, barrier) = (&tracer, &dir, &barrier);
            scope.spawn(move || {
                let (mut child, handle) = spawn_paused(tracer, dir, &["open", name]);
                // Both tracees are alive and traced at this point.
                barrier.wait();
                child.kill().expect("kill");
                child.wait().expect("reap");
                handle.finish(GRACE).expect("finish")
            })
        };
        let a = run("a");
        let b = run("b");
        [a.join().expect("thread a"), b.join().expect("thread b")]
    });
    let opened = |trace: &file_trace::Trace, name: &str| {
        trace
            .events
            .iter()
            .any(|e| matches!(e.op, Op::Open { .. }) && e.path == dir.join(name))
    };
    assert!(
        opened(&traces[0], "a") && !opened(&traces[0], "b"),
        "trace a has only a"
    );
    assert!(
        opened(&traces[1], "b") && !opened(&traces[1], "a"),
        "trace b has only b"
    );
    let pids = |trace: &file_trace::Trace| {
        trace
            .events
            .iter()
            .map(|e| e.pid)
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert!(
        pids(&traces[0]).is_disjoint(&pids(&traces[1])),
        "no task is in both traces"
    );
}

#[test]
fn an_untraced_child_started_meanwhile_is_not_disturbed() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    std::fs::write(dir.join("neighbour"), "n").expect("write");
    let (mut child, handle) = spawn_paused(&tracer, &dir, &["mark", "traced"]);
    // Another thread starts an untraced program while the traced one is alive.
    let neighbour = std::thread::spawn({
        let dir = dir.clone();
        move || {
            Command::new(exerciser())
                .current_dir(&dir)
                .args(["mark", "neighbour", "open", "neighbour", "io-uring"])
                .output()
                .expect("run the neighbour")
        }
    })
    .join()
    .expect("neighbour thread");
    assert!(neighbour.status.success(), "the neighbour ran to the end");
    assert_ne!(
        String::from_utf8_lossy(&neighbour.stdout).trim(),
        format!("io_uring_setup {}", libc::ENOSYS),
        "the neighbour carries no filter"
    );
    child.kill().expect("kill");
    child.wait().expect("reap");
    let trace = handle.finish(GRACE).expect("finish");
    assert!(trace.events.iter().any(|e| e.path == marker("traced")));
    assert!(
        !trace
            .events
            .iter()
            .any(|e| e.path == marker("neighbour") || e.path == dir.join("neighbour")),
        "the neighbour's calls are not in the trace"
    );
}

#[test]
fn a_spawn_that_fails_returns_an_error_and_never_hangs() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    let missing = dir.join("no-such-program");
    let err = tracer
        .spawn(&mut Command::new(&missing))
        .expect_err("a missing program does not spawn");
    assert_eq!(
        err.spawn_error().and_then(std::io::Error::raw_os_error),
        Some(libc::ENOENT),
        "the exec's error is kept: {err}"
    );

    let mut bad_dir = Command::new(exerciser());
    bad_dir.current_dir(dir.join("no-such-dir"));
    let err = tracer
        .spawn(&mut bad_dir)
        .expect_err("a missing working directory fails before the hook runs");
    assert!(matches!(err, Error::Spawn { .. }), "{err}");

    let mut refused = Command::new(exerciser());
    // SAFETY: the hook only returns an error.
    unsafe {
        refused.pre_exec(|| Err(std::io::Error::from_raw_os_error(libc::EPERM)));
    }
    let err = tracer
        .spawn(&mut refused)
        .expect_err("a caller's failing hook runs before ours");
    assert_eq!(
        err.spawn_error().and_then(std::io::Error::raw_os_error),
        Some(libc::EPERM)
    );
}

#[test]
fn a_command_spawned_again_without_the_tracer_runs_untraced() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    let mut command = Command::new(exerciser());
    command
        .current_dir(&dir)
        .arg("io-uring")
        .stdout(Stdio::piped());
    let (child, handle) = tracer.spawn(&mut command).expect("spawn traced");
    let traced = child.wait_with_output().expect("wait");
    handle.finish(GRACE).expect("finish");
    let again = command.output().expect("spawn the same command again");
    assert_eq!(
        String::from_utf8_lossy(&traced.stdout).trim(),
        format!("io_uring_setup {}", libc::ENOSYS)
    );
    assert!(again.status.success(), "the inert hook lets it run");
    assert_ne!(
        String::from_utf8_lossy(&again.stdout).trim(),
        format!("io_uring_setup {}", libc::ENOSYS),
        "and it carries no filter"
    );
}

#[test]
fn a_process_that_outlives_the_run_stops_the_trace_after_the_grace() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    // sh starts a background exerciser (its output elsewhere) and exits at once.
    let mut command = Command::new("/bin/sh");
    command
        .current_dir(&dir)
        .arg("-c")
        .arg(r#""$0" mark left-behind ready-and-pause > ready 2>&1 & echo $!"#)
        .arg(exerciser())
        .stdout(Stdio::piped());
    let (child, handle) = tracer.spawn(&mut command).expect("spawn");
    let output = child.wait_with_output().expect("wait for sh");
    let left: libc::pid_t = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("sh printed the background pid");
    let grace = Duration::from_millis(300);
    let started = Instant::now();
    let trace = handle.finish(grace).expect("finish");
    assert_eq!(trace.end, End::Stopped, "a task still held the filter");
    assert!(!trace.is_complete(), "such a trace is not to be trusted");
    assert!(started.elapsed() >= grace, "the grace was waited out");
    // SAFETY: kill sends a signal to the process this test's sh started.
    unsafe { libc::kill(left, libc::SIGKILL) };
}

#[test]
fn dropping_a_handle_without_finishing_does_not_hang() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    let (mut child, handle) = spawn_paused(&tracer, &dir, &[]);
    drop(handle);
    // The supervisor is gone; the paused tracee makes no more traced calls and is killed.
    child.kill().expect("kill");
    child.wait().expect("reap");
    let (_, trace) = exercise(&tracer, &dir, &["mark", "after"]);
    assert!(
        trace.events.iter().any(|e| e.path == marker("after")),
        "tracing still works"
    );
}

#[test]
fn a_killed_group_whose_orphans_init_reaps_ends_by_itself() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    let mut command = Command::new("/bin/sh");
    command
        .current_dir(&dir)
        .arg("-c")
        .arg(r#""$0" ready-and-pause > /dev/null 2>&1 & echo $!"#)
        .arg(exerciser())
        .stdout(Stdio::piped())
        .process_group(0);
    let (child, handle) = tracer.spawn(&mut command).expect("spawn");
    let group = child.id() as libc::pid_t;
    let output = child.wait_with_output().expect("wait for sh");
    assert!(output.status.success());
    // As a runner does at its child's exit: the group goes, orphans included.
    // SAFETY: killpg signals the group this test's child led.
    unsafe { libc::killpg(group, libc::SIGKILL) };
    let trace = handle.finish(GRACE).expect("finish");
    assert_eq!(
        trace.end,
        End::AllExited,
        "the orphan's new parent reaped it, which released the filter"
    );
}

#[test]
fn many_traces_started_from_many_threads_at_once_stay_separate() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let (tracer, dir) = (&tracer, &dir);
            scope.spawn(move || {
                for run in 0..6 {
                    let own = format!("t{thread}-r{run}");
                    let (_, trace) = exercise(tracer, dir, &["mark", &own, "open", &own]);
                    let marks: Vec<_> = trace
                        .events
                        .iter()
                        .filter(|e| e.path.starts_with("/@mark"))
                        .map(|e| e.path.clone())
                        .collect();
                    assert_eq!(marks, [marker(&own)], "only its own marker");
                    assert!(trace.events.iter().any(|e| e.path == dir.join(&own)));
                    assert!(trace.is_complete());
                }
            });
        }
    });
}
