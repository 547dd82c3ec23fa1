//! DeepGEMM's JIT through the launcher, by its own command lines (`csrc/jit/compiler.hpp` in
//! deepseek-ai/DeepGEMM): every kernel is written into a fresh `<cache>/tmp/<uuid>/kernel.cu`
//! and compiled as `cd <cache>/tmp && $DG_JIT_NVCC_COMPILER <uuid>/kernel.cu -cubin -o
//! <uuid>/kernel.cubin <flags>` (paths absolute), with `DG_JIT_NVCC_COMPILER` a symlink named
//! `nvcc` to `jit-cache`. The headers have DeepGEMM's shape: an include tree under `-I<lib>`,
//! a device assert macro spelled with `__FILE__`, libcu++ and `<cassert>`.
//!
//! The same kernel in another uuid directory, or on another host through a fleet tier, is the
//! same request when its output cannot name its directory, and every answer is byte for byte
//! what bare nvcc writes in that directory; a kernel whose output names its source
//! (`__FILE__`, a macro reaching it, `-lineinfo`, an anonymous namespace, a header beside it)
//! is compiled for its own directory.

use crate::launcher::run_ok;
use crate::support::{real_nvcc, CountingCompiler};
use std::path::{Path, PathBuf};
use std::process::Command;

const LAUNCHER: &str = env!("CARGO_BIN_EXE_jit-cache");

/// DeepGEMM's flags (`Compiler()` and `NVCCCompiler()`), for `sm_90a`.
fn flags(lib_include: &Path) -> Vec<String> {
    let mut flags: Vec<String> = [
        "-std=c++20",
        "--diag-suppress=39,161,174,177,186,940",
        "--ptxas-options=--register-usage-level=10",
    ]
    .map(String::from)
    .to_vec();
    flags.push(format!("-I{}", lib_include.display()));
    flags.extend(
        [
            "--gpu-architecture=sm_90a",
            "--compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,-Wno-abi",
            "-O3",
            "--expt-relaxed-constexpr",
            "--expt-extended-lambda",
        ]
        .map(String::from),
    );
    flags
}

const EXCEPTION_CUH: &str = r#"#pragma once
#include <cuda/std/cstdint>
#include <cassert>

