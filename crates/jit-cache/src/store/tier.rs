//! The remote tier: hosts of a fleet share compiled kernels through a store they all reach
//! (Redis in `jit-cache-redis`, S3 in `jit-cache-s3`: each implements [`RemoteTier`]).
//!
//! Local first: a local hit (memo or entry) never touches the network. On a local miss, under
//! the key's local lock (so one process per host asks), the key's remote manifest is read: each of
//! its variants carries the headers and absences its compile depended on, and a variant is used
//! only if they all match this host's files (the same rule as a local variant). Its artifact is
//! fetched by blake3 digest, checked for size and digest, and published into the local cache by
//! the normal durable path. When nothing serves, one process in the fleet compiles: it holds a
//! lease (a token with an expiry, renewed while it compiles, released by compare-and-delete); the
//! others poll for its manifest, and take over when the lease expires without one. After a build
//! the blob is uploaded first (content-addressed, never overwritten), the manifest last (a bounded
//! list of variants, replaced by compare-and-set). A compile failure of the source's own is
//! shared with a short expiry, so the fleet compiles a broken kernel once.
//!
//! # Guarantees
//! - **Remote bytes are verified.** An artifact is used only when its length and blake3 digest
//!   equal the manifest's; a manifest is used only when it parses, names this key and kind, and
//!   each variant's digest matches its recorded inputs. Anything else is a miss, counted as
//!   `rejected`, never an error.
//! - **A remote never fails a build.** Every remote fault (refused, timed out, stopped or killed
//!   server, a protocol error) is a miss; after the first one the remote is skipped for the rest
//!   of the process (ccache's rule), so a dead remote costs one connect timeout per process. A
//!   write refused for permission (a read-only ACL user) or memory (`maxmemory`) stops writes
//!   only; reads go on.
//! - **One compile per kernel fleet-wide** while the lease holder lives; a holder killed mid-
//!   compile costs the others at most the lease's expiry.
//!
//! # Limitations
//! - The skip-after-failure state lives in a [`Remote`] value: clones share it, separately
//!   created ones do not. At most one warning is printed to standard error per `Remote`.
//! - A waiter polls the manifest (every [`RemotePolicy::poll`]) for at most
//!   [`RemotePolicy::lease_wait`], then compiles itself.
//! - Remote counters are appended to `state/remote.log` of the local root (best effort; a
//!   read-only root counts nothing); [`Remote::stats`] has this process's.

use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A remote store of manifests, content-addressed blobs, failure records and leases.
///
/// Implementations bound every read by `limit` (a value longer than that is
/// [`TierErrorKind::TooLarge`], never read whole), apply connect and I/O timeouts, and never
/// retry into a long wait: the cache skips a failing tier on its own.
pub trait RemoteTier: Send + Sync + std::fmt::Debug {
    /// Where the tier is, for messages (no password).
    fn location(&self) -> String;
    /// The manifest of `key` (hex), if any.
    fn get_manifest(&self, key: &str, limit: usize) -> Result<Option<Vec<u8>>, TierError>;
    /// Replaces the manifest of `key` only if it is still as `expected` (what the writer read);
    /// false when another writer changed it first.
    fn replace_manifest(
        &self,
        key: &str,
        expected: Expected<'_>,
        new: &[u8],
    ) -> Result<bool, TierError>;
    /// The blob named by its blake3 digest (hex), if any.
    fn get_blob(&self, digest: &str, limit: usize) -> Result<Option<Vec<u8>>, TierError>;
    /// Stores a blob under its digest unless one is there already (never overwritten).
    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), TierError>;
    /// Overwrites the blob under `digest` with `bytes`, whose digest it is: only for a blob this
    /// process read and found not to hash to its name (corrupt, truncated), so it cannot replace
    /// a good one.
    fn repair_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), TierError>;
    /// The shared compile failure of `key`, if any.
    fn get_failure(&self, key: &str, limit: usize) -> Result<Option<Vec<u8>>, TierError>;
    /// Shares a compile failure of `key` for `ttl`.
    fn put_failure(&self, key: &str, record: &[u8], ttl: Duration) -> Result<(), TierError>;
    /// Takes the lease of `key` with `token` for `ttl` if nobody holds it.
    fn acquire_lease(&self, key: &str, token: &str, ttl: Duration) -> Result<bool, TierError>;
    /// Extends the lease if `token` still holds it; false when it expired or was taken.
    fn renew_lease(&self, key: &str, token: &str, ttl: Duration) -> Result<bool, TierError>;
    /// Releases the lease if `token` still holds it (compare-and-delete).
    fn release_lease(&self, key: &str, token: &str) -> Result<(), TierError>;
    /// Whether some host holds the lease of `key` now: a batch puts such a kernel off and
    /// builds the others first, so that hosts asking for the same kernels in the same order
    /// spread over them instead of queueing in step. The default says no (a tier without the
    /// query only loses that spreading).
    fn lease_held(&self, key: &str) -> Result<bool, TierError> {
        let _ = key;
        Ok(false)
    }
    /// A round trip that proves the tier answers.
    fn health(&self) -> Result<(), TierError>;
}

