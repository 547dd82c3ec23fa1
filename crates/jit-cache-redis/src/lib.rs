//! A Redis remote tier for `jit-cache`: the hosts of a fleet share compiled kernels, and one host
//! compiles each kernel while the others wait for it.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use jit_cache::{Cache, CacheOptions, RemoteMode};
//! let remote = jit_cache_redis::remote(
//!     "redis+unix:///run/redis/redis.sock",
//!     RemoteMode::ReadWrite,
//!     jit_cache_redis::RedisOptions::default(),
//! )?;
//! let cache = Cache::open_with("/var/cache/kernels", CacheOptions::default().remote(remote))?;
//! # let _ = cache; Ok(()) }
//! ```
//!
//! Store layout, under a namespace prefix (default `jit-cache`): `<ns>:m:<key>` a key's manifest
//! (JSON, replaced by a compare-and-set script), `<ns>:b:<blake3>` an artifact (`SET NX`: never
//! overwritten), `<ns>:f:<key>` a shared compile failure (short expiry), `<ns>:l:<key>` the
//! compile lease (`SET NX PX` with a token; renewed and released by compare-and-* scripts).
//!
//! # Guarantees
//! - Every read is bounded: `GETRANGE 0 <limit>` reads at most one byte past what the caller
//!   accepts, so an oversized value is refused without being transferred whole.
//! - Connect timeout (default 100 ms, covering the handshake) and per-read/write I/O timeout
//!   (default 500 ms) on every connection; nothing is retried here (the cache skips a failing
//!   tier for the rest of the process).
//! - A read-only ACL user works: reads need only `GETRANGE` (and `PING` for [`RedisTier`]'s
//!   health); its refused writes (`NOPERM`) stop writes, never reads or builds.
//!
//! # Limitations
//! - No TLS: `rediss://` URLs are refused with a message (the client is built without a TLS
//!   stack). Use a Unix socket or a TLS tunnel.
//! - With a TTL, a blob uploaded earlier keeps its first expiry (`SET NX` does not extend it), so
//!   a manifest may outlive its blob: the cache treats that as a miss.
//! - Redis Cluster is not supported (the keys of one kernel are not hash-tagged together).
#![deny(missing_docs)]

#[cfg(feature = "test-server")]
pub mod test_server;

use jit_cache::{Expected, Remote, RemoteMode, RemotePolicy, RemoteTier, TierError, TierErrorKind};
use std::sync::Mutex;
use std::time::Duration;

/// The remote's URL: `redis://[user:pass@]host:port/db`, `redis+unix:///path?db=N&user=U&pass=P`.
pub const REMOTE_ENV: &str = "JIT_CACHE_REMOTE";
/// `read-write` (default), `read-only` or `off`.
pub const REMOTE_MODE_ENV: &str = "JIT_CACHE_REMOTE_MODE";
/// The key prefix (default `jit-cache`).
pub const REMOTE_NAMESPACE_ENV: &str = "JIT_CACHE_REMOTE_NAMESPACE";
/// An expiry for uploaded manifests and blobs, in seconds (default: none).
pub const REMOTE_TTL_ENV: &str = "JIT_CACHE_REMOTE_TTL";
/// The connect timeout in milliseconds, handshake included (default 100).
pub const REMOTE_CONNECT_TIMEOUT_ENV: &str = "JIT_CACHE_REMOTE_CONNECT_TIMEOUT_MS";
/// The timeout of each read and write in milliseconds (default 500).
pub const REMOTE_IO_TIMEOUT_ENV: &str = "JIT_CACHE_REMOTE_IO_TIMEOUT_MS";
/// A compile lease's expiry in milliseconds (default 15 000): how long a dead holder delays the
/// fleet.
pub const REMOTE_LEASE_TTL_ENV: &str = "JIT_CACHE_REMOTE_LEASE_TTL_MS";

/// The most idle connections kept per tier.
const MAX_IDLE: usize = 8;

