//! The supervisor: takes the listener from the child, then answers every notification until no
//! task holds the filter or it is told to stop.

use crate::imp::arch;
use crate::imp::decode::{decode, Outcome};
use crate::imp::hook::{Hello, Step};
use crate::imp::memory::Reader;
use crate::imp::notify::Listener;
use crate::support::SyncWakeUp;
use crate::trace::{End, Errno, Trace};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendFlags};
use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// How the supervisor failed or ended before it was serving.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The child ended, or the supervisor was stopped, before the filter was installed.
    NotStarted,
    /// The child reported a failed step.
    Hook { step: Step, errno: Errno },
    /// The child sent something that is not a hello, or no listener with it.
    Protocol,
    /// An operation on the socket or the listener failed.
    Io { op: &'static str, errno: Errno },
}

/// The operation named when answering fails (`EINVAL` there means no `CONTINUE` flag).
pub(crate) const ANSWER_OP: &str = "answer a notification";

/// How long a stopped supervisor keeps answering calls that are already waiting.
const STOP_DRAIN: Duration = Duration::from_millis(50);

/// Runs the whole session on the calling thread: handshake on `socket`, then the listener.
pub(crate) fn supervise(
    socket: OwnedFd,
    stop: &OwnedFd,
    sync: SyncWakeUp,
) -> Result<Trace, Failure> {
    let (listener, killable_wait) = handshake(&socket, stop)?;
    let sync_wake_up = sync == SyncWakeUp::IfSupported && listener.set_sync_wake_up().is_ok();
    // The child waits for this byte before it goes on to exec. If it died meanwhile the send
    // fails, and the listener reports the hang-up below.
    let _ = rustix::net::send(&socket, b"g", SendFlags::NOSIGNAL);
    drop(socket);
    Supervisor {
        listener,
        reader: Reader::new(),
        trace: Trace {
            events: Vec::new(),
            gaps: Vec::new(),
            sync_wake_up,
            killable_wait,
            end: End::AllExited,
            notifications: 0,
        },
    }
    .serve(stop)
}

/// Waits for the child's hello and takes the listener attached to it.
fn handshake(socket: &OwnedFd, stop: &OwnedFd) -> Result<(Listener, bool), Failure> {
    loop {
        let mut fds = [
            PollFd::new(socket, PollFlags::IN),
            PollFd::new(stop, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(errno) => {
                return Err(Failure::Io {
                    op: "poll the handshake socket",
                    errno: errno.into(),
                })
            }
        }
        if !fds[0].revents().is_empty() {
            break;
        }
        if !fds[1].revents().is_empty() {
            return Err(Failure::NotStarted);
        }
    }
    let mut bytes = [0u8; 16];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = recvmsg(
        socket,
        &mut [IoSliceMut::new(&mut bytes)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|errno| Failure::Io {
        op: "receive the listener",
        errno: errno.into(),
    })?;
    let mut listener: Option<OwnedFd> = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            for fd in fds {
                listener.get_or_insert(fd);
            }
        }
    }
    if received.bytes == 0 {
        return Err(Failure::NotStarted);
    }
    let hello = Hello::decode(&bytes[..received.bytes]).ok_or(Failure::Protocol)?;
    match (hello.step, listener) {
        (Step::Installed, Some(fd)) => Ok((Listener::new(fd), hello.killable_wait)),
        (Step::Installed, None) => Err(Failure::Protocol),
        (step, _) => Err(Failure::Hook {
            step,
            errno: Errno(hello.errno),
        }),
    }
}

struct Supervisor {
    listener: Listener,
    reader: Reader,
    trace: Trace,
}

impl Supervisor {
    fn serve(mut self, stop: &OwnedFd) -> Result<Trace, Failure> {
        let mut stopping: Option<Instant> = None;
        loop {
            let now_only = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            let timeout = stopping.map(|_| &now_only);
            let mut fds = [
                PollFd::new(&self.listener, PollFlags::IN),
                PollFd::new(stop, PollFlags::IN),
            ];
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(errno) => {
                    return Err(Failure::Io {
                        op: "poll the listener",
                        errno: errno.into(),
                    })
                }
            }
            let listener = fds[0].revents();
            if stopping.is_none() && !fds[1].revents().is_empty() {
                stopping = Some(Instant::now());
            }
            if listener.contains(PollFlags::IN) {
                self.serve_one()?;
                if stopping.is_none_or(|since| since.elapsed() < STOP_DRAIN) {
                    continue;
                }
            } else if listener.intersects(PollFlags::HUP | PollFlags::ERR) {
                self.trace.end = End::AllExited;
                return Ok(self.trace);
            }
            if stopping.is_some() {
                self.trace.end = End::Stopped;
                return Ok(self.trace);
            }
        }
    }

    /// Receives one notification, records it, and lets the call go on.
    fn serve_one(&mut self) -> Result<(), Failure> {
        let notification = match self.listener.receive() {
            Ok(notification) => notification,
            // The call was abandoned between poll and receive.
            Err(errno) if errno.raw() == libc::ENOENT || errno.raw() == libc::EINTR => {
                return Ok(())
            }
            Err(errno) => {
                return Err(Failure::Io {
                    op: "receive a notification",
                    errno,
                })
            }
        };
        self.trace.notifications += 1;
        let outcome = match arch::lookup(notification.nr) {
            Some((call, name)) => decode(&notification, call, name, &mut self.reader),
            None => Outcome::Nothing,
        };
        // What was read through the pid belongs to the waiting task only if the task was still
        // waiting after the reads: otherwise it died and its pid may name another process. The
        // answer itself tells: the kernel takes it only while the task waits in this call (an
        // interrupted or killed task leaves the wait and its notification for good), so no
        // separate `SECCOMP_IOCTL_NOTIF_ID_VALID` is needed.
        match self.listener.continue_call(notification.id) {
            Ok(()) => {}
            // The task stopped waiting (killed, or interrupted and to be notified again).
            Err(errno) if errno.raw() == libc::ENOENT => return Ok(()),
            Err(errno) => {
                return Err(Failure::Io {
                    op: ANSWER_OP,
                    errno,
                })
            }
        }
        match outcome {
            Outcome::Event(event) => self.trace.events.push(event),
            Outcome::Gap(gap) => self.trace.gaps.push(gap),
            Outcome::Nothing => {}
        }
        Ok(())
    }
}
