//! Real pipelines through the launcher, unchanged: FlashInfer 0.7.2's own JIT (its
//! `FLASHINFER_NVCC_LAUNCHER`) and PyTorch's `torch.utils.cpp_extension` (its `PYTORCH_NVCC`),
//! driven by the scripts under `tests/fixtures/pipelines` with the Python of the venv that
//! `cargo xtask setup` installs (`target/pipelines-venv`, or `XTASK_PIPELINES_VENV`). Without
//! that venv these tests skip, except under `cargo xtask test`, where they fail.
//!
//! FlashInfer and PyTorch each build three times into the same paths: with bare nvcc (the
//! reference), through the launcher on an empty cache (every unit a miss), and through it again
//! after the build directory is wiped (every unit a hit). nvcc compiles are counted with a
//! wrapper compiler, named as the pipeline's nvcc. The launcher's objects equal the reference's
//! modulo cicc's module id, ninja records the same dependencies from the launcher's dependency
//! files, ninja has no work left, the library links and loads (on this machine without a GPU:
//! its functions are found, never called), and `jit-cache stats` counts no uncacheable command
//! and no fallback.
//!
//! TVM-FFI's `build_inline` (no launcher variable: it runs `$CUDA_HOME/bin/nvcc`) and torch's
//! `cpp_extension` without `PYTORCH_NVCC` build with `CUDA_HOME` a `jit-cache shim` and `NVCC`
//! unset, twice: after the build directory is wiped, `jit-cache stats` counts one compile and
//! one hit.
//!
//! CMake's separable compilation (`-rdc=true` units for two architectures, then a device link
//! the launcher is not asked to run) needs only cmake and ninja, so it runs everywhere: every
//! unit is a hit after `ninja -t clean`, and the device link accepts the launcher's objects.

use crate::launcher::{run_ok, same_modulo_module_id, tool};
use crate::support::{real_nvcc, CountingCompiler};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const LAUNCHER: &str = env!("CARGO_BIN_EXE_jit-cache");

/// The FlashInfer modules built (`flashinfer_jit.py` names them): one from a source FlashInfer
/// generates into its workspace, one from two of the package's own sources.
const FLASHINFER_MODULES: &[&str] = &["silu_and_mul", "page"];

/// The file `cargo xtask setup` writes in the venv once its install is complete.
const VENV_MARKER: &str = "xtask-pipelines.txt";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pipelines")
}

/// Whether a missing tool fails the test: under `cargo xtask test`.
fn required() -> bool {
    ["XTASK_TEST", "FS_TESTBED_REQUIRE"]
        .iter()
        .any(|var| std::env::var_os(var).is_some_and(|v| v == "1"))
}

/// The pipelines venv; `None` (said on stderr) when it is not installed, outside `cargo xtask
/// test`.
fn pipelines_venv(test: &str) -> Option<PathBuf> {
    let venv = std::env::var_os("XTASK_PIPELINES_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pipelines-venv")
        });
    if venv.join(VENV_MARKER).is_file() && venv.join("bin/python").is_file() {
        return Some(venv);
    }
    let why = format!(
        "no torch and FlashInfer venv at {} (run `cargo xtask setup`)",
        venv.display()
    );
    assert!(
        !required(),
        "{test}: {why} (XTASK_TEST=1: a missing tool fails, never skips)"
    );
    eprintln!("{test} skipped: {why}");
    None
}

/// The venv's `lib/python3.*/site-packages`.
fn site_packages(venv: &Path) -> PathBuf {
    std::fs::read_dir(venv.join("lib"))
        .expect("read the venv's lib directory")
        .flatten()
        .map(|entry| entry.path().join("site-packages"))
        .find(|dir| dir.is_dir())
        .expect("the venv has a site-packages directory")
}

/// The toolkit root of the real nvcc (`.../nvidia/cu13`): the pipelines' `CUDA_HOME`.
fn toolkit() -> PathBuf {
    let nvcc = real_nvcc();
    let root = nvcc
        .parent()
        .and_then(Path::parent)
        .expect("nvcc lies in a toolkit's bin directory")
        .to_path_buf();
    assert!(
        root.join("include/cuda_runtime.h").is_file(),
        "{} is a toolkit root with its headers",
        root.display()
    );
    root
}

