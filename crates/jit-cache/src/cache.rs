//! The cache handle: opening a root, and answering a request (`get_or_build`, `explain`).
//!
//! A request is resolved once (`request.rs`): its paths against the working directory of that
//! moment, its search path out of the flags. Everything after uses the resolved request: the
//! in-process memo is keyed by it, and threads share one flight only for an identical request
//! (the same key *and* the same search path), so two trees whose sources are identical never
//! receive each other's artifact.

pub use crate::build::answer::{Answer, Outcome, RebuildReason};
use crate::build::request::Request;
use crate::build::search::SearchPath;
use crate::build::single_flight::SingleFlight;
use crate::build::spec::KernelSpec;
use crate::context::BuildContext;
pub use crate::context::CacheOptions;
use crate::error::{CompileFailed, Error, Result};
use crate::memo::Memos;
use crate::publication::Built;
use crate::storage::counters::Event;
use crate::storage::layout::Layout;
use fingerprint::Digest;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What one flight hands to every thread that asked for the same request.
pub(crate) type FlightResult = std::result::Result<Built, Arc<Error>>;

/// A kernel cache rooted at one directory. Cheap to share between threads (`&Cache` or `Arc`).
pub struct Cache {
    /// What the miss path borrows (`context.rs`).
    pub(crate) cx: BuildContext,
    pub(crate) memos: Memos,
    flights: SingleFlight<(Digest, SearchPath), FlightResult>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("root", &self.cx.root)
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
        let root = crate::storage::layout::default_root().ok_or_else(|| Error::UnsafeRoot {
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
        let root = crate::storage::layout::absolute_root(root.as_ref())
            .unwrap_or_else(|_| root.as_ref().to_path_buf());
        let layout = match Layout::open(&root, options.mode) {
            Ok(layout) => Ok(layout.with_sharing(options.sharing)),
            Err(e @ Error::UnsafeRoot { .. }) => return Err(e),
            Err(e) => Err(e.to_string()),
        };
        Ok(Cache {
            cx: BuildContext::new(layout, root, options),
            memos: Memos::default(),
            flights: SingleFlight::new(),
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.cx.root
    }

    /// The keyed store on this root ([`crate::store`]): its entries live beside the kernels,
    /// under the same protocol, and this handle's `gc`, `verify`, `entries` and `stats` cover
    /// them too.
    pub fn store(&self) -> Result<crate::store::Store> {
        self.cx.store()
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
            let asked = crate::build::inputs::asked_now();
            let (toolchain, prepared) = self.memos.prepare(&self.cx, request, fresh)?;
            if let Some(hit) = self.memos.hit(&self.cx, &prepared) {
                self.cx.counters.count(Event::Hit);
                return Ok(hit);
            }
            let flight = (prepared.key, prepared.search.clone());
            let (result, _role) = self.flights.run(&flight, || {
                crate::miss::lookup_or_build(&self.cx, request, &toolchain, &prepared, asked)
                    .map_err(Arc::new)
            });
            match result {
                Ok(Built::Answer(answer)) => {
                    // An answer with a warning was counted where it was made.
                    if answer.warning.is_none() {
                        self.cx.counters.count(match answer.outcome {
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
                    why: crate::base::unproven::Unproven::Moved(_),
                    ..
                }) if !fresh => fresh = true,
                Ok(Built::Unproven {
                    why,
                    bytes,
                    printed,
                }) => {
                    self.cx.counters.count(Event::NotCached(why.kind()));
                    let artifact =
                        crate::build::compile::private_copy(request.spec.kind, bytes.to_vec())?;
                    // This compile's own record, beside its private artifact: a launcher answers
                    // with it instead of compiling again.
                    if let Some(dir) = artifact.path().parent() {
                        crate::build::compiler_record::write(
                            dir,
                            &printed.stderr,
                            &printed.read,
                            &printed.spelled,
                            &prepared.search,
                        );
                    }
                    let twice = if matches!(why, crate::base::unproven::Unproven::Moved(_)) {
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
        let Ok(layout) = &self.cx.layout else {
            return false;
        };
        let Ok((_, prepared)) = self.memos.prepare(&self.cx, request, false) else {
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
        self.cx.options.remote.is_some()
            && std::fs::symlink_metadata(layout.key_dir(&prepared.key)).is_err()
            && crate::fleet::leased_elsewhere(&self.cx, layout, &prepared.key)
    }

    /// Forgets a recorded compile failure for `spec` and asks again.
    pub fn retry(&self, spec: &KernelSpec) -> Result<Answer> {
        let request = Request::resolve(spec)?;
        let (_, prepared) = self.cx.prepare(&request)?;
        if let Ok(layout) = &self.cx.layout {
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
        let (_, prepared) = self.cx.prepare(&request)?;
        let layout = self.cx.layout.as_ref().map_err(|why| Error::UnsafeRoot {
            path: self.cx.root.clone(),
            reason: why.clone(),
        })?;
        let lookup = self.cx.lookup(layout, &prepared, spec.kind);
        let action = if let Some((_, artifact)) = &lookup.hit {
            Action::Hit {
                path: artifact.path().to_path_buf(),
            }
        } else if let Some(failure) = self.cx.recorded_failure(layout, &prepared) {
            Action::FailedBefore { failure }
        } else {
            match self.cx.rebuild_reasons(layout, &prepared, &lookup) {
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
        self.cx.save_stat_cache();
        if let Ok(layout) = &self.cx.layout {
            self.cx.counters.save(layout);
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        self.save_state();
    }
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
    ) -> Result<(
        Answer,
        Option<crate::build::compiler_record::CompilerRecord>,
    )> {
        let request = Request::resolve(spec)?;
        let answer = self.answer(&request)?;
        // An entry's record, or an unpublished compile's own beside its private artifact.
        let record = answer
            .artifact
            .path()
            .parent()
            .and_then(crate::build::compiler_record::load);
        Ok((answer, record))
    }
}

impl Cache {
    /// The remote counters recorded in this root's `state/remote.log` by every process that used
    /// it (all zero without a remote).
    pub fn remote_stats(&self) -> crate::store::tier::RemoteStats {
        let Ok(layout) = &self.cx.layout else {
            return crate::store::tier::RemoteStats::default();
        };
        let path = layout
            .pinned(crate::storage::layout::Subdir::State)
            .join(crate::store::tier::LOG_FILE);
        std::fs::read_to_string(path)
            .map(|text| crate::store::tier::RemoteStats::from_log(&text))
            .unwrap_or_default()
    }
}
