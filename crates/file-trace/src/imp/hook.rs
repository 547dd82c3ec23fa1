//! The child's half of the handshake, run between `fork` and `exec`: install the filter, pass
//! the listener to the supervisor, wait until it is ready, then let `exec` go on.
//!
//! Everything here is async-signal-safe: raw system calls on memory allocated before `fork`,
//! no allocation, no locks.

use crate::imp::filter::Program;
use std::io;
use std::os::fd::RawFd;

/// The filter flag that asks for killable waits once a notification was received (Linux 5.19).
pub(crate) const WAIT_KILLABLE_RECV: libc::c_ulong = libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;

/// The one message the child sends: eight bytes, with the listener attached on success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) step: Step,
    /// The filter carries `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`.
    pub(crate) killable_wait: bool,
    /// The errno of the failed step (0 on success).
    pub(crate) errno: i32,
}

/// Where the child got to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The filter is installed and its listener attached to the message.
    Installed,
    /// `prctl(PR_SET_NO_NEW_PRIVS)` failed.
    NoNewPrivs,
    /// `seccomp(SECCOMP_SET_MODE_FILTER)` failed.
    Seccomp,
}

impl Step {
    /// The step as messages name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Step::Installed => "install",
            Step::NoNewPrivs => "prctl(PR_SET_NO_NEW_PRIVS)",
            Step::Seccomp => "seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER)",
        }
    }
}

const MAGIC: u8 = b'T';

impl Hello {
    pub(crate) fn encode(self) -> [u8; 8] {
        let step = match self.step {
            Step::Installed => 0,
            Step::NoNewPrivs => 1,
            Step::Seccomp => 2,
        };
        let e = self.errno.to_ne_bytes();
        [
            MAGIC,
            step,
            u8::from(self.killable_wait),
            0,
            e[0],
            e[1],
            e[2],
            e[3],
        ]
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Hello> {
        let [MAGIC, step, killable, 0, e0, e1, e2, e3] = *bytes else {
            return None;
        };
        let step = match step {
            0 => Step::Installed,
            1 => Step::NoNewPrivs,
            2 => Step::Seccomp,
            _ => return None,
        };
        Some(Hello {
            step,
            killable_wait: killable == 1,
            errno: i32::from_ne_bytes([e0, e1, e2, e3]),
        })
    }
}

/// Runs in the forked child: installs `program` and hands its listener to the supervisor over
/// `child_end`, then waits for the supervisor's go byte. `parent_end` is the supervisor's end of
/// the socket pair, inherited through `fork`; the child closes it first so that the supervisor's
/// death reads as end of file.
///
/// # Errors
/// The failing step's OS error; the supervisor has been told (when the socket still worked), so
/// it ends without waiting.
pub(crate) fn install_in_child(
    program: &Program,
    child_end: RawFd,
    parent_end: RawFd,
) -> io::Result<()> {
    // SAFETY: closing a descriptor number only changes this (forked) process's table; the
    // supervisor keeps its own copy.
    unsafe { libc::close(parent_end) };
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(fail(child_end, Step::NoNewPrivs));
    }
    let fprog = program.fprog();
    let mut killable_wait = true;
    let mut listener = seccomp_with_listener(&fprog, WAIT_KILLABLE_RECV);
    if listener < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // Before Linux 5.19 the killable-wait flag is unknown; the trace works without it.
        killable_wait = false;
        listener = seccomp_with_listener(&fprog, 0);
    }
    if listener < 0 {
        return Err(fail(child_end, Step::Seccomp));
    }
    let hello = Hello {
        step: Step::Installed,
        killable_wait,
        errno: 0,
    };
    let sent = send(child_end, &hello.encode(), Some(listener));
    // SAFETY: the listener is this process's own descriptor; the supervisor has its own copy
    // (or nothing, if sending failed), and the filter stays installed regardless.
    unsafe { libc::close(listener) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    // Wait until the supervisor holds the listener and is serving it: exec is the first
    // traced call.
    let mut go = [0u8; 1];
    loop {
        // SAFETY: go is a valid one-byte buffer for the call's duration.
        let n = unsafe { libc::recv(child_end, go.as_mut_ptr().cast(), 1, 0) };
        match n {
            1 => break,
            // The supervisor is gone: no trace would be recorded, so do not run untraced.
            0 => return Err(io::Error::from_raw_os_error(libc::ECONNABORTED)),
            _ if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
            _ => return Err(io::Error::last_os_error()),
        }
    }
    // SAFETY: this process's own end of the pair, not needed after the handshake (it is
    // close-on-exec as well).
    unsafe { libc::close(child_end) };
    Ok(())
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER | extra, fprog)`: the listener, or -1.
fn seccomp_with_listener(fprog: &libc::sock_fprog, extra: libc::c_ulong) -> RawFd {
    // SAFETY: fprog points at the program's instructions, which live in memory copied by fork
    // and outlive the call; the kernel copies the program.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | extra,
            fprog as *const libc::sock_fprog,
        )
    };
    // A descriptor number always fits an int.
    fd as RawFd
}

/// Reports a failed step to the supervisor and returns its error.
fn fail(sock: RawFd, step: Step) -> io::Error {
    let error = io::Error::last_os_error();
    let hello = Hello {
        step,
        killable_wait: false,
        errno: error.raw_os_error().unwrap_or(0),
    };
    // If this send fails too, the supervisor sees end of file once the child is gone.
    send(sock, &hello.encode(), None);
    error
}

/// `sendmsg` of `bytes`, with `fd` attached as `SCM_RIGHTS` when given. Uses only stack memory.
fn send(sock: RawFd, bytes: &[u8; 8], fd: Option<RawFd>) -> isize {
    /// Room for one `cmsghdr` and one descriptor, aligned like a `cmsghdr`.
    #[repr(C)]
    union Control {
        header: libc::cmsghdr,
        bytes: [u8; 64],
    }
    let mut control = Control { bytes: [0; 64] };
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data for which all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE is arithmetic on a size.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) };
        // SAFETY: the union's bytes are initialised; taking a pointer to them is sound.
        msg.msg_control = unsafe { control.bytes.as_mut_ptr() }.cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at 64 aligned bytes, more than CMSG_SPACE(int), so
        // CMSG_FIRSTHDR returns a pointer into them and CMSG_DATA an int-sized slot after it.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>(), fd);
        }
    }
    // SAFETY: msg and everything it points at live on this stack frame for the call.
    unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips() {
        for hello in [
            Hello {
                step: Step::Installed,
                killable_wait: true,
                errno: 0,
            },
            Hello {
                step: Step::Seccomp,
                killable_wait: false,
                errno: libc::EBUSY,
            },
            Hello {
                step: Step::NoNewPrivs,
                killable_wait: false,
                errno: libc::EPERM,
            },
        ] {
            assert_eq!(Hello::decode(&hello.encode()), Some(hello));
        }
        assert_eq!(Hello::decode(b"garbage!"), None, "a wrong magic is refused");
        assert_eq!(Hello::decode(b"T\0"), None, "a short message is refused");
    }
}
