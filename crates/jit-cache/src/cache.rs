//! The cache handle: opening a root, and answering a request (`get_or_build`, `explain`).
//!
//! A request is resolved once (`request.rs`): its paths against the working directory of that
//! moment, its search path out of the flags. Everything after uses the resolved request: the
//! in-process memo is keyed by it, and threads share one flight only for an identical request
//! (the same key *and* the same search path), so two trees whose sources are identical never
//! receive each other's artifact.

pub use crate::answer::{Answer, Outcome, RebuildReason};
use crate::counters::Event;

use crate::error::{CompileFailed, Error, Result};
use crate::headers::{self, AbsenceGroup, HeaderRecord, Mismatch};
use crate::key::{self, Prepared};
use crate::layout::{Layout, RootMode};
use crate::memo::Memos;
use crate::publish::Built;
use crate::request::Request;
use crate::search::SearchPath;
use crate::single_flight::SingleFlight;
use crate::spec::KernelSpec;
use crate::toolchain::{HostCompiler, Toolchain};
use fingerprint::{Digest, StatCache};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

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
    /// A fleet's remote tier, consulted on a local miss (see [`crate::Remote`]); none by default.
    pub remote: Option<crate::remote::Remote>,
    /// Whether other hosts may share the root (detected from its filesystem by default).
    pub sharing: crate::fstype::Sharing,
    /// Directories the compile may use as its own (a logging wrapper's log, a harness's control
    /// files), beside those `JIT_CACHE_IGNORED_PATHS` names: what it writes there is no side
    /// effect, what it reads or looks for there no input. A traced compile that writes anywhere
    /// else outside its own directories is not cached.
    pub ignored_paths: Vec<PathBuf>,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            mode: RootMode::Private,
            nvcc: None,
            max_variants: 8,
            remote: None,
            sharing: crate::fstype::Sharing::Detect,
            ignored_paths: Vec::new(),
        }
    }
}

impl CacheOptions {
    /// Sets the root mode.
    pub fn mode(mut self, mode: RootMode) -> Self {
        self.mode = mode;
        self
    }

    /// Says whether other hosts may share the root (NFS, Lustre), overriding detection.
    pub fn sharing(mut self, sharing: crate::fstype::Sharing) -> Self {
        self.sharing = sharing;
        self
    }

    /// Shares kernels with other hosts through a remote tier.
    pub fn remote(mut self, remote: crate::remote::Remote) -> Self {
        self.remote = Some(remote);
        self
    }

    /// Sets the compiler.
    pub fn nvcc(mut self, nvcc: nvcc::Nvcc) -> Self {
        self.nvcc = Some(nvcc);
        self
    }

    /// Declares `dir` (absolute) the compile's own, as a logging wrapper's log: a compile that
    /// writes there is still cached (a hit does not write there), and what it reads there is no
    /// input.
    pub fn ignore_paths_under(mut self, dir: impl Into<PathBuf>) -> Self {
        self.ignored_paths.push(dir.into());
        self
    }
}

/// What one flight hands to every thread that asked for the same request.
pub(crate) type FlightResult = std::result::Result<Built, Arc<Error>>;

