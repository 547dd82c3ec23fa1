//! The real compiler: a traced `nvcc -c` sees the source, the toolkit headers, its helper
//! programs, and every header of its own dependency file (the cross-check a cache relies on).

use crate::support::{run_traced, strict, temp_dir, tracer};
use file_trace::{Found, Op, Trace};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `$NVCC`, or `None` (printed) when unset; under `XTASK_TEST=1` unset fails.
fn real_nvcc() -> Option<PathBuf> {
    match std::env::var_os("NVCC") {
        Some(path) => Some(PathBuf::from(path)),
        None if strict() => panic!("XTASK_TEST=1 requires NVCC (run `cargo xtask setup`)"),
        None => {
            eprintln!("skipping: NVCC is not set");
            None
        }
    }
}

/// The prerequisites of a make-style dependency file (`target: a b \` ...).
fn depfile_inputs(text: &str) -> Vec<String> {
    let joined = text.replace("\\\n", " ");
    let mut inputs = Vec::new();
    for rule in joined.lines() {
        let Some((_, prerequisites)) = rule.split_once(": ") else {
            continue;
        };
        let mut word = String::new();
        let mut chars = prerequisites.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&' ') => {
                    word.push(' ');
                    chars.next();
                }
                c if c.is_whitespace() => {
                    if !word.is_empty() {
                        inputs.push(std::mem::take(&mut word));
                    }
                }
                c => word.push(c),
            }
        }
        if !word.is_empty() {
            inputs.push(word);
        }
    }
    inputs
}

fn read_paths(trace: &Trace) -> BTreeSet<PathBuf> {
    trace
        .events
        .iter()
        .filter(|e| matches!(e.op, Op::Open { write: false, .. }) && e.found.exists())
        .filter_map(|e| e.path.canonicalize().ok())
        .collect()
}

fn exec_of(trace: &Trace, name: &str) -> bool {
    trace
        .events
        .iter()
        .any(|e| e.op == Op::Exec && e.path.file_name() == Some(name.as_ref()) && e.found.exists())
}

#[test]
fn a_traced_nvcc_compile_reads_everything_its_depfile_names() {
    let Some(tracer) = tracer() else { return };
    let Some(nvcc) = real_nvcc() else { return };
    let (_keep, dir) = temp_dir();
    std::fs::create_dir(dir.join("inc")).expect("mkdir inc");
    std::fs::write(dir.join("inc/value.h"), "#define VALUE 1.0f\n").expect("write header");
    std::fs::write(
        dir.join("k.cu"),
        "#include \"value.h\"\n\
         #if __has_include(\"optional.h\")\n#include \"optional.h\"\n#endif\n\
         extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = VALUE; }\n",
    )
    .expect("write source");
    let mut command = Command::new(&nvcc);
    command.current_dir(&dir).args([
        "-c",
        "k.cu",
        "-o",
        "k.o",
        "-arch=sm_90",
        "-I",
        "inc",
        "-MD",
        "-MF",
        "k.d",
    ]);
    let (output, trace) = run_traced(&tracer, &mut command);
    assert!(
        output.status.success(),
        "nvcc compiled: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        trace.is_complete(),
        "no gaps: {:?}, end {:?}",
        trace.gaps,
        trace.end
    );
    eprintln!(
        "{} events from {} notifications, sync wake-up {}",
        trace.events.len(),
        trace.notifications,
        trace.sync_wake_up
    );

    let read = read_paths(&trace);
    let source = dir.join("k.cu");
    assert!(read.contains(&source), "the source was read");
    assert!(
        read.iter().any(|p| p.ends_with("cuda_runtime.h")),
        "nvcc's implicit cuda_runtime.h was read"
    );
    assert!(exec_of(&trace, "cicc"), "cicc ran");
    assert!(exec_of(&trace, "ptxas"), "ptxas ran");
    assert!(
        trace
            .events
            .iter()
            .any(|e| e.path.ends_with("optional.h") && e.found == Found::Missing),
        "__has_include's probe is an absence"
    );
    assert!(
        trace
            .events
            .iter()
            .any(|e| matches!(e.op, Op::Open { write: true, .. }) && e.path == dir.join("k.o")),
        "the output was written"
    );

    let depfile = std::fs::read_to_string(dir.join("k.d")).expect("nvcc wrote k.d");
    let inputs = depfile_inputs(&depfile);
    assert!(
        inputs.len() > 20,
        "the depfile lists the toolkit headers: {inputs:?}"
    );
    let unread: Vec<&String> = inputs
        .iter()
        .filter(|input| {
            let path = Path::new(input.as_str());
            let path = if path.is_absolute() {
                path.to_owned()
            } else {
                dir.join(path)
            };
            let canonical = path.canonicalize().expect("a depfile input exists");
            !read.contains(&canonical)
        })
        .collect();
    assert!(
        unread.is_empty(),
        "every depfile input is a traced read: missing {unread:?}"
    );
}

#[test]
fn the_depfile_parser_reads_continuations_and_escaped_spaces() {
    assert_eq!(
        depfile_inputs("k.o : k.cu \\\n /a/b.h \\\n /c\\ d.h\nx.o: y.h\n"),
        ["k.cu", "/a/b.h", "/c d.h", "y.h"]
    );
}