/// What a manifest's writer read before replacing it: the compare of its compare-and-set.
/// Exhaustive on purpose: a tier must compare every case, never treat an unknown one as absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected<'a> {
    /// No manifest.
    Absent,
    /// Exactly these bytes.
    Value(&'a [u8]),
    /// A value longer than this many bytes, refused unread ([`TierErrorKind::TooLarge`]): garbage
    /// no reader accepts, replaced while it is still longer than that.
    LongerThan(usize),
}

/// What went wrong with a remote operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TierErrorKind {
    /// Refused, timed out, reset, or the server went away: skip the remote.
    Unavailable,
    /// The user may not do this (a read-only ACL user writing): stop writing.
    Denied,
    /// The store is out of memory or space (`maxmemory`): stop writing.
    Full,
    /// A value longer than the caller's limit: treated as absent.
    TooLarge,
    /// Anything else the store said (a wrong type, a script error): skip the remote.
    Protocol,
}

/// A remote operation's failure: the operation, its target (a store key) and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("remote {op} {target}: {message}")]
pub struct TierError {
    op: &'static str,
    target: String,
    kind: TierErrorKind,
    message: String,
}

impl TierError {
    /// A failure of `op` on `target`.
    pub fn new(
        op: &'static str,
        target: impl Into<String>,
        kind: TierErrorKind,
        message: impl Into<String>,
    ) -> TierError {
        TierError {
            op,
            target: target.into(),
            kind,
            message: message.into(),
        }
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> TierErrorKind {
        self.kind
    }

    /// The operation ("get blob", "acquire lease", ...).
    pub fn op(&self) -> &'static str {
        self.op
    }
}

/// Whether the cache reads and writes the remote tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteMode {
    /// Fetch, upload, and coordinate compiles through leases.
    ReadWrite,
    /// Fetch only: no upload, no lease (for untrusted writers, bazel #4276's lesson).
    ReadOnly,
    /// Never touch the remote.
    Off,
}

impl std::str::FromStr for RemoteMode {
    type Err = String;
    fn from_str(s: &str) -> Result<RemoteMode, String> {
        match s {
            "read-write" | "rw" => Ok(RemoteMode::ReadWrite),
            "read-only" | "ro" => Ok(RemoteMode::ReadOnly),
            "off" => Ok(RemoteMode::Off),
            other => Err(format!(
                "unknown remote mode `{other}` (read-write, read-only or off)"
            )),
        }
    }
}

/// How the cache uses a remote tier.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RemotePolicy {
    /// Read-write, read-only or off.
    pub mode: RemoteMode,
    /// A compile lease's expiry; renewed every third of it while the holder compiles.
    pub lease_ttl: Duration,
    /// How long a host waits for another's compile before compiling itself.
    pub lease_wait: Duration,
    /// How often a waiter looks for the manifest.
    pub poll: Duration,
    /// How long a shared compile failure is served.
    pub failure_ttl: Duration,
    /// How many variants a remote manifest keeps (newest first).
    pub max_variants: usize,
}

impl Default for RemotePolicy {
    fn default() -> RemotePolicy {
        RemotePolicy {
            mode: RemoteMode::ReadWrite,
            lease_ttl: Duration::from_secs(15),
            lease_wait: Duration::from_secs(300),
            poll: Duration::from_millis(50),
            failure_ttl: Duration::from_secs(60),
            max_variants: 8,
        }
    }
}

impl RemotePolicy {
    /// Sets the mode.
    pub fn mode(mut self, mode: RemoteMode) -> RemotePolicy {
        self.mode = mode;
        self
    }

    /// Sets the lease expiry.
    pub fn lease_ttl(mut self, ttl: Duration) -> RemotePolicy {
        self.lease_ttl = ttl;
        self
    }

    /// Sets how often a waiter looks for the manifest.
    pub fn poll(mut self, poll: Duration) -> RemotePolicy {
        self.poll = poll;
        self
    }

    /// Sets the longest wait for another host's compile.
    pub fn lease_wait(mut self, wait: Duration) -> RemotePolicy {
        self.lease_wait = wait;
        self
    }
}