/// A kernel cache rooted at one directory. Cheap to share between threads (`&Cache` or `Arc`).
pub struct Cache {
    pub(crate) layout: std::result::Result<Layout, String>,
    pub(crate) root: PathBuf,
    pub(crate) options: CacheOptions,
    toolchain: OnceLock<std::result::Result<Arc<Toolchain>, Arc<crate::error::ToolchainError>>>,
    hosts: Mutex<HashMap<PathBuf, Arc<HostCompiler>>>,
    stat: OnceLock<Mutex<StatCache>>,
    confirmed: Mutex<HashSet<(PathBuf, Digest)>>,
    pub(crate) memos: Memos,
    flights: SingleFlight<(Digest, SearchPath), FlightResult>,
    /// Builds of a batch in progress: the stat cache is then saved once, at the batch's end.
    pub(crate) batch_depth: std::sync::atomic::AtomicUsize,
    /// How requests were answered since the counts were last saved (`counters.rs`).
    pub(crate) counters: crate::counters::Counters,
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
    /// still opens: every build then compiles privately and says so in [`Answer::warning`].
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
        // Absolute once, here: the handle's root and its layout's places are spelled alike. A
        // root that cannot be made absolute (no working directory) fails in `Layout::open`
        // below, as any root that cannot be opened does.
        let root = crate::layout::absolute_root(root.as_ref())
            .unwrap_or_else(|_| root.as_ref().to_path_buf());
        let layout = match Layout::open(&root, options.mode) {
            Ok(layout) => Ok(layout.with_sharing(options.sharing)),
            Err(e @ Error::UnsafeRoot { .. }) => return Err(e),
            Err(e) => Err(e.to_string()),
        };
        Ok(Cache {
            layout,
            root,
            options,
            toolchain: OnceLock::new(),
            hosts: Mutex::new(HashMap::new()),
            stat: OnceLock::new(),
            confirmed: Mutex::new(HashSet::new()),
            memos: Memos::default(),
            flights: SingleFlight::new(),
            batch_depth: std::sync::atomic::AtomicUsize::new(0),
            counters: crate::counters::Counters::default(),
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The root's protocol (local when the root is unusable: nothing is shared then).
    pub(crate) fn protocol(&self) -> crate::fstype::Protocol {
        self.layout
            .as_ref()
            .map_or(crate::fstype::Protocol::Local, |layout| layout.protocol)
    }

    /// The keyed store on this root ([`crate::store`]): its entries live beside the kernels,
    /// under the same protocol, and this handle's `gc`, `verify`, `entries` and `stats` cover
    /// them too.
    pub fn store(&self) -> Result<crate::store::Store> {
        match &self.layout {
            Ok(layout) => Ok(crate::store::Store::on(
                layout.clone(),
                self.options.remote.clone(),
            )),
            Err(why) => Err(Error::UnsafeRoot {
                path: self.root.clone(),
                reason: why.clone(),
            }),
        }
    }

    pub(crate) fn toolchain(&self) -> Result<Arc<Toolchain>> {
        let probed = self.toolchain.get_or_init(|| {
            let nvcc = match &self.options.nvcc {
                Some(nvcc) => nvcc.clone(),
                None => nvcc::Nvcc::locate()
                    .map_err(|e| Arc::new(crate::error::ToolchainError::NotFound(e)))?,
            };
            let state_dir = self
                .layout
                .as_ref()
                .ok()
                .map(|l| l.dir(crate::layout::Subdir::State));
            Toolchain::probe(nvcc, state_dir.as_deref())
                .map(Arc::new)
                .map_err(|e| {
                    Arc::new(match e {
                        Error::Fingerprint(e) => crate::error::ToolchainError::Identity(e),
                        Error::Toolchain(shared) => match Arc::try_unwrap(shared) {
                            Ok(e) => e,
                            Err(shared) => crate::error::ToolchainError::Cache(Box::new(
                                Error::Toolchain(shared),
                            )),
                        },
                        other => crate::error::ToolchainError::Cache(Box::new(other)),
                    })
                })
        });
        probed.clone().map_err(Error::Toolchain)
    }

    /// The host compiler a request uses: the one its flags (or `NVCC_CCBIN`) name, else nvcc's
    /// default.
    fn host(&self, toolchain: &Toolchain, ccbin: Option<&Path>) -> Arc<HostCompiler> {
        let Some(ccbin) = ccbin else {
            return Arc::clone(&toolchain.host);
        };
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(
            hosts
                .entry(ccbin.to_path_buf())
                .or_insert_with(|| Arc::new(toolchain.host_named(ccbin))),
        )
    }

    /// Runs `f` with the stat cache, loaded on first use (a hit whose headers all match their
    /// stamps never needs it).
    pub(crate) fn with_stat_cache<T>(&self, f: impl FnOnce(&mut StatCache) -> T) -> T {
        let cell = self.stat.get_or_init(|| {
            Mutex::new(match &self.layout {
                Ok(layout) => StatCache::load(&stat_cache_file(layout)),
                Err(_) => StatCache::default(),
            })
        });
        f(&mut cell.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Revalidates recorded inputs for `search`, hashing through the stat cache only where a
    /// stamp does not settle it.
    pub(crate) fn revalidate(
        &self,
        headers: &[HeaderRecord],
        absent: &[AbsenceGroup],
        search: &SearchPath,
    ) -> std::result::Result<(), Box<Mismatch>> {
        let mut confirmed = self.confirmed.lock().unwrap_or_else(|p| p.into_inner());
        headers::revalidate(
            headers,
            absent,
            search,
            self.look(),
            &mut |p: &Path| self.with_stat_cache(|s| s.hash_file(p).ok()),
            &mut confirmed,
        )
    }

    /// How a hit looks at files: with the server's attributes under the shared protocol.
    pub(crate) fn look(&self) -> headers::Look {
        match &self.layout {
            Ok(layout) if layout.protocol == crate::fstype::Protocol::Shared => {
                headers::Look::Fresh
            }
            _ => headers::Look::Cached,
        }
    }

    /// Computes the key of a resolved request.
    pub(crate) fn prepare(&self, request: &Request) -> Result<(Arc<Toolchain>, Prepared)> {
        key::check_source_readable(&request.spec, request.source_path.as_deref())?;
        let toolchain = self.toolchain()?;
        let host = self.host(&toolchain, request.ccbin.as_deref());
        let prepared = key::prepare(request, &toolchain, &host, &|p| {
            self.with_stat_cache(|s| Ok(s.hash_file(p)?))
        })?;
        Ok((toolchain, prepared))
    }

    /// Returns the compiled artifact for `spec`: from memory, from the cache, or by compiling it
    /// once however many threads and processes ask at the same time.
    ///
    /// The spec's relative paths are resolved against the current directory now, once.
    ///
    /// A failed compile returns [`Error::Compile`] with the compiler's diagnostics. A failure of
    /// the source's own is recorded, so that later callers get it at once until an input changes
    /// (see [`Cache::retry`]); a timeout, a signal or a full disk is never recorded.
    pub fn get_or_build(&self, spec: &KernelSpec) -> Result<Answer> {
        let request = Request::resolve(spec)?;
        self.answer(&request)
    }

    pub(crate) fn answer(&self, request: &Request) -> Result<Answer> {
        // An input that changes while it is compiled gets one more compile; if it keeps moving,
        // the caller gets that compile's artifact uncached.
        let mut fresh = false;
        loop {
            // Before anything of the request is read: a file written earlier is no edit during
            // the compile (`inputs::compile_start`).
            let asked = crate::inputs::asked_now();
            let (toolchain, prepared) = self.memos.prepare(self, request, fresh)?;
            if let Some(hit) = self.memos.hit(self, &prepared) {
                self.counters.count(Event::Hit);
                return Ok(hit);
            }
            let flight = (prepared.key, prepared.search.clone());
            let (result, _role) = self.flights.run(&flight, || {
                crate::publish::lookup_or_build(self, request, &toolchain, &prepared, asked)
                    .map_err(Arc::new)
            });
            match result {
                Ok(Built::Answer(answer)) => {
                    // An answer with a warning was counted where it was made.
                    if answer.warning.is_none() {
                        self.counters.count(match answer.outcome {
                            Outcome::Hit => Event::Hit,
                            Outcome::Fetched => Event::Fetched,
                            Outcome::Built | Outcome::Rebuilt { .. } => Event::Built,
                        });
                    }
                    self.memos.remember(&prepared, &answer);
                    return Ok(answer);
                }
                // An input that moved may settle: compile once more.
                Ok(Built::Unproven {
                    why: crate::unproven::Unproven::Moved(_),
                    ..
                }) if !fresh => fresh = true,
                Ok(Built::Unproven {
                    why,
                    bytes,
                    printed,
                }) => {
                    self.counters.count(Event::NotCached(why.kind()));
                    let artifact = crate::compile::private_copy(request.spec.kind, bytes.to_vec())?;
                    // This compile's own record, beside its private artifact: a launcher answers
                    // with it instead of compiling again.
                    if let Some(dir) = artifact.path().parent() {
                        crate::compiler_record::write(
                            dir,
                            &printed.stderr,
                            &printed.read,
                            &printed.spelled,
                            &prepared.search,
                        );
                    }
                    let twice = if matches!(why, crate::unproven::Unproven::Moved(_)) {
                        ", twice"
                    } else {
                        ""
                    };
                    return Ok(Answer {
                        artifact,
                        outcome: Outcome::Built,
                        warning: Some(format!(
                            "`{}` is not cached: {why}{twice}",
                            request.spec.name
                        )),
                        inputs: None,
                    });
                }
                Err(shared) => return Err(Arc::try_unwrap(shared).unwrap_or_else(Error::Shared)),
            }
        }
    }

    /// Whether another builder holds the lock of `spec`'s key right now, or another host its
    /// fleet lease: a batch builds other kernels first instead of queueing behind it. Only a
    /// scheduling hint (it may change at once).
    pub(crate) fn key_is_being_built(&self, request: &Request) -> bool {
        let Ok(layout) = &self.layout else {
            return false;
        };
        let Ok((_, prepared)) = self.memos.prepare(self, request, false) else {
            return false;
        };
        if self.memos.has_entry(&prepared.key) {
            return false;
        }
        if matches!(layout.try_lock_key(&prepared.key), Ok(None)) {
            return true;
        }
        // Another host compiling it under the fleet's lease counts too, unless the key has a
        // local entry already (a hit needs nobody).
        self.options.remote.is_some()
            && std::fs::symlink_metadata(layout.key_dir(&prepared.key)).is_err()
            && crate::remote::flow::leased_elsewhere(self, layout, &prepared.key)
    }

    /// Forgets a recorded compile failure for `spec` and asks again.
    pub fn retry(&self, spec: &KernelSpec) -> Result<Answer> {
        let request = Request::resolve(spec)?;
        let (_, prepared) = self.prepare(&request)?;
        if let Ok(layout) = &self.layout {
            let path = layout.failure_file(&prepared.key);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove failure record", path, e)),
            }
        }
        self.answer(&request)
    }

    /// Says what `get_or_build` would do for `spec`, and why, without compiling.
    pub fn explain(&self, spec: &KernelSpec) -> Result<Explanation> {
        let request = Request::resolve(spec)?;
        let (_, prepared) = self.prepare(&request)?;
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
                Some(reasons) => Action::Rebuild {
                    reasons: reasons.iter().map(ToString::to_string).collect(),
                },
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

    /// Saves what this handle learned that spares the next process work (the stat cache), as
    /// dropping the handle does: for a process that ends without dropping it.
    pub fn save_state(&self) {
        self.save_stat_cache();
        if let Ok(layout) = &self.layout {
            self.counters.save(layout);
        }
    }

    /// Persists the stat cache when it changed (it saves re-hashing in the next process), unless
    /// a batch is running: the batch saves once when it ends.
    pub(crate) fn save_stat_cache(&self) {
        if self.batch_depth.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            return;
        }
        // Never loaded means never changed.
        let Some(cell) = self.stat.get() else { return };
        if let Ok(layout) = &self.layout {
            let mut stat = cell.lock().unwrap_or_else(|p| p.into_inner());
            if stat.is_dirty() {
                prune_stat_cache(&mut stat);
                let _ = stat.save(&stat_cache_file(layout));
            }
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        self.save_state();
    }
}

/// The most entries the stat cache keeps: past that, entries for files that no longer exist go,
/// so a cache that sees many generated trees does not grow without bound.
const STAT_CACHE_MAX: usize = 50_000;

fn prune_stat_cache(stat: &mut StatCache) {
    if stat.len() > STAT_CACHE_MAX {
        stat.retain(|path| Path::new(path).exists());
    }
}

fn stat_cache_file(layout: &Layout) -> PathBuf {
    layout
        .dir(crate::layout::Subdir::State)
        .join(format!("statcache-{}.json", crate::host::name()))
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

impl Cache {
    /// [`Cache::get_or_build`], and what the compiler printed and read for the entry that
    /// answered, as the compiler spelled it (this request spells the command the same way): for a caller that stands in for the compiler (a
    /// launcher replays the diagnostics and writes the dependency file the compiler would).
    ///
    /// A compile whose answer the cache could not prove (see [`Answer::warning`]) has its own
    /// record beside its private artifact. The record is `None` when the answer was made
    /// privately for another reason (the cache's storage failed) or the entry has no record
    /// (written by an older version, fetched from a remote tier, or a path that is not UTF-8);
    /// such a caller runs the compiler itself.
    pub fn get_or_build_with_record(
        &self,
        spec: &KernelSpec,
    ) -> Result<(Answer, Option<crate::compiler_record::CompilerRecord>)> {
        let request = Request::resolve(spec)?;
        let answer = self.answer(&request)?;
        // An entry's record, or an unpublished compile's own beside its private artifact.
        let record = answer
            .artifact
            .path()
            .parent()
            .and_then(crate::compiler_record::load);
        Ok((answer, record))
    }
}

impl Cache {
    /// The remote counters recorded in this root's `state/remote.log` by every process that used
    /// it (all zero without a remote).
    pub fn remote_stats(&self) -> crate::remote::RemoteStats {
        let Ok(layout) = &self.layout else {
            return crate::remote::RemoteStats::default();
        };
        let path = layout
            .pinned(crate::layout::Subdir::State)
            .join(crate::remote::LOG_FILE);
        std::fs::read_to_string(path)
            .map(|text| crate::remote::RemoteStats::from_log(&text))
            .unwrap_or_default()
    }
}
