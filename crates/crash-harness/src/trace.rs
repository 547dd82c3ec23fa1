//! The shared event log (`JIT_CACHE_LOCK_LOG`) and the rules checked on it.
//!
//! Every line is `<monotonic ns> <realtime ns> <pid> <event> <key> [detail]`, appended with one
//! `write` to an `O_APPEND` file, so the file's order is the order in which the writes happened.
//! The rules use that order, not the clocks:
//!
//! - jit-cache logs `acquire` after a key lock is granted and `release` before it is given up;
//!   the harness logs `kill` before it sends SIGKILL, and a failpoint logs `abort` before the
//!   process kills itself. So in a correct protocol, between one holder's `acquire` and its
//!   `release` (or its death) no other `acquire` of the same lock file appears (lines a process wrote
//!   between the harness's `kill` and its `reaped` are ignored: it was dying). One that does is
//!   an **overlapping holder**.
//! - The fake compiler logs `compile-start` and `compile-end` (key field: the kernel's name,
//!   detail: its parent, the builder, and its output path); jit-cache logs `point published`
//!   after an entry's rename, `trash` before an entry is marked for eviction or moved aside, and
//!   `untrash` when an eviction that marked it called itself off. A compile of a key is a
//!   **double compile** when (a) an earlier compile of that key is still running (it has not
//!   ended and its builder is not dead), or (b) the earlier compile's builder published the entry
//!   and no `trash` of the key was logged since. A recompile after the earlier builder died before
//!   publishing, or after the entry was evicted, is legitimate (and counted as such). Compiles
//!   whose output lies outside the cache (the cache's private fallback) are counted apart.
//! - The workers log `produce-start` once `jit_cache::store`'s `begin` made them a stored entry's
//!   producer (key field: the key directory's digest) and `produce-end` after its commit
//!   returned; jit-cache logs `point store-published` after the rename. The same rule as for
//!   compiles makes a produce a **double produce**: one producer per key at a time, and none
//!   while the entry a producer published is in place.
//! - Across hosts sharing one root ([`analyze_across_hosts`]) one exception: a compile or produce
//!   after the builder that published died before its `release` (past its rename, before its
//!   note for other hosts' waiters was sure to be written) is legitimate, as a recompile after a
//!   kill. Another host's negative lookup cache may hide the entry for up to `actimeo`, and no
//!   note tells it to wait: it makes the entry again, and its no-replace rename finds the one in
//!   place, which it answers with (jit-cache's storage docs, Limits). So may the dead builder's
//!   own host: its `published` point follows its rename whether that published or found the
//!   name taken, by an entry another host published without a note (an import killed at
//!   `import-published`, which this log does not record per key) and hidden here too. On one
//!   host ([`analyze`]) every lookup under the lock sees the entry, and the rule stays strict.
//! - jit-cache logs `corrupt` for every broken entry a builder finds under its lock: a correct
//!   protocol never leaves one, so each is a violation.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

/// One parsed line of the event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The writer's process id.
    pub pid: u32,
    /// What happened: `acquire`, `release`, `point`, `abort`, `trash`, `kill`, `compile-start`, ...
    pub kind: String,
    /// The key (hex), a kernel name, or `-`.
    pub key: String,
    /// The rest of the line.
    pub detail: String,
}

/// Parses the log; lines that do not parse (a torn last line of a killed writer) are skipped.
pub fn parse(text: &str) -> Vec<Event> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let _mono = fields.next()?;
            let _real = fields.next()?;
            let pid = fields.next()?.parse().ok()?;
            let kind = fields.next()?.to_string();
            let key = fields.next()?.to_string();
            let detail = fields.next().unwrap_or("").to_string();
            Some(Event {
                pid,
                kind,
                key,
                detail,
            })
        })
        .collect()
}