/// Why a remote could not be configured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL is not one the client can use.
    #[error("remote cache URL {url}: {reason}")]
    Url {
        /// The URL, without its password.
        url: String,
        /// Why it is refused.
        reason: String,
    },
    /// A setting from the environment is malformed.
    #[error("{var}: {reason}")]
    Setting {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Options of the Redis client.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisOptions {
    /// The prefix of every key.
    pub namespace: String,
    /// An expiry for uploaded manifests and blobs (None: kept until evicted by `maxmemory`).
    pub ttl: Option<Duration>,
    /// The connect timeout, handshake included.
    pub connect_timeout: Duration,
    /// The timeout of each read and write on a connection.
    pub io_timeout: Duration,
}

impl Default for RedisOptions {
    fn default() -> RedisOptions {
        RedisOptions {
            namespace: "jit-cache".into(),
            ttl: None,
            connect_timeout: Duration::from_millis(100),
            io_timeout: Duration::from_millis(500),
        }
    }
}

impl RedisOptions {
    /// Sets the namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> RedisOptions {
        self.namespace = namespace.into();
        self
    }

    /// Sets the expiry of uploads.
    pub fn ttl(mut self, ttl: Option<Duration>) -> RedisOptions {
        self.ttl = ttl;
        self
    }
}

/// A Redis server as a [`RemoteTier`]. Connects lazily, on first use.
pub struct RedisTier {
    client: redis::Client,
    location: String,
    options: RedisOptions,
    idle: Mutex<Vec<redis::Connection>>,
}

impl std::fmt::Debug for RedisTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTier")
            .field("location", &self.location)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The URL without user information or query (which may carry a password): the one
/// redaction every tier uses.
fn redact(url: &str) -> String {
    jit_cache::redact_url(url)
}

impl RedisTier {
    /// A tier for `url` (parsed now; no connection is made until the first operation).
    pub fn open(url: &str, options: RedisOptions) -> Result<RedisTier, Error> {
        let location = redact(url);
        if url.starts_with("rediss://") || url.starts_with("valkeys://") {
            return Err(Error::Url {
                url: location,
                reason: "TLS is not built in; use redis:// through a TLS tunnel, or a Unix socket"
                    .into(),
            });
        }
        let invalid = |e: redis::RedisError| Error::Url {
            url: location.clone(),
            reason: e.to_string(),
        };
        let info = redis::IntoConnectionInfo::into_connection_info(url).map_err(invalid)?;
        // No `CLIENT SETINFO` at connect: its two replies would each wait out the timeout on a
        // stopped server; `connect` sends one PING instead.
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let client = redis::Client::open(info.set_redis_settings(settings)).map_err(invalid)?;
        Ok(RedisTier {
            client,
            location,
            options,
            idle: Mutex::new(Vec::new()),
        })
    }

    fn name(&self, space: char, id: &str) -> String {
        format!("{}:{space}:{id}", self.options.namespace)
    }

    /// Connects and proves the server answers, all within the connect timeout: a stopped or
    /// wedged server costs one timeout, whatever the handshake.
    fn connect(&self, op: &'static str, target: &str) -> Result<redis::Connection, TierError> {
        let fail = |e: redis::RedisError| classify(op, target, &e);
        let started = std::time::Instant::now();
        let mut con = self
            .client
            .get_connection_with_timeout(self.options.connect_timeout)
            .map_err(fail)?;
        let left = self
            .options
            .connect_timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
        con.set_read_timeout(Some(left)).map_err(fail)?;
        con.set_write_timeout(Some(left)).map_err(fail)?;
        match redis::cmd("PING").query::<String>(&mut con) {
            Ok(_) => {}
            // A refusal (an ACL user without PING) is an answer too: the server is alive.
            Err(e) if e.code().is_some() => {}
            Err(e) => return Err(fail(e)),
        }
        con.set_read_timeout(Some(self.options.io_timeout))
            .map_err(fail)?;
        con.set_write_timeout(Some(self.options.io_timeout))
            .map_err(fail)?;
        Ok(con)
    }

