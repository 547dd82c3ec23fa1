//! `remove_live_temps` against real writers. Its own binary: it touches the process-wide
//! registry, which the other tests' writers also use.

use std::io::ErrorKind;

use durable_fs::{put, put_with, remove_live_temps, StagingDir};

#[test]
fn cleanup_removes_unpublished_temps_and_their_writers_fail() {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("target");
    put(&target, b"old").expect("put");
    let err = put_with(&target, |f| {
        std::io::Write::write_all(f, b"new")?;
        // The process is told to stop while this put is writing.
        assert_eq!(remove_live_temps(), 1, "the one live temp is removed");
        Ok(())
    })
    .expect_err("a reclaimed temp is never published");
    assert_eq!(err.kind(), ErrorKind::Interrupted, "{err}");
    assert_eq!(err.op(), "publish");
    assert_eq!(
        std::fs::read(&target).expect("read"),
        b"old",
        "target untouched"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("ls").count(),
        1,
        "no temp left"
    );

    // The same for a staging directory (one test: the registry is process-wide, so a second
    // test running on another thread could see this one's temps).
    let dir = tempfile::tempdir().expect("temp dir");
    let staging = StagingDir::new_in(dir.path()).expect("staging");
    put(staging.path().join("f"), b"f").expect("stage");
    assert!(remove_live_temps() >= 1, "the staging dir is removed");
    assert!(!staging.path().exists(), "gone from disk");
    let err = staging
        .commit_noreplace(dir.path().join("entry"))
        .expect_err("a reclaimed staging dir is never published");
    // fsync_dir of a removed tree fails first with NotFound; either way nothing is published.
    assert!(
        matches!(err.kind(), ErrorKind::Interrupted | ErrorKind::NotFound),
        "{err}"
    );
    assert!(!dir.path().join("entry").exists(), "nothing published");
    assert_eq!(remove_live_temps(), 0, "nothing left registered");
}
