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

/// Issue 31, item 4: a `Producer::write` that fails half-way (ENOSPC) left its partial file in
/// staging, and a later `commit` (once the disk had room again) published it as a whole,
/// verified entry. A failed write now poisons the producer: the commit is refused and nothing
/// is published.
#[test]
fn a_write_that_failed_half_way_is_never_committed() {
    fs_testbed::run_or_skip(FsKind::TinyTmpfs, |mount| {
        let store = jit_cache::store::Store::open(mount.join("cache")).expect("open store");
        let triton = jit_cache::store::Namespace::new("triton").expect("namespace");
        let producer = match store
            .begin(&triton, "k", std::time::Duration::from_secs(60))
            .expect("begin")
        {
            jit_cache::store::Claim::Produce(producer) => producer,
            jit_cache::store::Claim::Ready(_) => panic!("nothing is published yet"),
        };
        // Fill the disk, then give back 64 KiB: a 512 KiB write stops part of the way.
        fill(mount);
        let filler = mount.join("filler");
        let len = std::fs::metadata(&filler).expect("filler").len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&filler)
            .and_then(|f| f.set_len(len - 64 * 1024))
            .expect("free 64 KiB");
        let failed = producer.write("big.cubin", &vec![7u8; 512 * 1024]);
        assert!(failed.is_err(), "the write ran out of space");
        // The disk has room again: the commit must still refuse what was half written.
        std::fs::remove_file(&filler).expect("free the disk");
        let committed = producer.commit();
        assert!(
            committed.is_err(),
            "a producer whose write failed commits nothing, got {committed:?}"
        );
        assert!(
            store.get(&triton, "k").expect("get").is_none(),
            "no partial entry is published"
        );
    });
}
