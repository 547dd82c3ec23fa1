//! What one checker pass found, as the checker process prints it (JSON) and the harness reads it.

use crate::trace::TraceFindings;
use serde::{Deserialize, Serialize};

/// The findings of one checker pass over a cache root and the workload's files, with the
/// workers stopped. Every list holds one line per problem; all empty means the pass is clean.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CheckReport {
    /// Published entries examined.
    pub entries_checked: usize,
    /// Entries whose artifact differs from `meta.json` or from the compiler's bytes.
    pub corrupt: Vec<String>,
    /// Entries missing `meta.json` or part of the artifact.
    pub partial: Vec<String>,
    /// Lock files that could not be locked at once with every worker dead.
    pub stuck_locks: Vec<String>,
    /// Lock files that vanished or changed inode since the previous pass (a deleted lock file).
    pub lock_files_replaced: Vec<String>,
    /// Items the sweep removed (leftovers of dead processes, aged past the sweep's age).
    pub swept: usize,
    /// Staging, trash or temp items still present after the sweep.
    pub leftovers_after_sweep: Vec<String>,
    /// Kernels that could be neither hit nor rebuilt, or came back with wrong bytes.
    pub recovery_failures: Vec<String>,
    /// Put files examined.
    pub puts_checked: usize,
    /// Put files lost, torn, or older than the last put that returned success.
    pub puts_bad: Vec<String>,
    /// Staged directories examined.
    pub dirs_checked: usize,
    /// Staged directories missing or partial.
    pub dirs_bad: Vec<String>,
    /// What workers recorded: wrong reads, corrupt entries found by `verify`, failed operations.
    pub worker_violations: Vec<String>,
    /// Entries `verify` reported corrupt because they vanished under it (a concurrent `gc` moved
    /// them aside): a false alarm of `jit-cache`'s `verify`, counted, not a violation.
    #[serde(default)]
    pub verify_vanished: Vec<String>,
    /// Stored entries (`jit_cache::store`) examined.
    #[serde(default)]
    pub stored_checked: usize,
    /// Stored entries present but not whole: a file missing, cut short, or not the producer's
    /// bytes, or `meta.json` absent, garbled or not the key's.
    #[serde(default)]
    pub stored_torn: Vec<String>,
    /// Stored keys whose `begin` (short wait, every worker dead) answered neither `Ready` nor
    /// `Produce`, or whose entry came back wrong.
    #[serde(default)]
    pub stored_stuck: Vec<String>,
    /// Stored keys the checker's `begin` found ready.
    #[serde(default)]
    pub stored_ready: usize,
    /// Stored keys the checker's `begin` made it produce (none was published).
    #[serde(default)]
    pub stored_produced: usize,
    /// `Busy` answers the workers got (a producer held the key for the whole wait): counted, not
    /// violations (a stuck key is the checker's finding).
    #[serde(default)]
    pub store_busy: usize,
    /// Imports of the workload's pack the checker made (one per pass, after the sweep, with
    /// every worker dead).
    #[serde(default)]
    pub imports: usize,
    /// Entries those imports published.
    #[serde(default)]
    pub imported: usize,
    /// What blocked or spoiled the checker's import: an error, or an entry skipped.
    #[serde(default)]
    pub import_failures: Vec<String>,
    /// The event log's rules (overlapping holders, double compiles).
    pub trace: TraceFindings,
}

impl CheckReport {
    /// Every violation, one line each.
    pub fn violations(&self) -> Vec<String> {
        let tagged = |tag: &str, items: &[String]| {
            items
                .iter()
                .map(|i| format!("{tag}: {i}"))
                .collect::<Vec<_>>()
        };
        [
            tagged("corrupt entry", &self.corrupt),
            tagged("partial entry", &self.partial),
            tagged("torn stored entry", &self.stored_torn),
            tagged("stuck stored key", &self.stored_stuck),
            tagged("import failed", &self.import_failures),
            tagged("stuck lock", &self.stuck_locks),
            tagged("lock file replaced", &self.lock_files_replaced),
            tagged("leftover after sweep", &self.leftovers_after_sweep),
            tagged("recovery failure", &self.recovery_failures),
            tagged("put", &self.puts_bad),
            tagged("staged directory", &self.dirs_bad),
            tagged("worker", &self.worker_violations),
            tagged("overlapping lock holders", &self.trace.lock_overlaps),
            tagged("double compile", &self.trace.double_compiles),
            tagged("double produce", &self.trace.double_produces),
            tagged(
                "corrupt entry found by a builder",
                &self.trace.corrupt_found,
            ),
        ]
        .concat()
    }
}
