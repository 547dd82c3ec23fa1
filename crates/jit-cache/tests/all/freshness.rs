//! Freshness by content: FlashInfer #4489 and #4782, header changes, shadowing, two trees.

use crate::support::*;
use jit_cache::Outcome;

#[test]
fn content_replaced_under_an_older_mtime_is_rebuilt_flashinfer_4489() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (source, include) = write_project(dir.path(), 1);
    let cache = open_cache(dir.path());
    let spec = project_spec(&source, &include);
    assert_eq!(
        cache.get_or_build(&spec).expect("first build").outcome,
        Outcome::Built
    );
    // Same length, other bytes, and an mtime in the past: mtime- or length-based freshness would hit.
    let text = std::fs::read_to_string(&source)
        .expect("read source")
        .replace("x[threadIdx.x]", "x[threadIdx.y]");
    std::fs::write(&source, text).expect("rewrite source");
    set_mtime(&source, 1_000_000_000);
    match cache.get_or_build(&spec).expect("second build").outcome {
        Outcome::Rebuilt { reasons } => {
            assert!(
                reasons.iter().any(|r| r.to_string().contains("k.cu")),
                "the reason names the source: {reasons:?}"
            )
        }
        other => panic!("replaced content must rebuild, got {other:?}"),
    }
}

#[test]
fn sources_copied_again_with_fresh_mtimes_hit_flashinfer_4782() {
    // FlashInfer #4782: a package copied anew (a container layer, a reinstall) has the same files
    // with fresh mtimes, and every process rebuilt. The content is the same: a hit.
    let dir = tempfile::tempdir().expect("temp dir");
    let tree = dir.path().join("a");
    let (source, include) = write_project(&tree, 1);
    let cache = open_cache(dir.path());
    let first = cache
        .get_or_build(&project_spec(&source, &include))
        .expect("build in tree a");
    std::fs::remove_dir_all(&tree).expect("remove the tree");
    let (source_b, include_b) = write_project(&tree, 1);
    set_mtime(&source_b, 2_000_000_000);
    let second = cache
        .get_or_build(&project_spec(&source_b, &include_b))
        .expect("build in the copied tree");
    assert_eq!(
        second.outcome,
        Outcome::Hit,
        "a re-timestamped copy of the same files must hit"
    );
    assert_eq!(first.artifact.bytes(), second.artifact.bytes());
    // The same files at another absolute path are another command: `__FILE__` and `assert`
    // would name the other tree (issue 20); `launcher.rs` shows relative spellings sharing.
    let (source_c, include_c) = write_project(&dir.path().join("elsewhere/c"), 1);
    assert_ne!(
        cache
            .get_or_build(&project_spec(&source_c, &include_c))
            .expect("build in tree c")
            .outcome,
        Outcome::Hit,
        "an absolute spelling of another tree is not the first tree's answer"
    );
}

#[test]
fn a_changed_header_rebuilds_naming_it_and_an_unrelated_header_does_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (source, include) = write_project(dir.path(), 1);
    let spec = project_spec(&source, &include);
    let cache = open_cache(dir.path());
    cache.get_or_build(&spec).expect("first build");
    std::fs::write(include.join("unrelated.cuh"), "#define UNUSED 2\n")
        .expect("edit unrelated header");
    assert_eq!(
        cache
            .get_or_build(&spec)
            .expect("after unrelated edit")
            .outcome,
        Outcome::Hit
    );
    // A fresh handle (another process) must agree: the on-disk path, not only the memo.
    let fresh = open_cache(dir.path());
    assert_eq!(
        fresh.get_or_build(&spec).expect("fresh handle").outcome,
        Outcome::Hit
    );
    std::fs::write(include.join("tile.cuh"), "#define TILE_VALUE 2.0f\n").expect("edit the header");
    for cache in [&cache, &fresh] {
        match cache
            .get_or_build(&spec)
            .expect("after header edit")
            .outcome
        {
            Outcome::Rebuilt { reasons } => {
                // Typed until printed: a changed component named for the header, then its words.
                assert!(
                    reasons.iter().any(|r| matches!(
                        r,
                        jit_cache::RebuildReason::Changed(fingerprint::Change::Changed { name, .. })
                            if name.contains("tile.cuh")
                    )),
                    "reason names the header: {reasons:?}"
                );
                assert!(
                    reasons
                        .iter()
                        .any(|r| r.to_string().contains("header `tile.cuh` changed")),
                    "{reasons:?}"
                );
            }
            Outcome::Hit => {} // the second handle sees the first's rebuild: fine, it is fresh
            other => panic!("a changed header must rebuild, got {other:?}"),
        }
    }
    let explained = open_cache(dir.path()).explain(&spec).expect("explain");
    assert!(
        matches!(explained.action, jit_cache::Action::Hit { .. }),
        "{explained}"
    );
}

