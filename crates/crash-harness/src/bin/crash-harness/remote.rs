//! `--remote`: a real `redis-server` beside the run as the fleet's remote tier. Workers use it
//! (local misses are fetched from it, builds uploaded to it, compiles leased through it); the
//! supervisor kills it with SIGKILL on the schedule and starts a fresh one on the same socket,
//! and every checker pass audits it: each manifest parses and each blob hashes to its name.
//! A manifest whose blob is gone is a miss to readers, counted apart.

use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The remote's URL, for the workers.
pub const REMOTE_ENV: &str = "CRASH_HARNESS_REMOTE";

/// A redis-server of the run's own: a Unix socket in the run directory, persistence off, its
/// own process group, stopped by its pid.
pub struct Server {
    child: Child,
    socket: PathBuf,
    dir: PathBuf,
}

impl Server {
    /// Starts a server in `dir` and waits (bounded) until it answers.
    pub fn start(dir: &Path) -> Result<Server> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let socket = dir.join("redis.sock");
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
            ])
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("start redis-server (`cargo xtask setup` installs it)")?;
        let server = Server {
            child,
            socket,
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !server.answers() {
            if Instant::now() >= deadline {
                bail!(
                    "redis-server did not answer on {} within 20 s",
                    server.socket.display()
                );
            }
            // A bounded poll for the server's start, not synchronisation between our processes.
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket.display())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
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

    /// SIGKILL (everything it held is lost: persistence is off), then a fresh server on the same
    /// socket.
    pub fn kill_and_restart(&mut self) -> Result<()> {
        self.kill();
        *self = Server::start(&self.dir.clone())?;
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.wait();
    }

    /// What the server holds now.
    pub fn audit(&self) -> Result<jit_cache_redis::Audit> {
        let tier = jit_cache_redis::RedisTier::open(&self.url(), options())
            .with_context(|| format!("open {}", self.url()))?;
        tier.audit().context("audit the remote")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Timeouts for a loaded 2-core machine running many workers: a fault here should come from a
/// killed server, not from a slow one.
fn options() -> jit_cache_redis::RedisOptions {
    let mut options = jit_cache_redis::RedisOptions::default();
    options.connect_timeout = Duration::from_secs(1);
    options.io_timeout = Duration::from_secs(5);
    options
}

/// The remote a worker uses, when the run has one: a short lease, so that a killed holder costs
/// the others a second, not the default.
pub fn from_env() -> Result<Option<jit_cache::Remote>> {
    let Ok(url) = std::env::var(REMOTE_ENV) else {
        return Ok(None);
    };
    let tier = jit_cache_redis::RedisTier::open(&url, options())
        .with_context(|| format!("open the remote {url}"))?;
    Ok(Some(
        jit_cache::Remote::new(tier).with_policy(
            jit_cache::RemotePolicy::default()
                .lease_ttl(Duration::from_secs(1))
                .lease_wait(Duration::from_secs(10)),
        ),
    ))
}
