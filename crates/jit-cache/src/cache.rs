//! The cache handle and its read path: `get_or_build`, `explain`, and the in-process memo.

use crate::entry::{self, Artifact, Meta, Unusable};
use crate::error::{CompileFailed, Error, Result};
use crate::headers::{self, HeaderRecord, Mismatch};
use crate::key::{self, Prepared};
use crate::layout::{Layout, RootMode};
use crate::records::{read_record, FailureInputs, FailureRecord, SlotRecord};
use crate::single_flight::SingleFlight;
use crate::spec::KernelSpec;
use crate::toolchain::Toolchain;
use fingerprint::{Digest, StatCache};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// How a request was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The entry was in the cache (or in this process's memory) and still matches its inputs.
    Hit,
    /// Nothing was cached for this kernel before: it was compiled and published.
    Built,
    /// An earlier variant of this kernel existed and no longer matches: it was compiled again,
    /// for these reasons (cargo-style: "header `inc/tile.cuh` changed (blake3 1f2e.. -> 9a0b..)").
    Rebuilt {
        /// Why the earlier variant could not be used.
        reasons: Vec<String>,
    },
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Hit => write!(f, "hit"),
            Outcome::Built => write!(f, "built"),
            Outcome::Rebuilt { reasons } => write!(f, "rebuilt ({})", reasons.join("; ")),
        }
    }
}

/// The answer to `get_or_build`.
#[derive(Debug, Clone)]
pub struct Built {
    /// The compiled kernel, pinned while held.
    pub artifact: Artifact,
    /// Hit, built or rebuilt with reasons.
    pub outcome: Outcome,
    /// Set when the cache could not be used (full, read-only, failing): the artifact was then
    /// compiled in a private directory and is not cached. Says why.
    pub warning: Option<String>,
    /// The entry's recorded headers, validated (or recorded) by this process: what the memo keeps.
    pub(crate) headers: Option<Arc<[HeaderRecord]>>,
}

/// Options for [`Cache::open_with`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CacheOptions {
    /// How the root may be shared.
    pub mode: RootMode,
    /// The compiler; found with `nvcc::Nvcc::locate` when not given.
    pub nvcc: Option<nvcc::Nvcc>,
    /// How many variants (header sets) one key keeps; the least recently built go first.
    pub max_variants: usize,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            mode: RootMode::Private,
            nvcc: None,
            max_variants: 8,
        }
    }
}

