//! The fork rule: a child forked while its parent is a key's producer can produce that key once
//! the parent lets go, its inherited copy of the producer neither unlocks nor removes the
//! parent's, a producer killed -9 never keeps its key locked through a child it forked, and a
//! forked child's staging directories get a heartbeat of their own under the shared protocol.
//! Its own binary, one test: after `fork` only the forking thread exists in the child, so no
//! other test's thread may be inside the crate at that moment.

use jit_cache::store::{Claim, Namespace, Producer, Store, StoreOptions};
use jit_cache::Sharing;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

fn ns() -> Namespace {
    Namespace::new("forked").expect("namespace")
}

fn produce(claim: Claim) -> Producer {
    match claim {
        Claim::Produce(producer) => producer,
        Claim::Ready(entry) => panic!("expected to produce {}, found it published", entry.key()),
    }
}

/// A pipe, as (read end, write end) files.
fn pipe() -> (std::fs::File, std::fs::File) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid two-element out-array.
    let made = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(made, 0, "pipe: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just made by `pipe2` and are owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    (r.into(), w.into())
}

/// Forks; the child runs `child` and ends with its exit code (`_exit`: no destructors, no
/// atexit handlers of the test harness). Returns the child's pid in the parent.
fn fork_child(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child runs only `child`, on the one thread it has, and then `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
        // SAFETY: `_exit` ends the child at once.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Waits for `pid` and returns its exit code (or 128 + the signal).
fn wait_for(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `pid` is our child and `status` a valid out-pointer.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid: {}", std::io::Error::last_os_error());
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    }
}

fn mtime_age(path: &Path) -> Duration {
    let mtime = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .expect("stat the staging directory");
    SystemTime::now()
        .duration_since(mtime)
        .unwrap_or(Duration::ZERO)
}

/// The parent produces key `k`; the child, forked then, waits for the parent to abandon it
/// and must become its producer (the turns table and the lock it inherited are the parent's).
fn a_child_of_a_producer_produces_the_key_once_the_parent_abandons_it(root: &Path) {
    let store = Store::open(root).expect("open store");
    let producer = produce(store.begin(&ns(), "k", Duration::ZERO).expect("begin"));
    let (mut abandoned_r, mut abandoned_w) = pipe();
    let child = fork_child(move || {
        let mut byte = [0u8; 1];
        if abandoned_r.read_exact(&mut byte).is_err() {
            return 2;
        }
        match store.begin(&ns(), "k", Duration::from_secs(10)) {
            Ok(Claim::Produce(mine)) => {
                match mine.write("f", b"child").and(mine.commit().map(drop)) {
                    Ok(()) => 0,
                    Err(_) => 3,
                }
            }
            Ok(Claim::Ready(_)) => 4,
            Err(_) => 5, // Busy: the inherited turn or lock still holds the key
        }
    });
    drop(producer);
    abandoned_w.write_all(b"x").expect("tell the child");
    assert_eq!(
        wait_for(child),
        0,
        "the forked child produces the key its parent abandoned (5: it stayed busy)"
    );
}

/// The child drops its inherited copy of the parent's producer: the parent still holds the key
/// (another process is refused) and still commits its staging directory.
fn a_childs_copy_of_a_producer_neither_unlocks_nor_removes_the_parents(root: &Path) {
    let store = Store::open(root).expect("open store");
    let producer = produce(store.begin(&ns(), "k2", Duration::ZERO).expect("begin"));
    producer.write("f", b"parent").expect("write");
    let mut producer = std::mem::ManuallyDrop::new(producer);
    let child = fork_child(|| {
        // SAFETY: in the child this is the child's copy of the producer, never used again.
        drop(unsafe { std::mem::ManuallyDrop::take(&mut producer) });
        0
    });
    let producer = std::mem::ManuallyDrop::into_inner(producer);
    assert_eq!(wait_for(child), 0, "the child dropped its copy");
    let other = fork_child(|| {
        // A fresh process's view: `begin` without waiting is Busy while the parent holds it.
        match Store::open(root).and_then(|s| s.begin(&ns(), "k2", Duration::ZERO)) {
            Err(jit_cache::Error::Busy { .. }) => 0,
            Ok(_) => 1,
            Err(_) => 2,
        }
    });
    assert_eq!(
        wait_for(other),
        0,
        "the parent still holds the key after its child dropped its copy (1: it was unlocked)"
    );
    let entry = producer
        .commit()
        .expect("the parent commits: its child's copy removed no staging directory");
    assert_eq!(entry.read("f").expect("read"), b"parent");
}

/// A producer (a process of its own) forks a child that lives on, then is killed -9: another
/// process must get the key at once.
fn a_producer_killed_while_its_child_lives_releases_the_key(root: &Path) {
    let (mut pid_r, pid_w) = pipe();
    let producer = fork_child(move || {
        let mut pid_w = pid_w;
        let Ok(store) = Store::open(root) else {
            return 2;
        };
        let Ok(Claim::Produce(_held)) = store.begin(&ns(), "k3", Duration::ZERO) else {
            return 3;
        };
        let grandchild = fork_child(|| {
            // SAFETY: `pause` only waits for a signal (the test's SIGKILL).
            unsafe { libc::pause() };
            0
        });
        if pid_w.write_all(&grandchild.to_le_bytes()).is_err() {
            return 4;
        }
        // SAFETY: as above; the test kills this process.
        unsafe { libc::pause() };
        0
    });
    let mut pid = [0u8; 4];
    pid_r
        .read_exact(&mut pid)
        .expect("the producer reports its child once it holds the key");
    let grandchild = libc::pid_t::from_le_bytes(pid);
    // SAFETY: `producer` is our child, not yet waited for.
    unsafe { libc::kill(producer, libc::SIGKILL) };
    assert_eq!(
        wait_for(producer),
        128 + libc::SIGKILL,
        "the producer was killed"
    );
    let store = Store::open(root).expect("open store");
    let claim = store.begin(&ns(), "k3", Duration::from_secs(5));
    // SAFETY: the grandchild's parent is dead and it was not reaped: its pid is still its own
    // (a zombie's at worst) until init reaps it after the kill.
    unsafe { libc::kill(grandchild, libc::SIGKILL) };
    match claim {
        Ok(Claim::Produce(_)) => {}
        Ok(Claim::Ready(_)) => panic!("nothing was published"),
        Err(e) => panic!("the killed producer's child kept the key locked: {e}"),
    }
}

/// Under the shared protocol a child forked from a producer (whose heartbeat thread runs)
/// makes a staging directory of its own: it must be beaten by a thread of the child's.
fn a_forked_childs_staging_directory_gets_a_heartbeat(root: &Path) {
    let options = StoreOptions::default().sharing(Sharing::Shared);
    let store = Store::open_with(root, options).expect("open shared store");
    let producer = produce(store.begin(&ns(), "k4", Duration::ZERO).expect("begin"));
    let child = fork_child(move || {
        let Ok(Claim::Produce(mine)) = store.begin(&ns(), "k5", Duration::ZERO) else {
            return 2;
        };
        let old = SystemTime::now() - Duration::from_secs(3600);
        if std::fs::File::open(mine.dir())
            .and_then(|f| f.set_modified(old))
            .is_err()
        {
            return 3;
        }
        // The beat touches every directory when its thread starts and on each new heartbeat:
        // a second staging directory wakes it (bounded wait, no sleep).
        let Ok(Claim::Produce(_second)) = store.begin(&ns(), "k6", Duration::ZERO) else {
            return 4;
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while mtime_age(mine.dir()) > Duration::from_secs(60) {
            if Instant::now() > deadline {
                return 5;
            }
            std::thread::yield_now();
        }
        0
    });
    assert_eq!(
        wait_for(child),
        0,
        "the child's staging directory is beaten (5: no heartbeat within 10 s)"
    );
    drop(producer);
}

#[test]
fn a_forked_child_inherits_no_turn_no_lock_and_no_dead_heartbeat() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("cache");
    a_child_of_a_producer_produces_the_key_once_the_parent_abandons_it(&root);
    a_childs_copy_of_a_producer_neither_unlocks_nor_removes_the_parents(&root);
    a_producer_killed_while_its_child_lives_releases_the_key(&root);
    a_forked_childs_staging_directory_gets_a_heartbeat(&root.with_file_name("shared"));
}
