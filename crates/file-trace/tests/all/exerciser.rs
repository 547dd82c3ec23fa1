//! The exerciser's calls, one by one: each is exactly one event with the right operation, an
//! absolute path and what was there.

use crate::support::{
    between, exercise, exerciser, only_between, run_traced, temp_dir, tids, tracer,
};
use file_trace::{Attr, Event, Found, Op, SyncWakeUp, Trace};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const READ: Op = Op::Open {
    write: false,
    directory: false,
    nofollow: false,
    path_only: false,
};

const OPEN_DIR: Op = Op::Open {
    write: false,
    directory: true,
    nofollow: false,
    path_only: false,
};

/// What kind of thing an event found, for comparisons that ignore stat details.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Missing,
    File,
    Dir,
    Symlink,
}

fn kind(found: &Found) -> Kind {
    match found {
        Found::Missing => Kind::Missing,
        Found::File { .. } => Kind::File,
        Found::Dir { .. } => Kind::Dir,
        Found::Symlink { .. } => Kind::Symlink,
        other => panic!("unexpected {other:?}"),
    }
}

fn summary(events: &[Event]) -> Vec<(Op, PathBuf, Kind)> {
    events
        .iter()
        .map(|e| (e.op.clone(), e.path.clone(), kind(&e.found)))
        .collect()
}

/// A directory with a file `present` (5 bytes), a directory `sub` holding `inner`, and a
/// symlink `link` -> `present`.
fn fixture(dir: &Path) {
    std::fs::write(dir.join("present"), b"12345").expect("write present");
    std::fs::create_dir(dir.join("sub")).expect("mkdir sub");
    std::fs::write(dir.join("sub/inner"), b"x").expect("write inner");
    std::os::unix::fs::symlink("present", dir.join("link")).expect("symlink");
}

