//! `jit-cache shim DIR`: a directory usable as `CUDA_HOME` whose `bin/nvcc` runs the launcher
//! over the real nvcc (recorded when it is made) and whose other entries are the real toolkit's,
//! against the real nvcc. The pipelines that use it (TVM-FFI, torch's `cpp_extension`) are in
//! `pipelines.rs`.

use crate::launcher::run_ok;
use crate::support::{real_nvcc, write_executable};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const LAUNCHER: &str = env!("CARGO_BIN_EXE_jit-cache");

/// The real nvcc, canonical, and its toolkit root (the directory above its `bin`).
fn real_toolkit() -> (PathBuf, PathBuf) {
    let nvcc = std::fs::canonicalize(real_nvcc()).expect("resolve the real nvcc");
    let root = nvcc
        .parent()
        .and_then(Path::parent)
        .expect("nvcc lies in a toolkit's bin directory")
        .to_path_buf();
    (nvcc, root)
}

/// `jit-cache --json shim DIR` with `NVCC` naming `nvcc` (or unset) and `CUDA_HOME` as given.
fn shim(dir: &Path, nvcc: Option<&Path>, cuda_home: Option<&Path>) -> Output {
    let mut cmd = Command::new(LAUNCHER);
    cmd.args(["--json", "shim"])
        .arg(dir)
        .env_remove("CUDA_PATH");
    match nvcc {
        Some(nvcc) => cmd.env("NVCC", nvcc),
        None => cmd.env_remove("NVCC"),
    };
    match cuda_home {
        Some(home) => cmd.env("CUDA_HOME", home),
        None => cmd.env_remove("CUDA_HOME"),
    };
    cmd.output().expect("run jit-cache shim")
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A command run through the shim as a pipeline runs it: `$CUDA_HOME/bin/nvcc`.
fn through_shim(shim: &Path, cache: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(shim.join("bin/nvcc"));
    shim_env(&mut cmd, shim, cache, dir);
    cmd
}

/// A pipeline's environment with the shim: `NVCC` unset, `CUDA_HOME` naming the shim and the
/// shim's `bin` first on `PATH`.
fn shim_env(cmd: &mut Command, shim: &Path, cache: &Path, dir: &Path) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![shim.join("bin")];
    dirs.extend(std::env::split_paths(&path));
    cmd.current_dir(dir)
        .env_remove("NVCC")
        .env_remove("CUDA_PATH")
        .env("CUDA_HOME", shim)
        .env(
            "PATH",
            std::env::join_paths(dirs).expect("PATH without a colon"),
        )
        .env("JIT_CACHE_DIR", cache)
        .env_remove("NVCC_APPEND_FLAGS")
        .env_remove("NVCC_PREPEND_FLAGS")
        .env_remove("JIT_CACHE_DISABLE");
}

/// `jit-cache --json stats` of `cache`.
fn stats(cache: &Path) -> Value {
    let out = run_ok(
        Command::new(LAUNCHER)
            .arg("--cache-dir")
            .arg(cache)
            .args(["--json", "stats"]),
        "jit-cache stats",
    );
    serde_json::from_slice(&out.stdout).expect("stats is JSON")
}