/// What the rules found in a log.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TraceFindings {
    /// Key-lock acquisitions logged.
    pub acquires: usize,
    /// Compiles into the cache.
    pub compiles: usize,
    /// Compiles outside the cache (the private fallback of a failing cache).
    pub uncached_compiles: usize,
    /// Recompiles because the earlier builder died before publishing.
    pub recompiles_after_kill: usize,
    /// Recompiles because the entry was evicted or moved aside.
    pub recompiles_after_eviction: usize,
    /// Overlapping holders of one lock file.
    pub lock_overlaps: Vec<String>,
    /// Compiles of a key that the rule forbids.
    pub double_compiles: Vec<String>,
    /// Corrupt entries a builder found under its key lock (a correct protocol leaves none).
    #[serde(default)]
    pub corrupt_found: Vec<String>,
    /// Stored entries produced (begin answered `Produce`).
    #[serde(default)]
    pub produces: usize,
    /// Produces again because the earlier producer died before publishing.
    #[serde(default)]
    pub reproduces_after_kill: usize,
    /// Produces again because the entry was evicted.
    #[serde(default)]
    pub reproduces_after_eviction: usize,
    /// Produces of a stored key that the rule forbids.
    #[serde(default)]
    pub double_produces: Vec<String>,
}

impl TraceFindings {
    /// Adds another log's findings (one host's, in a multi-host run with local locks).
    pub fn absorb(&mut self, other: TraceFindings) {
        self.acquires += other.acquires;
        self.compiles += other.compiles;
        self.uncached_compiles += other.uncached_compiles;
        self.recompiles_after_kill += other.recompiles_after_kill;
        self.recompiles_after_eviction += other.recompiles_after_eviction;
        self.lock_overlaps.extend(other.lock_overlaps);
        self.double_compiles.extend(other.double_compiles);
        self.corrupt_found.extend(other.corrupt_found);
        self.produces += other.produces;
        self.reproduces_after_kill += other.reproduces_after_kill;
        self.reproduces_after_eviction += other.reproduces_after_eviction;
        self.double_produces.extend(other.double_produces);
    }
}

/// Why a key is made again (a compile or a produce), when the rule allows it.
enum Again {
    First,
    AfterKill,
    AfterEviction,
}

impl KeyState {
    /// A compile or produce of this key begins (builder `builder`, the process doing the work
    /// `worker`): why that is allowed, or the rule it breaks.
    fn start(
        &mut self,
        key: &str,
        builder: u32,
        worker: u32,
        stillborn: bool,
    ) -> Result<Again, String> {
        let verdict = if let Some((other_worker, other)) = self.running {
            Err(format!(
                "{key} made by builder {builder} while builder {other} (process {other_worker}) was still making it"
            ))
        } else if self.compiles == 0 {
            Ok(Again::First)
        } else {
            match (self.published, self.trashed) {
                (true, false) if self.unnoted => Ok(Again::AfterKill),
                (true, false) => Err(format!(
                    "{key} made again by builder {builder} while the entry builder {} published was in place",
                    self.last_builder.unwrap_or(0)
                )),
                (true, true) => Ok(Again::AfterEviction),
                (false, _) => Ok(Again::AfterKill),
            }
        };
        self.compiles += 1;
        self.running = if stillborn {
            None
        } else {
            Some((worker, builder))
        };
        self.last_builder = Some(builder);
        self.published = false;
        self.trashed = false;
        self.noting = None;
        self.unnoted = false;
        verdict
    }
}

#[derive(Default)]
struct KeyState {
    compiles: usize,
    running: Option<(u32, u32)>,
    last_builder: Option<u32>,
    published: bool,
    trashed: bool,
    /// The builder that published and has not yet released the key's lock (its note for other
    /// hosts' waiters is written before that release).
    noting: Option<u32>,
    /// Across hosts: the builder died between publishing and releasing the key's lock, so the
    /// entry may have no note and other hosts may not see it yet.
    unnoted: bool,
}

/// Applies the rules to `events`. `keys` maps kernel names to key hex; `cache_root` tells a
/// compile into the cache from a private one.
pub fn analyze(
    events: &[Event],
    keys: &HashMap<String, String>,
    cache_root: &str,
) -> TraceFindings {
    analyze_on(events, keys, cache_root, false)
}

/// [`analyze`] for the merged logs of several hosts that share one root and its locks: a repeat
/// after a builder died between publishing and its note is legitimate (the module's rules).
pub fn analyze_across_hosts(
    events: &[Event],
    keys: &HashMap<String, String>,
    cache_root: &str,
) -> TraceFindings {
    analyze_on(events, keys, cache_root, true)
}