    /// Runs one command on an idle connection (or a new one). A connection that failed at the
    /// transport level is dropped; one that got a server error (a refusal) is kept.
    fn run<T>(
        &self,
        op: &'static str,
        target: &str,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, TierError> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut con = match idle {
            Some(con) => con,
            None => self.connect(op, target)?,
        };
        match f(&mut con) {
            Ok(value) => {
                self.keep(con);
                Ok(value)
            }
            Err(e) => {
                let error = classify(op, target, &e);
                if matches!(
                    error.kind(),
                    TierErrorKind::Denied | TierErrorKind::Full | TierErrorKind::Protocol
                ) && e.code().is_some()
                {
                    self.keep(con);
                }
                Err(error)
            }
        }
    }

    fn keep(&self, con: redis::Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(con);
        }
    }

    /// `GETRANGE name 0 limit`: at most `limit + 1` bytes; more than `limit` is too large, an
    /// empty value absent.
    fn get_bounded(
        &self,
        op: &'static str,
        name: &str,
        limit: usize,
    ) -> Result<Option<Vec<u8>>, TierError> {
        let bytes: Vec<u8> = self.run(op, name, |con| {
            redis::cmd("GETRANGE")
                .arg(name)
                .arg(0)
                .arg(limit as u64)
                .query(con)
        })?;
        if bytes.len() > limit {
            return Err(TierError::new(
                op,
                name,
                TierErrorKind::TooLarge,
                format!("longer than the {limit} bytes accepted"),
            ));
        }
        Ok((!bytes.is_empty()).then_some(bytes))
    }

    fn ttl_ms(&self) -> u64 {
        self.options.ttl.map_or(0, |t| t.as_millis() as u64)
    }

    /// All keys matching `pattern`, by `SCAN` (never `KEYS`, which blocks the server).
    fn scan(&self, pattern: &str) -> Result<Vec<String>, TierError> {
        let mut cursor = 0u64;
        let mut keys = Vec::new();
        loop {
            let (next, batch): (u64, Vec<String>) = self.run("scan", pattern, |con| {
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query(con)
            })?;
            keys.extend(batch);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }

    /// Checks the store: every manifest parses, which of its variants' blobs exist, and every
    /// blob hashes to its name. Reads everything (an operator's tool and the crash tests' checker).
    pub fn audit(&self) -> Result<Audit, TierError> {
        let mut audit = Audit::default();
        for name in self.scan(&self.name('m', "*"))? {
            audit.manifests += 1;
            let bytes = self.get_bounded("get manifest", &name, 64 << 20)?;
            let Some(artifacts) = bytes.as_deref().and_then(jit_cache::manifest_artifacts) else {
                audit.unreadable_manifests.push(name);
                continue;
            };
            for (digest, _size) in artifacts {
                audit.variants += 1;
                let blob = self.name('b', &digest);
                let exists: bool = self.run("exists", &blob, |con| {
                    redis::cmd("EXISTS").arg(&blob).query(con)
                })?;
                if !exists {
                    audit.variants_without_blob += 1;
                }
            }
        }
        let prefix = self.name('b', "");
        for name in self.scan(&self.name('b', "*"))? {
            audit.blobs += 1;
            let bytes: Vec<u8> = self.run("get blob", &name, |con| {
                redis::cmd("GET").arg(&name).query(con)
            })?;
            if fingerprint::Digest::of_bytes(&bytes).to_hex() != name[prefix.len()..] {
                audit.corrupt_blobs.push(name);
            }
        }
        Ok(audit)
    }
}