fn every_call_actions(dir: &Path) -> Vec<String> {
    let present = dir.join("present");
    let mut actions: Vec<String> = [
        "mark",
        "begin",
        "open",
        "present",
        "open",
        "absent",
        "stat",
        "sub",
        "lstat",
        "link",
        "readlink",
        "link",
        "readlink",
        "present",
        "stat",
        "link",
        "access",
        "/etc",
        "statx",
        "present/below",
        "openat",
        "sub",
        "inner",
        "open-nofollow",
        "link",
        "open-path",
        "sub",
        "create",
        "new",
        "mkdir",
        "newdir",
        "rename",
        "new",
        "renamed",
        "symlink",
        "present",
        "sym2",
        "link",
        "present",
        "hard",
        "truncate",
        "present",
        "chmod",
        "present",
        "touch",
        "present",
        "unlink",
        "hard",
        "rmdir",
        "newdir",
        "exchange",
        "renamed",
        "sym2",
        "list",
        "sub",
        "chdir",
        "sub",
        "open",
        "inner",
        "open",
        "../present",
        "fchdir",
        "/",
        "open",
        "tmp",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if cfg!(target_arch = "x86_64") {
        let absent = dir.join("absent");
        for word in [
            "legacy-open",
            present.to_str().expect("UTF-8"),
            "legacy-stat",
        ] {
            actions.push(word.to_owned());
        }
        actions.push(absent.to_str().expect("UTF-8").to_owned());
    }
    actions.push("mark".into());
    actions.push("end".into());
    actions
}

fn every_call_expected(dir: &Path) -> Vec<(Op, PathBuf, Kind)> {
    let d = |rel: &str| dir.join(rel);
    let mut expected = vec![
        (READ, d("present"), Kind::File),
        (READ, d("absent"), Kind::Missing),
        (Op::Stat { nofollow: false }, d("sub"), Kind::Dir),
        (Op::Stat { nofollow: true }, d("link"), Kind::Symlink),
        (Op::Readlink, d("link"), Kind::Symlink),
        (Op::Readlink, d("present"), Kind::File),
        (Op::Stat { nofollow: false }, d("link"), Kind::File),
        (
            Op::Access { nofollow: false },
            PathBuf::from("/etc"),
            Kind::Dir,
        ),
        (
            Op::Stat { nofollow: false },
            d("present/below"),
            Kind::Missing,
        ),
        (OPEN_DIR, d("sub"), Kind::Dir),
        (READ, d("sub/inner"), Kind::File),
        (
            Op::Open {
                write: false,
                directory: false,
                nofollow: true,
                path_only: false,
            },
            d("link"),
            Kind::Symlink,
        ),
        (
            Op::Open {
                write: false,
                directory: false,
                nofollow: false,
                path_only: true,
            },
            d("sub"),
            Kind::Dir,
        ),
        (
            Op::Open {
                write: true,
                directory: false,
                nofollow: false,
                path_only: false,
            },
            d("new"),
            Kind::Missing,
        ),
        (Op::Mkdir, d("newdir"), Kind::Missing),
        (
            Op::Rename {
                to: d("renamed"),
                exchange: false,
            },
            d("new"),
            Kind::File,
        ),
        (
            Op::Symlink {
                target: PathBuf::from("present"),
            },
            d("sym2"),
            Kind::Missing,
        ),
        (Op::Link { to: d("hard") }, d("present"), Kind::File),
        (Op::Truncate, d("present"), Kind::File),
        (
            Op::SetAttr {
                attr: Attr::Mode,
                nofollow: false,
            },
            d("present"),
            Kind::File,
        ),
        (
            Op::SetAttr {
                attr: Attr::Times,
                nofollow: false,
            },
            d("present"),
            Kind::File,
        ),
        (Op::Unlink, d("hard"), Kind::File),
        (Op::Rmdir, d("newdir"), Kind::Dir),
        (
            Op::Rename {
                to: d("sym2"),
                exchange: true,
            },
            d("renamed"),
            Kind::File,
        ),
        (OPEN_DIR, d("sub"), Kind::Dir),
        (Op::ListDir, d("sub"), Kind::Dir),
        (Op::ListDir, d("sub"), Kind::Dir),
        (Op::Chdir, d("sub"), Kind::Dir),
        (READ, d("sub/inner"), Kind::File),
        (READ, d("sub/../present"), Kind::File),
        (OPEN_DIR, PathBuf::from("/"), Kind::Dir),
        (Op::Chdir, PathBuf::from("/"), Kind::Dir),
        (READ, PathBuf::from("/tmp"), Kind::Dir),
    ];
    if cfg!(target_arch = "x86_64") {
        expected.push((READ, d("present"), Kind::File));
        expected.push((Op::Stat { nofollow: false }, d("absent"), Kind::Missing));
    }
    expected
}

fn trace_every_call(sync: SyncWakeUp) -> Option<(PathBuf, Trace, tempfile::TempDir)> {
    let tracer = tracer()?.sync_wake_up(sync);
    let (keep, dir) = temp_dir();
    fixture(&dir);
    let actions = every_call_actions(&dir);
    let actions: Vec<&str> = actions.iter().map(String::as_str).collect();
    let (_, trace) = exercise(&tracer, &dir, &actions);
    Some((dir, trace, keep))
}

#[test]
fn each_call_is_one_event_with_its_absolute_path_and_what_was_there() {
    let Some((dir, trace, _keep)) = trace_every_call(SyncWakeUp::IfSupported) else {
        return;
    };
    let events = only_between(&trace, "begin", "end");
    let got = summary(&events);
    let expected = every_call_expected(&dir);
    for (i, (got, want)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "event {i} of the exerciser's calls");
    }
    assert_eq!(got.len(), expected.len(), "one event per call: {got:#?}");
    assert!(trace.is_complete(), "no gaps, all exited: {trace:?}");
    assert!(
        trace.notifications >= trace.events.len() as u64,
        "every event came from a notification"
    );
}

#[test]
fn a_file_event_carries_the_stat_of_the_file_before_the_call() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    fixture(&dir);
    let before = std::fs::metadata(dir.join("present")).expect("metadata");
    let (_, trace) = exercise(
        &tracer,
        &dir,
        &[
            "mark", "b", "open", "present", "truncate", "present", "stat", "present", "mark", "e",
        ],
    );
    let events = only_between(&trace, "b", "e");
    let Found::File {
        dev,
        ino,
        size,
        mtime,
        mode,
        ..
    } = events[0].found
    else {
        panic!("present is a file: {events:?}");
    };
    assert_eq!(
        (dev, ino, size, mode),
        (before.dev(), before.ino(), 5, before.mode())
    );
    assert_eq!(
        (mtime.secs, i64::from(mtime.nanos)),
        (before.mtime(), before.mtime_nsec()),
        "the mtime as stat reports it"
    );
    assert!(
        matches!(events[1].found, Found::File { size: 5, .. }),
        "truncate's event shows the file before the call"
    );
    assert!(
        matches!(events[2].found, Found::File { size: 0, .. }),
        "the next stat sees it truncated"
    );
}

