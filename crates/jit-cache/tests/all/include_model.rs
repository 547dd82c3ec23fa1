//! The include model against the real nvcc (issue 12): the cache never returns an artifact built
//! from other inputs. Each test compares the cache's answer with an uncached compile of the same
//! request in the same state of the files.

use crate::support::*;
use jit_cache::{KernelSpec, Outcome};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

fn write(path: &Path, text: impl AsRef<[u8]>) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("create directories");
    }
    std::fs::write(path, text).expect("write file");
}

/// A kernel whose code is `VALUE`, defined by the headers it includes.
fn kernel(includes: &str) -> String {
    format!("{includes}\nextern \"C\" __global__ void k(float* x) {{ x[threadIdx.x] = VALUE; }}\n")
}

/// Case 1: two threads asking for the same source text with different `-I` directories must
/// never share one flight's artifact.
#[test]
fn heavy_one_flight_never_serves_a_request_with_another_search_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let trees: Vec<(PathBuf, PathBuf)> = (0..4)
        .map(|n| write_project(&dir.path().join(format!("t{n}")), n as u32 + 1))
        .collect();
    let expected: Vec<Vec<u8>> = trees
        .iter()
        .map(|(src, inc)| uncached_cubin(dir.path(), src, &[&format!("-I{}", inc.display())]))
        .collect();
    assert!(
        expected.windows(2).all(|w| w[0] != w[1]),
        "the trees' headers make different code"
    );
    let cache = open_cache(dir.path());
    let barrier = std::sync::Barrier::new(8);
    let got: Vec<(usize, Vec<u8>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let (src, inc) = &trees[i % 4];
                let (cache, barrier) = (&cache, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let answer = cache.get_or_build(&project_spec(src, inc)).expect("build");
                    (i % 4, answer.artifact.bytes().to_vec())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    for (tree, bytes) in got {
        assert!(
            bytes == expected[tree],
            "tree {tree} got the artifact of another tree's headers"
        );
    }
    // The same through build_many, in a fresh root.
    let batch = open_cache(&dir.path().join("batch"));
    let specs: Vec<KernelSpec> = trees.iter().map(|(s, i)| project_spec(s, i)).collect();
    for (tree, result) in batch
        .build_many(&specs, Some(4), &|_| {})
        .iter()
        .enumerate()
    {
        let answer = result.as_ref().expect("batch build");
        assert!(
            answer.artifact.bytes() == expected[tree],
            "build_many gave tree {tree} another tree's artifact"
        );
    }
}

/// Case 2: a header reached with `..` from the source belongs to the source's tree: checkout b
/// never gets checkout a's artifact, and a long-lived handle sees its edits.
#[test]
fn a_header_outside_the_search_path_is_relative_to_its_tree_and_checked_on_every_hit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = kernel("#include \"../common/p.cuh\"");
    for (tree, value) in [("a", 1), ("b", 2)] {
        write(&dir.path().join(tree).join("src/k.cu"), &text);
        write(
            &dir.path().join(tree).join("common/p.cuh"),
            format!("#define VALUE {value}.0f\n"),
        );
    }
    let (src_a, src_b) = (dir.path().join("a/src/k.cu"), dir.path().join("b/src/k.cu"));
    let cache = open_cache(dir.path());
    let a = cache
        .get_or_build(&KernelSpec::from_file(&src_a))
        .expect("a");
    assert_eq!(a.artifact.bytes(), uncached_cubin(dir.path(), &src_a, &[]));
    let b = open_cache(dir.path())
        .get_or_build(&KernelSpec::from_file(&src_b))
        .expect("b");
    assert!(
        b.artifact.bytes() == uncached_cubin(dir.path(), &src_b, &[]),
        "checkout b got checkout a's artifact ({})",
        b.outcome
    );
    write(&dir.path().join("a/common/p.cuh"), "#define VALUE 3.0f\n");
    let again = cache
        .get_or_build(&KernelSpec::from_file(&src_a))
        .expect("a again");
    assert!(
        again.artifact.bytes() == uncached_cubin(dir.path(), &src_a, &[]),
        "the long-lived handle missed the edit of ../common/p.cuh ({})",
        again.outcome
    );
}

