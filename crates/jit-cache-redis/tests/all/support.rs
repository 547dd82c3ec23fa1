//! A real `redis-server` per test (Unix socket in a temp dir, persistence off, its own process
//! group, killed by pid), as the conformance suite's [`TestServer`]: admin inspection and
//! tampering over a direct connection, and a read-only ACL user.

use jit_cache_redis::test_server::RedisServer;
use jit_cache_redis::{RedisOptions, RedisTier};
use jit_cache_remote::conformance::server::{Space, TestServer, Timeouts};
use jit_cache_remote::test_server::Signal;
use jit_cache_remote::Audit;
use std::time::Duration;

/// A redis-server of this test's own (in a temp dir that lives as long as it does).
pub struct Server {
    server: RedisServer,
    _dir: tempfile::TempDir,
}

impl Server {
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// A direct connection, for the test's own inspection and tampering.
    pub fn admin(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(2)))
            .expect("admin connection")
    }
}

impl TestServer for Server {
    type Tier = RedisTier;

    /// A read that timed out: `EAGAIN`, as Linux words it.
    const NO_ANSWER: &'static str = "Resource temporarily unavailable";

    /// A missing `redis-server` fails the test: `cargo xtask setup` installs it.
    fn start() -> Server {
        let dir = tempfile::tempdir().expect("temp dir for redis");
        let server = RedisServer::start(dir.path(), &[]).unwrap_or_else(|e| panic!("{e}"));
        Server { server, _dir: dir }
    }

    fn tier(&self, timeouts: Timeouts) -> RedisTier {
        let mut options = RedisOptions::default();
        match timeouts {
            Timeouts::Default => {}
            Timeouts::Generous => {
                options.connect_timeout = Duration::from_secs(2);
                options.io_timeout = Duration::from_secs(10);
            }
            Timeouts::Exactly { connect, io } => {
                options.connect_timeout = connect;
                options.io_timeout = io;
            }
        }
        RedisTier::open(&self.url(), options).expect("a valid URL")
    }

    /// An ACL user that may read (`GETRANGE`) and answer health checks (`PING`), nothing else.
    fn reader_tier(&self) -> RedisTier {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("reader")
            .arg("on")
            .arg(">secret")
            .arg("~*")
            .arg("+getrange")
            .arg("+ping")
            .query::<()>(&mut self.admin())
            .expect("create a read-only user");
        let mut options = RedisOptions::default();
        options.connect_timeout = Duration::from_secs(2);
        options.io_timeout = Duration::from_secs(10);
        let url = format!("{}?user=reader&pass=secret", self.url());
        RedisTier::open(&url, options).expect("a valid URL")
    }

    fn names(&self, space: Space) -> Vec<String> {
        let space = match space {
            Space::Manifest => 'm',
            Space::Blob => 'b',
            Space::Failure => 'f',
            Space::Lease => 'l',
        };
        redis::cmd("KEYS")
            .arg(format!("jit-cache:{space}:*"))
            .query(&mut self.admin())
            .expect("KEYS")
    }

    fn get(&self, name: &str) -> Option<Vec<u8>> {
        redis::cmd("GET")
            .arg(name)
            .query(&mut self.admin())
            .expect("GET")
    }

    fn put(&self, name: &str, bytes: &[u8]) {
        redis::cmd("SET")
            .arg(name)
            .arg(bytes)
            .query::<()>(&mut self.admin())
            .expect("SET");
    }

    fn delete(&self, name: &str) {
        redis::cmd("DEL")
            .arg(name)
            .query::<()>(&mut self.admin())
            .expect("DEL");
    }

    fn signal(&self, signal: Signal) {
        self.server.signal(signal);
    }

    fn kill(&mut self) {
        self.server.kill();
    }

    fn audit(&self) -> Audit {
        self.tier(Timeouts::Generous).audit().expect("audit")
    }
}