#[test]
fn shim_nvcc_runs_the_real_toolkit_and_caches_with_nvcc_unset_and_cuda_home_the_shim() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (nvcc, root) = real_toolkit();
    let shim_dir = dir.path().join("cuda");
    let out = shim(&shim_dir, Some(&real_nvcc()), None);
    assert!(
        out.status.success(),
        "jit-cache shim makes an absent directory: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made = json(&out);
    assert_eq!(
        made["shim"].as_str(),
        Some(shim_dir.to_str().expect("UTF-8 temp path")),
        "it names the shim's directory"
    );
    assert_eq!(
        made["nvcc"].as_str(),
        nvcc.to_str(),
        "it records the real nvcc the launcher found"
    );
    let plain = run_ok(
        Command::new(LAUNCHER)
            .arg("shim")
            .arg(&shim_dir)
            .env("NVCC", real_nvcc()),
        "jit-cache shim DIR",
    );
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout).trim_end(),
        shim_dir.to_string_lossy(),
        "without --json it prints the directory alone, for CUDA_HOME=$(jit-cache shim DIR)"
    );

    // Every entry of the real toolkit but bin/nvcc is a link to the real one.
    for (real_dir, shim_sub) in [
        (root.clone(), shim_dir.clone()),
        (root.join("bin"), shim_dir.join("bin")),
    ] {
        for entry in std::fs::read_dir(&real_dir).expect("read the real toolkit") {
            let entry = entry.expect("a toolkit entry");
            let name = entry.file_name();
            if name == "bin" && real_dir == root || name == "nvcc" && real_dir != root {
                continue;
            }
            let link = shim_sub.join(&name);
            assert_eq!(
                std::fs::read_link(&link).ok(),
                Some(entry.path()),
                "{} is a link to the real toolkit's entry",
                link.display()
            );
        }
    }
    assert!(
        !shim_dir.join("bin/nvcc").is_symlink(),
        "bin/nvcc is the shim's own"
    );

    // nvcc finds its companions beside its own location: the real ones.
    let project = dir.path().join("project");
    std::fs::create_dir(&project).expect("create the project");
    std::fs::write(
        project.join("k.cu"),
        "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n",
    )
    .expect("write the source");
    let cache = dir.path().join("cache");
    let dry = run_ok(
        through_shim(&shim_dir, &cache, &project).args(["-dryrun", "-arch=sm_90", "-c", "k.cu"]),
        "nvcc -dryrun through the shim",
    );
    let dry = String::from_utf8_lossy(&dry.stderr);
    assert!(
        dry.lines()
            .any(|l| l == format!("#$ _HERE_={}", root.join("bin").display())),
        "the real nvcc runs from the real toolkit's bin, with its nvcc.profile and companions:\n{dry}"
    );

    let compile = |what: &str| {
        let _ = std::fs::remove_file(project.join("k.o"));
        run_ok(
            through_shim(&shim_dir, &cache, &project).args([
                "-arch=sm_90",
                "-c",
                "k.cu",
                "-o",
                "k.o",
            ]),
            what,
        );
        assert!(
            project.join("k.o").is_file(),
            "{what}: the object is written"
        );
    };
    compile("a compile through the shim, cold");
    compile("the same compile through the shim, its output removed");
    let stats = stats(&cache);
    assert_eq!(
        (
            stats["stats"]["built"].as_u64(),
            stats["stats"]["hits"].as_u64()
        ),
        (Some(1), Some(1)),
        "the shim's nvcc caches: one compile, then a hit: {stats}"
    );
    assert_eq!(
        stats["launcher"],
        serde_json::json!({ "uncacheable: --dryrun": 1 }),
        "only the -dryrun went to nvcc uncached; no compile fell back"
    );
}