#[test]
fn without_sync_wake_up_the_trace_is_the_same() {
    let Some((dir, trace, _keep)) = trace_every_call(SyncWakeUp::Off) else {
        return;
    };
    assert!(!trace.sync_wake_up, "sync wake-up was not asked for");
    let events = only_between(&trace, "begin", "end");
    assert_eq!(summary(&events), every_call_expected(&dir));
    assert!(trace.is_complete());
}

#[test]
fn sync_wake_up_is_in_effect_where_the_probe_found_it() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    let (_, trace) = exercise(&tracer, &dir, &["mark", "x"]);
    assert_eq!(
        trace.sync_wake_up,
        tracer.support().sync_wake_up,
        "the trace reports what the probe promised"
    );
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let mut parts = release.trim().split(['.', '-']);
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).expect("major");
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).expect("minor");
    if (major, minor) >= (6, 6) {
        assert!(trace.sync_wake_up, "Linux {major}.{minor} has sync wake-up");
    }
}

#[test]
fn threads_forks_and_spawned_children_are_each_seen_in_their_order() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    for name in ["a", "a2", "t1", "f1"] {
        std::fs::write(dir.join(name), name).expect("write");
    }
    let (stdout, trace) = exercise(
        &tracer,
        &dir,
        &[
            "mark",
            "b",
            "tid",
            "main",
            "open",
            "a",
            "thread",
            "[",
            "mark",
            "b",
            "tid",
            "thread",
            "open",
            "t1",
            "stat",
            "t2",
            "mark",
            "e",
            "]",
            "open",
            "a2",
            "fork",
            "[",
            "mark",
            "b",
            "tid",
            "fork",
            "open",
            "f1",
            "mark",
            "e",
            "]",
            "spawn",
            "/bin/true",
            "mark",
            "e",
        ],
    );
    let tids = tids(&stdout);
    let slices = between(&trace, "b", "e");
    let paths = |label: &str| -> Vec<(Op, PathBuf)> {
        slices[&tids[label]]
            .iter()
            .map(|e| (e.op.clone(), e.path.clone()))
            .collect()
    };
    assert_eq!(
        paths("main"),
        vec![(READ, dir.join("a")), (READ, dir.join("a2"))]
    );
    assert_eq!(
        paths("thread"),
        vec![
            (READ, dir.join("t1")),
            (Op::Stat { nofollow: false }, dir.join("t2"))
        ]
    );
    assert_eq!(paths("fork"), vec![(READ, dir.join("f1"))]);
    assert_eq!(slices.len(), 3, "three tasks passed the markers");
    let known: Vec<u32> = tids.values().copied().collect();
    let spawned = trace
        .events
        .iter()
        .find(|e| e.op == Op::Exec && e.path == Path::new("/bin/true"))
        .expect("posix_spawn's child (a vfork-like clone) is traced from its exec");
    assert!(
        !known.contains(&spawned.pid),
        "the spawned child has its own pid"
    );
    assert!(
        trace
            .events
            .iter()
            .any(|e| e.pid == spawned.pid && e.path.to_string_lossy().contains("libc.so")),
        "and the program it runs is traced too (its loader opens libc)"
    );
}

#[test]
fn an_exec_of_a_missing_program_is_an_absence() {
    let Some(tracer) = tracer() else { return };
    let (_keep, dir) = temp_dir();
    let mut command = Command::new(exerciser());
    command.current_dir(&dir).args(["exec", "no-such-program"]);
    let (output, trace) = run_traced(&tracer, &mut command);
    assert_eq!(output.status.code(), Some(127), "the exec failed");
    let execs: Vec<(PathBuf, Found)> = trace
        .events
        .iter()
        .filter(|e| e.op == Op::Exec)
        .map(|e| (e.path.clone(), e.found))
        .collect();
    assert_eq!(
        execs.len(),
        2,
        "the exerciser's own exec and the failed one: {execs:?}"
    );
    assert_eq!(
        execs[0].0,
        exerciser(),
        "the first exec is the program spawned"
    );
    assert!(matches!(execs[0].1, Found::File { .. }));
    assert_eq!(execs[1], (dir.join("no-such-program"), Found::Missing));
}