#[test]
fn two_trees_with_different_headers_both_stay_hits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (source_a, include_a) = write_project(&dir.path().join("a"), 1);
    let (source_b, include_b) = write_project(&dir.path().join("b"), 2);
    let cache = open_cache(dir.path());
    let (spec_a, spec_b) = (
        project_spec(&source_a, &include_a),
        project_spec(&source_b, &include_b),
    );
    let a1 = cache.get_or_build(&spec_a).expect("a first");
    let b1 = cache.get_or_build(&spec_b).expect("b first");
    assert_ne!(
        a1.artifact.bytes(),
        b1.artifact.bytes(),
        "different headers, different code"
    );
    for round in 0..3 {
        for (spec, first) in [(&spec_a, &a1), (&spec_b, &b1)] {
            let fresh = open_cache(dir.path());
            let again = fresh.get_or_build(spec).expect("alternate");
            assert_eq!(
                again.outcome,
                Outcome::Hit,
                "round {round}: both variants stay cached"
            );
            assert_eq!(again.artifact.bytes(), first.artifact.bytes());
        }
    }
}

#[test]
fn a_header_added_earlier_in_the_include_path_shadows_and_rebuilds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (source, include) = write_project(dir.path(), 1);
    let early = dir.path().join("early");
    std::fs::create_dir_all(&early).expect("mkdir early");
    let spec = jit_cache::KernelSpec::from_file(&source)
        .include_dir(&early)
        .include_dir(&include);
    let cache = open_cache(dir.path());
    cache.get_or_build(&spec).expect("first build");
    std::fs::write(early.join("tile.cuh"), "#define TILE_VALUE 9.0f\n")
        .expect("plant a shadowing header");
    match open_cache(dir.path())
        .get_or_build(&spec)
        .expect("after shadowing")
        .outcome
    {
        Outcome::Rebuilt { reasons } => {
            assert!(
                reasons.iter().any(|r| r.to_string().contains("tile.cuh")),
                "the reason names the header: {reasons:?}"
            )
        }
        other => panic!("a shadowing header must rebuild, got {other:?}"),
    }
}

#[test]
fn an_env_var_that_changes_nvcc_output_is_in_the_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = open_cache(dir.path());
    let spec = jit_cache::KernelSpec::from_text("envk", "envk.cu", kernel_text(3))
        .extra(jit_cache::Extra::Env("JIT_CACHE_TEST_KNOB".into()))
        .extra(jit_cache::Extra::Value {
            name: "mylib".into(),
            value: "1.0".into(),
        });
    cache.get_or_build(&spec).expect("build");
    let bumped = spec.clone().extra(jit_cache::Extra::Value {
        name: "mylib".into(),
        value: "1.1".into(),
    });
    match cache
        .get_or_build(&bumped)
        .expect("after version bump")
        .outcome
    {
        Outcome::Rebuilt { reasons } => {
            assert!(
                reasons.iter().any(|r| r.to_string().contains("mylib")),
                "{reasons:?}"
            )
        }
        other => panic!("a changed extra component must rebuild, got {other:?}"),
    }
}

