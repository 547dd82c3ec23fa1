//! Tree digests: what changes them and what must not.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use fingerprint::{hash_tree, ErrorKind, StatCache, SymlinkPolicy, TreeDigest, TreeOptions};

use crate::{set_mtime, write};

fn sample(root: &Path) {
    write(root, "include/tile.cuh", b"#define TILE 64\n");
    write(root, "include/detail/mma.cuh", b"// mma\n");
    write(root, "kernels/gemm.cu", b"__global__ void gemm() {}\n");
    write(root, "scripts/build.sh", b"#!/bin/sh\n");
    let script = root.join("scripts/build.sh");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod +x");
}

fn digest(root: &Path) -> TreeDigest {
    hash_tree(root, &TreeOptions::default(), None).expect("hash sample tree")
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            std::fs::create_dir_all(&target).expect("mkdir");
            copy_tree(&entry.path(), &target);
        } else {
            // std::fs::copy keeps permissions but gives the copy a new mtime.
            std::fs::copy(entry.path(), &target).expect("copy file");
            set_mtime(&target, 0);
        }
    }
}

#[test]
fn copy_elsewhere_with_new_mtimes_hashes_the_same() {
    let a = tempfile::tempdir().expect("temp dir");
    let b = tempfile::tempdir().expect("temp dir");
    sample(a.path());
    for f in ["include/tile.cuh", "kernels/gemm.cu"] {
        set_mtime(&a.path().join(f), 86_400);
    }
    copy_tree(a.path(), b.path());
    assert_ne!(
        a.path(),
        b.path(),
        "the copy lives at another absolute path"
    );
    assert_eq!(
        digest(a.path()),
        digest(b.path()),
        "FlashInfer #4782: a copy must not rebuild"
    );
}

#[test]
fn content_replaced_under_an_older_mtime_changes_the_digest() {
    let dir = tempfile::tempdir().expect("temp dir");
    sample(dir.path());
    let before = digest(dir.path()).digest;
    let f = dir.path().join("include/tile.cuh");
    std::fs::write(&f, b"#define TILE 128\n").expect("rewrite");
    set_mtime(&f, 10 * 86_400);
    assert_ne!(
        digest(dir.path()).digest,
        before,
        "FlashInfer #4489: an older mtime must not hide new bytes"
    );
}

#[test]
fn touch_alone_changes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    sample(dir.path());
    let before = digest(dir.path());
    set_mtime(&dir.path().join("kernels/gemm.cu"), 0);
    set_mtime(&dir.path().join("include/tile.cuh"), 5000);
    assert_eq!(digest(dir.path()), before, "mtime is not content");
}

#[test]
fn rename_one_byte_and_exec_bit_each_change_the_digest() {
    let dir = tempfile::tempdir().expect("temp dir");
    sample(dir.path());
    let base = digest(dir.path()).digest;

    let from = dir.path().join("kernels/gemm.cu");
    let to = dir.path().join("kernels/gemm2.cu");
    std::fs::rename(&from, &to).expect("rename");
    let renamed = digest(dir.path()).digest;
    assert_ne!(renamed, base, "a renamed file changes the tree");
    std::fs::rename(&to, &from).expect("rename back");
    assert_eq!(
        digest(dir.path()).digest,
        base,
        "renaming back restores the digest"
    );

    std::fs::write(&from, b"__global__ void gemm() {}\r").expect("change one byte");
    assert_ne!(digest(dir.path()).digest, base, "one byte changes the tree");
    std::fs::write(&from, b"__global__ void gemm() {}\n").expect("restore the byte");
    assert_eq!(
        digest(dir.path()).digest,
        base,
        "restoring the byte restores the digest"
    );

    let script = dir.path().join("scripts/build.sh");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).expect("chmod -x");
    assert_ne!(
        digest(dir.path()).digest,
        base,
        "the exec bit is part of the tree"
    );
}

#[test]
fn ignored_noise_changes_nothing_and_callers_can_extend_the_rules() {
    let dir = tempfile::tempdir().expect("temp dir");
    sample(dir.path());
    let base = digest(dir.path()).digest;
    write(dir.path(), ".git/HEAD", b"ref: refs/heads/main\n");
    write(dir.path(), "kernels/__pycache__/x.cpython-311.pyc", b"\0");
    write(dir.path(), "kernels/mod.pyc", b"\0");
    write(dir.path(), "include/tile.cuh~", b"backup");
    write(dir.path(), "include/.tile.cuh.swp", b"vim");
    write(dir.path(), "include/#tile.cuh#", b"emacs");
    assert_eq!(
        digest(dir.path()).digest,
        base,
        "default ignores skip VCS, bytecode and editor temps"
    );

    write(dir.path(), "build/out.o", b"obj");
    assert_ne!(
        digest(dir.path()).digest,
        base,
        "an unignored directory counts"
    );
    let opts = TreeOptions::default().ignore("build").ignore("*.log");
    write(dir.path(), "run.log", b"log");
    let extended = hash_tree(dir.path(), &opts, None).expect("hash with extra ignores");
    assert_eq!(
        extended.digest, base,
        "caller-added names and globs are skipped too"
    );
}

