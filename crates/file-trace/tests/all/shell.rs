//! Programs that start programs: `sh -c`, nested shells, make.

use crate::support::{run_traced, strict, temp_dir, tracer};
use file_trace::{Found, Op, Trace};
use std::path::Path;
use std::process::Command;

fn has(trace: &Trace, op: impl Fn(&Op) -> bool, path: &Path) -> Option<u32> {
    trace
        .events
        .iter()
        .find(|e| op(&e.op) && e.path == path)
        .map(|e| e.pid)
}

fn is_open(op: &Op) -> bool {
    matches!(op, Op::Open { .. })
}

#[test]
fn a_shell_script_is_fully_seen() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    std::fs::write(dir.join("present"), "p").expect("write");
    std::fs::create_dir(dir.join("sub")).expect("mkdir");
    let mut command = Command::new("/bin/sh");
    command.current_dir(&dir).args([
        "-c",
        "cat present > /dev/null; test -e absent; ls sub > /dev/null; mkdir made; echo x > out",
    ]);
    let (output, trace) = run_traced(&tracer, &mut command);
    assert!(output.status.success(), "{output:?}");
    assert!(trace.is_complete());
    let first = &trace.events[0];
    assert_eq!(
        (&first.op, first.path.as_path()),
        (&Op::Exec, Path::new("/bin/sh")),
        "the trace starts with the spawn's exec"
    );
    let sh = first.pid;
    let cat = trace
        .events
        .iter()
        .find(|e| e.op == Op::Exec && e.path.ends_with("cat") && e.found.exists())
        .expect("the exec of cat, after PATH misses");
    assert_ne!(cat.pid, sh, "cat runs in a child");
    assert_eq!(
        has(&trace, is_open, &dir.join("present")),
        Some(cat.pid),
        "cat opened present"
    );
    let absent = trace
        .events
        .iter()
        .find(|e| e.path == dir.join("absent"))
        .expect("test -e looked for absent");
    assert_eq!(
        (absent.pid, absent.found),
        (sh, Found::Missing),
        "the shell's own stat"
    );
    assert!(
        has(&trace, |op| *op == Op::ListDir, &dir.join("sub")).is_some(),
        "ls listed sub"
    );
    assert_eq!(
        has(&trace, |op| *op == Op::Mkdir, &dir.join("made")).map(|_| ()),
        Some(())
    );
    assert_eq!(
        has(
            &trace,
            |op| matches!(op, Op::Open { write: true, .. }),
            &dir.join("out")
        ),
        Some(sh),
        "the shell's redirection is a writing open"
    );
    assert!(
        trace.events.iter().any(|e| e.op.is_write()),
        "writes are flagged"
    );
}

#[test]
fn a_chain_of_shells_is_seen_to_the_bottom() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    std::fs::write(dir.join("deep"), "d").expect("write");
    let mut command = Command::new("/bin/sh");
    command.current_dir(&dir).args([
        "-c",
        r#"/bin/sh -c '/bin/sh -c "cat deep > /dev/null; true"; true'; true"#,
    ]);
    let (output, trace) = run_traced(&tracer, &mut command);
    assert!(output.status.success());
    let shells: Vec<u32> = trace
        .events
        .iter()
        .filter(|e| e.op == Op::Exec && e.path == Path::new("/bin/sh"))
        .map(|e| e.pid)
        .collect();
    assert_eq!(shells.len(), 3, "three shells exec'd: {shells:?}");
    let deep = has(&trace, is_open, &dir.join("deep")).expect("the innermost cat opened deep");
    assert!(!shells.contains(&deep), "from a fourth process");
}

#[test]
fn make_and_its_recipes_are_seen() {
    let Some(tracer) = tracer() else { return };
    let make = Path::new("/usr/bin/make");
    if !make.exists() {
        assert!(
            !strict(),
            "XTASK_TEST=1 requires make (cargo xtask setup installs it)"
        );
        eprintln!("skipping: no make");
        return;
    }
    let (_keep, dir) = temp_dir();
    std::fs::write(dir.join("in.txt"), "i").expect("write");
    std::fs::write(
        dir.join("Makefile"),
        "all: out.txt\nout.txt: in.txt\n\tcat in.txt > out.txt && cat out.txt > /dev/null\n",
    )
    .expect("write Makefile");
    let mut command = Command::new(make);
    command.current_dir(&dir).arg("-s");
    let (output, trace) = run_traced(&tracer, &mut command);
    assert!(output.status.success(), "{output:?}");
    let make_pid = trace.events[0].pid;
    assert!(
        trace
            .events
            .iter()
            .any(|e| e.pid == make_pid && e.path == dir.join("in.txt") && e.found.exists()),
        "make looked at its prerequisite"
    );
    let recipe = has(
        &trace,
        |op| matches!(op, Op::Open { write: true, .. }),
        &dir.join("out.txt"),
    )
    .expect("the recipe's shell wrote out.txt");
    assert_ne!(recipe, make_pid);
    assert!(
        trace
            .events
            .iter()
            .any(|e| is_open(&e.op) && e.path == dir.join("in.txt") && e.pid != make_pid),
        "cat read in.txt"
    );
    assert!(trace.is_complete());
}
