//! `--remote`: a real `redis-server` beside the run as the fleet's remote tier. Workers use it
//! (local misses are fetched from it, builds uploaded to it, compiles leased through it); the
//! supervisor kills it with SIGKILL on the schedule and starts a fresh one on the same socket,
//! and every checker pass audits it: each manifest parses and each blob hashes to its name.
//! A manifest whose blob is gone is a miss to readers, counted apart.

use anyhow::{Context, Result};
use jit_cache_redis::test_server::RedisServer;
use std::path::Path;
use std::time::Duration;

/// The remote's URL, for the workers.
pub const REMOTE_ENV: &str = "CRASH_HARNESS_REMOTE";

/// The run's redis-server (`jit_cache_redis::test_server`), in the run directory.
pub struct Server(RedisServer);

impl Server {
    /// Starts a server in `dir` and waits (bounded) until it answers.
    pub fn start(dir: &Path) -> Result<Server> {
        Ok(Server(
            RedisServer::start(dir, &[]).context("start the run's redis-server")?,
        ))
    }

    pub fn url(&self) -> String {
        self.0.url()
    }

    pub fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// SIGKILL (everything it held is lost: persistence is off), then a fresh server on the same
    /// socket.
    pub fn kill_and_restart(&mut self) -> Result<()> {
        self.0.restart().context("restart the run's redis-server")
    }

    /// What the server holds now.
    pub fn audit(&self) -> Result<jit_cache_redis::Audit> {
        let tier = jit_cache_redis::RedisTier::open(&self.url(), options())
            .with_context(|| format!("open {}", self.url()))?;
        tier.audit().context("audit the remote")
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
