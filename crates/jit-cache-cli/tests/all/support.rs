//! Shared helpers: the real compiler, a counting wrapper, kernels and the CLI binary.

use std::path::{Path, PathBuf};
use std::process::Command;

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

/// A wrapper compiler that appends one line per compile (not per `--version` or `-dryrun`, the
/// cache's probes of the toolchain) to a log, then runs the real nvcc: the tests count compiles
/// with it. The log is a write of the wrapper's, which a hit would not repeat: the wrapper
/// declares its directory in `JIT_CACHE_IGNORED_PATHS` (as a user's logging wrapper would), so
/// that the cache still caches what it compiles (a traced compile that writes elsewhere is never
/// cached).
pub struct CountingCompiler {
    pub path: PathBuf,
    pub log: PathBuf,
}

/// Adds `dir` to `JIT_CACHE_IGNORED_PATHS` for every process this one starts from now on (the
/// list accumulates: tests sharing a process each keep theirs).
pub fn ignore_paths_under(dir: &Path) {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let mut dirs: Vec<PathBuf> = std::env::var_os("JIT_CACHE_IGNORED_PATHS")
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    dirs.push(dir.to_path_buf());
    let joined = std::env::join_paths(dirs).expect("directories without a colon");
    std::env::set_var("JIT_CACHE_IGNORED_PATHS", joined);
}

impl CountingCompiler {
    pub fn new(dir: &Path) -> CountingCompiler {
        let bin = dir.join("wrapper-bin");
        std::fs::create_dir_all(&bin).expect("create wrapper dir");
        let path = bin.join("nvcc");
        let log_dir = dir.join("wrapper-log");
        std::fs::create_dir_all(&log_dir).expect("create the log's dir");
        let log = log_dir.join("compiles.log");
        ignore_paths_under(&log_dir);
        let script = format!(
            "#!/bin/sh\ncase \" $* \" in *\" --version \"*|*\" -dryrun \"*) ;; *) echo \"$$ $*\" >> '{}' ;; esac\nexec '{}' \"$@\"\n",
            log.display(),
            real_nvcc().display()
        );
        write_executable(&path, &script);
        CountingCompiler { path, log }
    }

    pub fn compiles(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// Every command the compiler ran, one per line (`<pid> <arguments>`), for a failure's message.
    pub fn commands(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

pub fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod script");
}

/// A small, valid kernel whose code depends on `n`, so each `n` is a distinct artifact.
pub fn kernel_text(n: usize) -> String {
    format!("extern \"C\" __global__ void k{n}(float* x) {{ x[threadIdx.x] = x[threadIdx.x] * {n}.0f + 1.0f; }}\n")
}

/// The CLI binary, with the real compiler unless `nvcc` says otherwise.
pub fn cli(cache_dir: &Path, nvcc: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jit-cache"));
    cmd.arg("--cache-dir").arg(cache_dir).env("NVCC", nvcc);
    cmd
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
