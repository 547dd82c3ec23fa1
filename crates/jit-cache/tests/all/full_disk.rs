//! A cache root on a full filesystem: the build still returns a working artifact, with a warning.

use crate::support::*;
use fs_testbed::FsKind;
use jit_cache::{Cache, CacheOptions, KernelSpec};

#[test]
fn a_full_cache_filesystem_still_returns_a_working_artifact_with_a_warning() {
    fs_testbed::run_or_skip(FsKind::TinyTmpfs, |mount| {
        let root = mount.join("cache");
        let cache = Cache::open_with(
            &root,
            CacheOptions::default().nvcc(nvcc::Nvcc::at(real_nvcc()).expect("nvcc")),
        )
        .expect("open on the small tmpfs");
        // Fill the filesystem to the last byte.
        let filler = mount.join("filler");
        let mut file = std::fs::File::create(&filler).expect("create filler");
        let chunk = vec![0u8; 64 * 1024];
        loop {
            use std::io::Write;
            if file.write_all(&chunk).is_err() {
                break;
            }
        }
        let built = cache
            .get_or_build(&KernelSpec::from_text("full", "full.cu", kernel_text(6)))
            .expect("never fails");
        let warning = built
            .warning
            .clone()
            .expect("a warning says the cache could not be used");
        assert!(warning.contains("uncached"), "{warning}");
        assert_eq!(&built.artifact.bytes()[..4], b"\x7fELF", "a working cubin");
        assert_eq!(
            std::fs::read(built.artifact.path()).expect("its path works"),
            built.artifact.bytes()
        );
        let staging = std::fs::read_dir(root.join(jit_cache::FORMAT_DIR).join("staging"))
            .expect("staging")
            .count();
        assert_eq!(staging, 0, "no staging left behind on the full filesystem");
    });
}

/// Fills the filesystem at `mount` to the last byte.
fn fill(mount: &std::path::Path) {
    let mut file = std::fs::File::create(mount.join("filler")).expect("create filler");
    let chunk = vec![0u8; 64 * 1024];
    while std::io::Write::write_all(&mut file, &chunk).is_ok() {}
}

/// Issue 20, class 8: a compiler that says "disk full" in another language. The earlier main
/// matched English messages only, recorded this as the source's own failure and replayed it
/// after the disk had room again. The evidence now is the filesystem the compile wrote.
#[test]
fn a_full_disk_told_in_german_is_the_environments_failure_never_replayed() {
    fs_testbed::run_or_skip(FsKind::TinyTmpfs, |mount| {
        let dir = tempfile::tempdir().expect("temp dir");
        let gxx = crate::gxx::Gxx::new(dir.path());
        let root = mount.join("cache");
        let cache = gxx.cache(&root);
        let source = dir.path().join("full_de.cu");
        std::fs::write(&source, kernel_text(8)).expect("write the source (on a healthy disk)");
        let spec = KernelSpec::from_file(&source);
        // The root's directories exist; then the disk fills, and the compile fails saying so in
        // German.
        cache.stats().expect("the root is usable");
        fill(mount);
        gxx.set_full_in_german();
        let first = cache.get_or_build(&spec);
        match &first {
            Err(jit_cache::Error::Compile(f)) => assert!(
                matches!(f.cause, jit_cache::FailureCause::Environment { .. }),
                "the environment's failure, by the filesystem's state: {:?}",
                f.cause
            ),
            Ok(answer) => assert!(answer.warning.is_some(), "uncached"),
            Err(e) => panic!("{e}"),
        }
        assert!(
            std::fs::read_dir(root.join(jit_cache::FORMAT_DIR).join("failures"))
                .map(|d| d.count() == 0)
                .unwrap_or(true),
            "an environment failure is never recorded"
        );
        // Room again: the next request compiles (nothing replayed).
        std::fs::remove_file(mount.join("filler")).expect("free the disk");
        let again = cache
            .get_or_build(&spec)
            .expect("compiles once the disk has room");
        assert!(again.warning.is_none(), "cached: {:?}", again.warning);
    });
}
