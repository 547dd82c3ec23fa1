//! Shared helpers: the tracer, the exerciser program, slicing a trace by markers.

use file_trace::{Event, Trace, Tracer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// How long `finish` waits for the filter to be released after the child was reaped.
pub const GRACE: Duration = Duration::from_secs(5);

/// Whether `cargo xtask test` runs us: then nothing may be skipped.
pub fn strict() -> bool {
    std::env::var_os("XTASK_TEST").is_some_and(|v| v == "1")
}

/// The tracer, or `None` (with the reason printed) where this system cannot trace; under
/// `XTASK_TEST=1` that fails instead.
pub fn tracer() -> Option<Tracer> {
    match Tracer::new() {
        Ok(tracer) => Some(tracer),
        Err(why) if strict() => panic!("XTASK_TEST=1 requires file tracing: {why}"),
        Err(why) => {
            eprintln!("skipping: cannot trace here: {why}");
            None
        }
    }
}

/// The test program that does exactly what its arguments say.
pub fn exerciser() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_file-trace-exerciser"))
}

/// Runs `command` traced to the end, capturing its output.
pub fn run_traced(tracer: &Tracer, command: &mut Command) -> (Output, Trace) {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (child, handle) = tracer.spawn(command).expect("spawn traced");
    let output = child.wait_with_output().expect("wait for the traced child");
    let trace = handle.finish(GRACE).expect("finish the trace");
    (output, trace)
}

/// Runs the exerciser traced with `actions`; asserts it succeeded.
pub fn exercise(tracer: &Tracer, dir: &Path, actions: &[&str]) -> (String, Trace) {
    let mut command = Command::new(exerciser());
    command.current_dir(dir).args(actions);
    let (output, trace) = run_traced(tracer, &mut command);
    assert!(
        output.status.success(),
        "the exerciser ran {actions:?}: {:?}, stderr {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    (
        String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        trace,
    )
}

/// The path of marker `name` (see the exerciser's `mark`).
pub fn marker(name: &str) -> PathBuf {
    PathBuf::from(format!("/@mark/{name}"))
}

/// The events of each pid strictly between its `begin` and `end` markers, markers excluded.
pub fn between(trace: &Trace, begin: &str, end: &str) -> BTreeMap<u32, Vec<Event>> {
    let (begin, end) = (marker(begin), marker(end));
    let mut open: BTreeMap<u32, bool> = BTreeMap::new();
    let mut slices: BTreeMap<u32, Vec<Event>> = BTreeMap::new();
    for event in &trace.events {
        if event.path == begin {
            open.insert(event.pid, true);
            slices.entry(event.pid).or_default();
        } else if event.path == end {
            open.insert(event.pid, false);
        } else if open.get(&event.pid).copied().unwrap_or(false) {
            slices.entry(event.pid).or_default().push(event.clone());
        }
    }
    slices
}

/// The single pid's events between the markers.
pub fn only_between(trace: &Trace, begin: &str, end: &str) -> Vec<Event> {
    let slices = between(trace, begin, end);
    assert_eq!(
        slices.len(),
        1,
        "one task passed the markers {begin}..{end}: {slices:#?}"
    );
    slices.into_values().next().expect("one slice")
}

/// The label -> tid lines the exerciser's `tid` action printed.
pub fn tids(stdout: &str) -> BTreeMap<String, u32> {
    stdout
        .lines()
        .filter_map(|line| {
            let (label, tid) = line.split_once(' ')?;
            Some((label.to_owned(), tid.parse().ok()?))
        })
        .collect()
}

/// A temp dir with its canonical path (the trace reports /proc's spelling, which is canonical).
pub fn temp_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let canonical = dir.path().canonicalize().expect("canonical temp dir");
    (dir, canonical)
}