#ifndef DG_DEVICE_ASSERT
#define DG_DEVICE_ASSERT(cond) \
do { \
    if (not (cond)) { \
        printf("Assertion failed: %s:%d, condition: %s\n", __FILE__, __LINE__, #cond); \
        asm("trap;"); \
    } \
} while (0)
#endif
"#;

const GEMM_CUH: &str = r#"#pragma once
#include <deep_gemm/common/exception.cuh>

namespace deep_gemm {
template <uint32_t BLOCK_M, uint32_t BLOCK_N, bool kSwap>
__global__ void __launch_bounds__(128, 1) sm90_gemm_impl(float *d, const float *a, uint32_t m) {
    DG_DEVICE_ASSERT(m % BLOCK_M == 0);
    assert(d != nullptr);
    const uint32_t i = blockIdx.x * BLOCK_N + threadIdx.x;
    d[i] = kSwap ? a[i] * BLOCK_M : a[i] + BLOCK_N;
}
}
"#;

/// A kernel source as DeepGEMM generates it.
fn kernel_cu(block_m: u32, body_extra: &str) -> String {
    format!(
        "\n#include <deep_gemm/impls/sm90_gemm.cuh>\n\nusing namespace deep_gemm;\n{body_extra}\n\
         static void __instantiate_kernel() {{\n    auto ptr = reinterpret_cast<void*>(&sm90_gemm_impl<\n        {block_m}, 128, true\n    >);\n}};\n"
    )
}

/// A DeepGEMM cache directory, its library's headers, the launcher as `DG_JIT_NVCC_COMPILER`,
/// and a counting compiler as the real nvcc.
struct DeepGemm {
    _dir: tempfile::TempDir,
    lib_include: PathBuf,
    dg_cache: PathBuf,
    nvcc_link: PathBuf,
    counter: CountingCompiler,
    jit_cache: PathBuf,
}

impl DeepGemm {
    fn new() -> DeepGemm {
        let dir = tempfile::tempdir().expect("temp dir");
        let lib_include = dir.path().join("site-packages/deep_gemm/include");
        let common = lib_include.join("deep_gemm/common");
        let impls = lib_include.join("deep_gemm/impls");
        std::fs::create_dir_all(&common).expect("mkdir common");
        std::fs::create_dir_all(&impls).expect("mkdir impls");
        std::fs::write(common.join("exception.cuh"), EXCEPTION_CUH).expect("write header");
        std::fs::write(impls.join("sm90_gemm.cuh"), GEMM_CUH).expect("write header");
        let bin = dir.path().join("launcher-bin");
        std::fs::create_dir_all(&bin).expect("mkdir bin");
        let nvcc_link = bin.join("nvcc");
        std::os::unix::fs::symlink(LAUNCHER, &nvcc_link).expect("symlink nvcc -> jit-cache");
        let counter = CountingCompiler::new(dir.path());
        DeepGemm {
            lib_include,
            dg_cache: dir.path().join("dot-deep_gemm"),
            nvcc_link,
            counter,
            jit_cache: dir.path().join("jit-cache"),
            _dir: dir,
        }
    }

    /// Writes `source` into `<cache>/tmp/<uuid>/kernel.cu` as DeepGEMM's `put` does.
    fn write_kernel(&self, uuid: &str, source: &str) -> PathBuf {
        let dir = self.dg_cache.join("tmp").join(uuid);
        std::fs::create_dir_all(&dir).expect("mkdir uuid dir");
        std::fs::write(dir.join("kernel.cu"), source).expect("write kernel.cu");
        dir
    }

    /// DeepGEMM's compile command with `compiler`, run in `<cache>/tmp`; returns the cubin.
    fn compile_with(&self, compiler: &Command, uuid: &str, extra: &[&str]) -> Vec<u8> {
        let dir = self.dg_cache.join("tmp").join(uuid);
        let cubin = dir.join("kernel.cubin");
        let _ = std::fs::remove_file(&cubin);
        let mut cmd = Command::new(compiler.get_program());
        cmd.envs(
            compiler
                .get_envs()
                .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))),
        );
        cmd.current_dir(self.dg_cache.join("tmp"))
            .arg(dir.join("kernel.cu"))
            .arg("-cubin")
            .arg("-o")
            .arg(&cubin)
            .args(flags(&self.lib_include))
            .args(extra);
        run_ok(&mut cmd, &format!("DeepGEMM compile in {uuid}"));
        std::fs::read(&cubin).expect("read kernel.cubin")
    }

    /// Through the launcher (`DG_JIT_NVCC_COMPILER`), with the fleet settings in `env`.
    fn launcher(&self, root: &Path, env: &[(&str, String)]) -> Command {
        let mut cmd = Command::new(&self.nvcc_link);
        cmd.env("JIT_CACHE_DIR", root)
            .env("NVCC", &self.counter.path)
            .env_remove("JIT_CACHE_REMOTE")
            .env_remove("NVCC_APPEND_FLAGS")
            .env_remove("NVCC_PREPEND_FLAGS");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Bare nvcc, as DeepGEMM runs it without the cache.
    fn bare(&self) -> Command {
        Command::new(real_nvcc())
    }
}

#[test]
fn heavy_deepgemm_kernels_in_fresh_uuid_directories_are_hits_equal_to_bare_nvcc() {
    let dg = DeepGemm::new();
    let source = kernel_cu(64, "");
    let launcher = dg.launcher(&dg.jit_cache, &[]);
    let uuids: Vec<String> = (0..20)
        .map(|n| {
            format!(
                "{:08x}-7c1e-4b2a-9f00-{:012x}",
                0x5eed_0000u32 + n,
                n * 7919
            )
        })
        .collect();
    let mut answers = Vec::new();
    for uuid in &uuids {
        dg.write_kernel(uuid, &source);
        answers.push(dg.compile_with(&launcher, uuid, &[]));
    }
    assert_eq!(
        dg.counter.compiles(),
        1,
        "one kernel in 20 uuid directories compiles once: 19 of 20 are hits"
    );
    // Bare nvcc in the first and the last directory: every answer is what it writes there.
    for uuid in [&uuids[0], &uuids[19]] {
        let bare = dg.compile_with(&dg.bare(), uuid, &[]);
        for (n, answer) in answers.iter().enumerate() {
            assert!(
                *answer == bare,
                "answer {n} equals bare nvcc's cubin in {uuid}"
            );
        }
    }
    // Another kernel (other template arguments) is another request.
    dg.write_kernel("other", &kernel_cu(128, ""));
    dg.compile_with(&launcher, "other", &[]);
    assert_eq!(dg.counter.compiles(), 2, "another kernel compiles");
}

