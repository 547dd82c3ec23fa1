//! Bad input: corrupt meta.json, truncated artifacts, foreign files, planted symlinks, hostile
//! names. Each is a clear error or a rebuild; nothing outside the root is touched.

use crate::support::*;
use jit_cache::{KernelSpec, Outcome};
use std::path::{Path, PathBuf};

fn entry_dir(built: &jit_cache::Answer) -> PathBuf {
    built
        .artifact
        .path()
        .parent()
        .expect("entry dir")
        .to_path_buf()
}

fn spec() -> KernelSpec {
    KernelSpec::from_text("corruptible", "corruptible.cu", kernel_text(4))
}

fn expect_rebuilt_with(cache_dir: &Path, what: &str) {
    let cache = open_cache(cache_dir.parent().expect("parent"));
    match cache.get_or_build(&spec()).expect("rebuild").outcome {
        Outcome::Rebuilt { reasons } => {
            assert!(
                reasons.iter().any(|r| r.to_string().contains(what)),
                "reason mentions `{what}`: {reasons:?}"
            )
        }
        other => panic!("expected a rebuild mentioning `{what}`, got {other:?}"),
    }
}

#[test]
fn corrupt_meta_json_is_rebuilt_with_the_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let entry = entry_dir(&open_cache(dir.path()).get_or_build(&spec()).expect("build"));
    std::fs::write(entry.join("meta.json"), b"{\"format\": 1, \"trunc").expect("corrupt meta");
    expect_rebuilt_with(&dir.path().join("cache"), "meta.json is corrupt");
}

#[test]
fn a_truncated_artifact_is_rebuilt_with_the_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let built = open_cache(dir.path()).get_or_build(&spec()).expect("build");
    let path = built.artifact.path().to_path_buf();
    drop(built);
    let len = std::fs::metadata(&path).expect("stat").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open")
        .set_len(len / 2)
        .expect("truncate");
    expect_rebuilt_with(&dir.path().join("cache"), "bytes");
}

#[test]
fn a_same_size_corrupted_artifact_is_caught_by_its_digest() {
    let dir = tempfile::tempdir().expect("temp dir");
    let built = open_cache(dir.path()).get_or_build(&spec()).expect("build");
    let path = built.artifact.path().to_path_buf();
    drop(built);
    let mut bytes = std::fs::read(&path).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&path, bytes).expect("flip a byte");
    expect_rebuilt_with(&dir.path().join("cache"), "digest");
    let report = open_cache(dir.path()).verify().expect("verify");
    assert!(
        report.corrupt.is_empty(),
        "after the rebuild nothing is corrupt: {:?}",
        report.corrupt
    );
}

#[test]
fn a_symlink_planted_at_an_entry_path_is_never_followed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir outside");
    std::fs::write(outside.join("meta.json"), b"{}").expect("bait");
    std::fs::write(outside.join("precious"), b"keep me").expect("bait");
    let entry = entry_dir(&open_cache(dir.path()).get_or_build(&spec()).expect("build"));
    std::fs::remove_dir_all(&entry).expect("remove entry");
    std::os::unix::fs::symlink(&outside, &entry).expect("plant symlink at the entry path");
    expect_rebuilt_with(&dir.path().join("cache"), "not a directory");
    assert_eq!(
        std::fs::read(outside.join("precious")).expect("still there"),
        b"keep me",
        "nothing outside touched"
    );
    assert_eq!(
        std::fs::read(outside.join("meta.json")).expect("still there"),
        b"{}"
    );
    let meta = std::fs::symlink_metadata(&entry).expect("entry exists again");
    assert!(
        meta.is_dir() && !meta.file_type().is_symlink(),
        "a real entry replaced the link"
    );
}

#[test]
fn foreign_files_in_the_root_are_ignored_and_survive() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = open_cache(dir.path());
    cache.get_or_build(&spec()).expect("build");
    let root = dir.path().join("cache");
    let foreign = [
        root.join("README"),
        root.join(jit_cache::FORMAT_DIR).join("entries/zz"),
        root.join(jit_cache::FORMAT_DIR)
            .join("entries/ab/not-a-key"),
    ];
    std::fs::write(&foreign[0], "foreign").expect("write");
    std::fs::write(&foreign[1], "foreign").expect("write");
    std::fs::create_dir_all(&foreign[2]).expect("mkdir");
    let fresh = open_cache(dir.path());
    assert_eq!(
        fresh.get_or_build(&spec()).expect("hit").outcome,
        Outcome::Hit
    );
    fresh.verify().expect("verify tolerates foreign files");
    fresh
        .gc(jit_cache::GcPolicy {
            max_bytes: Some(0),
            max_age: None,
        })
        .expect("gc tolerates foreign files");
    assert!(
        foreign.iter().all(|p| p.exists()),
        "foreign files are not ours to remove"
    );
}

#[test]
fn hostile_names_are_refused_before_touching_disk() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = open_cache(dir.path());
    for name in ["../escape", "a/b", "..", "nul\0byte", ""] {
        let err = cache
            .get_or_build(&spec().name(name))
            .expect_err("hostile name refused");
        assert!(err.to_string().contains("invalid kernel spec"), "{err}");
    }
    assert!(!dir.path().join("escape").exists());
}

#[test]
fn a_missing_source_is_an_error_naming_the_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = open_cache(dir.path());
    let missing = dir.path().join("nope.cu");
    let err = cache
        .get_or_build(&KernelSpec::from_file(&missing))
        .expect_err("missing source");
    assert!(err.to_string().contains("nope.cu"), "{err}");
}
