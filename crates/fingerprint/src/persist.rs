//! Writing a small cache file durably: temp file, fsync, rename, fsync directory.
//!
//! This crate must not depend on `durable-fs`, so it carries these few lines itself.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replaces `path` with `bytes`: a uniquely named temp file (`O_EXCL`) beside it, write, fsync,
/// rename over `path`, fsync the directory. A reader sees the old file or the new one, never a
/// mix; after the call returns the new one survives a crash. On failure the temp file is removed.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    // pid + counter + clock keep names apart within a host; O_EXCL refuses any collision.
    let unique = format!(
        ".{}.tmp.{}.{}.{}",
        name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        crate::file::now_ns()
    );
    let tmp = dir.join(unique);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        // The temp file may or may not exist depending on where we failed; either is fine.
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e| io::Error::new(e.kind(), format!("save {}: {e}", path.display())))
}
