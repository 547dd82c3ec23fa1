//! [`probe`]: whether this system can trace, found by tracing one call of a forked child.

use crate::imp::filter::Program;
use crate::imp::handle::TraceHandle;
use crate::imp::hook::{self, Step};
use crate::imp::supervisor::Failure;
use crate::imp::supervisor::ANSWER_OP;
use crate::support::{Support, SyncWakeUp, Unsupported};
use crate::trace::{Errno, Found, Op};
use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static PROBED: OnceLock<Result<Support, Unsupported>> = OnceLock::new();

/// Whether this system can trace, and how well. Probed once per process (cached): a forked
/// child installs the real filter and makes one traced `faccessat("/")`, which a supervisor
/// thread must record. The first call costs a `fork` of this process and a thread, about a
/// millisecond for a small process.
///
/// # Errors
/// Why not.
pub fn probe() -> Result<Support, Unsupported> {
    PROBED.get_or_init(run_probe).clone()
}

/// The longest the probe waits for its child's filter to be released after reaping it.
const PROBE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

fn run_probe() -> Result<Support, Unsupported> {
    let program = Program::build();
    let (parent_end, child_end) = socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|errno| probe_error("socketpair", errno))?;
    let (parent_raw, child_raw) = (parent_end.as_raw_fd(), child_end.as_raw_fd());
    let handle = TraceHandle::start(parent_end, SyncWakeUp::IfSupported, PathBuf::from("probe"))
        .map_err(|_| Unsupported::Probe {
            op: "start the supervisor",
            errno: Errno(libc::EAGAIN),
        })?;
    // SAFETY: fork duplicates this process; the child runs only hook::install_in_child (raw
    // system calls on memory allocated before fork, no allocation, no locks), one raw
    // faccessat on a static string, and _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = match hook::install_in_child(&program, child_raw, parent_raw) {
            // SAFETY: faccessat reads the static NUL-terminated string "/".
            Ok(()) => match unsafe {
                libc::syscall(
                    libc::SYS_faccessat,
                    libc::AT_FDCWD,
                    c"/".as_ptr(),
                    libc::F_OK,
                )
            } {
                0 => 0,
                _ => 1,
            },
            Err(_) => 2,
        };
        // SAFETY: _exit ends the child without running the parent's destructors or atexit
        // handlers.
        unsafe { libc::_exit(code) };
    }
    drop(child_end);
    if pid < 0 {
        let errno = Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        handle.request_stop();
        let _ = handle.join();
        return Err(Unsupported::Probe { op: "fork", errno });
    }
    let exit_code = reap(pid);
    let trace = match handle.wait(PROBE_GRACE) {
        Some(Ok(trace)) => trace,
        Some(Err(Failure::Hook {
            step: Step::Seccomp,
            errno,
        })) if errno.raw() == libc::EBUSY => return Err(Unsupported::AlreadyTraced),
        Some(Err(Failure::Hook { step, errno })) => {
            return Err(Unsupported::Refused {
                step: step.name(),
                errno,
            })
        }
        Some(Err(Failure::Io { op, errno })) if errno.raw() == libc::EINVAL && op == ANSWER_OP => {
            return Err(Unsupported::NoContinue)
        }
        Some(Err(Failure::Io { op, errno })) => return Err(Unsupported::Probe { op, errno }),
        Some(Err(Failure::NotStarted | Failure::Protocol)) | None => {
            return Err(Unsupported::Probe {
                op: "handshake with the probe child",
                errno: Errno(libc::EPROTO),
            })
        }
    };
    let recorded = match trace.events.as_slice() {
        [event] => {
            event.pid == pid as u32
                && event.op == Op::Access { nofollow: false }
                && event.path == Path::new("/")
                && matches!(event.found, Found::Dir { .. })
        }
        _ => false,
    };
    if exit_code != Some(0) || !recorded {
        return Err(Unsupported::Mismatch {
            found: format!("{:?} (child exit {exit_code:?})", trace.events),
        });
    }
    Ok(Support {
        sync_wake_up: trace.sync_wake_up,
        killable_wait: trace.killable_wait,
    })
}

/// Waits for the probe child; its exit code, `None` if it was killed.
fn reap(pid: libc::pid_t) -> Option<i32> {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; status is a valid int for the call.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            break;
        }
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
    libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
}

fn probe_error(op: &'static str, errno: rustix::io::Errno) -> Unsupported {
    Unsupported::Probe {
        op,
        errno: errno.into(),
    }
}
