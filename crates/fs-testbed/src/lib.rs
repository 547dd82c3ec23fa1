//! Test support: run a closure on a real filesystem mounted inside a private mount namespace.
//!
//! Tests of durable writes prove little on one filesystem (ext4's `auto_da_alloc` hides a missing
//! fsync), so the workspace's tests run their checks on the default temp directory and on
//! loop-mounted ext4, xfs (512- and 4096-byte sectors), btrfs and a small tmpfs.
//!
//! # How mounts stay private and never leak
//! [`with_fs`] runs the closure on a fresh thread that first calls `unshare(CLONE_NEWNS)` (which
//! also unshares the thread's `fs_struct`) and marks every mount private, so what it mounts is seen
//! by that thread and the processes it spawns, never by the machine. When the thread ends, the
//! namespace dies with it and the kernel detaches the mount, even if the test panicked; a test
//! killed with SIGKILL leaks nothing either. Loop devices are detached lazily (`losetup -d` right
//! after the mount sets auto-clear), so they go when the mount goes.
//!
//! # Skips
//! Mounting needs root, `losetup` and the `mkfs` tool of each filesystem. Where one is missing the
//! closure is not run and [`with_fs`] returns [`Skipped`] with the reason, which [`run_or_skip`]
//! prints. Under `cargo xtask test` (`FS_TESTBED_REQUIRE=1`) a skip is a failure instead.
#![deny(missing_docs)]

pub mod namespace;

use std::ffi::CString;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

/// A filesystem to run a test on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FsKind {
    /// A fresh directory under the default temp dir (no mount, no root needed).
    DefaultTmp,
    /// ext4 on a 64 MiB loop device.
    Ext4,
    /// xfs on a 320 MiB loop device with 512-byte sectors.
    Xfs,
    /// xfs on a 320 MiB loop device with 4096-byte logical sectors (`losetup --sector-size 4096`).
    Xfs4k,
    /// btrfs on a 128 MiB loop device.
    Btrfs,
    /// A tmpfs of 64 MiB.
    Tmpfs,
    /// A tmpfs of 1 MiB, for ENOSPC tests.
    TinyTmpfs,
}

impl FsKind {
    /// Every kind, the default temp dir first.
    pub const ALL: [FsKind; 6] = [
        FsKind::DefaultTmp,
        FsKind::Ext4,
        FsKind::Xfs,
        FsKind::Xfs4k,
        FsKind::Btrfs,
        FsKind::Tmpfs,
    ];

    /// A short name for messages.
    pub fn name(self) -> &'static str {
        match self {
            FsKind::DefaultTmp => "default-tmp",
            FsKind::Ext4 => "ext4",
            FsKind::Xfs => "xfs",
            FsKind::Xfs4k => "xfs-4k-sectors",
            FsKind::Btrfs => "btrfs",
            FsKind::Tmpfs => "tmpfs",
            FsKind::TinyTmpfs => "tmpfs-1MiB",
        }
    }

    /// Parses a name as printed by [`FsKind::name`] (also `tmp`, `xfs4k`).
    pub fn from_name(name: &str) -> Option<FsKind> {
        Some(match name {
            "default-tmp" | "tmp" | "default" => FsKind::DefaultTmp,
            "ext4" => FsKind::Ext4,
            "xfs" => FsKind::Xfs,
            "xfs-4k-sectors" | "xfs4k" => FsKind::Xfs4k,
            "btrfs" => FsKind::Btrfs,
            "tmpfs" => FsKind::Tmpfs,
            "tmpfs-1MiB" | "tiny-tmpfs" => FsKind::TinyTmpfs,
            _ => return None,
        })
    }
}

/// Why a filesystem could not be provided.
#[derive(Debug, Clone)]
pub struct Skipped {
    /// The filesystem that was asked for.
    pub kind: FsKind,
    /// What was missing or failed.
    pub reason: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "skipped on {}: {}", self.kind.name(), self.reason)
    }
}

/// Whether skips are failures (set by `cargo xtask test`).
pub fn skips_are_failures() -> bool {
    std::env::var_os("FS_TESTBED_REQUIRE").is_some_and(|v| v == "1")
}

/// Runs `f` on `kind` and returns its result, or prints why it skipped and returns `None`.
///
/// # Panics
/// When the filesystem cannot be provided and `FS_TESTBED_REQUIRE=1` (under `cargo xtask test`).
pub fn run_or_skip<R: Send>(kind: FsKind, f: impl FnOnce(&Path) -> R + Send) -> Option<R> {
    match with_fs(kind, f) {
        Ok(r) => Some(r),
        Err(skipped) if skips_are_failures() => {
            panic!("{skipped} (FS_TESTBED_REQUIRE=1: a skip is a failure under cargo xtask test)")
        }
        Err(skipped) => {
            eprintln!("{skipped}");
            None
        }
    }
}

/// Runs `f` with the root directory of a fresh filesystem of `kind`, mounted privately.
///
/// A panic inside `f` is propagated after the mount is gone.
pub fn with_fs<R: Send>(kind: FsKind, f: impl FnOnce(&Path) -> R + Send) -> Result<R, Skipped> {
    mounted(kind, None, f)
}

