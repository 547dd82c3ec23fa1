//! The suite's hosts: caches in roots of their own with the real nvcc, remotes with a short
//! lease (tests kill holders), kernels whose compiled bytes are deterministic, and the checks
//! the fault tests share.

use crate::conformance::server::{TestServer, Timeouts};
use jit_cache::{
    Cache, CacheOptions, KernelSpec, Outcome, Remote, RemoteMode, RemotePolicy, RemoteTier,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The real nvcc: `NVCC`, else the project's venv (what `cargo xtask setup` creates).
///
/// # Panics
/// When there is none.
pub fn real_nvcc() -> PathBuf {
    if let Some(path) = std::env::var_os("NVCC") {
        return PathBuf::from(path);
    }
    nvcc::Nvcc::locate()
        .expect("these tests need the real nvcc: run `cargo xtask setup` or set NVCC")
        .path()
        .to_path_buf()
}

/// A remote on `tier` in `mode`, with a short lease (tests kill holders) and a long wait.
pub fn remote_on(tier: impl RemoteTier + 'static, mode: RemoteMode) -> Remote {
    Remote::new(tier).with_policy(
        RemotePolicy::default()
            .mode(mode)
            .lease_ttl(Duration::from_secs(3))
            .lease_wait(Duration::from_secs(120)),
    )
}

/// A remote on `server` as the identity that may do everything, with
/// [`Timeouts::Generous`]: these tests are about sharing and coordination.
pub fn remote<S: TestServer>(server: &S, mode: RemoteMode) -> Remote {
    remote_on(server.tier(Timeouts::Generous), mode)
}

/// A "host": a cache in its own root with its own remote state.
///
/// # Panics
/// When the cache cannot open.
pub fn host(root: &Path, remote: Option<Remote>) -> Cache {
    let mut options =
        CacheOptions::default().nvcc(nvcc::Nvcc::at(real_nvcc()).expect("nvcc at NVCC"));
    if let Some(remote) = remote {
        options = options.remote(remote);
    }
    Cache::open_with(root, options).expect("open cache")
}

/// A kernel whose code depends on `n`, without internal-linkage symbols (nvcc's output is then
/// byte-deterministic).
pub fn kernel(n: usize) -> KernelSpec {
    KernelSpec::from_text(
        format!("k{n}"),
        format!("k{n}.cu"),
        format!(
            "extern \"C\" __global__ void k{n}(float* x) {{ x[threadIdx.x] = x[threadIdx.x] * {n}.0f + 1.0f; }}\n"
        ),
    )
}

/// A project in `dir`: `src/k.cu` including `tile.cuh` from `include/`, whose content is `value`.
///
/// # Panics
/// When the files cannot be written.
pub fn project(dir: &Path, value: u32) -> KernelSpec {
    let src = dir.join("src");
    let inc = dir.join("include");
    std::fs::create_dir_all(&src).expect("mkdir src");
    std::fs::create_dir_all(&inc).expect("mkdir include");
    std::fs::write(
        src.join("k.cu"),
        "#include \"tile.cuh\"\nextern \"C\" __global__ void tiled(float* x) { x[threadIdx.x] = TILE_VALUE; }\n",
    )
    .expect("write source");
    std::fs::write(
        inc.join("tile.cuh"),
        format!("#define TILE_VALUE {value}.0f\n"),
    )
    .expect("write header");
    KernelSpec::from_file(src.join("k.cu")).include_dir(inc)
}

/// The builds a root recorded (its event log): how many compiles it ran.
///
/// # Panics
/// When the stats cannot be read.
pub fn builds(cache: &Cache) -> usize {
    cache.stats().expect("stats").builds_recorded
}

/// What nvcc makes of `kernel(n)`'s text without any cache.
///
/// # Panics
/// When nvcc fails.
pub fn uncached(n: usize, dir: &Path) -> Vec<u8> {
    let source = dir.join(format!("k{n}.cu"));
    let output = dir.join(format!("k{n}.cubin"));
    if let jit_cache::Source::Text { text, .. } = &kernel(n).source {
        std::fs::write(&source, text).expect("write source");
    }
    let status = Command::new(real_nvcc())
        .args(["-cubin", "-arch", "sm_90", "-o"])
        .arg(&output)
        .arg(&source)
        .status()
        .expect("run nvcc");
    assert!(status.success(), "uncached nvcc of k{n}");
    std::fs::read(&output).expect("read uncached cubin")
}

/// Builds kernels `ns` on `cache` and checks each one compiled locally without a warning.
///
/// # Panics
/// When one did not.
pub fn all_built_locally(cache: &Cache, ns: &[usize]) {
    for &n in ns {
        let answer = cache
            .get_or_build(&kernel(n))
            .expect("a remote fault never fails a build");
        assert_eq!(answer.outcome, Outcome::Built, "k{n} compiled locally");
        assert!(answer.warning.is_none(), "{:?}", answer.warning);
    }
}

/// The one fault a process had: one error, a reason kept that `says` something, and builds done.
///
/// # Panics
/// When it had another number of errors, or no such reason.
pub fn one_fault(remote: &Remote, says: &str) {
    assert_eq!(
        remote.stats().errors,
        1,
        "the first failure turns the remote off: later kernels never try it"
    );
    let reason = remote.disabled_reason().expect("the reason is kept");
    assert!(reason.contains(says), "{reason}");
}
