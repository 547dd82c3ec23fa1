//! `RunOptions::trace`: the runner records every path lookup of the compiler and its children.

use crate::support::{real_nvcc, write};
use file_trace::{End, Op};
use nvcc::{ProcessRunner, RunOptions, Runner};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

fn args(words: &[&str]) -> Vec<OsString> {
    words.iter().map(OsString::from).collect()
}

/// The run's trace; `None` (printed) where this system cannot trace, except under
/// `XTASK_TEST=1`, where that fails.
fn trace_of(out: nvcc::RunOutput) -> Option<file_trace::Trace> {
    match (out.trace, out.trace_unavailable) {
        (Some(trace), None) => Some(trace),
        (None, Some(nvcc::TraceUnavailable::Unsupported(why)))
            if std::env::var_os("XTASK_TEST").is_none_or(|v| v != "1") =>
        {
            eprintln!("skipping: {why}");
            None
        }
        other => panic!("a trace or a reason, not {other:?}"),
    }
}

#[test]
fn a_traced_real_nvcc_compile_returns_its_trace() {
    let Some(nvcc) = real_nvcc() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path().canonicalize().expect("canonical temp dir");
    write(
        &dir,
        "k.cu",
        "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n",
    );
    let opts = RunOptions {
        working_dir: Some(dir.clone()),
        trace: true,
        ..RunOptions::default()
    };
    let out = ProcessRunner
        .run(
            nvcc.path(),
            &args(&[
                "-c",
                "k.cu",
                "-o",
                "k.o",
                "-arch=sm_90",
                "-MD",
                "-MF",
                "k.d",
            ]),
            &opts,
        )
        .expect("run nvcc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let Some(trace) = trace_of(out) else { return };
    assert!(
        trace.is_complete(),
        "gaps {:?}, end {:?}",
        trace.gaps,
        trace.end
    );
    let first = &trace.events[0];
    assert_eq!((&first.op, first.path.as_path()), (&Op::Exec, nvcc.path()));
    assert!(
        trace
            .events
            .iter()
            .any(|e| matches!(e.op, Op::Open { write: false, .. }) && e.path == dir.join("k.cu")),
        "the source was read"
    );
    assert!(
        trace
            .events
            .iter()
            .any(|e| e.op == Op::Exec && e.path.file_name() == Some("cicc".as_ref())),
        "cicc ran under the trace"
    );
}

#[test]
fn an_untraced_run_has_no_trace_and_no_reason() {
    let out = ProcessRunner
        .run(
            Path::new("/bin/sh"),
            &args(&["-c", "true"]),
            &RunOptions::default(),
        )
        .expect("run sh");
    assert!(out.status.success());
    assert!(out.trace.is_none() && out.trace_unavailable.is_none());
}

#[test]
fn a_traced_run_killed_at_its_timeout_still_ends_its_trace() {
    let opts = RunOptions {
        timeout: Some(Duration::from_millis(300)),
        trace: true,
        ..RunOptions::default()
    };
    let out = ProcessRunner
        .run(
            Path::new("/bin/sh"),
            &args(&["-c", "cat /dev/null; while :; do :; done"]),
            &opts,
        )
        .expect("run sh");
    assert!(out.timed_out, "the loop ran into the timeout");
    let Some(trace) = trace_of(out) else { return };
    assert_eq!(
        trace.end,
        End::AllExited,
        "the killed group released the filter"
    );
    assert!(
        trace
            .events
            .iter()
            .any(|e| matches!(e.op, Op::Open { .. }) && e.path == Path::new("/dev/null")),
        "what ran before the kill is recorded"
    );
}
