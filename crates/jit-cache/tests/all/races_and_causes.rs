//! Issue 12, cases 4 and 8, with the `g++ -E` fake (they need control of timing and signals):
//! an input edited while the compiler runs never binds the old artifact to the new content, and
//! a failure that is not the source's is never recorded or replayed.

use crate::gxx::{oracle, Gxx};
use jit_cache::{Error, FailureCause, KernelSpec};
use std::path::Path;
use std::time::Duration;

fn project(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, KernelSpec) {
    let (src, inc) = (dir.join("src/k.cu"), dir.join("inc"));
    std::fs::create_dir_all(src.parent().expect("parent")).expect("mkdir src");
    std::fs::create_dir_all(&inc).expect("mkdir inc");
    std::fs::write(&src, "#include \"tile.cuh\"\nint k = VALUE;\n").expect("write source");
    std::fs::write(inc.join("tile.cuh"), "#define VALUE 1\n").expect("write header");
    let spec = KernelSpec::from_file(&src).include_dir(&inc);
    (src, inc, spec)
}

fn expected(dir: &Path, src: &Path, inc: &Path) -> Vec<u8> {
    oracle(dir, src, &[format!("-I{}", inc.display())]).expect("oracle compiles")
}

/// Case 4: a header edited after the compiler read it, before the cache hashed it.
#[test]
fn a_header_edited_during_the_compile_never_binds_the_old_artifact_to_the_new_content() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gxx = Gxx::new(dir.path());
    let (src, inc, spec) = project(dir.path());
    let cache = gxx.cache(&dir.path().join("cache"));
    gxx.set("hold-after", true);
    let answer = std::thread::scope(|s| {
        let build = s.spawn(|| cache.get_or_build(&spec));
        assert_eq!(gxx.wait_started(), "after");
        std::fs::write(inc.join("tile.cuh"), "#define VALUE 2\n").expect("edit the header");
        gxx.set("hold-after", false);
        gxx.go();
        build.join().expect("builder thread")
    })
    .expect("build");
    let now = expected(dir.path(), &src, &inc);
    assert!(
        answer.warning.is_some() || answer.artifact.bytes() == now,
        "a cached answer must be the new content's"
    );
    let fresh = gxx.cache(&dir.path().join("cache"));
    let again = fresh.get_or_build(&spec).expect("next request");
    assert!(
        again.artifact.bytes() == now,
        "the old artifact was published under the new header's digest ({})",
        again.outcome
    );
}

/// Case 4: the source is hashed for the key before the compile; a source edited in between is
/// not published under the old key.
#[test]
fn a_source_edited_after_it_was_hashed_is_not_published_under_the_old_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gxx = Gxx::new(dir.path());
    let (src, inc, spec) = project(dir.path());
    let original = std::fs::read(&src).expect("read source");
    let cache = gxx.cache(&dir.path().join("cache"));
    gxx.set("hold-before", true);
    std::thread::scope(|s| {
        let build = s.spawn(|| cache.get_or_build(&spec));
        assert_eq!(gxx.wait_started(), "before");
        std::fs::write(&src, "#include \"tile.cuh\"\nint k = VALUE + 40;\n").expect("edit source");
        gxx.set("hold-before", false);
        gxx.go();
        let answer = build.join().expect("builder thread").expect("build");
        assert!(
            answer.warning.is_some() || answer.artifact.bytes() == expected(dir.path(), &src, &inc),
            "a cached answer must be the edited source's"
        );
    });
    std::fs::write(&src, &original).expect("restore the source");
    let again = gxx
        .cache(&dir.path().join("cache"))
        .get_or_build(&spec)
        .expect("request for the original source");
    assert!(
        again.artifact.bytes() == expected(dir.path(), &src, &inc),
        "the original source got the edited source's artifact ({})",
        again.outcome
    );
}

