//! The subprocess seam: a [`Runner`] trait and [`ProcessRunner`], the real implementation.

use crate::error::Error;
use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How to run one program.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The working directory; the caller's when `None`.
    pub working_dir: Option<PathBuf>,
    /// Extra environment variables, set on top of the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    /// Kill the whole process group after this long.
    pub timeout: Option<Duration>,
    /// The most bytes kept from each of stdout and stderr; the rest is read and discarded so the
    /// child never blocks on a full pipe.
    pub output_limit: usize,
    /// Record every path lookup of the program and of everything it starts ([`file_trace`]):
    /// the result is [`RunOutput::trace`]. Where this system cannot trace, the program runs
    /// untraced and [`RunOutput::trace_unavailable`] says why. Off by default.
    pub trace: bool,
}

/// The default for [`RunOptions::output_limit`]: 4 MiB per stream.
pub const DEFAULT_OUTPUT_LIMIT: usize = 4 << 20;

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            working_dir: None,
            env: Vec::new(),
            timeout: None,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            trace: false,
        }
    }
}

/// What a finished (or killed) program left.
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// The exit status of the program itself.
    pub status: ExitStatus,
    /// Captured stdout, at most [`RunOptions::output_limit`] bytes.
    pub stdout: Vec<u8>,
    /// Captured stderr, at most [`RunOptions::output_limit`] bytes.
    pub stderr: Vec<u8>,
    /// Whether stdout was longer than the limit.
    pub stdout_truncated: bool,
    /// Whether stderr was longer than the limit.
    pub stderr_truncated: bool,
    /// Whether the program was killed at the timeout.
    pub timed_out: bool,
    /// Wall time from spawn to reaping.
    pub duration: Duration,
    /// Every path lookup of the program and its descendants, when [`RunOptions::trace`] asked
    /// for it and it could be recorded. Check [`file_trace::Trace::is_complete`] before relying
    /// on it.
    pub trace: Option<file_trace::Trace>,
    /// Why a run that asked for a trace has none.
    pub trace_unavailable: Option<TraceUnavailable>,
}

/// Why a run that asked for a trace ([`RunOptions::trace`]) has none.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum TraceUnavailable {
    /// This system cannot trace (checked once per process); the program ran untraced.
    Unsupported(file_trace::Unsupported),
    /// Starting the trace failed, so the program ran untraced, or recording it failed mid-run.
    Failed(Arc<file_trace::Error>),
}

impl std::fmt::Display for TraceUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TraceUnavailable::Unsupported(why) => write!(f, "cannot trace here: {why}"),
            TraceUnavailable::Failed(err) => write!(f, "trace failed: {err}"),
        }
    }
}

/// Runs a program. Tests substitute a fake; [`ProcessRunner`] is the real one.
pub trait Runner: Send + Sync {
    /// Runs `program` with `args` (never through a shell) and waits for it.
    ///
    /// # Errors
    /// [`Error::Spawn`] when the program cannot be started. A program that runs and fails is not
    /// an error here: the caller judges [`RunOutput::status`] and [`RunOutput::timed_out`].
    fn run(&self, program: &Path, args: &[OsString], opts: &RunOptions)
        -> Result<RunOutput, Error>;
}

/// Runs programs as real child processes.
///
/// Each child gets: argv only (no shell); stdin from `/dev/null`; its own process group, so the
/// compiler and everything it starts (cicc, ptxas, the host compiler) can be killed together;
/// `PR_SET_PDEATHSIG(SIGKILL)`, so it dies if the thread that spawned it dies. When the child exits
/// or the timeout passes, `SIGKILL` goes to its whole process group, so no helper outlives it.
///
/// Waiting uses a pidfd (Linux 5.3+) polled together with both pipes, so completion is noticed
/// at once with no polling interval; without pidfds it falls back to checking every 10 ms.
///
/// With [`RunOptions::trace`] the child is spawned by [`file_trace::Tracer::spawn`] (the filter
/// is installed after the hooks above, just before `exec`) and the trace is collected after
/// reaping; everything else is the same.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessRunner;

/// How long to keep reading pipes after the process group was killed: a process that left the
/// group (`setsid`) could hold them open forever.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Poll interval when no pidfd is available.
const FALLBACK_POLL: Duration = Duration::from_millis(10);

/// How long to wait, after reaping, for the last traced task to release the filter: the group
/// was killed, and its members must still be reaped by their new parent.
const TRACE_GRACE: Duration = Duration::from_secs(1);

/// The tracer, made once per process (its probe forks a child once).
fn tracer() -> Result<&'static file_trace::Tracer, file_trace::Unsupported> {
    static TRACER: OnceLock<Result<file_trace::Tracer, file_trace::Unsupported>> = OnceLock::new();
    TRACER
        .get_or_init(file_trace::Tracer::new)
        .as_ref()
        .map_err(Clone::clone)
}

