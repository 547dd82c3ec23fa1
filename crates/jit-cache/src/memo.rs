//! What a process remembers between two requests, so that a repeated request costs a few
//! `stat`s: per resolved request, its key (reused while the source and the environment that
//! entered the key are unchanged); per key, the entry's bytes and project inputs (never a pin:
//! a remembered entry stays evictable, and a memo hit re-pins it).

use crate::build::answer::{Answer, Outcome};
use crate::build::entry::Artifact;
use crate::build::headers::{FastCheck, Inputs};
use crate::build::key::Prepared;
use crate::build::request::Request;
use crate::build::spec::Extra;
use crate::build::toolchain::Toolchain;
use crate::context::BuildContext;
use crate::error::Result;
use fingerprint::Digest;
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The memos of one cache handle.
#[derive(Default)]
pub(crate) struct Memos {
    entries: Mutex<HashMap<Digest, EntryMemo>>,
    requests: Mutex<HashMap<Request, RequestMemo>>,
}

/// An entry this process validated or built. Toolkit and installed headers were validated then
/// and are not checked again; project headers and absences are, on every hit.
#[derive(Clone)]
struct EntryMemo {
    inputs: Arc<Inputs>,
    bytes: Arc<[u8]>,
    path: PathBuf,
    kind: nvcc::OutputKind,
    /// The same check precomputed for one search path, when every stamp was settled.
    fast: Option<Arc<FastCheck>>,
}

/// A request seen before, with what its key depended on beyond the request itself.
struct RequestMemo {
    prepared: Arc<Prepared>,
    env: Vec<Option<OsString>>,
}

/// The environment variables a request's key read.
fn env_now(request: &Request) -> Vec<Option<OsString>> {
    let extra = request.spec.extras.iter().filter_map(|e| match e {
        Extra::Env(var) => Some(var.as_str()),
        _ => None,
    });
    nvcc::RELEVANT_ENV
        .iter()
        .copied()
        .chain(extra)
        .map(std::env::var_os)
        .collect()
}

impl Memos {
    /// The request's key: remembered, when its source content (a `stat`, else a hash) and the
    /// environment are unchanged, else computed. Requests with file or wheel extras are always
    /// prepared in full. `fresh` skips the memo.
    pub(crate) fn prepare(
        &self,
        cx: &BuildContext,
        request: &Request,
        fresh: bool,
    ) -> Result<(Arc<Toolchain>, Arc<Prepared>)> {
        let toolchain = cx.toolchain()?;
        let memoizable = request
            .spec
            .extras
            .iter()
            .all(|e| matches!(e, Extra::Value { .. } | Extra::Env(_)));
        if memoizable && !fresh {
            let requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(seen) = requests.get(request) {
                let source_unchanged = match &seen.prepared.source_path {
                    None => true,
                    Some(path) => {
                        let stamp = seen.prepared.source_stamp;
                        (stamp.is_some() && cx.look().stamp(path) == stamp)
                            || fingerprint::hash_file(path).ok()
                                == Some(seen.prepared.source_digest)
                    }
                };
                if source_unchanged && seen.env == env_now(request) {
                    return Ok((toolchain, Arc::clone(&seen.prepared)));
                }
            }
        }
        let (toolchain, prepared) = cx.prepare(request)?;
        let prepared = Arc::new(prepared);
        if memoizable {
            let memo = RequestMemo {
                prepared: Arc::clone(&prepared),
                env: env_now(request),
            };
            self.requests
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(request.clone(), memo);
        }
        Ok((toolchain, prepared))
    }

    /// Whether an entry of `key` is remembered.
    pub(crate) fn has_entry(&self, key: &Digest) -> bool {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(key)
    }

    /// A repeated request: revalidate the project inputs (a `stat` each, or the precomputed
    /// check) and answer from memory.
    pub(crate) fn hit(&self, cx: &BuildContext, prepared: &Prepared) -> Option<Answer> {
        let memo = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&prepared.key)
            .cloned()?;
        // A variant bound to its source serves no other (`source_bound.rs`).
        prepared.serves_source(memo.inputs.source.as_ref()).ok()?;
        let fast = memo
            .fast
            .as_ref()
            .filter(|f| f.applies_to(&prepared.search));
        let valid = match fast {
            Some(fast) => fast.still_valid(cx.look()),
            None => {
                // Stamps first, then the full check: a change made between the two fails the
                // precomputed check next time.
                let stamped = FastCheck::stamp(&memo.inputs, &prepared.search).map(Arc::new);
                let ok = cx
                    .revalidate(&memo.inputs.headers, &memo.inputs.absent, &prepared.search)
                    .is_ok();
                if ok && stamped.is_some() {
                    if let Some(entry) = self
                        .entries
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_mut(&prepared.key)
                    {
                        entry.fast = stamped;
                    }
                }
                ok
            }
        };
        let artifact = if valid {
            Artifact::repin(memo.bytes, &memo.path, memo.kind, cx.protocol())
        } else {
            None
        };
        let Some(artifact) = artifact else {
            self.entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&prepared.key);
            return None;
        };
        Some(Answer {
            artifact,
            outcome: Outcome::Hit,
            warning: None,
            inputs: None,
        })
    }

    /// Remembers a cached answer (never one with a warning: that artifact is not cached).
    pub(crate) fn remember(&self, prepared: &Prepared, answer: &Answer) {
        let (None, Some(inputs)) = (&answer.warning, &answer.inputs) else {
            return;
        };
        let memo = EntryMemo {
            inputs: Arc::new(inputs.project_part()),
            fast: None,
            bytes: answer.artifact.shared_bytes(),
            path: answer.artifact.path().to_path_buf(),
            kind: answer.artifact.kind(),
        };
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(prepared.key, memo);
    }
}
