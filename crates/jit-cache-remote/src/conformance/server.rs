//! What the suite asks of a tier: [`TestServer`], a real server of the test's own (the factory
//! is [`TestServer::start`]), tiers on it, and the hooks a test needs to look at, tamper with,
//! stop and kill what the tier stores.

use crate::audit::Audit;
use crate::test_server::Signal;
use jit_cache::RemoteTier;
use std::time::Duration;

/// The timeouts of a tier under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeouts {
    /// The tier's defaults: the fault tests that are about timeouts.
    Default,
    /// Connect 2 s, I/O 10 s: enough for a loaded 2-core machine, for the tests about sharing
    /// and coordination.
    Generous,
    /// These.
    Exactly {
        /// The connect timeout.
        connect: Duration,
        /// The I/O timeout.
        io: Duration,
    },
}

/// What a stored object holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    /// A key's manifest.
    Manifest,
    /// An artifact, named by its digest.
    Blob,
    /// A shared compile failure.
    Failure,
    /// A compile lease.
    Lease,
}

/// A tier's real server, started for one test and stopped (by its pid) when dropped.
pub trait TestServer: Sized {
    /// The tier.
    type Tier: RemoteTier + 'static;

    /// What a tier's error says of a server that accepts and never answers (a stopped one).
    const NO_ANSWER: &'static str;

    /// Starts a server of the test's own.
    ///
    /// # Panics
    /// When the server cannot start (`cargo xtask setup` installs them): a missing server fails
    /// the test, never skips it.
    fn start() -> Self;

    /// A tier on this server as an identity that may do everything.
    fn tier(&self, timeouts: Timeouts) -> Self::Tier;

    /// A tier on this server as an identity that may only read (and answer health checks), with
    /// [`Timeouts::Generous`].
    fn reader_tier(&self) -> Self::Tier;

    /// The names of the stored objects of `space`, as [`TestServer::get`] takes them.
    fn names(&self, space: Space) -> Vec<String>;

    /// An object's bytes, None when absent.
    fn get(&self, name: &str) -> Option<Vec<u8>>;

    /// Writes an object, unconditionally (tampering).
    fn put(&self, name: &str, bytes: &[u8]);

    /// Removes an object (an eviction).
    fn delete(&self, name: &str);

    /// Sends `signal` to the server's processes (`STOP`: a server that accepts connections and
    /// never answers; `CONT` resumes it).
    fn signal(&self, signal: Signal);

    /// Kills the server (everything it held is lost) and waits for it.
    fn kill(&mut self);

    /// The tier's audit of the whole store.
    fn audit(&self) -> Audit;
}
