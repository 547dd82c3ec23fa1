//! `verify` moves a corrupt entry aside only if, under its key's lock, it is still the entry it
//! found corrupt and no reader holds it.

use crate::support::*;
use jit_cache::{KernelSpec, Outcome};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn spec() -> KernelSpec {
    KernelSpec::from_text("rechecked", "rechecked.cu", kernel_text(31))
}

/// Flips one byte of a file in place (same size: only the digest can tell).
fn corrupt_in_place(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read artifact");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(path, bytes).expect("rewrite artifact in place");
}

/// Takes an exclusive `flock` on every lock file of the root, as a builder holding the key
/// would; the descriptors keep the locks.
fn hold_every_key_lock(cache_root: &Path) -> Vec<(std::fs::File, u64)> {
    std::fs::read_dir(cache_root.join(jit_cache::FORMAT_DIR).join("locks"))
        .expect("list lock files")
        .flatten()
        .map(|item| {
            let file = std::fs::File::open(item.path()).expect("open lock file");
            rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
                .expect("lock the key");
            let ino = file.metadata().expect("stat lock file").ino();
            (file, ino)
        })
        .collect()
}

/// Waits until some process or thread is blocked in `flock` on one of `inodes`, as
/// `/proc/locks` shows (`-> FLOCK ... maj:min:ino`): a condition, not a guess at timing.
fn wait_for_a_lock_waiter(inodes: &[u64]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let locks = std::fs::read_to_string("/proc/locks").expect("read /proc/locks");
        let waiting = locks.lines().any(|line| {
            line.contains("->")
                && line.split_whitespace().any(|field| {
                    let parts: Vec<&str> = field.split(':').collect();
                    parts.len() == 3 && parts[2].parse().is_ok_and(|ino: u64| inodes.contains(&ino))
                })
        });
        if waiting {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "verify never waited for the key's lock:\n{locks}"
        );
        std::thread::yield_now();
    }
}

fn copy_entry(from: &Path, to: &Path) {
    std::fs::create_dir(to).expect("mkdir copy");
    for item in std::fs::read_dir(from).expect("list entry").flatten() {
        std::fs::copy(item.path(), to.join(item.file_name())).expect("copy entry file");
    }
}

#[test]
fn verify_does_not_move_an_entry_a_builder_replaced_while_it_waited_for_the_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache_root = dir.path().join("cache");
    let built = open_cache(dir.path()).get_or_build(&spec()).expect("build");
    let artifact: PathBuf = built.artifact.path().to_path_buf();
    let entry = artifact.parent().expect("entry dir").to_path_buf();
    drop(built);
    // A good copy, prepared on the same filesystem, that a builder will publish in its place.
    let replacement = dir.path().join("replacement");
    copy_entry(&entry, &replacement);
    corrupt_in_place(&artifact);

    let held = hold_every_key_lock(&cache_root);
    let inodes: Vec<u64> = held.iter().map(|(_, ino)| *ino).collect();
    let verifier = {
        let dir = dir.path().to_path_buf();
        std::thread::spawn(move || open_cache(&dir).verify())
    };
    // Verify has found the entry corrupt and waits for the key; meanwhile "the builder" moves
    // the corrupt entry aside and publishes a good one under the same name.
    wait_for_a_lock_waiter(&inodes);
    std::fs::rename(&entry, dir.path().join("moved-aside")).expect("move corrupt entry aside");
    std::fs::rename(&replacement, &entry).expect("publish the replacement");
    let published_ino = std::fs::metadata(&entry).expect("stat replacement").ino();
    drop(held);

    let report = verifier
        .join()
        .expect("verify thread")
        .expect("verify after waiting");
    assert!(
        report.corrupt.is_empty(),
        "the good replacement must not be reported corrupt or moved: {:?}",
        report.corrupt
    );
    assert_eq!(
        std::fs::metadata(&entry).map(|m| m.ino()).ok(),
        Some(published_ino),
        "the replacement is still in place"
    );
    let again = open_cache(dir.path())
        .get_or_build(&spec())
        .expect("lookup");
    assert_eq!(again.outcome, Outcome::Hit, "the replacement serves hits");
}

#[test]
fn verify_leaves_a_corrupt_entry_that_a_reader_holds_and_moves_it_once_released() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = open_cache(dir.path());
    let reader = cache.get_or_build(&spec()).expect("build");
    let artifact = reader.artifact.path().to_path_buf();
    let entry = artifact.parent().expect("entry dir").to_path_buf();
    let bytes = reader.artifact.bytes().to_vec();
    // The disk rots under a reader that already loaded the artifact and still uses its path.
    corrupt_in_place(&artifact);

    let report = cache.verify().expect("verify while pinned");
    assert!(
        entry.exists(),
        "a pinned entry stays where its reader's path points"
    );
    assert!(
        report.corrupt.is_empty(),
        "nothing was moved aside: {:?}",
        report.corrupt
    );
    assert_eq!(
        report.corrupt_pinned.len(),
        1,
        "the corrupt entry is reported as held by a reader"
    );
    assert_eq!(
        reader.artifact.bytes(),
        &bytes[..],
        "the reader keeps its bytes"
    );

    drop(reader);
    let report = cache.verify().expect("verify once released");
    assert_eq!(report.corrupt.len(), 1, "released, it is moved aside");
    assert!(!entry.exists(), "the corrupt entry left its place");
}