/// What [`RedisTier::audit`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Audit {
    /// Manifests in the namespace.
    pub manifests: usize,
    /// Manifests that do not parse (readers treat them as misses).
    pub unreadable_manifests: Vec<String>,
    /// Variants the manifests name.
    pub variants: usize,
    /// Variants whose blob is absent (evicted, expired, lost with the server): misses.
    pub variants_without_blob: usize,
    /// Blobs in the namespace.
    pub blobs: usize,
    /// Blobs whose content does not hash to their name.
    pub corrupt_blobs: Vec<String>,
}

/// Maps a client error to the cache's kinds: transport failures make the tier unavailable;
/// `NOPERM` and `OOM` refuse writes; other server errors are protocol errors.
fn classify(op: &'static str, target: &str, e: &redis::RedisError) -> TierError {
    let kind = match e.code() {
        Some("NOPERM") => TierErrorKind::Denied,
        Some("OOM") => TierErrorKind::Full,
        _ if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_refusal()
            || e.is_connection_dropped() =>
        {
            TierErrorKind::Unavailable
        }
        _ => TierErrorKind::Protocol,
    };
    TierError::new(op, target, kind, e.to_string())
}

/// Replaces KEYS[1] with ARGV[3] if it is still ARGV[2] (ARGV[1] = '1'), absent (ARGV[1] = '0'),
/// or longer than ARGV[2] bytes (ARGV[1] = '2'); expiry ARGV[4] ms (0: none). Returns 1 when
/// replaced.
const REPLACE_SCRIPT: &str = r"
if ARGV[1] == '2' then
  if redis.call('STRLEN', KEYS[1]) <= tonumber(ARGV[2]) then return 0 end
else
  local cur = redis.call('GET', KEYS[1])
  if ARGV[1] == '0' then
    if cur then return 0 end
  elseif cur ~= ARGV[2] then
    return 0
  end
end
if ARGV[4] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
else
  redis.call('SET', KEYS[1], ARGV[3])
end
return 1
";

/// Extends KEYS[1] by ARGV[2] ms if it still holds token ARGV[1].
const RENEW_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Deletes KEYS[1] if it still holds token ARGV[1].
const RELEASE_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

impl RemoteTier for RedisTier {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn get_manifest(&self, key: &str, limit: usize) -> Result<Option<Vec<u8>>, TierError> {
        self.get_bounded("get manifest", &self.name('m', key), limit)
    }

    fn replace_manifest(
        &self,
        key: &str,
        expected: Expected<'_>,
        new: &[u8],
    ) -> Result<bool, TierError> {
        let name = self.name('m', key);
        let limit;
        let (mode, compared): (&str, &[u8]) = match expected {
            Expected::Value(bytes) => ("1", bytes),
            Expected::LongerThan(n) => {
                limit = n.to_string();
                ("2", limit.as_bytes())
            }
            Expected::Absent => ("0", b""),
        };
        let replaced: i64 = self.run("replace manifest", &name, |con| {
            redis::cmd("EVAL")
                .arg(REPLACE_SCRIPT)
                .arg(1)
                .arg(&name)
                .arg(mode)
                .arg(compared)
                .arg(new)
                .arg(self.ttl_ms())
                .query(con)
        })?;
        Ok(replaced == 1)
    }