/// A directory to link against on a machine without a driver: `libcudart.so` (the toolkit's)
/// and an empty `libcuda.so` (an empty linker script: the driver is only needed to run).
fn link_directory(dir: &Path) -> PathBuf {
    let libs = dir.join("cuda-libs");
    std::fs::create_dir_all(&libs).expect("create the link directory");
    std::os::unix::fs::symlink(
        toolkit().join("lib/libcudart.so.13"),
        libs.join("libcudart.so"),
    )
    .expect("link libcudart.so");
    std::fs::write(libs.join("libcuda.so"), "").expect("write an empty libcuda.so");
    libs
}

/// Runs a fixture script with the venv's Python and returns the JSON document it prints last.
fn run_script(mut cmd: Command, what: &str) -> Value {
    let started = Instant::now();
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: spawn: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{what}: {:.1}s", started.elapsed().as_secs_f64());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {stdout}"))
}

/// A command running `script` with the venv's Python and the environment both pipelines share.
fn python(venv: &Path, script: &str, cache: &Path) -> Command {
    let mut cmd = Command::new(venv.join("bin/python"));
    // No `__pycache__` in the source tree (the scripts import `ninja_report.py`).
    cmd.arg(fixtures().join(script))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("CUDA_HOME", toolkit())
        .env("JIT_CACHE_DIR", cache)
        .env("MAX_JOBS", "2")
        .env_remove("NVCC_APPEND_FLAGS")
        .env_remove("NVCC_PREPEND_FLAGS")
        .env_remove("JIT_CACHE_DISABLE");
    cmd
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("a JSON list")
        .iter()
        .map(|v| v.as_str().expect("a JSON string").to_string())
        .collect()
}