/// A spawned child, and its trace's handle when traced.
struct Spawned {
    child: Child,
    trace: Option<file_trace::TraceHandle>,
    unavailable: Option<TraceUnavailable>,
}

/// Spawns `command`, traced when `trace` asks and this system can.
fn spawn(command: &mut Command, trace: bool) -> io::Result<Spawned> {
    let untraced = |command: &mut Command, unavailable: Option<TraceUnavailable>| {
        spawn_retrying_busy_text(command, Command::spawn, |err: &io::Error| {
            err.raw_os_error() == Some(libc::ETXTBSY)
        })
        .map(|child| Spawned {
            child,
            trace: None,
            unavailable,
        })
    };
    if !trace {
        return untraced(command, None);
    }
    let tracer = match tracer() {
        Ok(tracer) => tracer,
        Err(why) => return untraced(command, Some(TraceUnavailable::Unsupported(why))),
    };
    let traced = spawn_retrying_busy_text(
        command,
        |command| tracer.spawn(command),
        |err: &file_trace::Error| {
            err.spawn_error().and_then(io::Error::raw_os_error) == Some(libc::ETXTBSY)
        },
    );
    match traced {
        Ok((child, handle)) => Ok(Spawned {
            child,
            trace: Some(handle),
            unavailable: None,
        }),
        Err(file_trace::Error::Spawn { source, .. }) => Err(source),
        Err(err) => untraced(command, Some(TraceUnavailable::Failed(Arc::new(err)))),
    }
}

impl Runner for ProcessRunner {
    fn run(
        &self,
        program: &Path,
        args: &[OsString],
        opts: &RunOptions,
    ) -> Result<RunOutput, Error> {
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(dir) = &opts.working_dir {
            command.current_dir(dir);
        }
        for (key, value) in &opts.env {
            command.env(key, value);
        }
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs in the forked child before exec and calls only prctl and getppid,
        // which are async-signal-safe; it allocates nothing (from_raw_os_error does not allocate).
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl; then no signal would ever come.
                if libc::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let started = Instant::now();
        let Spawned {
            mut child,
            trace: trace_handle,
            mut unavailable,
        } = spawn(&mut command, opts.trace).map_err(|source| Error::Spawn {
            program: program.to_owned(),
            source,
        })?;
        let pid = child.id() as libc::pid_t;
        let pidfd = pidfd_open(pid);
        let mut streams = [
            Stream::new(child.stdout.take().map(|s| Box::new(s) as Box<dyn ReadFd>)),
            Stream::new(child.stderr.take().map(|s| Box::new(s) as Box<dyn ReadFd>)),
        ];
        let deadline = opts.timeout.map(|timeout| started + timeout);
        let mut leader_exited = false;
        let mut timed_out = false;
        let mut drain_deadline: Option<Instant> = None;
        loop {
            if !leader_exited && pidfd.is_none() {
                leader_exited = exited_without_reaping(pid);
            }
            if leader_exited && drain_deadline.is_none() {
                // The leader is a zombie until we reap it below, so its pid still names this
                // group: the signal cannot reach an unrelated process.
                kill_group(pid);
                drain_deadline = Some(Instant::now() + DRAIN_GRACE);
            }
            if leader_exited && streams.iter().all(Stream::is_closed) {
                break;
            }
            let now = Instant::now();
            if !leader_exited && !timed_out {
                if let Some(deadline) = deadline {
                    if now >= deadline {
                        kill_group(pid);
                        timed_out = true;
                    }
                }
            }
            if drain_deadline.is_some_and(|drain| now >= drain) {
                break;
            }
            let mut wait: Option<Duration> = None;
            let mut shorten = |d: Duration| wait = Some(wait.map_or(d, |w: Duration| w.min(d)));
            if let (Some(deadline), false, false) = (deadline, timed_out, leader_exited) {
                shorten(deadline.saturating_duration_since(now));
            }
            if let Some(drain) = drain_deadline {
                shorten(drain.saturating_duration_since(now));
            }
            if pidfd.is_none() && !leader_exited {
                shorten(FALLBACK_POLL);
            }
            let mut fds: Vec<libc::pollfd> = Vec::with_capacity(3);
            for stream in &streams {
                if let Some(fd) = stream.raw_fd() {
                    fds.push(pollfd(fd));
                }
            }
            let pidfd_index = match (&pidfd, leader_exited) {
                (Some(fd), false) => {
                    fds.push(pollfd(fd.as_raw_fd()));
                    Some(fds.len() - 1)
                }
                _ => None,
            };
            if fds.is_empty() {
                // Both pipes are closed and only the fallback check remains.
                std::thread::sleep(wait.unwrap_or(FALLBACK_POLL));
                continue;
            }
            let timeout_ms = wait.map_or(-1, |w| {
                // Round up so a wait never ends a little before its deadline and spins.
                i32::try_from(w.as_millis() + u128::from(w.subsec_nanos() % 1_000_000 != 0))
                    .unwrap_or(i32::MAX)
            });
            // SAFETY: fds is a valid, initialised array of fds.len() pollfd structures that lives
            // across the call.
            let ready =
                unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
            if ready < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // poll on valid descriptors cannot otherwise fail; stop waiting on pipes rather
                // than spin, and let the reaping below report the status.
                kill_group(pid);
                break;
            }
            if let Some(index) = pidfd_index {
                if fds[index].revents != 0 {
                    leader_exited = true;
                }
            }
            for stream in &mut streams {
                let Some(fd) = stream.raw_fd() else { continue };
                if fds.iter().any(|p| p.fd == fd && p.revents != 0) {
                    stream.read_available(opts.output_limit);
                }
            }
        }
        let status = child
            .wait()
            .map_err(|source| Error::io("wait for child", program, source))?;
        let duration = started.elapsed();
        // Reaping released the leader's filter; the killed group's members release theirs
        // when their new parent reaps them.
        let trace = trace_handle.and_then(|handle| match handle.finish(TRACE_GRACE) {
            Ok(trace) => Some(trace),
            Err(err) => {
                unavailable = Some(TraceUnavailable::Failed(Arc::new(err)));
                None
            }
        });
        let [stdout, stderr] = streams;
        Ok(RunOutput {
            status,
            stdout: stdout.buffer,
            stderr: stderr.buffer,
            stdout_truncated: stdout.truncated,
            stderr_truncated: stderr.truncated,
            timed_out,
            duration,
            trace,
            trace_unavailable: unavailable,
        })
    }
}

