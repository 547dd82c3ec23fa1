//! The seccomp listener's ioctls: receive a notification, answer it.

use crate::trace::Errno;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6), the flag of `SECCOMP_IOCTL_NOTIF_SET_FLAGS`.
const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;

/// One received notification: which task made which call with which arguments.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Notification {
    pub(crate) id: u64,
    pub(crate) pid: u32,
    pub(crate) nr: i32,
    pub(crate) args: [u64; 6],
}

/// A listener descriptor and a receive buffer of the size the kernel asks for.
pub(crate) struct Listener {
    fd: OwnedFd,
    /// `struct seccomp_notif`, at least as large as the kernel's (`SECCOMP_GET_NOTIF_SIZES`), as
    /// u64s for alignment.
    buffer: Vec<u64>,
}

impl Listener {
    pub(crate) fn new(fd: OwnedFd) -> Listener {
        let ours = std::mem::size_of::<libc::seccomp_notif>();
        let kernels = notification_size().unwrap_or(ours);
        Listener {
            fd,
            buffer: vec![0; ours.max(kernels).div_ceil(8)],
        }
    }

    /// Asks the kernel to switch directly between tracee and supervisor on one CPU.
    pub(crate) fn set_sync_wake_up(&self) -> Result<(), Errno> {
        // SAFETY: SET_FLAGS takes the flags as the ioctl's integer argument, not a pointer.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(last_errno())
        }
    }

    /// `SECCOMP_IOCTL_NOTIF_RECV`. `ENOENT` means the notification vanished between `poll`
    /// and this call (its task was killed or interrupted by a signal).
    pub(crate) fn receive(&mut self) -> Result<Notification, Errno> {
        // The kernel refuses a buffer that is not zeroed.
        self.buffer.fill(0);
        // SAFETY: the buffer is at least as large as the kernel's struct seccomp_notif and
        // aligned for it; the kernel writes within it.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                self.buffer.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(last_errno());
        }
        // SAFETY: the buffer holds a struct seccomp_notif the kernel just wrote; it is aligned
        // for u64 and at least size_of::<seccomp_notif>() bytes long.
        let raw: libc::seccomp_notif =
            unsafe { std::ptr::read(self.buffer.as_ptr().cast::<libc::seccomp_notif>()) };
        Ok(Notification {
            id: raw.id,
            pid: raw.pid,
            nr: raw.data.nr,
            args: raw.data.args,
        })
    }

    /// Answers with `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the kernel runs the call as if no
    /// filter had stopped it. `ENOENT`: the task stopped waiting (killed, or interrupted by a
    /// signal; an interrupted call that restarts is notified again).
    pub(crate) fn continue_call(&self, id: u64) -> Result<(), Errno> {
        let mut response = libc::seccomp_notif_resp {
            id,
            val: 0,
            error: 0,
            flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        };
        // SAFETY: response is a valid seccomp_notif_resp for the call's duration.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &mut response as *mut libc::seccomp_notif_resp,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(last_errno())
        }
    }
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The kernel's `sizeof(struct seccomp_notif)` (`SECCOMP_GET_NOTIF_SIZES`, Linux 5.0).
fn notification_size() -> Option<usize> {
    let mut sizes = libc::seccomp_notif_sizes {
        seccomp_notif: 0,
        seccomp_notif_resp: 0,
        seccomp_data: 0,
    };
    // SAFETY: the call writes a seccomp_notif_sizes through the pointer, valid for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_NOTIF_SIZES,
            0,
            &mut sizes as *mut libc::seccomp_notif_sizes,
        )
    };
    (rc == 0).then_some(usize::from(sizes.seccomp_notif))
}

fn last_errno() -> Errno {
    Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}
