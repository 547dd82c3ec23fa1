//! A key's remote manifest: the variants built for it anywhere in the fleet, newest first, each
//! with what its compile depended on and its artifact's size and digest. Stat stamps never leave
//! a host (another host's tuples prove nothing here): they are dropped on upload and on read.

use crate::build::headers::{AbsenceGroup, HeaderRecord, Inputs};
use crate::build::source_bound::SourceBinding;
use fingerprint::Digest;
use serde::{Deserialize, Serialize};

/// The manifest format; a manifest of another format is a miss.
pub(crate) const MANIFEST_FORMAT: u32 = 1;

/// The largest manifest read (a bounded list of variants; headers as compact strings).
pub(crate) const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// The largest artifact fetched: a recorded size above it is refused unread.
pub(crate) const MAX_ARTIFACT_BYTES: u64 = 1 << 30;

/// The largest shared failure record read.
pub(crate) const MAX_FAILURE_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RemoteManifest {
    pub(crate) format: u32,
    pub(crate) key: Digest,
    pub(crate) kind: String,
    pub(crate) variants: Vec<RemoteVariant>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RemoteVariant {
    pub(crate) variant: Digest,
    pub(crate) name: String,
    pub(crate) artifact_size: u64,
    pub(crate) artifact_digest: Digest,
    pub(crate) headers: Vec<HeaderRecord>,
    #[serde(default)]
    pub(crate) absent: Vec<AbsenceGroup>,
    /// The source the output names, when it may (`source_bound.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) source: Option<SourceBinding>,
    /// The compile's record (`compiler_record.rs`, its stored text), for launchers on other
    /// hosts; checked against the variant's headers before it is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) record: Option<String>,
    pub(crate) created_unix_ms: u64,
    pub(crate) compile_ms: u64,
    pub(crate) host: String,
}

impl RemoteVariant {
    /// The variant's inputs without stamps.
    pub(crate) fn inputs(&self) -> Inputs {
        without_stamps(Inputs {
            headers: self.headers.clone(),
            absent: self.absent.clone(),
            source: self.source.clone(),
        })
    }

    /// Whether the record is self-consistent: its digest names its inputs, and its size is one
    /// we would fetch.
    pub(crate) fn consistent(&self) -> bool {
        self.artifact_size > 0
            && self.artifact_size <= MAX_ARTIFACT_BYTES
            && crate::build::entry::variant_of(&self.inputs()) == self.variant
    }
}

/// Inputs with every stat stamp dropped.
pub(crate) fn without_stamps(mut inputs: Inputs) -> Inputs {
    for header in &mut inputs.headers {
        header.stamp = None;
    }
    for group in &mut inputs.absent {
        group.stamp = None;
    }
    inputs
}

impl RemoteManifest {
    /// Parses a manifest read for `key` and `kind`; None when it is corrupt, foreign or of
    /// another format.
    pub(crate) fn parse(bytes: &[u8], key: &Digest, kind: &str) -> Option<RemoteManifest> {
        let manifest: RemoteManifest = serde_json::from_slice(bytes).ok()?;
        (manifest.format == MANIFEST_FORMAT && manifest.key == *key && manifest.kind == kind)
            .then_some(manifest)
    }

    /// `current` (if it parses) with `variant` put first, any older record of the same variant
    /// dropped, and at most `max` variants kept.
    pub(crate) fn merged(
        current: Option<&[u8]>,
        key: &Digest,
        kind: &str,
        variant: RemoteVariant,
        max: usize,
    ) -> RemoteManifest {
        let mut variants = vec![variant];
        if let Some(old) = current.and_then(|b| RemoteManifest::parse(b, key, kind)) {
            let id = variants[0].variant;
            variants.extend(old.variants.into_iter().filter(|v| v.variant != id));
        }
        variants.truncate(max.max(1));
        RemoteManifest {
            format: MANIFEST_FORMAT,
            key: *key,
            kind: kind.to_string(),
            variants,
        }
    }
}

/// The blobs a remote manifest names, as (blake3 hex, size), for audits of a store: a kernel's
/// artifacts, or a stored entry's files. None when the manifest does not parse (every reader
/// treats it as a miss).
pub fn manifest_artifacts(bytes: &[u8]) -> Option<Vec<(String, u64)>> {
    if let Some(stored) = crate::store::tier_stored::StoredManifest::parse(bytes) {
        return Some(
            stored
                .files
                .iter()
                .map(|f| (f.digest.to_hex(), f.size))
                .collect(),
        );
    }
    let manifest: RemoteManifest = serde_json::from_slice(bytes).ok()?;
    (manifest.format == MANIFEST_FORMAT).then(|| {
        manifest
            .variants
            .iter()
            .map(|v| (v.artifact_digest.to_hex(), v.artifact_size))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::search::Base;

    fn variant(n: u8) -> RemoteVariant {
        let inputs = Inputs {
            headers: vec![HeaderRecord {
                base: Base::Include(0),
                rel: format!("h{n}.cuh").into(),
                digest: Digest::of_bytes(&[n]),
                stamp: None,
            }],
            absent: Vec::new(),
            source: None,
        };
        RemoteVariant {
            variant: crate::build::entry::variant_of(&inputs),
            name: "k".into(),
            artifact_size: 10,
            artifact_digest: Digest::of_bytes(b"artifact"),
            headers: inputs.headers,
            absent: inputs.absent,
            source: inputs.source,
            record: None,
            created_unix_ms: 0,
            compile_ms: 0,
            host: "h".into(),
        }
    }

    #[test]
    fn merging_puts_the_new_variant_first_replaces_its_old_record_and_bounds_the_list() {
        let key = Digest::of_bytes(b"key");
        let mut bytes: Option<Vec<u8>> = None;
        for n in [1, 2, 3, 2] {
            let merged = RemoteManifest::merged(bytes.as_deref(), &key, "cubin", variant(n), 2);
            bytes = Some(serde_json::to_vec(&merged).expect("serialise"));
        }
        let parsed = RemoteManifest::parse(bytes.as_deref().unwrap_or_default(), &key, "cubin")
            .expect("the merged manifest parses");
        let order: Vec<_> = parsed.variants.iter().map(|v| v.variant).collect();
        assert_eq!(
            order,
            vec![variant(2).variant, variant(3).variant],
            "newest first, no duplicate, at most two"
        );
        assert!(parsed.variants.iter().all(RemoteVariant::consistent));
    }

    #[test]
    fn foreign_corrupt_or_inconsistent_manifests_are_refused() {
        let key = Digest::of_bytes(b"key");
        let good = RemoteManifest::merged(None, &key, "cubin", variant(1), 8);
        let bytes = serde_json::to_vec(&good).expect("serialise");
        assert!(RemoteManifest::parse(&bytes, &Digest::of_bytes(b"other"), "cubin").is_none());
        assert!(RemoteManifest::parse(&bytes, &key, "ptx").is_none());
        assert!(RemoteManifest::parse(&bytes[..bytes.len() / 2], &key, "cubin").is_none());
        let mut lying = variant(1);
        lying.headers[0].digest = Digest::of_bytes(b"something else");
        assert!(!lying.consistent(), "a variant id must name its inputs");
        let mut huge = variant(1);
        huge.artifact_size = MAX_ARTIFACT_BYTES + 1;
        assert!(!huge.consistent(), "an oversized artifact is never fetched");
    }
}
