//! This host's identity, as temp names carry it (`temp_name.rs` writes it into each name and
//! reads it back out).
//!
//! Hosts that share a filesystem (NFS, Lustre) tell their temps apart by this field: a sweeper
//! can then apply a rule for its own host's temps (whose `flock`s it can see) and another for
//! foreign ones (whose directory `flock`s it cannot see on NFS).

use std::sync::OnceLock;

use crate::fnv::{fnv1a, fnv1a_fresh};

/// The environment variable that overrides the host id, read once per process: a 16-digit hex
/// number. For tests that simulate several hosts on one machine (they share `/etc/machine-id`);
/// never needed in production.
pub const HOST_ID_ENV: &str = "DURABLE_FS_HOST_ID";

/// The host id in [`crate::temp_name`]s this process makes: a hash of `/etc/machine-id` (or the
/// boot id) and the node name, or the value of [`HOST_ID_ENV`] when that is set to 16 hex
/// digits. Read once per process.
pub fn host_id() -> u64 {
    static HOST: OnceLock<u64> = OnceLock::new();
    *HOST.get_or_init(|| {
        // Tests that simulate several hosts on one machine set their own.
        if let Some(id) = host_id_override() {
            return id;
        }
        let machine = std::fs::read("/etc/machine-id")
            .or_else(|_| std::fs::read("/proc/sys/kernel/random/boot_id"))
            .unwrap_or_default();
        let uname = rustix::system::uname();
        let h = fnv1a_fresh(b"durable-fs host id v1\0");
        let h = fnv1a(&machine, h);
        fnv1a(uname.nodename().to_bytes(), fnv1a(b"\0", h))
    })
}

/// The override from [`HOST_ID_ENV`], if it is set to 1..=16 hex digits.
fn host_id_override() -> Option<u64> {
    let value = std::env::var(HOST_ID_ENV).ok()?;
    let value = value.trim();
    if value.is_empty() || value.len() > 16 {
        return None;
    }
    u64::from_str_radix(value, 16).ok()
}
