//! This host's identity as temp names carry it, and reading it back out of a temp name.
//!
//! Hosts that share a filesystem (NFS, Lustre) tell their temps apart by this field: a sweeper
//! can then apply a rule for its own host's temps (whose `flock`s it can see) and another for
//! foreign ones (whose directory `flock`s it cannot see on NFS).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::temp_name::{is_temp_name, TEMP_PREFIX};

/// The environment variable that overrides the host id, read once per process: a 16-digit hex
/// number. For tests that simulate several hosts on one machine (they share `/etc/machine-id`);
/// never needed in production.
pub const HOST_ID_ENV: &str = "DURABLE_FS_HOST_ID";

/// The host id in [`crate::temp_name`]s this process makes: a hash of `/etc/machine-id` (or the
/// boot id) and the node name, or the value of [`HOST_ID_ENV`] when that is set to 16 hex
/// digits. Read once per process.
pub fn host_id() -> u64 {
    crate::temp_name::host_id()
}

/// The override from [`HOST_ID_ENV`], if it is set to 1..=16 hex digits.
pub(crate) fn host_id_override() -> Option<u64> {
    let value = std::env::var(HOST_ID_ENV).ok()?;
    let value = value.trim();
    if value.is_empty() || value.len() > 16 {
        return None;
    }
    u64::from_str_radix(value, 16).ok()
}

/// The host id recorded in a temp name (a bare file name) that [`crate::temp_name`] made, or
/// `None` for any other name.
pub fn temp_name_host(name: &OsStr) -> Option<u64> {
    if !is_temp_name(name) {
        return None;
    }
    let rest = name.as_bytes().strip_prefix(TEMP_PREFIX.as_bytes())?;
    // `<stem>.<host>.<pid>.<counter>.<random>`: the host is the fourth field from the end.
    let host = rest.rsplitn(5, |&b| b == b'.').nth(3)?;
    u64::from_str_radix(std::str::from_utf8(host).ok()?, 16).ok()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_host_field_of_our_own_names_is_our_host_id() {
        let name = crate::temp_name("staging");
        assert_eq!(temp_name_host(&name), Some(host_id()), "{name:?}");
        assert_eq!(temp_name_host(OsStr::new("kernel.cubin")), None);
        let foreign = ".dfs-tmp.staging.00000000000000ab.12.0.0123456789abcdef";
        assert_eq!(temp_name_host(OsStr::new(foreign)), Some(0xab));
    }
}