fn analyze_on(
    events: &[Event],
    keys: &HashMap<String, String>,
    cache_root: &str,
    across_hosts: bool,
) -> TraceFindings {
    let mut findings = TraceFindings::default();
    let mut holders: HashMap<String, Vec<(u32, String)>> = HashMap::new();
    let mut states: HashMap<String, KeyState> = HashMap::new();
    // Stored keys, by their key directory's digest.
    let mut stored: HashMap<String, KeyState> = HashMap::new();
    // A killed process may still write a line or two between the harness's `kill` line and its
    // death; its pid is not reused before the harness logs `reaped`. Lines of a dying process are
    // ignored (its holds ended at the `kill` line, which is lenient); a line from a reaped pid is
    // a new process.
    let mut dying: HashSet<u32> = HashSet::new();
    let mut reaped: HashSet<u32> = HashSet::new();
    for event in events {
        if !matches!(event.kind.as_str(), "kill" | "reaped") {
            if dying.contains(&event.pid) && !event.kind.starts_with("compile-") {
                continue;
            }
            reaped.remove(&event.pid);
        }
        match event.kind.as_str() {
            "reaped" => {
                if let Some(pid) = event.detail.split(' ').next().and_then(|p| p.parse().ok()) {
                    dying.remove(&pid);
                    reaped.insert(pid);
                }
            }
            "acquire" => {
                findings.acquires += 1;
                let held = holders.entry(event.detail.clone()).or_default();
                if let Some((other, other_key)) = held.first() {
                    findings.lock_overlaps.push(format!(
                        "pid {} acquired {} (key {}) while pid {other} held it (key {})",
                        event.pid,
                        event.detail,
                        short(&event.key),
                        short(other_key)
                    ));
                }
                held.push((event.pid, event.key.clone()));
            }
            "release" => {
                if let Some(held) = holders.get_mut(&event.detail) {
                    if let Some(i) = held.iter().position(|(pid, _)| *pid == event.pid) {
                        held.remove(i);
                    }
                }
                for map in [&mut states, &mut stored] {
                    if let Some(state) = map.get_mut(&event.key) {
                        if state.noting == Some(event.pid) {
                            state.noting = None;
                        }
                    }
                }
            }
            "kill" | "abort" => {
                let dead = if event.kind == "kill" {
                    event.detail.split(' ').next().and_then(|p| p.parse().ok())
                } else {
                    Some(event.pid)
                };
                if let Some(dead) = dead {
                    dying.insert(dead);
                    for held in holders.values_mut() {
                        held.retain(|(pid, _)| *pid != dead);
                    }
                    for state in states.values_mut().chain(stored.values_mut()) {
                        if state.running.is_some_and(|(_, builder)| builder == dead) {
                            state.running = None;
                        }
                        if state.noting == Some(dead) {
                            state.noting = None;
                            state.unnoted = across_hosts;
                        }
                    }
                }
            }
            "point" if event.detail == "published" || event.detail == "store-published" => {
                let map = if event.detail == "published" {
                    &mut states
                } else {
                    &mut stored
                };
                if let Some(state) = map.get_mut(&event.key) {
                    if state.last_builder == Some(event.pid) {
                        state.published = true;
                        state.trashed = false;
                        state.noting = Some(event.pid);
                    }
                }
            }
            "corrupt" => {
                findings
                    .corrupt_found
                    .push(format!("key {}: {}", short(&event.key), event.detail))
            }
            "trash" | "untrash" => {
                for map in [&mut states, &mut stored] {
                    if let Some(state) = map.get_mut(&event.key) {
                        state.trashed = event.kind == "trash";
                    }
                }
            }
            "produce-start" => {
                findings.produces += 1;
                let state = stored.entry(event.key.clone()).or_default();
                let stillborn = dying.contains(&event.pid);
                match state.start(&event.key, event.pid, event.pid, stillborn) {
                    Ok(Again::First) => {}
                    Ok(Again::AfterKill) => findings.reproduces_after_kill += 1,
                    Ok(Again::AfterEviction) => findings.reproduces_after_eviction += 1,
                    Err(why) => findings.double_produces.push(why),
                }
            }
            "produce-end" => {
                if let Some(state) = stored.get_mut(&event.key) {
                    if state.running.is_some_and(|(worker, _)| worker == event.pid) {
                        state.running = None;
                    }
                }
            }
            "compile-start" => {
                let mut detail = event.detail.splitn(2, ' ');
                let builder: u32 = detail.next().and_then(|p| p.parse().ok()).unwrap_or(0);
                let output = detail.next().unwrap_or("");
                if !output.starts_with(cache_root) {
                    findings.uncached_compiles += 1;
                    continue;
                }
                let Some(key) = keys.get(&event.key) else {
                    continue;
                };
                findings.compiles += 1;
                let state = states.entry(key.clone()).or_default();
                // A compiler whose builder was already killed is stillborn: it dies with it.
                let stillborn = dying.contains(&builder) || reaped.contains(&builder);
                match state.start(&event.key, builder, event.pid, stillborn) {
                    Ok(Again::First) => {}
                    Ok(Again::AfterKill) => findings.recompiles_after_kill += 1,
                    Ok(Again::AfterEviction) => findings.recompiles_after_eviction += 1,
                    Err(why) => findings.double_compiles.push(why),
                }
            }
            "compile-end" => {
                for state in states.values_mut() {
                    if state
                        .running
                        .is_some_and(|(compiler, _)| compiler == event.pid)
                    {
                        state.running = None;
                    }
                }
            }
            _ => {}
        }
    }
    findings
}

