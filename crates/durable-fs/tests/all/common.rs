//! Helpers shared by the test modules.

use std::path::{Path, PathBuf};

/// The names in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("list the test directory")
        .map(|e| {
            e.expect("read a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    v.sort();
    v
}

/// The temp-named entries in `dir`.
pub fn temps(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("list the test directory")
        .map(|e| e.expect("read a directory entry"))
        .filter(|e| durable_fs::is_temp_name(&e.file_name()))
        .map(|e| e.path())
        .collect()
}

/// Whether this process runs as root (some fault tests need it to plant others' files).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
