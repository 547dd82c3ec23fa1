//! This host: its name, which names per-host state files and records, and its wall clock in the
//! unit records carry.

use std::time::{SystemTime, UNIX_EPOCH};

/// This host's name, for per-host state files.
pub(crate) fn name() -> String {
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy();
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        "localhost".to_string()
    } else {
        clean
    }
}

/// Milliseconds since the epoch, as records carry them (0 before 1970).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