impl CacheOptions {
    /// Sets the root mode.
    pub fn mode(mut self, mode: RootMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the compiler.
    pub fn nvcc(mut self, nvcc: nvcc::Nvcc) -> Self {
        self.nvcc = Some(nvcc);
        self
    }
}

type FlightResult = std::result::Result<Built, Arc<Error>>;

/// A kernel cache rooted at one directory. Cheap to share between threads (`&Cache` or `Arc`).
pub struct Cache {
    pub(crate) layout: std::result::Result<Layout, String>,
    pub(crate) root: PathBuf,
    pub(crate) options: CacheOptions,
    toolchain: OnceLock<std::result::Result<Arc<Toolchain>, String>>,
    stat: OnceLock<Mutex<StatCache>>,
    confirmed: Mutex<HashSet<(PathBuf, Digest)>>,
    memo: Mutex<HashMap<Digest, Memo>>,
    requests: Mutex<HashMap<KernelSpec, RequestMemo>>,
    flights: SingleFlight<Digest, FlightResult>,
}

/// What this process remembers of an entry: its bytes and project headers, never a pin (a
/// remembered entry stays evictable; a memo hit re-pins it). Toolkit and system headers were
/// validated when the entry was first seen by this process and are not checked again.
#[derive(Clone)]
struct Memo {
    project_headers: Arc<[HeaderRecord]>,
    bytes: Arc<[u8]>,
    path: PathBuf,
    kind: nvcc::OutputKind,
    /// The same check precomputed for one search path, when every header had a settled stamp.
    fast: Option<Arc<headers::FastCheck>>,
}

/// A request seen before in this process, with what its key depended on beyond the spec itself.
struct RequestMemo {
    prepared: Arc<Prepared>,
    env: Vec<Option<std::ffi::OsString>>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Cache {
    /// Opens the cache at `root` (created, mode 0700, when missing) with default options.
    ///
    /// A root owned by another user, writable by others, or reached through a symlink is refused
    /// with an error that says why. A root that exists but cannot be written (read-only, full)
    /// still opens: every build then compiles privately and says so in [`Built::warning`].
    pub fn open(root: impl AsRef<Path>) -> Result<Cache> {
        Cache::open_with(root, CacheOptions::default())
    }

    /// Opens the default root: `$JIT_CACHE_DIR`, else `$XDG_CACHE_HOME/jit-cache`, else
    /// `~/.cache/jit-cache`.
    pub fn open_default() -> Result<Cache> {
        let root = crate::layout::default_root().ok_or_else(|| Error::UnsafeRoot {
            path: PathBuf::new(),
            reason: "no cache directory: set JIT_CACHE_DIR, XDG_CACHE_HOME or HOME".into(),
        })?;
        Cache::open(root)
    }

    /// Opens the cache at `root` with options.
    pub fn open_with(root: impl AsRef<Path>, options: CacheOptions) -> Result<Cache> {
        let root = root.as_ref().to_path_buf();
        let layout = match Layout::open(&root, options.mode) {
            Ok(layout) => Ok(layout),
            Err(e @ Error::UnsafeRoot { .. }) => return Err(e),
            Err(e) => Err(e.to_string()),
        };
        Ok(Cache {
            layout,
            root,
            options,
            toolchain: OnceLock::new(),
            stat: OnceLock::new(),
            confirmed: Mutex::new(HashSet::new()),
            memo: Mutex::new(HashMap::new()),
            requests: Mutex::new(HashMap::new()),
            flights: SingleFlight::new(),
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn toolchain(&self) -> Result<Arc<Toolchain>> {
        let probed = self.toolchain.get_or_init(|| {
            let nvcc = match &self.options.nvcc {
                Some(nvcc) => nvcc.clone(),
                None => nvcc::Nvcc::locate().map_err(|e| e.to_string())?,
            };
            let state_dir = self.layout.as_ref().ok().map(|l| l.dir("state"));
            Toolchain::probe(nvcc, state_dir.as_deref())
                .map(Arc::new)
                .map_err(|e| e.to_string())
        });
        probed.clone().map_err(Error::Compiler)
    }

    /// The stat cache, loaded on first use: a hit whose headers all match their stamps never
    /// needs it.
    pub(crate) fn stat(&self) -> MutexGuard<'_, StatCache> {
        let cell = self.stat.get_or_init(|| {
            Mutex::new(match &self.layout {
                Ok(layout) => StatCache::load(&stat_cache_file(layout)),
                Err(_) => StatCache::default(),
            })
        });
        cell.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Revalidates recorded headers for `search`, hashing through the stat cache only where a
    /// stamp does not settle it.
    pub(crate) fn revalidate(
        &self,
        records: &[HeaderRecord],
        search: &headers::SearchPath,
    ) -> std::result::Result<(), Box<Mismatch>> {
        let mut confirmed = self.confirmed.lock().unwrap_or_else(|p| p.into_inner());
        headers::revalidate(
            records,
            search,
            &mut |p: &Path| self.stat().hash_file(p).ok(),
            &mut confirmed,
        )
    }

    pub(crate) fn prepare(&self, spec: &KernelSpec) -> Result<(Arc<Toolchain>, Prepared)> {
        spec.validate()?;
        key::check_source_readable(spec)?;
        let toolchain = self.toolchain()?;
        let prepared = key::prepare(spec, &toolchain, &|p| Ok(self.stat().hash_file(p)?))?;
        Ok((toolchain, prepared))
    }

    /// Returns the compiled artifact for `spec`: from memory, from the cache, or by compiling it
    /// once however many threads and processes ask at the same time.
    ///
    /// A failed compile returns [`Error::Compile`] with the compiler's diagnostics, and records the
    /// failure so that later callers get it at once until an input changes (see [`Cache::retry`]).
    pub fn get_or_build(&self, spec: &KernelSpec) -> Result<Built> {
        let (toolchain, prepared) = self.prepare_memoized(spec)?;
        if let Some(hit) = self.memo_hit(&prepared) {
            return Ok(hit);
        }
        let (result, _role) = self.flights.run(&prepared.key, || {
            self.lookup_or_build(spec, &toolchain, &prepared)
                .map_err(Arc::new)
        });
        match result {
            Ok(built) => {
                if let (None, Some(headers)) = (&built.warning, &built.headers) {
                    let project_headers: Arc<[HeaderRecord]> = headers
                        .iter()
                        .filter(|h| h.is_project_header())
                        .cloned()
                        .collect();
                    let fast =
                        headers::FastCheck::new(&project_headers, &prepared.search).map(Arc::new);
                    let memo = Memo {
                        project_headers,
                        fast,
                        bytes: built.artifact.shared_bytes(),
                        path: built.artifact.path().to_path_buf(),
                        kind: built.artifact.kind(),
                    };
                    self.memo
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(prepared.key, memo);
                }
                Ok(built)
            }
            Err(shared) => Err(Arc::try_unwrap(shared).unwrap_or_else(Error::Shared)),
        }
    }

    /// `prepare`, skipped for a request seen before whose source content (a `stat` through the
    /// stat cache) and relevant environment are unchanged. Requests with file or wheel extras are
    /// always prepared in full.
    fn prepare_memoized(&self, spec: &KernelSpec) -> Result<(Arc<Toolchain>, Arc<Prepared>)> {
        let toolchain = self.toolchain()?;
        let memoizable = spec.extras.iter().all(|e| {
            matches!(
                e,
                crate::spec::Extra::Value { .. } | crate::spec::Extra::Env(_)
            )
        });
        let env_now = || -> Vec<Option<std::ffi::OsString>> {
            let extra_env = spec.extras.iter().filter_map(|e| match e {
                crate::spec::Extra::Env(var) => Some(var.as_str()),
                _ => None,
            });
            nvcc::RELEVANT_ENV
                .iter()
                .copied()
                .chain(extra_env)
                .map(std::env::var_os)
                .collect()
        };
        if memoizable {
            let requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(seen) = requests.get(spec) {
                let source_unchanged = match &seen.prepared.source_path {
                    None => true,
                    Some(path) => {
                        let stamp = seen.prepared.source_stamp;
                        (stamp.is_some() && headers::StatStamp::of(path) == stamp)
                            || fingerprint::hash_file(path).ok()
                                == Some(seen.prepared.source_digest)
                    }
                };
                if source_unchanged && seen.env == env_now() {
                    return Ok((toolchain, Arc::clone(&seen.prepared)));
                }
            }
        }
        let (toolchain, prepared) = self.prepare(spec)?;
        let prepared = Arc::new(prepared);
        if memoizable {
            let memo = RequestMemo {
                prepared: Arc::clone(&prepared),
                env: env_now(),
            };
            self.requests
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(spec.clone(), memo);
        }
        Ok((toolchain, prepared))
    }

    /// Whether another builder holds the lock of `spec`'s key right now: a batch builds other
    /// kernels first instead of queueing behind it. Only a scheduling hint (it may change at once).
    pub(crate) fn key_is_being_built(&self, spec: &KernelSpec) -> bool {
        let (Ok(layout), Ok((_, prepared))) = (&self.layout, self.prepare_memoized(spec)) else {
            return false;
        };
        if self
            .memo
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&prepared.key)
        {
            return false;
        }
        let lock = layout.lock_file(&prepared.key);
        matches!(
            durable_fs::try_lock(&lock, durable_fs::LockMode::Exclusive),
            Ok(None)
        )
    }

    /// Forgets a recorded compile failure for `spec` and asks again.
    pub fn retry(&self, spec: &KernelSpec) -> Result<Built> {
        let (_, prepared) = self.prepare(spec)?;
        if let Ok(layout) = &self.layout {
            let path = layout.failure_file(&prepared.key);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove failure record", path, e)),
            }
        }
        self.get_or_build(spec)
    }

    /// A repeated request in this process: revalidate the headers (a `stat` each) and answer
    /// from memory.
    fn memo_hit(&self, prepared: &Prepared) -> Option<Built> {
        let memo = self
            .memo
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&prepared.key)
            .cloned()?;
        let fast = memo
            .fast
            .as_ref()
            .filter(|f| f.applies_to(&prepared.search));
        let valid = match fast {
            Some(fast) if fast.still_valid() => true,
            _ => self
                .revalidate(&memo.project_headers, &prepared.search)
                .is_ok(),
        };
        let artifact = if valid {
            Artifact::repin(memo.bytes, &memo.path, memo.kind)
        } else {
            None
        };
        let Some(artifact) = artifact else {
            self.memo
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&prepared.key);
            return None;
        };
        Some(Built {
            artifact,
            outcome: Outcome::Hit,
            warning: None,
            headers: None,
        })
    }

