//! What the miss path, the fleet flow and the memo borrow from a cache handle: the root's
//! layout, the options, the compiler's identity, the stat cache and the counts. [`Cache`] owns
//! one and lends it, so that nothing below the facade takes the handle itself.
//!
//! [`Cache`]: crate::Cache

use crate::build::headers::{self, AbsenceGroup, HeaderRecord, Mismatch};
use crate::build::key::{self, Prepared};
use crate::build::request::Request;
use crate::build::search::SearchPath;
use crate::build::toolchain::{HostCompiler, Toolchain};
use crate::error::{Error, Result};
use crate::storage::layout::{Layout, RootMode};
use fingerprint::{Digest, StatCache};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Options for [`crate::Cache::open_with`].
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
    pub remote: Option<crate::store::tier::Remote>,
    /// Whether other hosts may share the root (detected from its filesystem by default).
    pub sharing: crate::base::fstype::Sharing,
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
            sharing: crate::base::fstype::Sharing::Detect,
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
    pub fn sharing(mut self, sharing: crate::base::fstype::Sharing) -> Self {
        self.sharing = sharing;
        self
    }

    /// Shares kernels with other hosts through a remote tier.
    pub fn remote(mut self, remote: crate::store::tier::Remote) -> Self {
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

/// A cache handle's state that the miss path borrows (see the module's doc).
pub(crate) struct BuildContext {
    pub(crate) layout: std::result::Result<Layout, String>,
    pub(crate) root: PathBuf,
    pub(crate) options: CacheOptions,
    toolchain: OnceLock<std::result::Result<Arc<Toolchain>, Arc<crate::error::ToolchainError>>>,
    hosts: Mutex<HashMap<PathBuf, Arc<HostCompiler>>>,
    stat: OnceLock<Mutex<StatCache>>,
    confirmed: Mutex<HashSet<(PathBuf, Digest)>>,
    /// Builds of a batch in progress: the stat cache is then saved once, at the batch's end.
    pub(crate) batch_depth: std::sync::atomic::AtomicUsize,
    /// How requests were answered since the counts were last saved (`counters.rs`).
    pub(crate) counters: crate::storage::counters::Counters,
}

impl BuildContext {
    pub(crate) fn new(
        layout: std::result::Result<Layout, String>,
        root: PathBuf,
        options: CacheOptions,
    ) -> BuildContext {
        BuildContext {
            layout,
            root,
            options,
            toolchain: OnceLock::new(),
            hosts: Mutex::new(HashMap::new()),
            stat: OnceLock::new(),
            confirmed: Mutex::new(HashSet::new()),
            batch_depth: std::sync::atomic::AtomicUsize::new(0),
            counters: crate::storage::counters::Counters::default(),
        }
    }

    /// The root's protocol (local when the root is unusable: nothing is shared then).
    pub(crate) fn protocol(&self) -> crate::base::fstype::Protocol {
        self.layout
            .as_ref()
            .map_or(crate::base::fstype::Protocol::Local, |layout| {
                layout.protocol
            })
    }

    /// The keyed store on this root ([`crate::store`]), under this handle's remote tier.
    pub(crate) fn store(&self) -> Result<crate::store::Store> {
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
                .map(|l| l.dir(crate::storage::layout::Subdir::State));
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
            Ok(layout) if layout.protocol.looks_fresh() => headers::Look::Fresh,
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
        .dir(crate::storage::layout::Subdir::State)
        .join(format!("statcache-{}.json", crate::base::host::name()))
}