/// Case 2: every search-path flag nvcc accepts, given through `flags`, enters the search path.
#[test]
fn search_path_flags_given_as_flags_are_followed_in_every_spelling() {
    type Form = fn(&Path) -> Vec<String>;
    let forms: [(&str, Form); 5] = [
        ("-I", |inc| vec![format!("-I{}", inc.display())]),
        ("--include-path", |inc| {
            vec![format!("--include-path={}", inc.display())]
        }),
        ("-isystem", |inc| {
            vec!["-isystem".into(), inc.display().to_string()]
        }),
        ("-Xcompiler -iquote", |inc| {
            vec![format!("-Xcompiler=-iquote,{}", inc.display())]
        }),
        ("-include", |inc| {
            vec![
                "-include".into(),
                inc.join("tile.cuh").display().to_string(),
            ]
        }),
    ];
    for (name, form) in forms {
        let dir = tempfile::tempdir().expect("temp dir");
        let include = if name == "-include" {
            ""
        } else {
            "#include \"tile.cuh\""
        };
        for (tree, value) in [("a", 1), ("b", 2)] {
            write(&dir.path().join(tree).join("src/k.cu"), kernel(include));
            write(
                &dir.path().join(tree).join("inc/tile.cuh"),
                format!("#define VALUE {value}.0f\n"),
            );
        }
        let cache = open_cache(dir.path());
        for tree in ["a", "b", "a"] {
            let src = dir.path().join(tree).join("src/k.cu");
            let flags = form(&dir.path().join(tree).join("inc"));
            let spec = flags
                .iter()
                .fold(KernelSpec::from_file(&src), |s, f| s.flag(f.clone()));
            let args: Vec<&str> = flags.iter().map(String::as_str).collect();
            let expected = uncached_cubin(dir.path(), &src, &args);
            for handle in [&cache, &open_cache(dir.path())] {
                let got = handle.get_or_build(&spec).expect("build");
                assert!(
                    got.artifact.bytes() == expected,
                    "{name}: tree {tree} got another tree's artifact ({})",
                    got.outcome
                );
            }
        }
        // An edit is seen by the long-lived handle.
        let src = dir.path().join("b/src/k.cu");
        let flags = form(&dir.path().join("b/inc"));
        write(&dir.path().join("b/inc/tile.cuh"), "#define VALUE 5.0f\n");
        let spec = flags
            .iter()
            .fold(KernelSpec::from_file(&src), |s, f| s.flag(f.clone()));
        let args: Vec<&str> = flags.iter().map(String::as_str).collect();
        let got = cache.get_or_build(&spec).expect("after the edit");
        assert!(
            got.artifact.bytes() == uncached_cubin(dir.path(), &src, &args),
            "{name}: the edit was missed ({})",
            got.outcome
        );
    }
}

/// Case 3: a header added in the including file's own directory, which GCC searches first for
/// `#include "x"`, must be seen (it is not a search-path directory).
#[test]
fn a_header_added_in_the_includers_directory_is_seen() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (src, inc, inc2) = (
        dir.path().join("src/k.cu"),
        dir.path().join("inc"),
        dir.path().join("inc2"),
    );
    write(&src, kernel("#include \"sub/tile.cuh\""));
    write(&inc.join("sub/tile.cuh"), "#include \"detail.cuh\"\n");
    write(&inc2.join("detail.cuh"), "#define VALUE 1.0f\n");
    let spec = KernelSpec::from_file(&src)
        .include_dir(&inc)
        .include_dir(&inc2);
    let args = [
        format!("-I{}", inc.display()),
        format!("-I{}", inc2.display()),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cache = open_cache(dir.path());
    assert_eq!(
        cache.get_or_build(&spec).expect("first").artifact.bytes(),
        uncached_cubin(dir.path(), &src, &args)
    );
    write(&inc.join("sub/detail.cuh"), "#define VALUE 2.0f\n");
    let expected = uncached_cubin(dir.path(), &src, &args);
    for handle in [&cache, &open_cache(dir.path())] {
        let got = handle
            .get_or_build(&spec)
            .expect("after adding sub/detail.cuh");
        assert!(
            got.artifact.bytes() == expected,
            "inc/sub/detail.cuh now shadows inc2/detail.cuh ({})",
            got.outcome
        );
    }
}

