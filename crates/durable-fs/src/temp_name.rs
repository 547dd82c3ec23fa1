//! Temp names unique across threads, processes, PID namespaces and hosts sharing a filesystem,
//! and reading the host back out of one.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::fnv::fnv1a;
use crate::host::host_id;

/// The prefix of every temp name this crate makes; [`crate::sweep`] touches nothing else.
pub const TEMP_PREFIX: &str = ".dfs-tmp.";

/// The longest stem kept in a temp name, so the name stays under the 255-byte limit of a
/// directory entry on every Linux filesystem.
const MAX_STEM: usize = 150;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Makes a fresh temp name: `.dfs-tmp.<stem>.<host-id>.<pid>.<counter>.<random>`.
///
/// The host id is a hash of `/etc/machine-id` (or the boot id) and the node name, the pid tells
/// processes on one host apart, the counter tells calls in one process apart, and 64 random bits
/// tell apart what the rest cannot (two containers with the same machine id and pid, a forked
/// child). Callers still create the name with `O_EXCL`: uniqueness is a probability, exclusivity
/// is the kernel's. The stem is cut to 150 bytes and `/` or NUL in it become `_`.
pub fn temp_name(stem: &str) -> OsString {
    let mut cut = stem.len().min(MAX_STEM);
    while !stem.is_char_boundary(cut) {
        cut -= 1;
    }
    let stem: String = stem[..cut]
        .chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect();
    let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{TEMP_PREFIX}{stem}.{:016x}.{}.{counter}.{:016x}",
        host_id(),
        std::process::id(),
        random_u64(),
    )
    .into()
}

/// Whether `name` (a bare file name, not a path) is one this crate's [`temp_name`] makes.
///
/// It checks the prefix and the shape of the four trailing fields, so a user's file that merely
/// starts with the prefix is not taken for a temp.
pub fn is_temp_name(name: &OsStr) -> bool {
    let Some(rest) = name.as_bytes().strip_prefix(TEMP_PREFIX.as_bytes()) else {
        return false;
    };
    let mut fields = rest.rsplitn(5, |&b| b == b'.');
    let (Some(random), Some(counter), Some(pid), Some(host), Some(_stem)) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return false;
    };
    let hex16 = |f: &[u8]| f.len() == 16 && f.iter().all(u8::is_ascii_hexdigit);
    let decimal = |f: &[u8]| !f.is_empty() && f.len() <= 20 && f.iter().all(u8::is_ascii_digit);
    hex16(random) && hex16(host) && decimal(counter) && decimal(pid)
}

/// The host id recorded in a temp name (a bare file name) that [`temp_name`] made, or `None` for
/// any other name.
pub fn temp_name_host(name: &OsStr) -> Option<u64> {
    if !is_temp_name(name) {
        return None;
    }
    let rest = name.as_bytes().strip_prefix(TEMP_PREFIX.as_bytes())?;
    // `<stem>.<host>.<pid>.<counter>.<random>`: the host is the fourth field from the end.
    let host = rest.rsplitn(5, |&b| b == b'.').nth(3)?;
    u64::from_str_radix(std::str::from_utf8(host).ok()?, 16).ok()
}

/// 64 bits from the OS random source; on the rare failure, a mix of the clock and the counter,
/// which still differs per call (O_EXCL catches the remaining collisions).
fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_ok() {
        return u64::from_le_bytes(bytes);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    fnv1a(&nanos.to_le_bytes(), COUNTER.load(Ordering::Relaxed))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn names_are_recognised_distinct_and_bounded() {
        let a = temp_name("kernel.cubin");
        let b = temp_name("kernel.cubin");
        assert_ne!(a, b, "two calls give two names");
        assert!(is_temp_name(&a), "our own name is recognised: {a:?}");
        assert!(a.as_bytes().starts_with(TEMP_PREFIX.as_bytes()));
        let long = temp_name(&"é".repeat(400));
        assert!(
            long.len() <= 255,
            "a long stem is cut: {} bytes",
            long.len()
        );
        assert!(is_temp_name(&long), "a cut name is still recognised");
        let slashed = temp_name("a/b");
        assert!(!slashed.as_bytes().contains(&b'/'), "no slash in a name");
        for not_ours in [
            ".dfs-tmp.",
            ".dfs-tmp.x",
            "kernel.cubin",
            ".dfs-tmp.a.b.c.d.e",
            ".nfs0001",
        ] {
            assert!(
                !is_temp_name(OsStr::new(not_ours)),
                "{not_ours} is not a temp name"
            );
        }
    }

    #[test]
    fn the_host_field_of_our_own_names_is_our_host_id() {
        let name = temp_name("staging");
        assert_eq!(temp_name_host(&name), Some(host_id()), "{name:?}");
        assert_eq!(temp_name_host(OsStr::new("kernel.cubin")), None);
        let foreign = ".dfs-tmp.staging.00000000000000ab.12.0.0123456789abcdef";
        assert_eq!(temp_name_host(OsStr::new(foreign)), Some(0xab));
    }

    #[test]
    fn names_from_many_threads_never_collide() {
        let names: Vec<OsString> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| (0..1000).map(|_| temp_name("x")).collect::<Vec<_>>()))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("naming thread"))
                .collect()
        });
        let distinct: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "8000 names, all distinct");
    }
}