    /// Looks for a valid variant of the key. Returns the hit, plus the entries found corrupt and
    /// the reasons the other variants did not match.
    pub(crate) fn lookup(
        &self,
        layout: &Layout,
        prepared: &Prepared,
        kind: nvcc::OutputKind,
    ) -> Lookup {
        let mut lookup = Lookup::default();
        let key_dir = layout.key_dir(&prepared.key);
        for variant in entry::list_variants(&key_dir) {
            let dir = key_dir.join(&variant);
            let open = match entry::open_entry(&dir, &prepared.key, &variant) {
                Ok(open) => open,
                Err(Unusable::Absent) => continue,
                Err(Unusable::Corrupt(reason)) => {
                    lookup.corrupt.push((dir, reason));
                    continue;
                }
            };
            let checked = self.revalidate(&open.meta.headers, &prepared.search);
            if let Err(mismatch) = checked {
                lookup.mismatches.push(*mismatch);
                continue;
            }
            match open.load(kind) {
                Ok((meta, artifact)) => {
                    lookup.hit = Some((meta, artifact));
                    return lookup;
                }
                Err(Unusable::Absent) => {}
                Err(Unusable::Corrupt(reason)) => lookup.corrupt.push((dir, reason)),
            }
        }
        lookup
    }

    /// The miss path, run by one thread per key in this process.
    fn lookup_or_build(
        &self,
        spec: &KernelSpec,
        toolchain: &Toolchain,
        prepared: &Prepared,
    ) -> Result<Built> {
        let layout = match &self.layout {
            Ok(layout) => layout,
            Err(why) => {
                let warning = format!(
                    "cache at {} is unusable ({why}); compiled `{}` uncached",
                    self.root.display(),
                    spec.name
                );
                return crate::build::build_uncached(spec, toolchain, warning);
            }
        };
        let first = self.lookup(layout, prepared, spec.kind);
        if let Some((meta, artifact)) = first.hit {
            return Ok(Built {
                artifact,
                outcome: Outcome::Hit,
                warning: None,
                headers: Some(meta.headers.into()),
            });
        }
        if let Some(failure) = self.recorded_failure(layout, prepared) {
            return Err(Error::Compile(Arc::new(failure)));
        }
        match crate::build::locked_build(self, layout, spec, toolchain, prepared) {
            Err(e) if e.is_storage() => {
                let warning = format!(
                    "cache at {} failed ({e}); compiled `{}` uncached",
                    self.root.display(),
                    spec.name
                );
                crate::build::build_uncached(spec, toolchain, warning)
            }
            other => other,
        }
    }

