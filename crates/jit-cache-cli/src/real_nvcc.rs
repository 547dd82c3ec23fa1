//! The real nvcc, found one way for the launcher (the compiler it runs) and for `jit-cache shim`
//! (the compiler a shim records): both take a shim's `bin/nvcc` for the nvcc its marker names
//! (`shim_marker.rs`), so neither ever runs or records the launcher over itself.

use crate::shim_marker::recorded_nvcc;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The real nvcc: the one named, else `NVCC`, `CUDA_HOME/bin/nvcc`, `CUDA_PATH/bin/nvcc`, each
/// `PATH` entry, then the library's search (pip venvs, `/usr/local/cuda`), never this binary; a
/// shim's `bin/nvcc` (`jit-cache shim`) stands for the real nvcc it records, so that a shim never
/// runs the launcher over itself.
pub(crate) fn find(named: Option<PathBuf>) -> Result<PathBuf, String> {
    let found = search(named)?;
    Ok(recorded_nvcc(&found).unwrap_or(found))
}

/// The nvcc named or found first, as it is: perhaps a shim's `bin/nvcc`.
fn search(named: Option<PathBuf>) -> Result<PathBuf, String> {
    // This binary by identity (device and inode, through every link), not by path: two stats
    // instead of resolving each path component.
    let identity = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let me = identity(Path::new("/proc/self/exe"))
        .ok_or_else(|| "find this executable: /proc/self/exe".to_string())?;
    let is_me = |p: &Path| identity(p) == Some(me);
    if let Some(named) = named {
        if is_me(&named) {
            return Err(format!("{} is this launcher, not nvcc", named.display()));
        }
        return Ok(named);
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(nvcc) = std::env::var_os("NVCC").filter(|v| !v.is_empty()) {
        candidates.push(nvcc.into());
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            candidates.push(Path::new(&root).join("bin").join("nvcc"));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("nvcc")));
    }
    if let Some(found) = candidates.into_iter().find(|c| c.is_file() && !is_me(c)) {
        return Ok(found);
    }
    // The library's search (pip venvs, /usr/local/cuda) costs more: only when nothing else names
    // a compiler.
    nvcc::Nvcc::locate()
        .ok()
        .map(|found| found.path().to_path_buf())
        .filter(|p| !is_me(p))
        .ok_or_else(|| {
            "no nvcc found (set NVCC, CUDA_HOME or PATH; the launcher never runs itself)".into()
        })
}