#[test]
fn an_env_var_changed_inside_the_process_rebuilds_with_the_same_handle() {
    // The request memo must re-read the environment: NVCC_APPEND_FLAGS changes nvcc's output.
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = open_cache(dir.path());
    let spec = jit_cache::KernelSpec::from_text("envk", "envk.cu", kernel_text(9));
    std::env::remove_var("NVCC_APPEND_FLAGS");
    cache.get_or_build(&spec).expect("build");
    assert_eq!(
        cache.get_or_build(&spec).expect("hit").outcome,
        Outcome::Hit
    );
    std::env::set_var("NVCC_APPEND_FLAGS", "-lineinfo");
    let outcome = cache
        .get_or_build(&spec)
        .expect("after the env change")
        .outcome;
    std::env::remove_var("NVCC_APPEND_FLAGS");
    match outcome {
        Outcome::Rebuilt { reasons } => assert!(
            reasons
                .iter()
                .any(|r| r.to_string().contains("NVCC_APPEND_FLAGS")),
            "the reason names the variable: {reasons:?}"
        ),
        other => panic!("a changed NVCC_APPEND_FLAGS must rebuild, got {other:?}"),
    }
}

/// On a local filesystem the last-use stamp only orders eviction: a variant whose headers
/// changed is looked at on every request of its key, but only a variant that is answered with
/// gets its stamp refreshed, so the stale one ages out first.
#[test]
fn only_the_variant_answered_with_has_its_last_use_refreshed() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let (source, include) = write_project(dir.path(), 1);
    let spec = project_spec(&source, &include);
    let first = open_cache(dir.path())
        .get_or_build(&spec)
        .expect("first build");
    let old = first.artifact.path().to_path_buf();
    drop(first);
    let two_hours_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
        - 7200;
    set_mtime(&old, two_hours_ago);
    std::fs::write(include.join("tile.cuh"), "#define TILE_VALUE 2.0f\n").expect("edit the header");
    let rebuilt = open_cache(dir.path()).get_or_build(&spec).expect("rebuild");
    assert_ne!(rebuilt.artifact.path(), old, "a new variant");
    let hit = open_cache(dir.path()).get_or_build(&spec).expect("hit");
    assert_eq!(hit.outcome, Outcome::Hit);
    assert!(
        std::fs::metadata(&old).expect("stale variant kept").atime() <= two_hours_ago,
        "the stale variant's last use was refreshed by requests it did not answer"
    );
}

#[test]
fn headers_written_just_before_the_compile_are_recorded_with_stamps_a_hit_can_trust() {
    // A JIT library writes its kernel and headers, then builds at once. The compile reads them
    // after its start on the coarse clock, so their stamps are settled when the entry is
    // recorded: the next process checks each with one `stat` instead of hashing it.
    let dir = tempfile::tempdir().expect("temp dir");
    let (source, include) = write_project(dir.path(), 1);
    let cache = open_cache(dir.path());
    let answer = cache
        .get_or_build(&project_spec(&source, &include))
        .expect("build");
    let entry = answer.artifact.path().parent().expect("entry dir");
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(entry.join("meta.json")).expect("read meta.json"))
            .expect("meta.json is JSON");
    let headers: Vec<&str> = meta["headers"]
        .as_array()
        .expect("header records")
        .iter()
        .filter_map(|h| h.as_str())
        .collect();
    let tile = headers
        .iter()
        .find(|h| h.ends_with(" tile.cuh"))
        .unwrap_or_else(|| panic!("tile.cuh is recorded: {headers:?}"));
    let stamp = tile.split(' ').nth(2).expect("a stamp field");
    assert_ne!(stamp, "-", "the project header has a settled stamp: {tile}");

    // The stamp proves nothing once the file changes: the same length, its old mtime put back.
    let mtime = std::fs::metadata(include.join("tile.cuh"))
        .expect("stat")
        .modified()
        .expect("mtime");
    std::fs::write(include.join("tile.cuh"), "#define TILE_VALUE 2.0f\n").expect("rewrite");
    std::fs::File::options()
        .write(true)
        .open(include.join("tile.cuh"))
        .and_then(|f| f.set_modified(mtime))
        .expect("restore mtime");
    let again = open_cache(dir.path())
        .get_or_build(&project_spec(&source, &include))
        .expect("rebuild");
    assert!(
        matches!(again.outcome, Outcome::Rebuilt { .. }),
        "a rewrite under the old mtime and length is seen (ctime moved): {:?}",
        again.outcome
    );
}