/// Case 3: an `-I` directory that now shadows a toolkit header is a change.
#[test]
fn a_project_header_that_shadows_a_toolkit_header_is_seen() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (src, inc) = (dir.path().join("src/k.cu"), dir.path().join("inc"));
    write(
        &src,
        kernel("#include <cuda_fp16.h>\n#ifdef SHADOWED\n#define VALUE 2.0f\n#else\n#define VALUE 1.0f\n#endif"),
    );
    std::fs::create_dir_all(&inc).expect("mkdir inc");
    let spec = KernelSpec::from_file(&src).include_dir(&inc);
    let arg = format!("-I{}", inc.display());
    let cache = open_cache(dir.path());
    cache.get_or_build(&spec).expect("first");
    write(&inc.join("cuda_fp16.h"), "#define SHADOWED 1\n");
    let expected = uncached_cubin(dir.path(), &src, &[&arg]);
    for handle in [&cache, &open_cache(dir.path())] {
        let got = handle
            .get_or_build(&spec)
            .expect("after shadowing cuda_fp16.h");
        assert!(
            got.artifact.bytes() == expected,
            "inc/cuda_fp16.h shadows the toolkit's ({})",
            got.outcome
        );
    }
}

/// Case 3: `#include_next` continues after the directory that resolved the current file; a header
/// added in a directory between is a change.
#[test]
fn include_next_sees_a_header_added_between() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("src/k.cu");
    let dirs: Vec<PathBuf> = ["inc1", "mid", "inc2"]
        .iter()
        .map(|d| dir.path().join(d))
        .collect();
    write(&src, kernel("#include <x.h>"));
    write(&dirs[0].join("x.h"), "#include_next <x.h>\n");
    write(&dirs[2].join("x.h"), "#define VALUE 2.0f\n");
    std::fs::create_dir_all(&dirs[1]).expect("mkdir mid");
    let spec = dirs
        .iter()
        .fold(KernelSpec::from_file(&src), |s, d| s.include_dir(d));
    let args: Vec<String> = dirs.iter().map(|d| format!("-I{}", d.display())).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cache = open_cache(dir.path());
    cache.get_or_build(&spec).expect("first");
    write(&dirs[1].join("x.h"), "#define VALUE 3.0f\n");
    let got = cache.get_or_build(&spec).expect("after adding mid/x.h");
    assert!(
        got.artifact.bytes() == uncached_cubin(dir.path(), &src, &args),
        "mid/x.h is next after inc1 ({})",
        got.outcome
    );
}

/// Case 5: a relative spec is resolved at the request; after a `chdir` the same spec is another
/// request and never gets the first tree's artifact.
#[test]
fn a_relative_spec_after_chdir_is_resolved_in_the_new_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    write_project(&a, 1);
    write_project(&b, 2);
    // The compiler is found before the working directory changes.
    std::env::set_var("NVCC", real_nvcc());
    let spec = KernelSpec::from_file("src/k.cu").include_dir("include");
    let expected = |root: &Path| uncached_cubin(root, Path::new("src/k.cu"), &["-Iinclude"]);
    let cache = open_cache(dir.path());
    for root in [&a, &b, &a] {
        std::env::set_current_dir(root).expect("chdir");
        let got = cache.get_or_build(&spec).expect("build");
        assert!(
            got.artifact.bytes() == expected(root),
            "after chdir to {} the answer came from another tree ({})",
            root.display(),
            got.outcome
        );
    }
    std::env::set_current_dir(dir.path()).expect("chdir back");
}