#[test]
fn files_are_listed_relative_and_sorted() {
    let dir = tempfile::tempdir().expect("temp dir");
    sample(dir.path());
    let names: Vec<String> = digest(dir.path())
        .files
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "include/detail/mma.cuh",
            "include/tile.cuh",
            "kernels/gemm.cu",
            "scripts/build.sh"
        ],
        "relative `/`-separated paths, sorted by bytes"
    );
}

#[test]
fn symlink_policies_and_loop_detection() {
    let dir = tempfile::tempdir().expect("temp dir");
    sample(dir.path());
    std::os::unix::fs::symlink("tile.cuh", dir.path().join("include/alias.cuh")).expect("symlink");
    let follow = hash_tree(dir.path(), &TreeOptions::default(), None).expect("follow");
    let record = hash_tree(
        dir.path(),
        &TreeOptions::default().symlinks(SymlinkPolicy::Record),
        None,
    )
    .expect("record");
    let alias = |t: &TreeDigest| {
        t.files
            .iter()
            .find(|(n, _)| n == "include/alias.cuh")
            .map(|(_, d)| *d)
    };
    let tile = follow
        .files
        .iter()
        .find(|(n, _)| n == "include/tile.cuh")
        .map(|(_, d)| *d);
    assert_eq!(alias(&follow), tile, "Follow hashes the target's content");
    assert_eq!(
        alias(&record),
        Some(fingerprint::Digest::of_bytes(b"tile.cuh")),
        "Record hashes the target string"
    );

    std::os::unix::fs::symlink("..", dir.path().join("include/up")).expect("symlink loop");
    let err =
        hash_tree(dir.path(), &TreeOptions::default(), None).expect_err("a loop must be reported");
    assert!(
        matches!(err.kind(), ErrorKind::SymlinkLoop),
        "loop kind, got {err}"
    );
    assert!(
        err.path().ends_with("include/up"),
        "the error names the looping link: {err}"
    );
    hash_tree(
        dir.path(),
        &TreeOptions::default().symlinks(SymlinkPolicy::Record),
        None,
    )
    .expect("Record never follows, so a loop is harmless");
}

#[test]
fn stat_cache_gives_the_same_answers_as_a_full_hash() {
    let dir = tempfile::tempdir().expect("temp dir");
    sample(dir.path());
    let mut cache = StatCache::new();
    let cold = hash_tree(dir.path(), &TreeOptions::default(), Some(&mut cache)).expect("cold");
    assert_eq!(cache.len(), 4, "one entry per file");
    assert!(cache.is_dirty(), "new entries make the cache dirty");
    let state = tempfile::tempdir().expect("temp dir for the cache file");
    let saved = state.path().join("cache/stat.json");
    cache.save(&saved).expect("save cache");
    let mut loaded = StatCache::load(&saved);
    assert_eq!(loaded.len(), 4, "the cache round-trips through its file");
    let warm = hash_tree(dir.path(), &TreeOptions::default(), Some(&mut loaded)).expect("warm");
    assert_eq!(warm, cold, "a warm walk agrees with the cold one");
    let f = dir.path().join("kernels/gemm.cu");
    std::fs::write(&f, b"__global__ void gemm() { }\n").expect("edit");
    set_mtime(&f, 86_400);
    let edited =
        hash_tree(dir.path(), &TreeOptions::default(), Some(&mut loaded)).expect("after edit");
    let full = hash_tree(dir.path(), &TreeOptions::default(), None).expect("full");
    assert_eq!(
        edited, full,
        "after an edit under an old mtime the cache agrees with a full hash"
    );
    assert_ne!(edited.digest, cold.digest, "and the edit is seen");
}

#[test]
fn stat_cache_retain_drops_entries_and_marks_dirty() {
    let dir = tempfile::tempdir().expect("temp dir");
    sample(dir.path());
    let mut cache = StatCache::new();
    hash_tree(dir.path(), &TreeOptions::default(), Some(&mut cache)).expect("walk");
    let state = tempfile::tempdir().expect("temp dir");
    let saved = state.path().join("stat.json");
    cache.save(&saved).expect("save");
    let mut loaded = StatCache::load(&saved);
    assert!(!loaded.is_dirty(), "a freshly loaded cache is clean");
    loaded.retain(|p| !p.ends_with("gemm.cu"));
    assert_eq!(loaded.len(), 3, "one entry dropped");
    assert!(loaded.is_dirty(), "dropping entries makes the cache dirty");
}
