//! What a request is answered with: the artifact and how it was obtained.

use crate::build::entry::Artifact;
use crate::build::headers::Inputs;
use std::path::PathBuf;
use std::sync::Arc;

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
        reasons: Vec<RebuildReason>,
    },
    /// Not in this host's cache: a variant another host built was fetched from the remote tier,
    /// verified (size and blake3) and published locally.
    Fetched,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Hit => write!(f, "hit"),
            Outcome::Built => write!(f, "built"),
            Outcome::Rebuilt { reasons } => {
                let reasons: Vec<String> = reasons.iter().map(ToString::to_string).collect();
                write!(f, "rebuilt ({})", reasons.join("; "))
            }
            Outcome::Fetched => write!(f, "fetched"),
        }
    }
}

/// Why an earlier variant of a kernel did not serve, typed until it is printed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RebuildReason {
    /// An input changed: a key component (the source, a flag, the compiler, a variable) or a
    /// header, as `fingerprint`'s diff of the two manifests says.
    Changed(fingerprint::Change),
    /// A header the earlier compile read is now shadowed by a file found earlier in the search.
    Shadowed {
        /// The header, as the compile found it.
        header: PathBuf,
        /// The file that now comes first.
        by: PathBuf,
    },
    /// The earlier entry was there but unusable (corrupt), and was moved aside.
    Unusable {
        /// The entry's directory.
        entry: PathBuf,
        /// What was wrong with it.
        why: String,
    },
    /// The earlier entry's output names its own source (`__FILE__`, nvcc's module id,
    /// diagnostics), and this request's source is another file or elsewhere.
    OtherSource {
        /// The earlier entry's source, as it was spelled.
        source: PathBuf,
    },
    /// The earlier entry is gone (evicted or removed) and nothing else changed.
    Gone,
}

impl std::fmt::Display for RebuildReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RebuildReason::Changed(change) => write!(f, "{change}"),
            RebuildReason::Shadowed { header, by } => write!(
                f,
                "header `{}` is now shadowed by {}",
                header.display(),
                by.display()
            ),
            RebuildReason::Unusable { entry, why } => {
                write!(f, "entry {} was unusable: {why}", entry.display())
            }
            RebuildReason::OtherSource { source } => write!(
                f,
                "the earlier entry's output names its own source {}",
                source.display()
            ),
            RebuildReason::Gone => write!(f, "the earlier entry was evicted or removed"),
        }
    }
}

/// The answer to a request: the artifact, whether it was a hit or a build, and any warning.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The compiled kernel, pinned while held.
    pub artifact: Artifact,
    /// Hit, built or rebuilt with reasons.
    pub outcome: Outcome,
    /// Set when the artifact is not cached: the cache could not be used (full, read-only,
    /// failing), or an input changed while it compiled. The artifact was then compiled in a
    /// private directory. Says why.
    pub warning: Option<String>,
    /// The entry's inputs as validated (or recorded) by this process: what the memo keeps.
    pub(crate) inputs: Option<Arc<Inputs>>,
}
