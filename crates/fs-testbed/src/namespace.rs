//! Private mount namespaces and the raw mount calls the test filesystems need (this crate's loop
//! mounts, `powercut-fs` and `nfs-sim`'s FUSE mounts): the mounting thread calls
//! `unshare(CLONE_NEWNS)` and marks every mount private, so a mount is seen by that thread and
//! the processes it spawns, never by the machine, and it goes away with the thread even after a
//! panic or SIGKILL.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// Moves the calling thread into a new mount namespace whose mounts are all private.
pub fn enter_private_mount_namespace() -> io::Result<()> {
    // SAFETY: unshare only changes this thread's namespaces; CLONE_NEWNS implies CLONE_FS, which
    // the kernel allows per thread, so other threads keep the machine's namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a valid NUL-terminated target and null source, type and data, as mount(2) allows
    // for a propagation change.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Bind-mounts `source` on `target` (an existing file or directory), then makes the mount
/// read-only. Call it in a private mount namespace.
pub fn bind_read_only(source: &Path, target: &Path) -> io::Result<()> {
    let (source, target) = (cstring(source)?, cstring(target)?);
    // SAFETY: valid NUL-terminated source and target, null type and data, as mount(2) allows for
    // a bind mount.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; a remount of the bind changes only its flags.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `umount2(path, flags)`.
pub fn umount(path: &Path, flags: i32) -> io::Result<()> {
    let path = cstring(path)?;
    // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
    if unsafe { libc::umount2(path.as_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The FUSE connection number of the filesystem mounted at `path` (its kernel `dev_t`), the name
/// of its directory under `/sys/fs/fuse/connections`.
pub fn fuse_connection(path: &Path) -> io::Result<u64> {
    let dev = std::fs::metadata(path)?;
    let dev = std::os::unix::fs::MetadataExt::dev(&dev);
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    Ok((u64::from(major) << 20) | u64::from(minor))
}

/// Aborts a FUSE connection through fusectl, mounting fusectl in this (private) namespace if it
/// is not there yet: open files on a lazily detached mount then fail with ENOTCONN and the
/// daemon's request loop ends.
pub fn abort_fuse_connection(connection: u64) -> io::Result<()> {
    let dir = Path::new("/sys/fs/fuse/connections");
    let abort = dir.join(connection.to_string()).join("abort");
    if !abort.exists() {
        let (source, target, fstype) = (c"fusectl", cstring(dir)?, c"fusectl");
        // SAFETY: all pointers are valid NUL-terminated strings or null for the call.
        let rc = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    std::fs::write(&abort, b"1")
}
