//! A test server's process (feature `test-server`), as every tier's test server runs one: in its
//! own process group, so that a signal reaches the workers it forks too, signalled and killed by
//! its pid (never by name), and killed when dropped. `jit-cache-redis`'s `RedisServer` and
//! `jit-cache-s3`'s `WeedServer` are built on it.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub use rustix::process::Signal;

/// A running server process, killed (with its process group) when dropped.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
}

impl ServerProcess {
    /// Spawns `command` in a process group of its own, its standard input closed. `install`
    /// says how to get the program when it is missing (it goes into the error).
    ///
    /// # Errors
    /// When the program cannot be started.
    pub fn spawn(command: &mut Command, install: &str) -> std::io::Result<ServerProcess> {
        let program = command.get_program().to_string_lossy().into_owned();
        let child = command
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| {
                std::io::Error::new(e.kind(), format!("start {program} ({install}): {e}"))
            })?;
        Ok(ServerProcess { child })
    }

    /// The server's pid (its process group's id too).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the server's process group (`STOP` makes a server that accepts
    /// connections and never answers).
    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, signal);
        }
    }

    /// SIGKILL, and waits for it.
    pub fn kill(&mut self) {
        // A stopped server must be continued to die of SIGKILL promptly; both are harmless to
        // a dead one.
        self.signal(Signal::CONT);
        self.signal(Signal::KILL);
        let _ = self.child.wait();
    }

    /// The server's exit status if it has exited.
    ///
    /// # Errors
    /// As [`Child::try_wait`].
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `ready` until it answers true or `limit` has passed: a bounded wait for a server's
/// start, not synchronisation between our processes. False when the time ran out.
///
/// # Errors
/// The first error `ready` returns (a server that exited, say).
pub fn wait_until(
    limit: Duration,
    mut ready: impl FnMut() -> std::io::Result<bool>,
) -> std::io::Result<bool> {
    let deadline = Instant::now() + limit;
    loop {
        if ready()? {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