#[test]
fn shim_rerun_with_cuda_home_naming_itself_records_the_real_nvcc_and_replaces_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (nvcc, _) = real_toolkit();
    let shim_dir = dir.path().join("cuda");
    let first = shim(&shim_dir, Some(&real_nvcc()), None);
    assert!(first.status.success(), "the first shim is made");
    let stale = shim_dir.join("stale-entry");
    std::fs::write(&stale, "left by an older shim").expect("plant a stale entry");

    // NVCC unset, CUDA_HOME the shim: the launcher's search finds the shim's own bin/nvcc first.
    let rerun = shim(&shim_dir, None, Some(&shim_dir));
    assert!(
        rerun.status.success(),
        "a rerun over a shim replaces it: {}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    assert_eq!(
        json(&rerun)["nvcc"].as_str(),
        nvcc.to_str(),
        "the rerun records the real nvcc the shim stands for, never the shim itself"
    );
    let script = std::fs::read_to_string(shim_dir.join("bin/nvcc")).expect("read bin/nvcc");
    assert!(
        !script.contains(&*shim_dir.to_string_lossy()),
        "the shim's nvcc does not run itself:\n{script}"
    );
    assert!(!stale.exists(), "the rerun replaced the whole tree");
    let leftovers: Vec<String> = std::fs::read_dir(dir.path())
        .expect("read the shim's parent")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "cuda")
        .collect();
    assert!(
        leftovers.is_empty(),
        "no staging directory or old tree is left beside the shim: {leftovers:?}"
    );

    // A symlink named nvcc to the launcher (DeepGEMM's DG_JIT_NVCC_COMPILER) with CUDA_HOME the
    // shim finds the shim's nvcc and runs the real one behind it: one launcher, never two.
    let links = dir.path().join("links");
    std::fs::create_dir(&links).expect("create the links' directory");
    std::os::unix::fs::symlink(LAUNCHER, links.join("nvcc")).expect("link nvcc to the launcher");
    std::fs::write(
        dir.path().join("k.cu"),
        "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n",
    )
    .expect("write the source");
    let cache = dir.path().join("cache");
    let mut linked = Command::new(links.join("nvcc"));
    shim_env(&mut linked, &shim_dir, &cache, dir.path());
    linked.args(["-arch=sm_90", "-cubin", "k.cu", "-o", "k.cubin"]);
    run_ok(
        &mut linked,
        "a compile through a symlink named nvcc, CUDA_HOME the shim",
    );
    let stats = stats(&cache);
    assert_eq!(
        stats["stats"]["built"].as_u64(),
        Some(1),
        "one compile: {stats}"
    );
    assert_eq!(
        stats["launcher"],
        serde_json::json!({}),
        "the toolchain's probes ran the real nvcc, not the shim's launcher again"
    );
}

#[test]
fn shim_refuses_a_directory_that_holds_anything_else_and_a_wrapper_nvcc() {
    let dir = tempfile::tempdir().expect("tempdir");
    let full = dir.path().join("full");
    std::fs::create_dir(&full).expect("create a directory");
    std::fs::write(full.join("notes.txt"), "mine").expect("write a file");
    let out = shim(&full, Some(&real_nvcc()), None);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a directory with other files is refused"
    );
    assert!(
        json(&out)["error"]
            .as_str()
            .is_some_and(|e| e.contains("holds other files")),
        "the refusal says why: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(full.join("notes.txt"))
            .ok()
            .as_deref(),
        Some("mine"),
        "the refused directory is untouched"
    );

    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").expect("write a file");
    let out = shim(&file, Some(&real_nvcc()), None);
    assert_eq!(out.status.code(), Some(2), "a file is refused");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("create an empty directory");
    let out = shim(&empty, Some(&real_nvcc()), None);
    assert!(out.status.success(), "an empty directory becomes a shim");
    assert!(empty.join("bin/nvcc").is_file(), "with its nvcc");

    // A wrapper has no toolkit beside it: there is nothing to mirror.
    let bin = dir.path().join("wrapper/bin");
    std::fs::create_dir_all(&bin).expect("create the wrapper's bin");
    write_executable(
        &bin.join("nvcc"),
        &format!("#!/bin/sh\nexec '{}' \"$@\"\n", real_nvcc().display()),
    );
    let out = shim(
        &dir.path().join("from-wrapper"),
        Some(&bin.join("nvcc")),
        None,
    );
    assert_eq!(out.status.code(), Some(2), "a wrapper nvcc is refused");
    assert!(
        json(&out)["error"]
            .as_str()
            .is_some_and(|e| e.contains("nvcc.profile")),
        "the refusal says why: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        !dir.path().join("from-wrapper").exists(),
        "nothing is made for a refused nvcc"
    );
}
