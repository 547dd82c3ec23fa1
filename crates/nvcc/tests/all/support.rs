//! Shared helpers: the real compiler, fake compilers written as shell scripts.

use nvcc::Nvcc;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The real nvcc from env `NVCC`, else [`Nvcc::locate`]. `None` (with the reason printed) when there
/// is none, except under `cargo xtask test` (`XTASK_TEST=1`), where a missing compiler fails.
pub fn real_nvcc() -> Option<Nvcc> {
    if let Some(path) = std::env::var_os("NVCC") {
        return Some(Nvcc::at(&path).expect("env NVCC names a usable nvcc"));
    }
    match Nvcc::locate() {
        Ok(nvcc) => Some(nvcc),
        Err(err) if std::env::var_os("XTASK_TEST").is_some_and(|v| v == "1") => {
            panic!("XTASK_TEST=1 requires the real nvcc (run `cargo xtask setup`): {err}")
        }
        Err(err) => {
            eprintln!("skipping: no real nvcc: {err}");
            None
        }
    }
}

/// Writes an executable shell script and returns its path.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("write fake compiler script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make fake compiler executable");
    path
}

/// Writes `contents` to `dir/name`, creating parent directories.
pub fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create parent directory");
    }
    std::fs::write(&path, contents).expect("write test file");
    path
}

/// Whether `pid` has exited: no `/proc` entry, or a zombie waiting for its new parent to reap it.
/// Whether `pid` is gone within `limit`: a killed process closes its files (so pipes reach EOF)
/// before it becomes a zombie, and on a loaded machine a test can look in between. A bounded wait
/// for the condition, not a sleep standing in for synchronisation.
pub fn process_is_gone_within(pid: u32, limit: std::time::Duration) -> bool {
    let start = std::time::Instant::now();
    loop {
        if process_is_gone(pid) {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

pub fn process_is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}
