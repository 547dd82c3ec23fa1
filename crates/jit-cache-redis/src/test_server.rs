//! A `redis-server` of a test's own (feature `test-server`): a Unix socket in a directory the
//! caller owns, persistence off, its own process group, stopped by its pid (never by name)
//! through `jit_cache_remote::test_server`. The tests of this crate and of `jit-cache-cli`, the
//! remote bench and the crash harness all start their servers here. `cargo xtask setup`
//! installs Debian's `redis-server`.

use jit_cache_remote::test_server::{wait_until, ServerProcess};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a server may take to answer its first `PING`.
const START_LIMIT: Duration = Duration::from_secs(20);

/// A running `redis-server`, killed (with its process group) when dropped; a kill loses
/// everything it held (persistence is off).
#[derive(Debug)]
pub struct RedisServer {
    process: ServerProcess,
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
        let process = ServerProcess::spawn(
            Command::new("redis-server")
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
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            "`cargo xtask setup` installs it",
        )?;
        let server = RedisServer {
            process,
            dir: dir.to_path_buf(),
            socket,
            extra: extra.iter().map(|a| a.to_string()).collect(),
        };
        if !wait_until(START_LIMIT, || Ok(server.answers()))? {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "redis-server did not answer on {} within 20 s",
                    server.socket.display()
                ),
            ));
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

/// A server is its process with an address: its pid, signals and kill are
/// [`ServerProcess`]'s.
impl std::ops::Deref for RedisServer {
    type Target = ServerProcess;

    fn deref(&self) -> &ServerProcess {
        &self.process
    }
}

impl std::ops::DerefMut for RedisServer {
    fn deref_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }
}