/// Counters of remote use: of one process ([`Remote::stats`]) or of a root's log
/// ([`crate::Cache::remote_stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RemoteStats {
    /// Local misses answered by a verified remote artifact.
    pub hits: u64,
    /// Local misses the remote could not answer.
    pub misses: u64,
    /// Artifacts uploaded (blob and manifest).
    pub uploads: u64,
    /// Verified artifact bytes fetched.
    pub bytes_fetched: u64,
    /// Artifact bytes uploaded.
    pub bytes_uploaded: u64,
    /// Remote faults (each turns the remote off for the rest of the process, or its writes).
    pub errors: u64,
    /// Local misses that waited for another host's compile.
    pub leases_waited: u64,
    /// Manifests or blobs refused by verification (wrong size, digest, format): misses.
    pub rejected: u64,
    /// Compile failures answered from the remote.
    pub failures_fetched: u64,
    /// Compile failures shared.
    pub failures_shared: u64,
}

/// One event, counted in memory and appended to the root's `state/remote.log`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    Hit(u64),
    Miss,
    Upload(u64),
    Error,
    LeaseWait,
    Rejected,
    FailureFetched,
    FailureShared,
}

crate::base::words::words! {
    /// What an [`Event`] counts, by its word in `state/remote.log`.
    enum Counted {
        Hit = "hit",
        Miss = "miss",
        Upload = "upload",
        Error = "error",
        LeaseWait = "lease-wait",
        Rejected = "rejected",
        FailureFetched = "failure-fetched",
        FailureShared = "failure-shared",
    }
}

impl Event {
    /// What the event counts, and its bytes (a log line's two fields).
    fn parts(self) -> (Counted, u64) {
        match self {
            Event::Hit(n) => (Counted::Hit, n),
            Event::Miss => (Counted::Miss, 0),
            Event::Upload(n) => (Counted::Upload, n),
            Event::Error => (Counted::Error, 0),
            Event::LeaseWait => (Counted::LeaseWait, 0),
            Event::Rejected => (Counted::Rejected, 0),
            Event::FailureFetched => (Counted::FailureFetched, 0),
            Event::FailureShared => (Counted::FailureShared, 0),
        }
    }

    /// The event a log line's two fields name.
    fn from_parts(counted: Counted, n: u64) -> Event {
        match counted {
            Counted::Hit => Event::Hit(n),
            Counted::Miss => Event::Miss,
            Counted::Upload => Event::Upload(n),
            Counted::Error => Event::Error,
            Counted::LeaseWait => Event::LeaseWait,
            Counted::Rejected => Event::Rejected,
            Counted::FailureFetched => Event::FailureFetched,
            Counted::FailureShared => Event::FailureShared,
        }
    }
}

impl RemoteStats {
    /// Counts one event: the one place that says which field each event adds to, for this
    /// process's counts and the log's alike.
    fn add(&mut self, event: Event) {
        match event {
            Event::Hit(n) => {
                self.hits += 1;
                self.bytes_fetched += n;
            }
            Event::Miss => self.misses += 1,
            Event::Upload(n) => {
                self.uploads += 1;
                self.bytes_uploaded += n;
            }
            Event::Error => self.errors += 1,
            Event::LeaseWait => self.leases_waited += 1,
            Event::Rejected => self.rejected += 1,
            Event::FailureFetched => self.failures_fetched += 1,
            Event::FailureShared => self.failures_shared += 1,
        }
    }

