//! `remove_live_temps` in a forked child leaves the parent's temps alone. Its own binary with one
//! test: after `fork` only the forking thread exists in the child, so no other thread of this
//! process may be inside the registry at that moment.

use durable_fs::{remove_live_temps, Batch};

#[test]
fn a_forked_child_never_removes_its_parents_temps() {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("target");
    let mut batch = Batch::new();
    batch.put(&target, b"staged by the parent").expect("stage");
    let temps = || {
        std::fs::read_dir(dir.path())
            .expect("list")
            .filter(|e| durable_fs::is_temp_name(&e.as_ref().expect("entry").file_name()))
            .count()
    };
    assert_eq!(temps(), 1, "the parent's staged temp exists");

    // SAFETY: the child calls only `remove_live_temps` (no other thread can hold the registry's
    // lock: this binary runs one test) and then `_exit`, which runs no destructors.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let removed = remove_live_temps();
        // SAFETY: `_exit` is async-signal-safe and ends the child at once.
        unsafe { libc::_exit(i32::try_from(removed).unwrap_or(99)) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our child and `status` a valid out-pointer.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid");
    assert!(libc::WIFEXITED(status), "the child exited normally");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "the child's cleanup removed none of the parent's temps"
    );
    assert_eq!(temps(), 1, "the parent's temp is still there");
    let report = batch.commit().expect("the parent commits its batch");
    assert_eq!(report.files, 1);
    assert_eq!(
        std::fs::read(&target).expect("read"),
        b"staged by the parent"
    );
    assert_eq!(remove_live_temps(), 0, "nothing is left to clean up");
}