/// Like [`with_fs`], for benchmarks: the filesystem is `size_mib` MiB (a sparse image), and its
/// loop device reads and writes the image with direct I/O, so that a file dropped from the
/// filesystem's page cache is read from the disk again, not from the host's cache of the image.
/// A tmpfs is `size_mib` MiB of memory.
pub fn with_sized_fs<R: Send>(
    kind: FsKind,
    size_mib: u64,
    f: impl FnOnce(&Path) -> R + Send,
) -> Result<R, Skipped> {
    mounted(kind, Some(size_mib), f)
}

fn mounted<R: Send>(
    kind: FsKind,
    size_mib: Option<u64>,
    f: impl FnOnce(&Path) -> R + Send,
) -> Result<R, Skipped> {
    let skip = |reason: String| Skipped { kind, reason };
    let scratch = tempfile::Builder::new()
        .prefix("fs-testbed-")
        .tempdir()
        .map_err(|e| {
            skip(format!(
                "create scratch dir in {}: {e}",
                std::env::temp_dir().display()
            ))
        })?;
    if kind == FsKind::DefaultTmp {
        return Ok(f(scratch.path()));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(skip(
            "mounting needs root (run as root or under cargo xtask test as root)".into(),
        ));
    }
    let mountpoint = scratch.path().join("mnt");
    std::fs::create_dir(&mountpoint)
        .map_err(|e| skip(format!("mkdir {}: {e}", mountpoint.display())))?;
    let image = scratch.path().join("image");

    std::thread::scope(|scope| {
        let handle = scope.spawn(|| -> Result<R, Skipped> {
            enter_private_mount_namespace().map_err(skip)?;
            mount_kind(kind, size_mib, &image, &mountpoint).map_err(skip)?;
            Ok(f(&mountpoint))
        });
        match handle.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Runs `f` with each of `paths` also visible under a directory every user can enter (bind
/// mounts, read-only, in a private mount namespace): for tests that run what a checkout built
/// (a binary, the project's nvcc) as another user, from a checkout under a directory that user
/// cannot enter (a clone under `/root`, or `mktemp -d`). `f` gets the reachable paths, in order;
/// processes it starts see them too.
///
/// # Errors
/// [`Skipped`] when not root, or when a mount fails.
pub fn with_reachable<R: Send>(
    paths: &[&Path],
    f: impl FnOnce(&[std::path::PathBuf]) -> R + Send,
) -> Result<R, Skipped> {
    let skip = |reason: String| Skipped {
        kind: FsKind::DefaultTmp,
        reason,
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(skip("bind mounts need root".into()));
    }
    let scratch = tempfile::Builder::new()
        .prefix("fs-testbed-reachable-")
        .tempdir_in("/tmp")
        .map_err(|e| skip(format!("create a scratch dir in /tmp: {e}")))?;
    std::fs::set_permissions(
        scratch.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .map_err(|e| skip(format!("chmod {}: {e}", scratch.path().display())))?;
    let mut targets = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let name = path.file_name().map_or_else(
            || format!("path{i}"),
            |n| format!("{i}-{}", n.to_string_lossy()),
        );
        let target = scratch.path().join(name);
        if path.is_dir() {
            std::fs::create_dir(&target)
        } else {
            std::fs::write(&target, b"")
        }
        .map_err(|e| skip(format!("create {}: {e}", target.display())))?;
        targets.push(target);
    }
    std::thread::scope(|scope| {
        let handle = scope.spawn(|| -> Result<R, Skipped> {
            enter_private_mount_namespace().map_err(skip)?;
            for (path, target) in paths.iter().zip(&targets) {
                namespace::bind_read_only(path, target).map_err(|e| {
                    skip(format!(
                        "bind {} on {}: {e}",
                        path.display(),
                        target.display()
                    ))
                })?;
            }
            Ok(f(&targets))
        });
        match handle.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Moves the calling thread into a new mount namespace whose mounts are all private.
fn enter_private_mount_namespace() -> Result<(), String> {
    namespace::enter_private_mount_namespace()
        .map_err(|e| format!("enter a private mount namespace (unshare, make / private): {e}"))
}

/// Mounts `kind` at `mountpoint`; `sized`: a benchmark's size in MiB and direct I/O on the image
/// ([`with_sized_fs`]).
fn mount_kind(
    kind: FsKind,
    sized: Option<u64>,
    image: &Path,
    mountpoint: &Path,
) -> Result<(), String> {
    let (mkfs, size_mib, sector, fstype): (&[&str], u64, Option<u32>, &str) = match kind {
        FsKind::DefaultTmp => return Ok(()),
        FsKind::Tmpfs => {
            let data = format!("size={}M,mode=0755", sized.unwrap_or(64));
            return mount_raw("tmpfs", mountpoint, "tmpfs", &data);
        }
        FsKind::TinyTmpfs => return mount_raw("tmpfs", mountpoint, "tmpfs", "size=1M,mode=0755"),
        FsKind::Ext4 => (&["mkfs.ext4", "-q", "-F"], 64, None, "ext4"),
        FsKind::Xfs => (&["mkfs.xfs", "-q", "-f"], 320, None, "xfs"),
        FsKind::Xfs4k => (
            &["mkfs.xfs", "-q", "-f", "-s", "size=4096"],
            320,
            Some(4096),
            "xfs",
        ),
        FsKind::Btrfs => (&["mkfs.btrfs", "-q", "-f"], 128, None, "btrfs"),
    };
    let file =
        std::fs::File::create(image).map_err(|e| format!("create {}: {e}", image.display()))?;
    file.set_len(sized.unwrap_or(size_mib) << 20)
        .map_err(|e| format!("size {}: {e}", image.display()))?;
    drop(file);
    run_tool(Command::new(mkfs[0]).args(&mkfs[1..]).arg(image))?;
    let mut losetup = Command::new("losetup");
    losetup.args(["--find", "--show"]);
    if let Some(sector) = sector {
        losetup.arg("--sector-size").arg(sector.to_string());
    }
    if sized.is_some() {
        losetup.arg("--direct-io=on");
    }
    let device = run_tool(losetup.arg(image))?;
    let device = device.trim().to_string();
    let mounted = mount_raw(&device, mountpoint, fstype, "");
    // Detach at once: on a mounted device this only sets auto-clear, so the loop device goes away
    // with the mount (thread exit, panic or SIGKILL alike). On a failed mount it detaches now.
    let detached = run_tool(Command::new("losetup").arg("-d").arg(&device));
    mounted?;
    detached.map(|_| ())
}

fn mount_raw(source: &str, target: &Path, fstype: &str, data: &str) -> Result<(), String> {
    let cstr = |s: &[u8]| CString::new(s).map_err(|e| format!("mount argument with NUL: {e}"));
    let (source_c, target_c) = (
        cstr(source.as_bytes())?,
        cstr(target.as_os_str().as_bytes())?,
    );
    let (fstype_c, data_c) = (cstr(fstype.as_bytes())?, cstr(data.as_bytes())?);
    // SAFETY: all four pointers are valid NUL-terminated strings for the duration of the call.
    let rc = unsafe {
        libc::mount(
            source_c.as_ptr(),
            target_c.as_ptr(),
            fstype_c.as_ptr(),
            0,
            data_c.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "mount {fstype} {source} on {}: {}",
            target.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn run_tool(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("run {cmd:?}: {e} (is it installed? try cargo xtask setup)"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_mounts_privately_and_is_writable() {
        for kind in FsKind::ALL.into_iter().chain([FsKind::TinyTmpfs]) {
            let seen = run_or_skip(kind, |root| {
                let probe = root.join("probe");
                std::fs::write(&probe, b"hello").expect("write a file on the test filesystem");
                let mounts =
                    std::fs::read_to_string("/proc/thread-self/mounts").expect("read mounts");
                (
                    std::fs::read(&probe).expect("read it back"),
                    mounts.contains(&root.display().to_string()),
                )
            });
            if let Some((bytes, listed)) = seen {
                assert_eq!(bytes, b"hello", "{}: bytes read back", kind.name());
                assert!(
                    kind == FsKind::DefaultTmp || listed,
                    "{}: mount visible in its namespace",
                    kind.name()
                );
            }
        }
        // Nothing of ours is left in the machine's namespace.
        let mounts =
            std::fs::read_to_string("/proc/self/mounts").expect("read the process's mounts");
        assert!(
            !mounts.contains("fs-testbed-"),
            "a test mount leaked into the machine namespace"
        );
    }

    #[test]
    fn a_sized_filesystem_has_the_size_asked_for_and_its_loop_device_bypasses_the_host_cache() {
        let seen = with_sized_fs(FsKind::Xfs, 1024, |root| {
            let mounts = std::fs::read_to_string("/proc/thread-self/mounts").expect("read mounts");
            let device = mounts
                .lines()
                .find(|l| l.split(' ').nth(1) == Some(&*root.to_string_lossy()))
                .and_then(|l| l.split(' ').next())
                .expect("the mount is listed")
                .trim_start_matches("/dev/")
                .to_string();
            let dio = std::fs::read_to_string(format!("/sys/block/{device}/loop/dio"))
                .expect("read the loop device's direct I/O flag");
            // SAFETY: `statvfs` holds integers only, so all-zero bytes are a valid value.
            let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
            let path = CString::new(root.as_os_str().as_bytes()).expect("no NUL");
            // SAFETY: `path` is a NUL-terminated string and `st` a writable `statvfs`, both alive
            // for the call.
            assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut st) }, 0);
            (st.f_blocks * st.f_frsize, dio.trim().to_string())
        });
        match seen {
            Ok((bytes, dio)) => {
                assert!(bytes > 900 << 20 && bytes <= 1024 << 20, "{bytes} bytes");
                assert_eq!(dio, "1", "the loop device uses direct I/O");
            }
            Err(skipped) if skips_are_failures() => panic!("{skipped}"),
            Err(skipped) => eprintln!("{skipped}"),
        }
    }
}