    pub(crate) fn from_log(text: &str) -> RemoteStats {
        let mut stats = RemoteStats::default();
        for line in text.lines() {
            let mut parts = line.split(' ');
            let (Some(_), Some(word), Some(n)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            // A word this version does not know (another version's event) is skipped.
            let Ok(counted) = word.parse::<Counted>() else {
                continue;
            };
            stats.add(Event::from_parts(counted, n.parse().unwrap_or(0)));
        }
        stats
    }
}

/// A remote tier with its policy and this process's state (skipped after a fault, counters).
/// Clones share the state.
#[derive(Clone)]
pub struct Remote {
    pub(crate) tier: Arc<dyn RemoteTier>,
    pub(crate) policy: RemotePolicy,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    /// Set by the first fault: the remote is skipped from then on.
    off: AtomicBool,
    /// Set by a refused write (permission, memory): reads go on.
    no_writes: AtomicBool,
    warned: AtomicBool,
    reason: Mutex<Option<String>>,
    /// Blobs read here that did not hash to their names: an upload of the same digest repairs
    /// them.
    corrupt_blobs: Mutex<std::collections::HashSet<fingerprint::Digest>>,
    counts: Mutex<RemoteStats>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("location", &self.tier.location())
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Remote {
    /// A remote tier with the default policy (read-write).
    pub fn new(tier: impl RemoteTier + 'static) -> Remote {
        Remote {
            tier: Arc::new(tier),
            policy: RemotePolicy::default(),
            state: Arc::default(),
        }
    }

    /// Sets the policy.
    pub fn with_policy(mut self, policy: RemotePolicy) -> Remote {
        self.policy = policy;
        self
    }

    /// The policy.
    pub fn policy(&self) -> &RemotePolicy {
        &self.policy
    }

    /// Where the tier is.
    pub fn location(&self) -> String {
        self.tier.location()
    }

    /// Why the remote (or its writes) was turned off in this process, if it was.
    pub fn disabled_reason(&self) -> Option<String> {
        self.state
            .reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// This process's counters.
    pub fn stats(&self) -> RemoteStats {
        self.state
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// One round trip to the tier (for `stats`); never changes this process's state.
    pub fn health(&self) -> Result<(), TierError> {
        self.tier.health()
    }

    pub(crate) fn note_corrupt_blob(&self, digest: fingerprint::Digest) {
        self.state
            .corrupt_blobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(digest);
    }

    pub(crate) fn blob_was_corrupt(&self, digest: &fingerprint::Digest) -> bool {
        self.state
            .corrupt_blobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(digest)
    }

    pub(crate) fn readable(&self) -> bool {
        self.policy.mode != RemoteMode::Off && !self.state.off.load(Ordering::SeqCst)
    }

    pub(crate) fn writable(&self) -> bool {
        self.readable()
            && self.policy.mode == RemoteMode::ReadWrite
            && !self.state.no_writes.load(Ordering::SeqCst)
    }

    fn count(&self, event: Event) {
        self.state
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(event);
    }

    /// Records a remote fault (see [`Remote::fault`]) and appends it to the root's log.
    pub(crate) fn fault_logged(&self, layout: &crate::storage::layout::Layout, error: &TierError) {
        self.fault(error);
        append(layout, Event::Error);
    }

    /// Counts an event in memory and appends it to the root's log (best effort).
    pub(crate) fn log(&self, layout: &crate::storage::layout::Layout, event: Event) {
        self.count(event);
        append(layout, event);
    }

    /// Records a fault: a refused write stops writes, a too-large value is only counted, anything
    /// else turns the remote off for the rest of the process. Warns once.
    pub(crate) fn fault(&self, error: &TierError) {
        self.count(Event::Error);
        let what = match error.kind() {
            TierErrorKind::TooLarge => return,
            TierErrorKind::Denied | TierErrorKind::Full if is_write(error.op()) => {
                self.state.no_writes.store(true, Ordering::SeqCst);
                "not written to again"
            }
            _ => {
                self.state.off.store(true, Ordering::SeqCst);
                "not used again"
            }
        };
        let message = format!(
            "remote cache {} failed ({error}); {what} by this process",
            self.tier.location()
        );
        let mut reason = self.state.reason.lock().unwrap_or_else(|p| p.into_inner());
        reason.get_or_insert(message.clone());
        drop(reason);
        // One line per process, never one per kernel: the build goes on locally either way.
        if !self.state.warned.swap(true, Ordering::SeqCst) {
            eprintln!("jit-cache: warning: {message}");
        }
    }
}

/// The root's log of remote events, one line each, summed by [`crate::Cache::remote_stats`].
pub(crate) const LOG_FILE: &str = "remote.log";

fn append(layout: &crate::storage::layout::Layout, event: Event) {
    let (counted, n) = event.parts();
    let line = format!("{} {counted} {n}", crate::base::host::now_ms());
    layout.append_line(crate::storage::layout::Subdir::State, LOG_FILE, line);
}

fn is_write(op: &str) -> bool {
    !op.starts_with("get") && op != "health"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_sum_into_stats_and_unknown_lines_are_skipped() {
        let stats = RemoteStats::from_log(
            "1 hit 100\n2 hit 50\n3 miss 0\n4 upload 70\n5 error 0\ngarbage\n6 future-word 3\n",
        );
        assert_eq!(
            (
                stats.hits,
                stats.bytes_fetched,
                stats.misses,
                stats.uploads,
                stats.errors
            ),
            (2, 150, 1, 1, 1),
            "every known event counts once, bytes add up"
        );
    }

    #[test]
    fn modes_parse() {
        assert_eq!("read-only".parse(), Ok(RemoteMode::ReadOnly));
        assert_eq!("off".parse(), Ok(RemoteMode::Off));
        assert!("sometimes".parse::<RemoteMode>().is_err());
    }
}
