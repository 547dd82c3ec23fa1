//! The system calls the filter notifies, by number, for the architecture this crate is built for.
//!
//! Numbers come from `libc`; each architecture lists only the calls it has (aarch64, like every
//! newer port, has no `open`, `stat`, `access`, `rename`, ...: its C library uses the `*at`
//! forms).

use libc::c_long;

/// The `AUDIT_ARCH_*` value the kernel puts in `seccomp_data.arch` for native calls.
#[cfg(target_arch = "x86_64")]
pub(crate) const NATIVE_ARCH: u32 = 0xC000_003E; // EM_X86_64 | 64-bit | little-endian
/// The `AUDIT_ARCH_*` value the kernel puts in `seccomp_data.arch` for native calls.
#[cfg(target_arch = "aarch64")]
pub(crate) const NATIVE_ARCH: u32 = 0xC000_00B7; // EM_AARCH64 | 64-bit | little-endian

/// On x86_64 the x32 ABI shares the native `arch` value and sets this bit in the call number;
/// the filter kills such calls, since their numbers mean other calls.
#[cfg(target_arch = "x86_64")]
pub(crate) const X32_SYSCALL_BIT: Option<u32> = Some(0x4000_0000);
/// On x86_64 the x32 ABI shares the native `arch` value and sets this bit in the call number.
#[cfg(target_arch = "aarch64")]
pub(crate) const X32_SYSCALL_BIT: Option<u32> = None;

/// `fchmodat2` (Linux 6.6) has one number on every architecture; `libc` lacks it on some.
const SYS_FCHMODAT2: c_long = 452;

/// A notified (or denied) system call, by what its arguments mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// aarch64 has none of the legacy calls, so their variants are never built there.
#[cfg_attr(target_arch = "aarch64", allow(dead_code))]
pub(crate) enum Call {
    Open,
    OpenAt,
    OpenAt2,
    Creat,
    Stat,
    Lstat,
    FstatAt,
    Statx,
    NameToHandleAt,
    Access,
    FaccessAt,
    FaccessAt2,
    Execve,
    ExecveAt,
    Chdir,
    Fchdir,
    Getdents,
    Unlink,
    UnlinkAt,
    Rmdir,
    Rename,
    RenameAt,
    RenameAt2,
    Mkdir,
    MkdirAt,
    Mknod,
    MknodAt,
    Link,
    LinkAt,
    Symlink,
    SymlinkAt,
    Readlink,
    ReadlinkAt,
    Truncate,
    Chmod,
    FchmodAt,
    FchmodAt2,
    Chown,
    Lchown,
    FchownAt,
    Utime,
    Utimes,
    FutimesAt,
    UtimensAt,
    /// `chroot`, `pivot_root`, `mount`, `umount2`, `move_mount`, `setns`.
    ChangesView,
    OpenByHandleAt,
    /// Denied with `ENOSYS`, so that programs fall back to plain calls the filter sees.
    IoUringSetup,
}

/// What the filter does with a call's number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// Notify the supervisor.
    Notify,
    /// Notify unless argument `flags_arg` has `AT_EMPTY_PATH`: then the call is an `fstat` of
    /// a descriptor (glibc's `fstat`), which looks nothing up by name.
    NotifyUnlessEmptyPath { flags_arg: u8 },
    /// Fail the call with this errno without notifying.
    Deny { errno: u16 },
}

impl Call {
    pub(crate) fn rule(self) -> Rule {
        match self {
            Call::FstatAt => Rule::NotifyUnlessEmptyPath { flags_arg: 3 },
            Call::Statx => Rule::NotifyUnlessEmptyPath { flags_arg: 2 },
            Call::IoUringSetup => Rule::Deny {
                errno: libc::ENOSYS as u16,
            },
            _ => Rule::Notify,
        }
    }
}

/// One row of the table: the number, what it is, and its name for reports.
pub(crate) struct Entry {
    pub(crate) nr: c_long,
    pub(crate) call: Call,
    pub(crate) name: &'static str,
}

