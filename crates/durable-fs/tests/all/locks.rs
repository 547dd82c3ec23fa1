//! flock-based locks: exclusion, waiting, release on drop, bounded lock files.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use durable_fs::{lock, lock_file_for_key, try_lock, LockMode, Wait};

#[test]
fn timed_wait_gives_up_and_forever_waits_for_release() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("l.lock");
    let held = lock(&path, LockMode::Exclusive, Wait::Forever).expect("granted");
    assert_eq!(held.mode(), LockMode::Exclusive);
    assert_eq!(held.path(), path);
    let timed_out = lock(
        &path,
        LockMode::Exclusive,
        Wait::Timeout(Duration::from_millis(30)),
    )
    .expect_err("a held lock is not granted within the timeout");
    assert_eq!(
        timed_out.kind(),
        std::io::ErrorKind::TimedOut,
        "a timeout is an error of its own kind: {timed_out}"
    );
    assert_eq!(timed_out.path(), path, "the error names the lock file");
    assert!(
        try_lock(&path, LockMode::Shared).expect("try").is_none(),
        "try_lock says None while an exclusive holder exists"
    );
    let released = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (path, released) = (path.clone(), released.clone());
        std::thread::spawn(move || {
            let g = lock(&path, LockMode::Shared, Wait::Forever).expect("forever means granted");
            assert!(
                released.load(Ordering::SeqCst),
                "granted only after the holder let go"
            );
            g.unlock().expect("explicit unlock");
        })
    };
    released.store(true, Ordering::SeqCst);
    drop(held);
    waiter.join().expect("waiter thread");
    let again = lock(
        &path,
        LockMode::Exclusive,
        Wait::Timeout(Duration::from_secs(60)),
    )
    .expect("free again after every guard dropped");
    drop(again);
    assert!(path.exists(), "the lock file stays");
}

#[test]
fn lock_refuses_a_symlinked_lock_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"x").expect("write");
    let link = dir.path().join("l.lock");
    std::os::unix::fs::symlink(&victim, &link).expect("symlink");
    let err = try_lock(&link, LockMode::Exclusive).expect_err("O_NOFOLLOW");
    assert_eq!(err.op(), "open lock file", "{err}");
}

#[test]
fn lock_files_for_keys_are_bounded_and_stable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let paths: BTreeSet<_> = (0..10_000u32)
        .map(|k| lock_file_for_key(dir.path(), &k.to_le_bytes(), 64))
        .collect();
    assert!(paths.len() <= 64, "at most 64 lock files: {}", paths.len());
    assert!(
        paths.len() > 32,
        "keys spread over the buckets: {}",
        paths.len()
    );
    assert_eq!(
        lock_file_for_key(dir.path(), b"kernel-a", 64),
        lock_file_for_key(dir.path(), b"kernel-a", 64),
        "a key always maps to the same file"
    );
    assert_eq!(
        lock_file_for_key(dir.path(), b"x", 0),
        lock_file_for_key(dir.path(), b"y", 0),
        "zero buckets count as one"
    );
    for p in paths.iter().take(3) {
        assert!(
            p.starts_with(dir.path()) && !durable_fs::is_temp_name(p.file_name().expect("name"))
        );
    }
}

/// Issue 31, item 11: a timeout too long to add to the clock panicked in `Instant + Duration`
/// even for a free lock; it now means a wait without end.
#[test]
fn a_timeout_beyond_the_clock_is_no_panic() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("l.lock");
    let guard = lock(&path, LockMode::Exclusive, Wait::Timeout(Duration::MAX))?;
    drop(guard);
    Ok(())
}
