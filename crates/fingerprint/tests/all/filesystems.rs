//! The same tree on ext4, xfs, btrfs and tmpfs (fresh private mounts): same digests, same
//! answers from the stat cache, same reports for special files.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use fingerprint::{hash_tree, Digest, ErrorKind, StatCache, TreeOptions};
use fs_testbed::{run_or_skip, FsKind};

use crate::{set_mtime, write};

fn sample(root: &Path) {
    write(root, "include/tile.cuh", b"#define TILE 64\n");
    write(root, "include/deep/a/b/c.cuh", &vec![7u8; 300 * 1024]);
    write(root, "bin/tool", b"#!/bin/sh\n");
    std::fs::set_permissions(
        root.join("bin/tool"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod +x");
    std::fs::write(root.join(OsStr::from_bytes(b"caf\xe9.h")), b"latin-1 name")
        .expect("non-UTF-8 name");
    std::os::unix::fs::symlink("tile.cuh", root.join("include/alias.cuh")).expect("symlink");
}

/// What each filesystem must agree on: the digest, the warm answer, an edit seen through the
/// cache, and a FIFO reported.
fn check(root: &Path) -> Digest {
    let tree = root.join("tree");
    sample(&tree);
    let mut cache = StatCache::new();
    let cold = hash_tree(&tree, &TreeOptions::default(), Some(&mut cache)).expect("cold walk");
    let warm = hash_tree(&tree, &TreeOptions::default(), Some(&mut cache)).expect("warm walk");
    assert_eq!(cold, warm, "warm and cold walks agree");

    let f = tree.join("include/tile.cuh");
    std::fs::write(&f, b"#define TILE 32\n").expect("same-size rewrite");
    set_mtime(&f, 86_400);
    let edited = hash_tree(&tree, &TreeOptions::default(), Some(&mut cache)).expect("after edit");
    assert_ne!(
        edited.digest, cold.digest,
        "the edit is seen through the cache"
    );
    std::fs::write(&f, b"#define TILE 64\n").expect("restore");
    let restored = hash_tree(&tree, &TreeOptions::default(), Some(&mut cache)).expect("restored");
    assert_eq!(
        restored.digest, cold.digest,
        "restoring the bytes restores the digest"
    );

    let c = std::ffi::CString::new(tree.join("pipe").as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
    let err = hash_tree(&tree, &TreeOptions::default(), None).expect_err("FIFO reported");
    assert!(
        matches!(err.kind(), ErrorKind::SpecialFile { .. }),
        "got {err}"
    );
    cold.digest
}

#[test]
fn heavy_tree_digest_is_the_same_on_every_filesystem() {
    let reference = tempfile::tempdir().expect("temp dir");
    let expected = check(reference.path());
    for kind in [FsKind::Ext4, FsKind::Xfs, FsKind::Btrfs, FsKind::Tmpfs] {
        if let Some(d) = run_or_skip(kind, check) {
            assert_eq!(
                d,
                expected,
                "{}: the same tree hashes the same",
                kind.name()
            );
        }
    }
}
