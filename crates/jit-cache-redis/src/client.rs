//! The tier's handle on one Redis server: the URL parsed once (TLS refused), connections made
//! lazily within the connect timeout and kept idle for reuse, each command run with the I/O
//! timeout, every client error mapped to the cache's kinds, and the bounded read every other
//! module reads through.

use crate::options::RedisOptions;
use jit_cache::{TierError, TierErrorKind};
use jit_cache_remote::Error;
use std::sync::Mutex;
use std::time::Duration;

/// The most idle connections kept per tier.
const MAX_IDLE: usize = 8;

/// A Redis server as a [`RemoteTier`](jit_cache::RemoteTier). Connects lazily, on first use.
pub struct RedisTier {
    client: redis::Client,
    pub(crate) location: String,
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

    pub(crate) fn name(&self, space: char, id: &str) -> String {
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
    pub(crate) fn run<T>(
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
    pub(crate) fn get_bounded(
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

    pub(crate) fn ttl_ms(&self) -> u64 {
        self.options.ttl.map_or(0, |t| t.as_millis() as u64)
    }

    /// All keys matching `pattern`, by `SCAN` (never `KEYS`, which blocks the server).
    pub(crate) fn scan(&self, pattern: &str) -> Result<Vec<String>, TierError> {
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
    fn tls_urls_are_refused_with_a_reason() {
        let refused = RedisTier::open("rediss://h:6380", RedisOptions::default());
        assert!(
            matches!(refused, Err(Error::Url { ref reason, .. }) if reason.contains("TLS")),
            "{refused:?}"
        );
    }
}