    fn get_blob(&self, digest: &str, limit: usize) -> Result<Option<Vec<u8>>, TierError> {
        self.get_bounded("get blob", &self.name('b', digest), limit)
    }

    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), TierError> {
        let name = self.name('b', digest);
        let ttl = self.ttl_ms();
        self.run("put blob", &name, |con| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&name).arg(bytes).arg("NX");
            if ttl > 0 {
                cmd.arg("PX").arg(ttl);
            }
            cmd.query::<Option<String>>(con)
        })?;
        Ok(())
    }

    fn repair_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), TierError> {
        let name = self.name('b', digest);
        let ttl = self.ttl_ms();
        self.run("repair blob", &name, |con| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&name).arg(bytes);
            if ttl > 0 {
                cmd.arg("PX").arg(ttl);
            }
            cmd.query::<Option<String>>(con)
        })?;
        Ok(())
    }

    fn get_failure(&self, key: &str, limit: usize) -> Result<Option<Vec<u8>>, TierError> {
        self.get_bounded("get failure", &self.name('f', key), limit)
    }

    fn put_failure(&self, key: &str, record: &[u8], ttl: Duration) -> Result<(), TierError> {
        let name = self.name('f', key);
        self.run("put failure", &name, |con| {
            redis::cmd("SET")
                .arg(&name)
                .arg(record)
                .arg("PX")
                .arg(ttl.as_millis().max(1) as u64)
                .query::<Option<String>>(con)
        })?;
        Ok(())
    }

    fn acquire_lease(&self, key: &str, token: &str, ttl: Duration) -> Result<bool, TierError> {
        let name = self.name('l', key);
        let set: Option<String> = self.run("acquire lease", &name, |con| {
            redis::cmd("SET")
                .arg(&name)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(ttl.as_millis().max(1) as u64)
                .query(con)
        })?;
        Ok(set.is_some())
    }

    fn lease_held(&self, key: &str) -> Result<bool, TierError> {
        let name = self.name('l', key);
        self.run("look at lease", &name, |con| {
            redis::cmd("EXISTS").arg(&name).query(con)
        })
    }

    fn renew_lease(&self, key: &str, token: &str, ttl: Duration) -> Result<bool, TierError> {
        let name = self.name('l', key);
        let renewed: i64 = self.run("renew lease", &name, |con| {
            redis::cmd("EVAL")
                .arg(RENEW_SCRIPT)
                .arg(1)
                .arg(&name)
                .arg(token)
                .arg(ttl.as_millis().max(1) as u64)
                .query(con)
        })?;
        Ok(renewed == 1)
    }

    fn release_lease(&self, key: &str, token: &str) -> Result<(), TierError> {
        let name = self.name('l', key);
        self.run("release lease", &name, |con| {
            redis::cmd("EVAL")
                .arg(RELEASE_SCRIPT)
                .arg(1)
                .arg(&name)
                .arg(token)
                .query::<i64>(con)
        })?;
        Ok(())
    }

    fn health(&self) -> Result<(), TierError> {
        self.run("health", &self.location, |con| {
            redis::cmd("PING").query::<String>(con)
        })?;
        Ok(())
    }
}

/// A [`Remote`] on the Redis server at `url`, in `mode`, with the default policy.
pub fn remote(url: &str, mode: RemoteMode, options: RedisOptions) -> Result<Remote, Error> {
    let tier = RedisTier::open(url, options)?;
    Ok(Remote::new(tier).with_policy(RemotePolicy::default().mode(mode)))
}

/// The remote's settings, from the environment ([`REMOTE_ENV`] and the others) or a command line.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RemoteSettings {
    /// The URL; no remote without one.
    pub url: Option<String>,
    /// The mode (default read-write).
    pub mode: Option<RemoteMode>,
    /// The namespace (default `jit-cache`).
    pub namespace: Option<String>,
    /// An expiry for uploads.
    pub ttl: Option<Duration>,
    /// The connect timeout (default [`RedisOptions::default`]'s).
    pub connect_timeout: Option<Duration>,
    /// The I/O timeout (default [`RedisOptions::default`]'s).
    pub io_timeout: Option<Duration>,
    /// The lease expiry (default [`RemotePolicy::default`]'s).
    pub lease_ttl: Option<Duration>,
}

