//! The settings every fleet tier reads, from the environment or a command line: the URL, the
//! mode, the timeouts and the lease expiry (shared), and the namespace and upload expiry (which
//! only Redis honours; the S3 tier refuses them). One reader, so that each variable means the
//! same whichever tier its URL names.

use crate::error::Error;
use jit_cache::{RemoteMode, RemotePolicy};
use std::time::Duration;

/// The remote's URL: `redis://[user:pass@]host:port/db`, `redis+unix:///path?db=N&user=U&pass=P`,
/// or `s3://bucket/prefix`.
pub const REMOTE_ENV: &str = "JIT_CACHE_REMOTE";
/// `read-write` (default), `read-only` or `off`.
pub const REMOTE_MODE_ENV: &str = "JIT_CACHE_REMOTE_MODE";
/// The key prefix (default `jit-cache`; Redis only).
pub const REMOTE_NAMESPACE_ENV: &str = "JIT_CACHE_REMOTE_NAMESPACE";
/// An expiry for uploaded manifests and blobs, in seconds (default: none; Redis only).
pub const REMOTE_TTL_ENV: &str = "JIT_CACHE_REMOTE_TTL";
/// The connect timeout in milliseconds, handshake included (default: the tier's).
pub const REMOTE_CONNECT_TIMEOUT_ENV: &str = "JIT_CACHE_REMOTE_CONNECT_TIMEOUT_MS";
/// The timeout of each read and write in milliseconds (default: the tier's).
pub const REMOTE_IO_TIMEOUT_ENV: &str = "JIT_CACHE_REMOTE_IO_TIMEOUT_MS";
/// A compile lease's expiry in milliseconds (default 15 000): how long a dead holder delays the
/// fleet.
pub const REMOTE_LEASE_TTL_ENV: &str = "JIT_CACHE_REMOTE_LEASE_TTL_MS";

/// The remote's settings, from the environment ([`REMOTE_ENV`] and the others) or a command line.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RemoteSettings {
    /// The URL; no remote without one.
    pub url: Option<String>,
    /// The mode (default read-write).
    pub mode: Option<RemoteMode>,
    /// The namespace (default `jit-cache`; Redis only).
    pub namespace: Option<String>,
    /// An expiry for uploads (Redis only).
    pub ttl: Option<Duration>,
    /// The connect timeout (default: the tier's).
    pub connect_timeout: Option<Duration>,
    /// The I/O timeout (default: the tier's).
    pub io_timeout: Option<Duration>,
    /// The lease expiry (default [`RemotePolicy::default`]'s).
    pub lease_ttl: Option<Duration>,
}

impl RemoteSettings {
    /// Reads [`REMOTE_ENV`], [`REMOTE_MODE_ENV`], [`REMOTE_NAMESPACE_ENV`], [`REMOTE_TTL_ENV`],
    /// [`REMOTE_CONNECT_TIMEOUT_ENV`], [`REMOTE_IO_TIMEOUT_ENV`] and [`REMOTE_LEASE_TTL_ENV`];
    /// unset and empty variables mean the defaults.
    ///
    /// # Errors
    /// [`Error::Setting`] naming the first malformed variable.
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

    /// The URL of the remote to open: None without a URL or with mode `off` (no remote).
    pub fn active_url(&self) -> Option<&str> {
        self.url
            .as_deref()
            .filter(|_| self.mode() != RemoteMode::Off)
    }

    /// The mode, read-write unless set.
    pub fn mode(&self) -> RemoteMode {
        self.mode.unwrap_or(RemoteMode::ReadWrite)
    }

    /// The policy these settings ask for: [`RemotePolicy::default`] in [`RemoteSettings::mode`],
    /// with the lease expiry if one is set.
    pub fn policy(&self) -> RemotePolicy {
        let policy = RemotePolicy::default().mode(self.mode());
        match self.lease_ttl {
            Some(ttl) => policy.lease_ttl(ttl),
            None => policy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_url_or_mode_off_means_no_remote_and_the_policy_takes_the_settings() {
        assert_eq!(RemoteSettings::default().active_url(), None, "no URL");
        let mut settings = RemoteSettings {
            url: Some("redis+unix:///nowhere.sock".into()),
            mode: Some(RemoteMode::Off),
            ..RemoteSettings::default()
        };
        assert_eq!(settings.active_url(), None, "mode off");
        settings.mode = None;
        assert_eq!(
            settings.active_url(),
            Some("redis+unix:///nowhere.sock"),
            "read-write unless set"
        );
        assert_eq!(settings.policy().mode, RemoteMode::ReadWrite);
        settings.mode = Some(RemoteMode::ReadOnly);
        settings.lease_ttl = Some(Duration::from_millis(1500));
        let policy = settings.policy();
        assert_eq!(policy.mode, RemoteMode::ReadOnly);
        assert_eq!(policy.lease_ttl, Duration::from_millis(1500));
    }
}