fn read(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// One build's report from `ninja_report.py`, with its objects' bytes read before the next
/// pass wipes them.
struct Built {
    objects: Vec<(String, Vec<u8>)>,
    /// `ninja -t deps`, one block per target (its line, then its dependencies in the order the
    /// dependency file gave them), sorted by target: ninja lists targets in the order their
    /// edges finished, which parallel jobs race for.
    deps: Vec<Vec<String>>,
    commands: Vec<String>,
    up_to_date: bool,
}

impl Built {
    fn of(report: &Value) -> Built {
        Built {
            objects: strings(&report["objects"])
                .into_iter()
                .map(|path| {
                    let bytes = read(&path);
                    (path, bytes)
                })
                .collect(),
            deps: deps_by_target(strings(&report["deps"])),
            commands: strings(&report["commands"])
                .into_iter()
                .map(|c| c.trim().to_string())
                .collect(),
            up_to_date: report["up_to_date"] == Value::Bool(true),
        }
    }
}

/// The lines of `ninja -t deps` as blocks, one per target, sorted by target.
fn deps_by_target(lines: Vec<String>) -> Vec<Vec<String>> {
    let mut blocks: Vec<Vec<String>> = Vec::new();
    for line in lines {
        if line.trim().is_empty() {
            continue;
        }
        match blocks.last_mut() {
            Some(block) if line.starts_with(char::is_whitespace) => block.push(line),
            _ => blocks.push(vec![line]),
        }
    }
    blocks.sort();
    blocks
}

/// Asserts the launcher's build matches the reference: the same nvcc commands behind the
/// launcher word, objects equal modulo the module id, the same recorded dependencies.
fn assert_like_reference(what: &str, reference: &Built, built: &Built) {
    let behind_launcher: Vec<String> = reference
        .commands
        .iter()
        .map(|c| format!("{LAUNCHER} {c}"))
        .collect();
    assert_eq!(
        built.commands, behind_launcher,
        "{what}: the pipeline ran its own nvcc commands, the launcher word before each"
    );
    assert_eq!(
        built.objects.len(),
        reference.objects.len(),
        "{what}: the same objects"
    );
    for ((path, bytes), (_, want)) in built.objects.iter().zip(&reference.objects) {
        assert!(
            same_modulo_module_id(want, bytes),
            "{what}: {path} equals bare nvcc's object modulo cicc's module id"
        );
    }
    assert_eq!(
        built.deps, reference.deps,
        "{what}: ninja recorded the dependencies bare nvcc's dependency files gave it"
    );
    assert!(built.up_to_date, "{what}: ninja has no work left");
}

/// Asserts a hit pass wrote the cold pass's bytes.
fn assert_same_bytes(what: &str, cold: &Built, warm: &Built) {
    for ((path, bytes), (_, want)) in warm.objects.iter().zip(&cold.objects) {
        assert!(
            bytes == want,
            "{what}: {path} holds the bytes the miss wrote"
        );
    }
}

/// Asserts `jit-cache stats` holds `entries` entries and counted no uncacheable command and no
/// fallback (the launcher logs each).
fn assert_all_cached(cache: &Path, entries: u64) {
    let out = Command::new(LAUNCHER)
        .arg("--cache-dir")
        .arg(cache)
        .args(["--json", "stats"])
        .output()
        .expect("run jit-cache stats");
    assert!(out.status.success(), "jit-cache stats succeeds");
    let stats: Value = serde_json::from_slice(&out.stdout).expect("stats is JSON");
    assert_eq!(
        stats["launcher"],
        serde_json::json!({}),
        "the launcher refused no command and fell back on none: {}",
        stats["launcher"]
    );
    assert_eq!(
        stats["stats"]["entries"].as_u64(),
        Some(entries),
        "one entry per nvcc unit: {stats}"
    );
}

#[test]
fn heavy_pipelines_flashinfer_jit_hits_every_nvcc_command_after_its_workspace_is_wiped() {
    let Some(venv) = pipelines_venv("flashinfer") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let counter = CountingCompiler::new(dir.path());
    let workspace = dir.path().join("workspace");
    let cache = dir.path().join("cache");
    let libs = link_directory(dir.path());
    let torch_cuda_headers = site_packages(&venv).join("nvidia/cu13/include");
    // FlashInfer on a machine without a GPU: the target architecture named, `-lcudart -lcuda`
    // resolved, and the CUDA headers of torch's wheels (cuBLASLt's, which FlashInfer's
    // sources include) beside the toolkit's.
    let flashinfer = |launcher: bool, what: &str| -> Built {
        let mut cmd = python(&venv, "flashinfer_jit.py", &cache);
        cmd.args(FLASHINFER_MODULES)
            .env("FLASHINFER_CUDA_ARCH_LIST", "9.0")
            .env("FLASHINFER_WORKSPACE_BASE", &workspace)
            .env("FLASHINFER_NVCC", &counter.path)
            .env("FLASHINFER_EXTRA_LDFLAGS", format!("-L{}", libs.display()))
            .env(
                "FLASHINFER_EXTRA_CUDAFLAGS",
                format!("-isystem {}", torch_cuda_headers.display()),
            );
        if launcher {
            cmd.env("FLASHINFER_NVCC_LAUNCHER", LAUNCHER);
        } else {
            cmd.env_remove("FLASHINFER_NVCC_LAUNCHER");
        }
        let report = run_script(cmd, what);
        let mut built = Built {
            objects: Vec::new(),
            deps: Vec::new(),
            commands: Vec::new(),
            up_to_date: true,
        };
        for module in FLASHINFER_MODULES {
            let entry = &report[*module];
            assert_eq!(
                entry["exported"],
                Value::Bool(true),
                "{what}: {module}'s library loaded through tvm_ffi and exports its function"
            );
            let one = Built::of(entry);
            built.objects.extend(one.objects);
            built.deps.extend(one.deps);
            built.commands.extend(one.commands);
            built.up_to_date &= one.up_to_date;
        }
        built
    };
    let wipe = || std::fs::remove_dir_all(&workspace).expect("wipe FlashInfer's workspace");
    // What a failed count shows: the compiler's commands and the launcher's log.
    let ran = || {
        format!(
            "the compiler ran:\n{}launcher.log:\n{}",
            counter.commands(),
            std::fs::read_to_string(cache.join("launcher.log")).unwrap_or_default()
        )
    };

    let reference = flashinfer(false, "FlashInfer with bare nvcc");
    let units = reference.objects.len();
    assert_eq!(units, 3, "the two modules have three nvcc units");
    assert_eq!(counter.compiles(), units, "bare nvcc compiled each unit");
    assert!(reference.up_to_date, "the reference build is complete");

    wipe();
    let cold = flashinfer(true, "FlashInfer through the launcher, cold");
    assert_eq!(
        counter.compiles(),
        2 * units,
        "on an empty cache each unit compiles once; {}",
        ran()
    );
    assert_like_reference("cold", &reference, &cold);

    wipe();
    let warm = flashinfer(true, "FlashInfer through the launcher, workspace wiped");
    assert_eq!(
        counter.compiles(),
        2 * units,
        "after the workspace is wiped every nvcc command is a hit: no compile; {}",
        ran()
    );
    assert_like_reference("warm", &reference, &warm);
    assert_same_bytes("warm", &cold, &warm);
    assert_all_cached(&cache, units as u64);
}

#[test]
fn heavy_pipelines_torch_cpp_extension_hits_after_its_build_directory_is_wiped() {
    let Some(venv) = pipelines_venv("torch") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let counter = CountingCompiler::new(dir.path());
    let build = dir.path().join("build");
    let cache = dir.path().join("cache");
    let libs = link_directory(dir.path());
    let torch_cuda_headers = site_packages(&venv).join("nvidia/cu13/include");
    // `PYTORCH_NVCC` replaces the nvcc command word for word; torch prepends ccache (on PATH
    // here) to the host compiler only, whose cache stays in the test's directory.
    let torch = |nvcc: String, what: &str| -> Built {
        let mut cmd = python(&venv, "torch_extension.py", &cache);
        cmd.arg(&build)
            .arg(fixtures().join("scale.cu"))
            .arg(&torch_cuda_headers)
            .arg(&libs)
            .env("PYTORCH_NVCC", &nvcc)
            .env("TORCH_CUDA_ARCH_LIST", "9.0")
            .env("CCACHE_DIR", dir.path().join("ccache"))
            .env_remove("TORCH_NO_COMPILER_WRAPPER");
        let report = run_script(cmd, what);
        assert_eq!(
            report["nvcc_line"].as_str(),
            Some(format!("nvcc = {nvcc}").as_str()),
            "{what}: build.ninja runs PYTORCH_NVCC as given"
        );
        assert_eq!(
            report["exported"],
            Value::Bool(true),
            "{what}: the extension loaded and exports its function"
        );
        Built::of(&report)
    };
    let wipe = || std::fs::remove_dir_all(&build).expect("wipe the build directory");
    let through_launcher = format!("{LAUNCHER} {}", counter.path.display());

    let reference = torch(
        counter.path.display().to_string(),
        "cpp_extension with bare nvcc",
    );
    assert_eq!(reference.objects.len(), 1, "one CUDA unit");
    assert_eq!(counter.compiles(), 1, "bare nvcc compiled it");

    wipe();
    let cold = torch(
        through_launcher.clone(),
        "cpp_extension through the launcher, cold",
    );
    assert_eq!(counter.compiles(), 2, "on an empty cache the unit compiles");
    assert_like_reference("cold", &reference, &cold);

    wipe();
    let warm = torch(
        through_launcher,
        "cpp_extension through the launcher, build directory wiped",
    );
    assert_eq!(
        counter.compiles(),
        2,
        "after the build directory is wiped the CUDA compile is a hit"
    );
    assert_like_reference("warm", &reference, &warm);
    assert_same_bytes("warm", &cold, &warm);
    assert_all_cached(&cache, 1);
}

#[test]
fn heavy_pipelines_cmake_separable_compilation_hits_and_device_links_after_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    let counter = CountingCompiler::new(dir.path());
    let build = dir.path().join("build");
    let cache = dir.path().join("cache");
    let env = |cmd: &mut Command| {
        cmd.env("JIT_CACHE_DIR", &cache)
            .env_remove("NVCC_APPEND_FLAGS")
            .env_remove("NVCC_PREPEND_FLAGS")
            .env_remove("JIT_CACHE_DISABLE");
    };
    let mut configure = tool("cmake");
    configure
        .arg("-S")
        .arg(fixtures().join("cmake-rdc"))
        .arg("-B")
        .arg(&build)
        .args(["-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"])
        .arg(format!("-DCMAKE_CUDA_COMPILER={}", counter.path.display()))
        .arg(format!("-DCMAKE_CUDA_COMPILER_LAUNCHER={LAUNCHER}"));
    env(&mut configure);
    run_ok(&mut configure, "cmake configure");
    let ninja = |args: &[&str]| {
        let mut cmd = tool("ninja");
        cmd.arg("-C").arg(&build).args(args);
        env(&mut cmd);
        run_ok(&mut cmd, &format!("ninja {args:?}"))
    };
    let objects = [
        "CMakeFiles/rdc.dir/src/twice.cu.o",
        "CMakeFiles/rdc.dir/src/launch.cu.o",
    ];
    let read_objects = || -> Vec<Vec<u8>> {
        objects
            .iter()
            .map(|o| read(&build.join(o).to_string_lossy()))
            .collect()
    };

    // Configuring runs the compiler; only the build's compiles are counted.
    let configured = counter.compiles();
    ninja(&[]);
    // Each unit compiles, and the device link (nvcc -dlink, run without the launcher) too.
    assert_eq!(
        counter.compiles() - configured,
        objects.len() + 1,
        "on an empty cache both units compile, then the device link runs"
    );
    let cold = read_objects();
    assert!(build.join("librdc.so").is_file(), "the library links");

    ninja(&["-t", "clean"]);
    ninja(&[]);
    assert_eq!(
        counter.compiles() - configured,
        objects.len() + 2,
        "after clean both -rdc=true units are hits; only the device link runs nvcc again"
    );
    for (object, (got, want)) in objects.iter().zip(read_objects().iter().zip(&cold)) {
        assert!(got == want, "{object} holds the bytes the miss wrote");
    }
    assert!(
        build.join("librdc.so").is_file(),
        "the device link and the link accept the launcher's objects"
    );
    let dry = ninja(&["-n"]);
    assert!(
        String::from_utf8_lossy(&dry.stdout).contains("no work to do"),
        "ninja has no work left"
    );
    assert_all_cached(&cache, objects.len() as u64);
}

