//! The Redis client's options: the key namespace, an expiry for uploads, and the timeouts.

use std::time::Duration;

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