#[test]
fn heavy_a_deepgemm_kernel_whose_output_names_its_directory_is_compiled_for_each() {
    let dg = DeepGemm::new();
    let launcher = dg.launcher(&dg.jit_cache, &[]);
    // (what the kernel does, its source's extra text, extra flags, whether the outputs of two
    // directories differ under bare nvcc)
    let cases: &[(&str, &str, &[&str], bool)] = &[
        (
            "__FILE__ in the source",
            "__global__ void where(const char **out) { *out = __FILE__; }",
            &[],
            true,
        ),
        (
            "a header's macro reaching __FILE__, used in the source",
            "__global__ void check(int m) { DG_DEVICE_ASSERT(m > 1); }",
            &[],
            true,
        ),
        (
            "__FILE__ folded into a constant (no path in the bytes: only the text says so)",
            "constexpr unsigned fnv(const char *s, unsigned h = 2166136261u) {\n\
             return *s ? fnv(s + 1, (h ^ (unsigned char)*s) * 16777619u) : h; }\n\
             __global__ void hashed(unsigned *out) { *out = fnv(__FILE__); }",
            &[],
            true,
        ),
        (
            "an anonymous namespace (nvcc's module id names the source's path)",
            "namespace { __global__ void local(int *p) { *p = 7; } }\nvoid *keep = (void *)&local;",
            &[],
            true,
        ),
        (
            "DG_JIT_WITH_LINEINFO's flags",
            "__global__ void lined(int *p) { *p = 8; }",
            &["-Xcompiler", "-rdynamic", "-lineinfo"],
            true,
        ),
        (
            "a header beside the source",
            "#include \"beside.cuh\"\n__global__ void near(int *p) { *p = BESIDE; }",
            &[],
            false,
        ),
    ];
    for (n, (what, extra, flags, differ)) in cases.iter().enumerate() {
        let source = kernel_cu(64 + n as u32, extra);
        let mut answers = Vec::new();
        let mut bares = Vec::new();
        for side in ["a", "b"] {
            let uuid = format!("case{n}-{side}");
            let dir = dg.write_kernel(&uuid, &source);
            std::fs::write(dir.join("beside.cuh"), "#define BESIDE 5\n").expect("write beside");
            answers.push(dg.compile_with(&launcher, &uuid, flags));
            bares.push(dg.compile_with(&dg.bare(), &uuid, flags));
        }
        assert_eq!(
            dg.counter.compiles(),
            2 * (n + 1),
            "{what}: each directory compiles its own"
        );
        if *differ {
            assert!(
                bares[0] != bares[1],
                "{what}: bare nvcc's outputs differ between directories (the case tests something)"
            );
        }
        for side in 0..2 {
            assert!(
                answers[side] == bares[side],
                "{what}: the answer in directory {side} is bare nvcc's there"
            );
        }
    }
}

/// Two hosts of a fleet: host A compiles in its uuid directory, host B (its own cache root) gets
/// the kernel for another uuid directory from the tier, compiling nothing.
fn uuid_directories_are_served_across_hosts(env: &[(&str, String)]) {
    let dg = DeepGemm::new();
    let source = kernel_cu(64, "");
    dg.write_kernel("host-a-1b6f", &source);
    dg.write_kernel("host-b-93d0", &source);
    let host_a = dg.launcher(&dg.jit_cache.join("host-a"), env);
    let host_b = dg.launcher(&dg.jit_cache.join("host-b"), env);
    let a = dg.compile_with(&host_a, "host-a-1b6f", &[]);
    assert_eq!(dg.counter.compiles(), 1, "host A compiles");
    let b = dg.compile_with(&host_b, "host-b-93d0", &[]);
    assert_eq!(
        dg.counter.compiles(),
        1,
        "host B's kernel in another uuid directory comes from the tier"
    );
    let bare = dg.compile_with(&dg.bare(), "host-b-93d0", &[]);
    assert!(a == bare && b == bare, "both answers are bare nvcc's cubin");
    let stats = crate::support::cli(&dg.jit_cache.join("host-b"), &dg.counter.path)
        .args(["stats"])
        .output()
        .expect("stats");
    let stats = String::from_utf8_lossy(&stats.stdout);
    assert!(stats.contains("fetched"), "host B counts a fetch: {stats}");
}

#[test]
fn heavy_deepgemm_uuid_directories_are_served_across_hosts_through_redis() {
    let dir = tempfile::tempdir().expect("temp dir for redis");
    let server = jit_cache_redis::test_server::RedisServer::start(dir.path(), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    uuid_directories_are_served_across_hosts(&[
        ("JIT_CACHE_REMOTE", server.url()),
        ("JIT_CACHE_REMOTE_CONNECT_TIMEOUT_MS", "2000".into()),
        ("JIT_CACHE_REMOTE_IO_TIMEOUT_MS", "10000".into()),
    ]);
}

#[test]
fn heavy_deepgemm_uuid_directories_are_served_across_hosts_through_s3() {
    let dir = tempfile::tempdir().expect("temp dir for weed");
    let weed =
        jit_cache_s3::test_server::WeedServer::start(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let mut env = weed.env(weed.admin());
    env.push(("JIT_CACHE_REMOTE_CONNECT_TIMEOUT_MS", "2000".into()));
    env.push(("JIT_CACHE_REMOTE_IO_TIMEOUT_MS", "10000".into()));
    uuid_directories_are_served_across_hosts(&env);
}