/// `jit-cache shim DIR` over the real nvcc, as a user makes one: `CUDA_HOME=$(jit-cache shim
/// DIR)`. Returns the directory it printed.
fn make_shim(dir: &Path) -> PathBuf {
    let out = Command::new(LAUNCHER)
        .arg("shim")
        .arg(dir)
        .env("NVCC", real_nvcc())
        .output()
        .expect("run jit-cache shim");
    assert!(
        out.status.success(),
        "jit-cache shim: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim_end())
}

/// `jit-cache stats`' counts of compiles and hits, and the launcher's log lines.
fn compiles_and_hits(cache: &Path) -> (u64, u64, Value) {
    let out = Command::new(LAUNCHER)
        .arg("--cache-dir")
        .arg(cache)
        .args(["--json", "stats"])
        .output()
        .expect("run jit-cache stats");
    assert!(out.status.success(), "jit-cache stats succeeds");
    let stats: Value = serde_json::from_slice(&out.stdout).expect("stats is JSON");
    (
        stats["stats"]["built"].as_u64().unwrap_or_default(),
        stats["stats"]["hits"].as_u64().unwrap_or_default(),
        stats["launcher"].clone(),
    )
}

#[test]
fn heavy_pipelines_tvm_ffi_build_inline_through_a_shim_compiles_nothing_after_its_build_directory_is_wiped(
) {
    let Some(venv) = pipelines_venv("tvm-ffi") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let build = dir.path().join("build");
    let cache = dir.path().join("cache");
    let libs = link_directory(dir.path());
    let shim = make_shim(&dir.path().join("cuda"));
    // TVM-FFI's own build_inline, unchanged: it writes `nvcc = $CUDA_HOME/bin/nvcc` and has no
    // launcher variable; NVCC is unset, so only the shim's record names the real nvcc.
    let tvm_ffi = |what: &str| -> Built {
        let mut cmd = python(&venv, "tvm_ffi_inline.py", &cache);
        cmd.arg(&build)
            .arg(&libs)
            .env("CUDA_HOME", &shim)
            .env_remove("CUDA_PATH")
            .env_remove("NVCC")
            .env("TVM_FFI_CUDA_ARCH_LIST", "9.0");
        let report = run_script(cmd, what);
        assert_eq!(
            report["nvcc_line"].as_str(),
            Some(format!("nvcc = {}", shim.join("bin/nvcc").display()).as_str()),
            "{what}: build.ninja runs the shim's nvcc as $CUDA_HOME/bin/nvcc"
        );
        assert_eq!(
            report["exported"],
            Value::Bool(true),
            "{what}: the module loaded through tvm_ffi and exports its function"
        );
        Built::of(&report)
    };

    let launcher = one_unit_cold_then_a_hit_after_a_wipe(
        "TVM-FFI build_inline through the shim",
        &build,
        &cache,
        tvm_ffi,
    );
    assert_eq!(
        launcher,
        serde_json::json!({}),
        "TVM-FFI ran no command the launcher refused or fell back on"
    );
}

#[test]
fn heavy_pipelines_torch_cpp_extension_with_cuda_home_a_shim_compiles_nothing_after_its_build_directory_is_wiped(
) {
    let Some(venv) = pipelines_venv("torch-shim") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let build = dir.path().join("build");
    let cache = dir.path().join("cache");
    let libs = link_directory(dir.path());
    let torch_cuda_headers = site_packages(&venv).join("nvidia/cu13/include");
    let shim = make_shim(&dir.path().join("cuda"));
    // No PYTORCH_NVCC: torch runs `$CUDA_HOME/bin/nvcc`, the shim's.
    let torch = |what: &str| -> Built {
        let mut cmd = python(&venv, "torch_extension.py", &cache);
        cmd.arg(&build)
            .arg(fixtures().join("scale.cu"))
            .arg(&torch_cuda_headers)
            .arg(&libs)
            .env("CUDA_HOME", &shim)
            .env_remove("CUDA_PATH")
            .env_remove("NVCC")
            .env_remove("PYTORCH_NVCC")
            .env("TORCH_CUDA_ARCH_LIST", "9.0")
            // Without PYTORCH_NVCC, torch puts ccache (on PATH here) before `$CUDA_HOME/bin/nvcc`
            // too, and ccache would answer the rebuild before the launcher is asked.
            .env("TORCH_NO_COMPILER_WRAPPER", "1");
        let report = run_script(cmd, what);
        assert_eq!(
            report["nvcc_line"].as_str(),
            Some(format!("nvcc = {}", shim.join("bin/nvcc").display()).as_str()),
            "{what}: build.ninja runs the shim's nvcc"
        );
        assert_eq!(
            report["exported"],
            Value::Bool(true),
            "{what}: the extension loaded and exports its function"
        );
        Built::of(&report)
    };

    let launcher = one_unit_cold_then_a_hit_after_a_wipe(
        "cpp_extension with CUDA_HOME the shim",
        &build,
        &cache,
        torch,
    );
    // torch asks `$CUDA_HOME/bin/nvcc --version` for its version check: the shim's nvcc runs it
    // through the launcher, which hands it to nvcc and counts it. No compile fell back.
    let lines: Vec<&String> = launcher
        .as_object()
        .expect("the launcher's counts are a JSON object")
        .keys()
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("uncacheable:") && !l.contains(".cu")),
        "only torch's probes went to nvcc uncached: {launcher}"
    );
}

