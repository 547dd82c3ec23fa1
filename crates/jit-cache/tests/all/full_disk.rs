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