/// Case 6: `inc/link/../x.cuh` under a symlinked `inc/link` names the link target's neighbour,
/// as the kernel resolves it, not `inc/x.cuh`.
#[test]
fn dot_dot_after_a_symlink_is_resolved_as_the_kernel_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (src, inc) = (dir.path().join("src/k.cu"), dir.path().join("inc"));
    write(&src, kernel("#include <link/y.cuh>"));
    write(
        &dir.path().join("real/sub/y.cuh"),
        "#include \"../x.cuh\"\n",
    );
    write(&dir.path().join("real/x.cuh"), "#define VALUE 1.0f\n");
    write(&inc.join("x.cuh"), "#define VALUE 100.0f\n"); // the lexical neighbour
    std::os::unix::fs::symlink("../real/sub", inc.join("link")).expect("symlink");
    let spec = KernelSpec::from_file(&src).include_dir(&inc);
    let arg = format!("-I{}", inc.display());
    let cache = open_cache(dir.path());
    let first = cache.get_or_build(&spec).expect("first");
    assert_eq!(
        first.artifact.bytes(),
        uncached_cubin(dir.path(), &src, &[&arg])
    );
    write(&dir.path().join("real/x.cuh"), "#define VALUE 2.0f\n");
    let got = cache.get_or_build(&spec).expect("after editing real/x.cuh");
    assert!(
        got.artifact.bytes() == uncached_cubin(dir.path(), &src, &[&arg]),
        "the edit of the header the compiler read was missed ({})",
        got.outcome
    );
}

/// Case 6: paths are bytes: a header whose name is not UTF-8 builds and hits.
#[test]
fn a_header_whose_name_is_not_utf8_builds_and_hits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("src/k.cu");
    let mut text = b"#include \"h\xff.cuh\"\n".to_vec();
    text.extend_from_slice(kernel("").as_bytes());
    write(&src, text);
    let header = dir
        .path()
        .join("src")
        .join(std::ffi::OsStr::from_bytes(b"h\xff.cuh"));
    write(&header, "#define VALUE 1.0f\n");
    let cache = open_cache(dir.path());
    let spec = KernelSpec::from_file(&src);
    assert_eq!(
        cache.get_or_build(&spec).expect("build").outcome,
        Outcome::Built
    );
    assert_eq!(
        open_cache(dir.path())
            .get_or_build(&spec)
            .expect("hit")
            .outcome,
        Outcome::Hit
    );
    write(&header, "#define VALUE 2.0f\n");
    let got = cache.get_or_build(&spec).expect("rebuild");
    assert!(
        matches!(got.outcome, Outcome::Rebuilt { .. }),
        "{}",
        got.outcome
    );
    assert_eq!(got.artifact.bytes(), uncached_cubin(dir.path(), &src, &[]));
}

/// A `-ccbin` wrapper that compiles another kernel when the shell test `test` holds, the way a
/// site's wrapper picks flags by what it finds on disk. Builds through the cache (a build, then
/// a hit), lets `change` flip what the test finds, and checks that the next answer is a rebuild
/// with bare nvcc's bytes for the changed state.
fn a_wrapper_decision_is_recorded_and_its_change_rebuilds(
    dir: &Path,
    test: &str,
    change: impl FnOnce(),
) {
    let gxx = host_gxx();
    let wrapper = dir.join("bin/g++");
    std::fs::create_dir_all(wrapper.parent().expect("parent")).expect("mkdir bin");
    write_executable(
        &wrapper,
        &format!("#!/bin/sh\nif {test}; then exec {gxx} -DFEATURE \"$@\"; fi\nexec {gxx} \"$@\"\n"),
    );
    let src = dir.join("k.cu");
    write(
        &src,
        "extern \"C\" __global__ void k(float* x) {\n#ifdef FEATURE\n  x[0] = 2.0f;\n#else\n  x[0] = 3.0f;\n#endif\n}\n",
    );
    let ccbin = wrapper.display().to_string();
    let spec = KernelSpec::from_file(&src).flag("-ccbin").flag(&ccbin);
    let with = uncached_cubin(dir, &src, &["-ccbin", &ccbin]);
    let first = open_cache(dir).get_or_build(&spec).expect("build");
    assert_eq!(first.outcome, Outcome::Built, "{:?}", first.warning);
    assert_eq!(first.artifact.bytes(), with.as_slice());
    let hit = open_cache(dir).get_or_build(&spec).expect("hit");
    assert_eq!(hit.outcome, Outcome::Hit, "nothing changed: a hit");
    change();
    let without = uncached_cubin(dir, &src, &["-ccbin", &ccbin]);
    assert_ne!(with, without, "the wrapper's test decides the kernel");
    let got = open_cache(dir).get_or_build(&spec).expect("again");
    assert_ne!(got.outcome, Outcome::Hit, "{}", got.outcome);
    assert_eq!(got.artifact.bytes(), without.as_slice());
}