/// A build of one CUDA unit through a shim: cold, it compiles once; after its build directory is
/// wiped, the rebuild is a hit with the same bytes and dependencies and nothing left to do.
/// Returns the launcher's counts.
fn one_unit_cold_then_a_hit_after_a_wipe(
    what: &str,
    build: &Path,
    cache: &Path,
    run: impl Fn(&str) -> Built,
) -> Value {
    let cold = run(&format!("{what}, cold"));
    assert_eq!(cold.objects.len(), 1, "{what}: one CUDA unit");
    assert!(cold.up_to_date, "{what}: the cold build is complete");
    let (built, hits, _) = compiles_and_hits(cache);
    assert_eq!(
        (built, hits),
        (1, 0),
        "{what}: on an empty cache the unit compiles once"
    );
    std::fs::remove_dir_all(build).expect("wipe the build directory");
    let warm = run(&format!("{what}, build directory wiped"));
    let (built, hits, launcher) = compiles_and_hits(cache);
    assert_eq!(
        (built, hits),
        (1, 1),
        "{what}: after the build directory is wiped the unit is a hit: no compile"
    );
    assert_same_bytes("warm", &cold, &warm);
    assert_eq!(
        warm.deps, cold.deps,
        "{what}: ninja recorded the same dependencies"
    );
    assert!(warm.up_to_date, "{what}: ninja has no work left");
    launcher
}