/// Case 4: a source edited after the compiler started and restored before the cache looked again
/// has its original content, but the compiler may have read the edit: only the ctime tells.
#[test]
fn a_source_edited_and_restored_during_the_compile_is_not_published() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gxx = Gxx::new(dir.path());
    let (src, inc, spec) = project(dir.path());
    let original = std::fs::read(&src).expect("read source");
    let cache = gxx.cache(&dir.path().join("cache"));
    gxx.set("hold-before", true);
    gxx.set("hold-after", true);
    std::thread::scope(|s| {
        let build = s.spawn(|| cache.get_or_build(&spec));
        assert_eq!(gxx.wait_started(), "before");
        std::fs::write(&src, "#include \"tile.cuh\"\nint k = VALUE + 40;\n").expect("edit source");
        gxx.set("hold-before", false);
        gxx.go();
        assert_eq!(
            gxx.wait_started(),
            "after",
            "the compiler read the edited source"
        );
        std::fs::write(&src, &original).expect("restore the source");
        gxx.set("hold-after", false);
        gxx.go();
        build.join().expect("builder thread").expect("build");
    });
    let again = gxx
        .cache(&dir.path().join("cache"))
        .get_or_build(&spec)
        .expect("request for the original source");
    assert!(
        again.artifact.bytes() == expected(dir.path(), &src, &inc),
        "the edited source's artifact was published under the original's key ({})",
        again.outcome
    );
}

/// Case 8: a compiler killed by a signal (the OOM killer) is not the source's fault: nothing is
/// recorded, and the next request compiles again.
#[test]
fn a_compiler_killed_by_a_signal_is_never_recorded() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gxx = Gxx::new(dir.path());
    let (_, _, spec) = project(dir.path());
    let cache = gxx.cache(&dir.path().join("cache"));
    gxx.set("kill", true);
    let err = cache.get_or_build(&spec).expect_err("killed compile");
    let failure = err.compile_failure().expect("a compile failure");
    assert_eq!(failure.cause, FailureCause::Signal { signal: 9 }, "{err}");
    let err = cache.get_or_build(&spec).expect_err("killed again");
    assert!(
        !err.compile_failure().expect("failure").from_record,
        "a killed compile was replayed from a record"
    );
    assert_eq!(gxx.compiles(), 2, "the second request compiled again");
    gxx.set("kill", false);
    cache
        .get_or_build(&spec)
        .expect("builds once nothing kills it");
}

/// Case 8: a timeout is not the source's fault either, and says so.
#[test]
fn a_compile_timeout_is_a_structured_error_and_never_recorded() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gxx = Gxx::new(dir.path());
    let (_, _, spec) = project(dir.path());
    let spec = spec.timeout(Duration::from_millis(300));
    let cache = gxx.cache(&dir.path().join("cache"));
    gxx.set("hang", true);
    for _ in 0..2 {
        let err = cache.get_or_build(&spec).expect_err("timed out");
        let failure = err.compile_failure().expect("a compile failure");
        assert_eq!(
            failure.cause,
            FailureCause::Timeout { after_ms: 300 },
            "{err}"
        );
        assert!(!failure.from_record, "a timeout is never replayed");
        assert!(err.to_string().contains("timeout"), "{err}");
    }
    // (No count of compiles here: under load the compiler may be killed before it logs one.
    // `from_record` on the second request is the proof that nothing was replayed.)
}

/// Case 8: the compiler failing to write into a full cache filesystem is the environment's
/// fault: the caller gets a working artifact, uncached, with a warning, and nothing is recorded.
#[test]
fn a_compile_that_cannot_write_into_the_cache_filesystem_compiles_privately() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gxx = Gxx::new(dir.path());
    let (src, inc, spec) = project(dir.path());
    let root = dir.path().join("cache");
    let cache = gxx.cache(&root);
    gxx.set_full(&root);
    let answer = cache.get_or_build(&spec).expect("a working artifact");
    assert!(answer.warning.is_some(), "uncached, with a warning");
    assert_eq!(answer.artifact.bytes(), expected(dir.path(), &src, &inc));
    assert!(
        std::fs::read_dir(root.join(jit_cache::FORMAT_DIR).join("failures"))
            .map(|d| d.count() == 0)
            .unwrap_or(true),
        "an environment failure is never recorded"
    );
    match cache.get_or_build(&spec) {
        Ok(again) => assert!(again.warning.is_some()),
        Err(Error::Compile(f)) => panic!("replayed as a compile failure: {f}"),
        Err(e) => panic!("{e}"),
    }
}
