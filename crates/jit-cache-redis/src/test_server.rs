//! A `redis-server` of a test's own (feature `test-server`): a Unix socket in a directory the
//! caller owns, persistence off, its own process group, stopped by its pid (never by name). The
//! tests of this crate and of `jit-cache-cli`, the remote bench and the crash harness all start
//! their servers here. `cargo xtask setup` installs Debian's `redis-server`.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer its first `PING`.
const START_LIMIT: Duration = Duration::from_secs(20);

/// A running `redis-server`, killed (with its process group) when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server whose socket is `dir/redis.sock`, with extra configuration arguments
    /// (`--maxmemory 1mb`, ...), and waits until it answers.
    ///
    /// # Errors
    /// When `redis-server` cannot be started or does not answer within 20 s.
    pub fn start(dir: &Path, extra: &[&str]) -> std::io::Result<RedisServer> {
        std::fs::create_dir_all(dir)?;
        let socket = dir.join("redis.sock");
        // A socket left by a killed server would answer nothing: start from none.
        let _ = std::fs::remove_file(&socket);
        let child = Command::new("redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args([
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
            ])
            .arg(dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("start redis-server (`cargo xtask setup` installs it): {e}"),
                )
            })?;
        let server = RedisServer {
            child,
            dir: dir.to_path_buf(),
            socket,
            extra: extra.iter().map(|a| a.to_string()).collect(),
        };
        let deadline = Instant::now() + START_LIMIT;
        while !server.answers() {
            if Instant::now() >= deadline {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "redis-server did not answer on {} within 20 s",
                        server.socket.display()
                    ),
                ));
            }
            // A bounded poll for the server's start, not synchronisation between our processes.
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// `redis+unix://<socket>`.
    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket.display())
    }

    /// The Unix socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The server's pid (its process group's id too).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the server's process group (`STOP` makes a server that accepts
    /// connections and never answers).
    pub fn signal(&self, signal: rustix::process::Signal) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, signal);
        }
    }

    /// SIGKILL (everything it held is lost: persistence is off), and waits for it.
    pub fn kill(&mut self) {
        // A stopped server must be continued to die of SIGKILL promptly; both are harmless to
        // a dead one.
        self.signal(rustix::process::Signal::CONT);
        self.signal(rustix::process::Signal::KILL);
        let _ = self.child.wait();
    }

    /// Kills the server and starts a fresh, empty one on the same socket.
    ///
    /// # Errors
    /// As [`RedisServer::start`].
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.kill();
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        *self = RedisServer::start(&self.dir.clone(), &extra)?;
        Ok(())
    }

    /// Whether the server answers `PING` (inline protocol).
    fn answers(&self) -> bool {
        let Ok(mut stream) = std::os::unix::net::UnixStream::connect(&self.socket) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