    /// The recorded failure of this key, if what it depended on is unchanged since.
    pub(crate) fn recorded_failure(
        &self,
        layout: &Layout,
        prepared: &Prepared,
    ) -> Option<CompileFailed> {
        let record: FailureRecord = read_record(&layout.failure_file(&prepared.key))?;
        if record.key != prepared.key {
            return None;
        }
        let unchanged = match &record.inputs {
            FailureInputs::Headers(headers) => self.revalidate(headers, &prepared.search).is_ok(),
            FailureInputs::IncludeTrees(digest) => {
                self.include_trees_snapshot(prepared) == Some(*digest)
            }
        };
        unchanged.then_some(CompileFailed {
            from_record: true,
            ..record.failure
        })
    }

    /// A digest of the include directories' trees, through the stat cache, for a failure that left
    /// no dependency file. None when they are too large to snapshot: the failure is then not
    /// recorded. (The source's own directory is not walked: it may hold anything, the cache
    /// included; a header missing from it is reported by the compiler, and adding it there changes
    /// nothing we can see cheaply, so such failures recompile once the key's source changes.)
    pub(crate) fn include_trees_snapshot(&self, prepared: &Prepared) -> Option<Digest> {
        const MAX_FILES: usize = 20_000;
        if prepared.search.include_dirs.is_empty() {
            return None;
        }
        let mut text = String::from("jit-cache failure include trees\0");
        let mut files = 0;
        let mut stat = self.stat();
        for dir in &prepared.search.include_dirs {
            let tree =
                fingerprint::hash_tree(dir, &fingerprint::TreeOptions::default(), Some(&mut stat))
                    .ok()?;
            files += tree.files.len();
            if files > MAX_FILES {
                return None;
            }
            text.push_str(&tree.digest.to_hex());
            text.push('\0');
        }
        Some(Digest::of_bytes(text.as_bytes()))
    }