/// Spawns with `spawn`, retrying a few times while `busy` says the error is `ETXTBSY`: a
/// compiler wrapper script written just now can still be open for writing in a child another
/// thread forked and has not yet exec'd (the fd closes at its exec), a window of microseconds.
fn spawn_retrying_busy_text<T, E>(
    command: &mut Command,
    mut spawn: impl FnMut(&mut Command) -> Result<T, E>,
    busy: impl Fn(&E) -> bool,
) -> Result<T, E> {
    let mut attempts = 0;
    loop {
        match spawn(command) {
            Err(err) if busy(&err) && attempts < 20 => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

/// A child pipe that can be polled and read.
trait ReadFd: Read + AsRawFd + Send {}
impl<T: Read + AsRawFd + Send> ReadFd for T {}

struct Stream {
    pipe: Option<Box<dyn ReadFd>>,
    buffer: Vec<u8>,
    truncated: bool,
}

impl Stream {
    fn new(pipe: Option<Box<dyn ReadFd>>) -> Stream {
        Stream {
            pipe,
            buffer: Vec::new(),
            truncated: false,
        }
    }

    fn is_closed(&self) -> bool {
        self.pipe.is_none()
    }

    fn raw_fd(&self) -> Option<RawFd> {
        self.pipe.as_ref().map(|pipe| pipe.as_raw_fd())
    }

    /// Reads once (poll said the pipe is readable or hung up, so this does not block).
    fn read_available(&mut self, limit: usize) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        let mut chunk = [0u8; 64 * 1024];
        match pipe.read(&mut chunk) {
            Ok(0) => self.pipe = None,
            Ok(n) => {
                let room = limit.saturating_sub(self.buffer.len());
                self.buffer.extend_from_slice(&chunk[..n.min(room)]);
                if n > room {
                    self.truncated = true;
                }
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => self.pipe = None,
        }
    }
}

fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Opens a pidfd for `pid`: readable once the process exits, without reaping it.
fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no memory is
    // passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether `pid` has exited, leaving it unreaped (WNOWAIT) so its pid keeps naming its group.
fn exited_without_reaping(pid: libc::pid_t) -> bool {
    // SAFETY: siginfo_t is plain data for which all-zero is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: info is a valid siginfo_t the kernel may write; the flags do not reap the child.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: waitid filled info (or left it zeroed when nothing changed); si_pid reads the pid
    // field of the union, which is zero when no child has changed state.
    rc == 0 && unsafe { info.si_pid() } != 0
}

/// Sends SIGKILL to the process group led by `pgid`; a group that is already gone is fine.
fn kill_group(pgid: libc::pid_t) {
    // SAFETY: killpg only sends a signal; the group is the one our child leads.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}
