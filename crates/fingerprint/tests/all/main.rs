//! Integration tests of the `fingerprint` crate, one module per topic.

mod bad_input;
mod filesystems;
mod identity;
mod manifest;
mod props;
mod tree;

use std::path::Path;

/// Writes `content` to `root/rel`, creating parent directories.
pub fn write(root: &Path, rel: &str, content: &[u8]) {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create parent directories");
    }
    std::fs::write(&path, content).expect("write test file");
}

/// Sets the mtime of `path` (utimensat through `File::set_times`).
pub fn set_mtime(path: &Path, secs_ago: u64) {
    let t = std::time::SystemTime::now() - std::time::Duration::from_secs(secs_ago);
    std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open to set times")
        .set_times(std::fs::FileTimes::new().set_modified(t).set_accessed(t))
        .expect("set mtime");
}
