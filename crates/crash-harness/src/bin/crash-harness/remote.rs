//! `--remote`: a real fleet tier beside the run, a `redis-server` or (`--remote-store s3`) a
//! SeaweedFS S3 server. Workers use it (local misses are fetched from it, builds uploaded to it,
//! compiles leased through it); the supervisor kills it with SIGKILL on the schedule and starts a
//! fresh, empty one at the same address, and every checker pass audits it: each manifest parses
//! and each blob hashes to its name. A manifest whose blob is gone is a miss to readers, counted
//! apart.

use anyhow::{Context, Result};
use jit_cache_redis::test_server::RedisServer;
use jit_cache_s3::test_server::WeedServer;
use std::path::Path;
use std::time::Duration;

/// The remote's URL, for the workers (with `AWS_*` beside it for an `s3://` one).
pub const REMOTE_ENV: &str = "CRASH_HARNESS_REMOTE";

/// Which server plays the fleet's store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Store {
    /// `redis-server` on a Unix socket, persistence off.
    #[default]
    Redis,
    /// SeaweedFS's `weed mini` on loopback ports (a fresh data directory after each kill).
    S3,
}

impl Store {
    pub fn name(self) -> &'static str {
        match self {
            Store::Redis => "redis",
            Store::S3 => "s3",
        }
    }
}

/// The run's server (`jit_cache_redis::test_server` or `jit_cache_s3::test_server`), in the run
/// directory.
pub enum Server {
    Redis(RedisServer),
    S3(WeedServer),
}

/// What an audit of either store found.
pub struct Audit {
    pub manifests: usize,
    pub unreadable_manifests: usize,
    pub variants: usize,
    pub variants_without_blob: usize,
    pub blobs: usize,
    pub corrupt_blobs: usize,
}

impl Server {
    /// Starts a server in `dir` and waits (bounded) until it answers.
    pub fn start(store: Store, dir: &Path) -> Result<Server> {
        Ok(match store {
            Store::Redis => {
                Server::Redis(RedisServer::start(dir, &[]).context("start the run's redis-server")?)
            }
            Store::S3 => Server::S3(WeedServer::start(dir).context("start the run's weed")?),
        })
    }

    /// The environment a worker needs to reach the server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Server::Redis(server) => vec![(REMOTE_ENV, server.url())],
            Server::S3(weed) => {
                let mut env: Vec<_> = weed
                    .env(weed.admin())
                    .into_iter()
                    .filter(|(k, _)| *k != "JIT_CACHE_REMOTE")
                    .collect();
                env.push((REMOTE_ENV, weed.url()));
                env
            }
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            Server::Redis(server) => server.pid(),
            Server::S3(weed) => weed.pid(),
        }
    }

    /// SIGKILL (everything it held is lost), then a fresh server at the same address.
    pub fn kill_and_restart(&mut self) -> Result<()> {
        match self {
            Server::Redis(server) => server.restart().context("restart the run's redis-server"),
            Server::S3(weed) => weed.restart().context("restart the run's weed"),
        }
    }

    /// What the server holds now.
    pub fn audit(&self) -> Result<Audit> {
        match self {
            Server::Redis(server) => {
                let tier = jit_cache_redis::RedisTier::open(&server.url(), redis_options())
                    .with_context(|| format!("open {}", server.url()))?;
                let audit = tier.audit().context("audit the remote")?;
                Ok(Audit {
                    manifests: audit.manifests,
                    unreadable_manifests: audit.unreadable_manifests.len(),
                    variants: audit.variants,
                    variants_without_blob: audit.variants_without_blob,
                    blobs: audit.blobs,
                    corrupt_blobs: audit.corrupt_blobs.len(),
                })
            }
            Server::S3(weed) => {
                let audit = weed.admin_tier().audit().context("audit the remote")?;
                Ok(Audit {
                    manifests: audit.manifests,
                    unreadable_manifests: audit.unreadable_manifests.len(),
                    variants: audit.variants,
                    variants_without_blob: audit.variants_without_blob,
                    blobs: audit.blobs,
                    corrupt_blobs: audit.corrupt_blobs.len(),
                })
            }
        }
    }
}

/// Timeouts for a loaded 2-core machine running many workers: a fault here should come from a
/// killed server, not from a slow one.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const IO_TIMEOUT: Duration = Duration::from_secs(5);

fn redis_options() -> jit_cache_redis::RedisOptions {
    let mut options = jit_cache_redis::RedisOptions::default();
    options.connect_timeout = CONNECT_TIMEOUT;
    options.io_timeout = IO_TIMEOUT;
    options
}

/// The remote a worker uses, when the run has one: a short lease, so that a killed holder costs
/// the others a second (and on S3 up to two more: `Date` has whole seconds), not the default.
pub fn from_env() -> Result<Option<jit_cache::Remote>> {
    let Ok(url) = std::env::var(REMOTE_ENV) else {
        return Ok(None);
    };
    let remote = if url.starts_with("s3://") {
        let config = jit_cache_s3::S3Config::from_env(&url)
            .with_context(|| format!("configure the remote {url}"))?
            .timeouts(CONNECT_TIMEOUT, IO_TIMEOUT);
        jit_cache::Remote::new(
            jit_cache_s3::S3Tier::open(config).with_context(|| format!("open the remote {url}"))?,
        )
    } else {
        jit_cache::Remote::new(
            jit_cache_redis::RedisTier::open(&url, redis_options())
                .with_context(|| format!("open the remote {url}"))?,
        )
    };
    Ok(Some(
        remote.with_policy(
            jit_cache::RemotePolicy::default()
                .lease_ttl(Duration::from_secs(1))
                .lease_wait(Duration::from_secs(10)),
        ),
    ))
}