    /// The reasons an earlier variant of this slot does not serve, by diffing its manifest against
    /// the inputs now. None when the slot has no history.
    pub(crate) fn rebuild_reasons(
        &self,
        layout: &Layout,
        prepared: &Prepared,
        lookup: &Lookup,
    ) -> Option<Vec<String>> {
        let record: SlotRecord = read_record(&layout.slot_file(&prepared.slot))?;
        let mut before = record.manifest.clone();
        for header in &record.headers {
            before.insert(
                header.component_name(),
                fingerprint::Component {
                    digest: header.digest,
                    value: None,
                },
            );
        }
        let mut now = prepared.manifest.clone();
        {
            let mut stat = self.stat();
            for header in &record.headers {
                let Some(dir) = prepared.search.dir_of(header.base) else {
                    continue;
                };
                if let Ok(digest) = stat.hash_file(&dir.join(&header.rel)) {
                    now.insert(
                        header.component_name(),
                        fingerprint::Component {
                            digest,
                            value: None,
                        },
                    );
                }
            }
        }
        let mut reasons: Vec<String> = fingerprint::diff(&before, &now)
            .iter()
            .map(ToString::to_string)
            .collect();
        reasons.extend(
            lookup
                .mismatches
                .iter()
                .filter(|m| matches!(m, Mismatch::Shadowed { .. }))
                .map(ToString::to_string),
        );
        reasons.extend(
            lookup
                .corrupt
                .iter()
                .map(|(dir, why)| format!("entry {} was unusable: {why}", dir.display())),
        );
        if reasons.is_empty() {
            reasons.push("the earlier entry was evicted or removed".to_string());
        }
        reasons.dedup();
        Some(reasons)
    }

    /// Says what `get_or_build` would do for `spec`, and why, without compiling.
    pub fn explain(&self, spec: &KernelSpec) -> Result<Explanation> {
        let (_, prepared) = self.prepare(spec)?;
        let layout = self.layout.as_ref().map_err(|why| Error::UnsafeRoot {
            path: self.root.clone(),
            reason: why.clone(),
        })?;
        let lookup = self.lookup(layout, &prepared, spec.kind);
        let action = if let Some((_, artifact)) = &lookup.hit {
            Action::Hit {
                path: artifact.path().to_path_buf(),
            }
        } else if let Some(failure) = self.recorded_failure(layout, &prepared) {
            Action::FailedBefore { failure }
        } else {
            match self.rebuild_reasons(layout, &prepared, &lookup) {
                Some(reasons) => Action::Rebuild { reasons },
                None => Action::Build,
            }
        };
        Ok(Explanation {
            name: spec.name.clone(),
            key: prepared.key.to_hex(),
            slot: prepared.slot.to_hex(),
            action,
        })
    }

    /// Persists the stat cache when it changed (it saves re-hashing in the next process).
    pub(crate) fn save_stat_cache(&self) {
        // Never loaded means never changed.
        let Some(cell) = self.stat.get() else { return };
        if let Ok(layout) = &self.layout {
            let stat = cell.lock().unwrap_or_else(|p| p.into_inner());
            if stat.is_dirty() {
                let _ = stat.save(&stat_cache_file(layout));
            }
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        self.save_stat_cache();
    }
}

fn stat_cache_file(layout: &Layout) -> PathBuf {
    layout
        .dir("state")
        .join(format!("statcache-{}.json", crate::toolchain::host_name()))
}

/// What a lookup found.
#[derive(Default)]
pub(crate) struct Lookup {
    pub(crate) hit: Option<(Meta, Artifact)>,
    pub(crate) corrupt: Vec<(PathBuf, String)>,
    pub(crate) mismatches: Vec<Mismatch>,
}

/// What [`Cache::explain`] found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Explanation {
    /// The kernel's name.
    pub name: String,
    /// The key (hex).
    pub key: String,
    /// The slot (hex).
    pub slot: String,
    /// What would happen.
    #[serde(flatten)]
    pub action: Action,
}

/// What `get_or_build` would do.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Action {
    /// A valid entry exists.
    Hit {
        /// The artifact's path.
        path: PathBuf,
    },
    /// Nothing was built for this kernel before.
    Build,
    /// An earlier variant exists but does not serve, for these reasons.
    Rebuild {
        /// The reasons.
        reasons: Vec<String>,
    },
    /// The same inputs failed to compile before; that failure would be returned.
    FailedBefore {
        /// The recorded failure.
        failure: CompileFailed,
    },
}

impl std::fmt::Display for Explanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.action {
            Action::Hit { path } => write!(f, "{}: hit ({})", self.name, path.display()),
            Action::Build => write!(f, "{}: would build (never built before)", self.name),
            Action::Rebuild { reasons } => {
                write!(f, "{}: would rebuild: {}", self.name, reasons.join("; "))
            }
            Action::FailedBefore { failure } => {
                write!(f, "{}: failed before: {failure}", self.name)
            }
        }
    }
}
