//! Shared helpers: the real compiler, kernels, projects and caches.

use jit_cache::{Cache, CacheOptions, KernelSpec};
use std::path::{Path, PathBuf};

/// The real nvcc: `NVCC`, else the project's venv (what `cargo xtask setup` creates).
pub fn real_nvcc() -> PathBuf {
    if let Some(path) = std::env::var_os("NVCC") {
        return PathBuf::from(path);
    }
    nvcc::Nvcc::locate()
        .expect("these tests need the real nvcc: run `cargo xtask setup` or set NVCC")
        .path()
        .to_path_buf()
}

/// The host's `g++` as the shell finds it on `PATH` (what nvcc runs by default), for wrappers
/// that `-ccbin` names.
pub fn host_gxx() -> String {
    let found = std::process::Command::new("sh")
        .args(["-c", "command -v g++"])
        .output()
        .expect("find g++");
    let gxx = String::from_utf8_lossy(&found.stdout).trim().to_string();
    assert!(!gxx.is_empty(), "g++ is on PATH");
    gxx
}

/// A small, valid kernel whose code depends on `n`, so each `n` is a distinct artifact.
pub fn kernel_text(n: usize) -> String {
    format!("extern \"C\" __global__ void k{n}(float* x) {{ x[threadIdx.x] = x[threadIdx.x] * {n}.0f + 1.0f; }}\n")
}

/// Writes a project: `src/k.cu` including `tile.cuh` from `include/`, plus an unrelated header.
pub fn write_project(root: &Path, header_value: u32) -> (PathBuf, PathBuf) {
    let src = root.join("src");
    let inc = root.join("include");
    std::fs::create_dir_all(&src).expect("mkdir src");
    std::fs::create_dir_all(&inc).expect("mkdir include");
    std::fs::write(
        src.join("k.cu"),
        "#include \"tile.cuh\"\nextern \"C\" __global__ void k(float* x) { x[threadIdx.x] = TILE_VALUE; }\n",
    )
    .expect("write source");
    std::fs::write(
        inc.join("tile.cuh"),
        format!("#define TILE_VALUE {header_value}.0f\n"),
    )
    .expect("write header");
    std::fs::write(inc.join("unrelated.cuh"), "#define UNUSED 1\n")
        .expect("write unrelated header");
    (src.join("k.cu"), inc)
}

pub fn project_spec(source: &Path, include: &Path) -> KernelSpec {
    KernelSpec::from_file(source).include_dir(include)
}

/// A cache in a fresh root under `dir`, with the real compiler.
pub fn open_cache(dir: &Path) -> Cache {
    Cache::open_with(
        dir.join("cache"),
        CacheOptions::default().nvcc(nvcc::Nvcc::at(real_nvcc()).expect("nvcc")),
    )
    .expect("open cache")
}

/// Sets a file's mtime (seconds since the epoch), to forge timestamps instead of waiting.
pub fn set_mtime(path: &Path, secs: i64) {
    let stamp = rustix::fs::Timespec {
        tv_sec: secs,
        tv_nsec: 0,
    };
    let times = rustix::fs::Timestamps {
        last_access: stamp,
        last_modification: stamp,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        path,
        &times,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .expect("set times");
}

pub fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod script");
}

/// The artifact of an uncached compile by the real nvcc, for comparing with the cache's answer.
pub fn uncached_cubin(cwd: &Path, source: &Path, args: &[&str]) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("k.cubin");
    let status = std::process::Command::new(real_nvcc())
        .current_dir(cwd)
        .args(["-cubin", "-arch=sm_90"])
        .args(args)
        .arg("-o")
        .arg(&out)
        .arg(source)
        .status()
        .expect("run nvcc");
    assert!(
        status.success(),
        "uncached nvcc compile of {}",
        source.display()
    );
    std::fs::read(&out).expect("read uncached cubin")
}