fn short(key: &str) -> &str {
    &key[..key.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(lines: &[&str]) -> Vec<Event> {
        parse(
            &lines
                .iter()
                .map(|l| format!("1 2 {l}\n"))
                .collect::<String>(),
        )
    }

    fn keys() -> HashMap<String, String> {
        HashMap::from([("k0".to_string(), "aa00".to_string())])
    }

    #[test]
    fn serial_holders_and_a_killed_holder_are_fine_overlap_is_not() {
        let ok = log(&[
            "10 acquire aa00 /c/locks/aa.lock",
            "10 release aa00 /c/locks/aa.lock",
            "11 acquire aa00 /c/locks/aa.lock",
            "1 kill - 11 compiling",
            "12 acquire aa00 /c/locks/aa.lock",
        ]);
        assert!(
            analyze(&ok, &keys(), "/c").lock_overlaps.is_empty(),
            "serial holders, one killed"
        );
        let bad = log(&[
            "10 acquire aa00 /c/locks/aa.lock",
            "11 acquire aa00 /c/locks/aa.lock",
        ]);
        assert_eq!(
            analyze(&bad, &keys(), "/c").lock_overlaps.len(),
            1,
            "two holders at once"
        );
    }

    #[test]
    fn a_stored_key_has_one_producer_at_a_time_and_none_while_its_entry_is_in_place() {
        let fine = log(&[
            "10 produce-start bb00 triton-000",
            "1 kill - 10 store-writing",
            "1 reaped - 10",
            "11 produce-start bb00 triton-000",
            "11 point bb00 store-published",
            "11 produce-end bb00 triton-000",
            "12 trash bb00 /c/v2/entries/bb/bb00/v",
            "13 produce-start bb00 triton-000",
        ]);
        let found = analyze(&fine, &keys(), "/c");
        assert!(
            found.double_produces.is_empty(),
            "after a kill and after an eviction: {:?}",
            found.double_produces
        );
        assert_eq!(
            (
                found.produces,
                found.reproduces_after_kill,
                found.reproduces_after_eviction
            ),
            (3, 1, 1)
        );
        let at_once = log(&[
            "10 produce-start bb00 triton-000",
            "11 produce-start bb00 triton-000",
        ]);
        assert_eq!(
            analyze(&at_once, &keys(), "/c").double_produces.len(),
            1,
            "two producers of one key at once"
        );
        let in_place = log(&[
            "10 produce-start bb00 triton-000",
            "10 point bb00 store-published",
            "10 produce-end bb00 triton-000",
            "11 produce-start bb00 triton-000",
        ]);
        assert_eq!(
            analyze(&in_place, &keys(), "/c").double_produces.len(),
            1,
            "a produce while the published entry is in place"
        );
        let called_off = log(&[
            "10 produce-start bb00 triton-000",
            "10 point bb00 store-published",
            "10 produce-end bb00 triton-000",
            "12 trash bb00 /c/v2/entries/bb/bb00/v",
            "12 untrash bb00 /c/v2/entries/bb/bb00/v",
            "11 produce-start bb00 triton-000",
        ]);
        assert_eq!(
            analyze(&called_off, &keys(), "/c").double_produces.len(),
            1,
            "an eviction that marked the entry and called itself off left it in place"
        );
    }

    #[test]
    fn across_hosts_a_produce_after_a_death_before_the_note_is_legitimate() {
        let died_before_note = |then: &str| {
            log(&[
                "10 acquire bb00 /c/locks/bb.lock",
                "10 produce-start bb00 triton-000",
                "10 point bb00 store-published",
                then,
                "11 acquire bb00 /c/locks/bb.lock",
                "11 produce-start bb00 triton-000",
            ])
        };
        let killed = died_before_note("10 abort - store-published");
        let found = analyze_across_hosts(&killed, &keys(), "/c");
        assert_eq!(
            (found.double_produces.len(), found.reproduces_after_kill),
            (0, 1),
            "no note told the other hosts: {:?}",
            found.double_produces
        );
        assert_eq!(
            analyze(&killed, &keys(), "/c").double_produces.len(),
            1,
            "one host: the locked lookup sees the entry"
        );
        let noted = died_before_note("10 release bb00 /c/locks/bb.lock");
        assert_eq!(
            analyze_across_hosts(&noted, &keys(), "/c")
                .double_produces
                .len(),
            1,
            "a publisher that released the lock had written its note"
        );
    }

    #[test]
    fn a_recompile_is_legitimate_only_after_a_death_before_publishing_or_an_eviction() {
        let after_kill = log(&[
            "20 compile-start k0 10 /c/v1/staging/x/artifact.cubin",
            "1 kill - 10 compiling",
            "21 compile-start k0 11 /c/v1/staging/y/artifact.cubin",
            "21 compile-end k0 11 /c/v1/staging/y/artifact.cubin",
            "11 point aa00 published",
            "12 trash aa00 /c/v1/entries/aa/aa00/v",
            "22 compile-start k0 13 /c/v1/staging/z/artifact.cubin",
        ]);
        let found = analyze(&after_kill, &keys(), "/c");
        assert!(
            found.double_compiles.is_empty(),
            "{:?}",
            found.double_compiles
        );
        assert_eq!(
            (found.recompiles_after_kill, found.recompiles_after_eviction),
            (1, 1)
        );
        let twice = log(&[
            "20 compile-start k0 10 /c/s/a",
            "20 compile-end k0 10 /c/s/a",
            "10 point aa00 published",
            "21 compile-start k0 11 /c/s/b",
        ]);
        assert_eq!(
            analyze(&twice, &keys(), "/c").double_compiles.len(),
            1,
            "published and in place"
        );
        let stillborn = log(&[
            "1 kill - 10 compiling",
            "20 compile-start k0 10 /c/s/a",
            "10 acquire aa00 /c/locks/aa.lock",
            "1 reaped - 10",
            "21 compile-start k0 11 /c/s/b",
            "11 acquire aa00 /c/locks/aa.lock",
        ]);
        let found = analyze(&stillborn, &keys(), "/c");
        assert!(
            found.double_compiles.is_empty() && found.lock_overlaps.is_empty(),
            "a dying builder's lines are not held against others: {found:?}"
        );
        let concurrent = log(&[
            "20 compile-start k0 10 /c/s/a",
            "21 compile-start k0 11 /c/s/b",
        ]);
        assert_eq!(
            analyze(&concurrent, &keys(), "/c").double_compiles.len(),
            1,
            "two at once"
        );
        let private = log(&[
            "20 compile-start k0 10 /tmp/private/a",
            "21 compile-start k0 11 /tmp/private/b",
        ]);
        let found = analyze(&private, &keys(), "/c");
        assert_eq!(
            (
                found.compiles,
                found.uncached_compiles,
                found.double_compiles.len()
            ),
            (0, 2, 0)
        );
    }
}