/// Issue 31, item 3: a lookup that found a directory is recorded. A `-ccbin` wrapper that
/// tests `[ -d DIR ]` compiles another kernel once DIR is gone: a hit after `rmdir` would be
/// stale (seen failing before the trace kept found directories: a hit with the old cubin).
#[test]
fn a_directory_a_ccbin_wrapper_tests_for_is_recorded_and_its_removal_rebuilds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let feature = dir.path().join("opt/feature");
    std::fs::create_dir_all(&feature).expect("mkdir feature");
    a_wrapper_decision_is_recorded_and_its_change_rebuilds(
        dir.path(),
        &format!("[ -d '{}' ]", feature.display()),
        || std::fs::remove_dir(&feature).expect("rmdir feature"),
    );
}

/// Issue 31, item 3: a lookup that found a symlink itself (an `lstat`, a wrapper's
/// `[ -L LINK ]`) was recorded nowhere, so replacing the link by a file gave a stale hit (seen
/// failing: a hit with the old cubin). The link is recorded with its target, and checked once
/// its directory changes.
#[test]
fn a_symlink_a_ccbin_wrapper_tests_for_is_recorded_and_its_replacement_rebuilds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("opt/feature.conf");
    std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir opt");
    write(&target, "on\n");
    let link = dir.path().join("opt/feature");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    // The link replaced by a file of the same content: `[ -L ]` is false then.
    a_wrapper_decision_is_recorded_and_its_change_rebuilds(
        dir.path(),
        &format!("[ -L '{}' ]", link.display()),
        || {
            std::fs::remove_file(&link).expect("remove the link");
            write(&link, "on\n");
        },
    );
}

/// Issue 31, item 3: `readlink` is traced. A wrapper that decides the kernel by a link's target
/// text (`readlink LINK`, never looking the target up) got a stale hit once the link pointed
/// elsewhere (seen failing with the trace's link records left out); the target is recorded.
#[test]
fn a_link_target_a_ccbin_wrapper_reads_is_recorded_and_its_change_rebuilds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let link = dir.path().join("opt/current");
    std::fs::create_dir_all(link.parent().expect("parent")).expect("mkdir opt");
    std::os::unix::fs::symlink("v2", &link).expect("symlink");
    // Pointed elsewhere (neither target exists: only the text decides).
    a_wrapper_decision_is_recorded_and_its_change_rebuilds(
        dir.path(),
        &format!("[ \"$(readlink '{}')\" = v2 ]", link.display()),
        || {
            std::fs::remove_file(&link).expect("remove the link");
            std::os::unix::fs::symlink("v3", &link).expect("symlink again");
        },
    );
}

/// Case 7: `-ccbin` enters the key as that compiler's identity (its content and version), not
/// the default's and not its path: the compiler replaced at the same path is another key, and
/// the same compiler at another path shares the entry.
#[test]
fn the_host_compiler_named_by_ccbin_is_in_the_key_by_identity() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gxx = host_gxx();
    let wrapper = |at: &Path, build: &str| {
        std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
        write_executable(
            at,
            &format!("#!/bin/sh\n# host compiler build {build}\nexec {gxx} \"$@\"\n"),
        );
    };
    let (one, two) = (dir.path().join("one/g++"), dir.path().join("two/g++"));
    wrapper(&one, "1");
    let src = dir.path().join("k.cu");
    write(&src, kernel_text(7));
    let spec = |ccbin: &Path| {
        KernelSpec::from_file(&src)
            .flag("-ccbin")
            .flag(ccbin.display().to_string())
    };
    let cache = open_cache(dir.path());
    assert_eq!(
        cache.get_or_build(&spec(&one)).expect("one").outcome,
        Outcome::Built
    );
    wrapper(&two, "1");
    assert_eq!(
        open_cache(dir.path())
            .get_or_build(&spec(&two))
            .expect("same compiler elsewhere")
            .outcome,
        Outcome::Hit,
        "the same compiler at another path is the same key"
    );
    wrapper(&one, "2");
    let replaced = open_cache(dir.path())
        .get_or_build(&spec(&one))
        .expect("replaced compiler");
    assert_ne!(
        replaced.outcome,
        Outcome::Hit,
        "a compiler replaced at the same path is another key"
    );
}
