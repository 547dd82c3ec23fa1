//! Looking in the cache: the variants of a key, a recorded failure, and why an earlier variant
//! no longer serves.

use crate::build::answer::RebuildReason;
use crate::build::entry::{self, Artifact, Meta, Unusable};
use crate::build::headers::Mismatch;
use crate::build::key::Prepared;
use crate::build::records::{read_record, FailureRecord, SlotRecord};
use crate::context::BuildContext;
use crate::error::CompileFailed;
use crate::storage::layout::Layout;
use std::path::PathBuf;

/// What a lookup found.
#[derive(Default)]
pub(crate) struct Lookup {
    pub(crate) hit: Option<(Meta, Artifact)>,
    pub(crate) corrupt: Vec<(PathBuf, String)>,
    pub(crate) mismatches: Vec<Mismatch>,
    /// The variants (directory names) opened and judged, served or not: a variant listed but
    /// not here could not be opened (gone, or hidden by a negative lookup cache).
    pub(crate) examined: Vec<String>,
}

impl BuildContext {
    /// Looks for a variant of the key whose recorded inputs match the files now. Returns the
    /// hit, plus the entries found corrupt and the reasons the other variants did not match.
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
            let open = match entry::open_entry(
                &dir,
                &prepared.key,
                &variant,
                crate::storage::pin::LastUse::Refresh(layout.protocol),
            ) {
                Ok(open) => open,
                Err(Unusable::Absent) => continue,
                Err(Unusable::Corrupt(reason)) => {
                    lookup.examined.push(variant);
                    lookup.corrupt.push((dir, reason));
                    continue;
                }
            };
            lookup.examined.push(variant.clone());
            let checked = prepared
                .serves_source(open.meta.source.as_ref())
                .and_then(|()| {
                    self.revalidate(&open.meta.headers, &open.meta.absent, &prepared.search)
                });
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

    /// The recorded failure of this key, if what it depended on is unchanged since: one check of
    /// the recorded headers and absences, as a hit's.
    pub(crate) fn recorded_failure(
        &self,
        layout: &Layout,
        prepared: &Prepared,
    ) -> Option<CompileFailed> {
        let record: FailureRecord = read_record(&layout.failure_file(&prepared.key))?;
        if record.key != prepared.key {
            return None;
        }
        // Diagnostics name the source: a failure of another source's is not replayed.
        prepared.serves_source(record.inputs.source.as_ref()).ok()?;
        self.revalidate(
            &record.inputs.headers,
            &record.inputs.absent,
            &prepared.search,
        )
        .ok()?;
        Some(CompileFailed {
            from_record: true,
            ..record.failure
        })
    }

    /// The reasons an earlier variant of this slot does not serve, by diffing its manifest against
    /// the inputs now. None when the slot has no history.
    pub(crate) fn rebuild_reasons(
        &self,
        layout: &Layout,
        prepared: &Prepared,
        lookup: &Lookup,
    ) -> Option<Vec<RebuildReason>> {
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
        self.with_stat_cache(|stat| {
            for header in &record.headers {
                let Some(path) = prepared.search.path_of(header.base, &header.rel) else {
                    continue;
                };
                if let Ok(digest) = stat.hash_file(&path) {
                    now.insert(
                        header.component_name(),
                        fingerprint::Component {
                            digest,
                            value: None,
                        },
                    );
                }
            }
        });
        let mut reasons: Vec<RebuildReason> = fingerprint::diff(&before, &now)
            .into_iter()
            .map(RebuildReason::Changed)
            .collect();
        reasons.extend(lookup.mismatches.iter().filter_map(|m| match m {
            Mismatch::Shadowed { name, by } => Some(RebuildReason::Shadowed {
                header: name.clone(),
                by: by.clone(),
            }),
            Mismatch::OtherSource { source } => Some(RebuildReason::OtherSource {
                source: source.clone(),
            }),
            _ => None,
        }));
        reasons.extend(
            lookup
                .corrupt
                .iter()
                .map(|(dir, why)| RebuildReason::Unusable {
                    entry: dir.clone(),
                    why: why.clone(),
                }),
        );
        if reasons.is_empty() {
            reasons.push(RebuildReason::Gone);
        }
        reasons.dedup();
        Some(reasons)
    }
}