impl RemoteSettings {
    /// Reads [`REMOTE_ENV`], [`REMOTE_MODE_ENV`], [`REMOTE_NAMESPACE_ENV`], [`REMOTE_TTL_ENV`],
    /// [`REMOTE_CONNECT_TIMEOUT_ENV`], [`REMOTE_IO_TIMEOUT_ENV`] and [`REMOTE_LEASE_TTL_ENV`];
    /// unset and empty variables mean the defaults.
    pub fn from_env() -> Result<RemoteSettings, Error> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let mode = var(REMOTE_MODE_ENV)
            .map(|m| m.parse::<RemoteMode>())
            .transpose()
            .map_err(|reason| Error::Setting {
                var: REMOTE_MODE_ENV,
                reason,
            })?;
        let ttl = var(REMOTE_TTL_ENV)
            .map(|t| t.parse::<u64>().map(Duration::from_secs))
            .transpose()
            .map_err(|e| Error::Setting {
                var: REMOTE_TTL_ENV,
                reason: format!("not a number of seconds: {e}"),
            })?;
        let millis = |name: &'static str| {
            var(name)
                .map(|t| t.parse::<u64>().map(Duration::from_millis))
                .transpose()
                .map_err(|e| Error::Setting {
                    var: name,
                    reason: format!("not a number of milliseconds: {e}"),
                })
        };
        Ok(RemoteSettings {
            url: var(REMOTE_ENV),
            mode,
            namespace: var(REMOTE_NAMESPACE_ENV),
            ttl,
            connect_timeout: millis(REMOTE_CONNECT_TIMEOUT_ENV)?,
            io_timeout: millis(REMOTE_IO_TIMEOUT_ENV)?,
            lease_ttl: millis(REMOTE_LEASE_TTL_ENV)?,
        })
    }

    /// The remote these settings describe; None without a URL or with mode `off`.
    pub fn into_remote(self) -> Result<Option<Remote>, Error> {
        let Some(url) = self.url else {
            return Ok(None);
        };
        let mode = self.mode.unwrap_or(RemoteMode::ReadWrite);
        if mode == RemoteMode::Off {
            return Ok(None);
        }
        let mut options = RedisOptions::default().ttl(self.ttl);
        if let Some(namespace) = self.namespace {
            options = options.namespace(namespace);
        }
        if let Some(timeout) = self.connect_timeout {
            options.connect_timeout = timeout;
        }
        if let Some(timeout) = self.io_timeout {
            options.io_timeout = timeout;
        }
        let tier = RedisTier::open(&url, options)?;
        let mut policy = RemotePolicy::default().mode(mode);
        if let Some(ttl) = self.lease_ttl {
            policy = policy.lease_ttl(ttl);
        }
        Ok(Some(Remote::new(tier).with_policy(policy)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_never_show_a_password() {
        assert_eq!(
            redact("redis://reader:secret@cache.example:6379/2"),
            "redis://cache.example:6379/2"
        );
        assert_eq!(
            redact("redis+unix:///run/r.sock?user=a&pass=secret"),
            "redis+unix:///run/r.sock"
        );
    }

    #[test]
    fn no_url_or_mode_off_means_no_remote_and_settings_reach_the_policy() {
        let none = RemoteSettings::default()
            .into_remote()
            .expect("no URL is no error");
        assert!(none.is_none(), "no URL, no remote");
        let off = RemoteSettings {
            url: Some("redis+unix:///nowhere.sock".into()),
            mode: Some(RemoteMode::Off),
            ..RemoteSettings::default()
        };
        assert!(
            off.into_remote().expect("valid").is_none(),
            "mode off, no remote"
        );
        let on = RemoteSettings {
            url: Some("redis+unix:///nowhere.sock".into()),
            mode: Some(RemoteMode::ReadOnly),
            lease_ttl: Some(Duration::from_millis(1500)),
            ..RemoteSettings::default()
        };
        let remote = on.into_remote().expect("valid").expect("a remote");
        assert_eq!(remote.policy().mode, RemoteMode::ReadOnly);
        assert_eq!(remote.policy().lease_ttl, Duration::from_millis(1500));
        assert_eq!(remote.location(), "redis+unix:///nowhere.sock");
    }

    #[test]
    fn tls_urls_are_refused_with_a_reason() {
        let refused = RedisTier::open("rediss://h:6380", RedisOptions::default());
        assert!(
            matches!(refused, Err(Error::Url { ref reason, .. }) if reason.contains("TLS")),
            "{refused:?}"
        );
    }
}