macro_rules! table {
    ($($sys:ident => $call:ident),* $(,)?) => {
        &[$(Entry { nr: libc::$sys, call: Call::$call, name: stringify!($sys) }),*]
    };
}

/// Calls every supported architecture has.
const COMMON: &[Entry] = table![
    SYS_openat => OpenAt,
    SYS_openat2 => OpenAt2,
    SYS_newfstatat => FstatAt,
    SYS_statx => Statx,
    SYS_name_to_handle_at => NameToHandleAt,
    SYS_faccessat => FaccessAt,
    SYS_faccessat2 => FaccessAt2,
    SYS_execve => Execve,
    SYS_execveat => ExecveAt,
    SYS_chdir => Chdir,
    SYS_fchdir => Fchdir,
    SYS_getdents64 => Getdents,
    SYS_unlinkat => UnlinkAt,
    SYS_renameat2 => RenameAt2,
    SYS_mkdirat => MkdirAt,
    SYS_mknodat => MknodAt,
    SYS_linkat => LinkAt,
    SYS_symlinkat => SymlinkAt,
    SYS_readlinkat => ReadlinkAt,
    SYS_truncate => Truncate,
    SYS_fchmodat => FchmodAt,
    SYS_fchownat => FchownAt,
    SYS_utimensat => UtimensAt,
    SYS_chroot => ChangesView,
    SYS_pivot_root => ChangesView,
    SYS_mount => ChangesView,
    SYS_umount2 => ChangesView,
    SYS_move_mount => ChangesView,
    SYS_setns => ChangesView,
    SYS_open_by_handle_at => OpenByHandleAt,
    SYS_io_uring_setup => IoUringSetup,
];

/// The legacy path calls x86_64 still has.
#[cfg(target_arch = "x86_64")]
const LEGACY: &[Entry] = table![
    SYS_open => Open,
    SYS_creat => Creat,
    SYS_stat => Stat,
    SYS_lstat => Lstat,
    SYS_access => Access,
    SYS_getdents => Getdents,
    SYS_unlink => Unlink,
    SYS_rmdir => Rmdir,
    SYS_rename => Rename,
    SYS_renameat => RenameAt,
    SYS_mkdir => Mkdir,
    SYS_mknod => Mknod,
    SYS_link => Link,
    SYS_symlink => Symlink,
    SYS_readlink => Readlink,
    SYS_chmod => Chmod,
    SYS_chown => Chown,
    SYS_lchown => Lchown,
    SYS_utime => Utime,
    SYS_utimes => Utimes,
    SYS_futimesat => FutimesAt,
];
/// aarch64 has none of the legacy path calls.
#[cfg(target_arch = "aarch64")]
const LEGACY: &[Entry] = &[];

const FCHMODAT2: Entry = Entry {
    nr: SYS_FCHMODAT2,
    call: Call::FchmodAt2,
    name: "SYS_fchmodat2",
};

/// Every entry, each number once.
pub(crate) fn entries() -> impl Iterator<Item = &'static Entry> {
    COMMON
        .iter()
        .chain(LEGACY.iter())
        .chain(std::iter::once(&FCHMODAT2))
}

/// The call with number `nr`, and its name without the `SYS_` prefix.
pub(crate) fn lookup(nr: i32) -> Option<(Call, &'static str)> {
    entries()
        .find(|entry| entry.nr == c_long::from(nr))
        .map(|entry| {
            let name = entry.name.strip_prefix("SYS_").unwrap_or(entry.name);
            (entry.call, name)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_number_appears_once() {
        let mut seen = HashSet::new();
        for entry in entries() {
            assert!(seen.insert(entry.nr), "{} is listed twice", entry.name);
        }
    }

    #[test]
    fn lookup_names_a_call_without_the_prefix() {
        assert_eq!(
            lookup(libc::SYS_openat as i32),
            Some((Call::OpenAt, "openat")),
            "openat is found by number"
        );
        assert_eq!(lookup(libc::SYS_read as i32), None, "read is not traced");
        assert_eq!(
            lookup(libc::SYS_readlinkat as i32),
            Some((Call::ReadlinkAt, "readlinkat")),
            "readlinkat is traced"
        );
    }
}
