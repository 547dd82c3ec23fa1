//! The demo's flow on every real filesystem: build the example kernels cold, hit them, edit the
//! shared header and see exactly the kernel that includes it rebuilt with the header named, then
//! verify the cache and check that durable-fs leaves nothing behind. Loop-mounted filesystems are
//! mounted inside a private mount namespace (fs-testbed); under `cargo xtask test` a skip fails.

use fs_testbed::FsKind;
use jit_cache::{Cache, CacheOptions, KernelSpec, Outcome};
use std::path::{Path, PathBuf};

fn nvcc() -> nvcc::Nvcc {
    match std::env::var_os("NVCC") {
        Some(path) => nvcc::Nvcc::at(PathBuf::from(path)).expect("NVCC names a usable nvcc"),
        None => nvcc::Nvcc::locate().expect("the real nvcc: run `cargo xtask setup` or set NVCC"),
    }
}

fn copy_examples(to: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kernels");
    std::fs::create_dir_all(to.join("include")).expect("mkdir");
    for sub in ["", "include"] {
        for entry in std::fs::read_dir(from.join(sub))
            .expect("read examples")
            .flatten()
        {
            if entry.file_type().expect("type").is_file() {
                std::fs::copy(entry.path(), to.join(sub).join(entry.file_name()))
                    .expect("copy example");
            }
        }
    }
}

fn demo_flow_on(kind: FsKind) {
    let compiler = nvcc();
    fs_testbed::run_or_skip(kind, |root| {
        let kernels = root.join("kernels");
        copy_examples(&kernels);
        let specs: Vec<KernelSpec> = ["vector_add", "reduce_sum", "gemm_f16"]
            .iter()
            .map(|k| {
                KernelSpec::from_file(kernels.join(format!("{k}.cu")))
                    .include_dir(kernels.join("include"))
            })
            .collect();
        let open = || {
            Cache::open_with(
                root.join("cache"),
                CacheOptions::default().nvcc(compiler.clone()),
            )
            .expect("open cache")
        };
        let cold = open().build_many(&specs, None, &|_| {});
        for (spec, built) in specs.iter().zip(&cold) {
            let built = built.as_ref().expect("cold build");
            assert_eq!(
                built.outcome,
                Outcome::Built,
                "{}: {} cold",
                kind.name(),
                spec.name
            );
            assert!(
                built.warning.is_none(),
                "{}: cached, not a fallback: {:?}",
                kind.name(),
                built.warning
            );
        }
        for spec in &specs {
            assert_eq!(
                open().get_or_build(spec).expect("warm").outcome,
                Outcome::Hit,
                "{}: {} warm",
                kind.name(),
                spec.name
            );
        }
        let header = kernels.join("include/tile.cuh");
        let text = std::fs::read_to_string(&header).expect("read header");
        durable_fs::put(
            &header,
            text.replace("#define TILE 16", "#define TILE 32")
                .as_bytes(),
        )
        .expect("edit header durably");
        let cache = open();
        for spec in &specs {
            let outcome = cache.get_or_build(spec).expect("after edit").outcome;
            if spec.name == "gemm_f16" {
                match outcome {
                    Outcome::Rebuilt { reasons } => assert!(
                        reasons
                            .iter()
                            .any(|r| r.to_string().contains("header `tile.cuh` changed")),
                        "{}: the reason names the header: {reasons:?}",
                        kind.name()
                    ),
                    other => panic!("{}: gemm_f16 must be rebuilt, got {other:?}", kind.name()),
                }
            } else {
                assert_eq!(
                    outcome,
                    Outcome::Hit,
                    "{}: {} does not include the header",
                    kind.name(),
                    spec.name
                );
            }
        }
        let report = cache.verify().expect("verify");
        assert!(
            report.corrupt.is_empty(),
            "{}: nothing corrupt: {:?}",
            kind.name(),
            report.corrupt
        );
        assert_eq!(
            report.checked,
            4,
            "{}: three kernels plus gemm's second variant",
            kind.name()
        );
        let leftovers: Vec<PathBuf> = std::fs::read_dir(
            root.join("cache")
                .join(jit_cache::FORMAT_DIR)
                .join("staging"),
        )
        .expect("staging")
        .flatten()
        .map(|e| e.path())
        .collect();
        assert!(
            leftovers.is_empty(),
            "{}: no staging left by finished builds: {leftovers:?}",
            kind.name()
        );
        let temps: Vec<_> = std::fs::read_dir(kernels.join("include"))
            .expect("include")
            .flatten()
            .filter(|e| durable_fs::is_temp_name(&e.file_name()))
            .collect();
        assert!(
            temps.is_empty(),
            "{}: put left no temp beside the header",
            kind.name()
        );
    });
}

#[test]
fn heavy_demo_flow_on_the_default_temp_dir() {
    demo_flow_on(FsKind::DefaultTmp);
}

#[test]
fn heavy_demo_flow_on_ext4() {
    demo_flow_on(FsKind::Ext4);
}

#[test]
fn heavy_demo_flow_on_xfs_with_4k_sectors() {
    demo_flow_on(FsKind::Xfs4k);
}

#[test]
fn heavy_demo_flow_on_btrfs() {
    demo_flow_on(FsKind::Btrfs);
}

#[test]
fn heavy_demo_flow_on_tmpfs() {
    demo_flow_on(FsKind::Tmpfs);
}
