//! A kernel entry as the one publication step (`storage/publish.rs`) takes it, for builds,
//! fetches and imports alike, under the key's lock: what is adopted when another host's entry is
//! found at the target (its answer, or a private copy when it is damaged and may be held), and
//! what a kernel records beside its entry once it is published (the slot record, old variants
//! pruned, the failure record removed); and what the miss path produced (`Built`).

use crate::base::fstype::Protocol;
use crate::base::unproven::Unproven;
use crate::build::answer::{Answer, Outcome};
use crate::build::entry::{self, open_entry, Meta, Unusable};
use crate::build::headers::Inputs;
use crate::build::key::Prepared;
use crate::build::records::{write_record, SlotRecord};
use crate::build::request::Request;
use crate::context::BuildContext;
use crate::error::Result;
use crate::storage::evict::evict_unpinned;
use crate::storage::hooks::Failpoint;
use crate::storage::layout::Layout;
use crate::storage::pin::LastUse;
use crate::storage::publish::{self, Points, Publishable, Published, Target};
use crate::storage::staging::Staging;
use durable_fs::PublishOutcome;
use fingerprint::Digest;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the miss path produced.
#[derive(Debug, Clone)]
pub(crate) enum Built {
    /// An answer (cached, or uncached with a warning).
    Answer(Answer),
    /// The compile's answer is the compiler's own, but the cache cannot prove what it depended
    /// on (an input moved while it ran, or the compiler read what the include model cannot
    /// account for): nothing was published; these are the bytes of that compile, and what it
    /// printed and read (a launcher answers with them as from an entry).
    Unproven {
        why: Unproven,
        bytes: Arc<[u8]>,
        printed: Arc<Printed>,
    },
}

/// What an unpublished compile printed and read, for its compiler record.
#[derive(Debug)]
pub(crate) struct Printed {
    pub(crate) stderr: String,
    pub(crate) read: Vec<std::path::PathBuf>,
    pub(crate) spelled: Vec<std::path::PathBuf>,
}

/// What a publication puts in place: the staging directory holding the artifact (and, for a
/// build, the compiler record), the entry's metadata, and what it depended on.
pub(crate) struct Staged<'a> {
    pub(crate) staging: Staging,
    pub(crate) meta: &'a Meta,
    pub(crate) bytes: &'a [u8],
    pub(crate) inputs: &'a Inputs,
    pub(crate) origin: Origin,
}

/// How an entry came to be published, as the event log says it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Origin {
    Build,
    Fetch,
    Import,
}

impl Origin {
    fn event(self) -> crate::base::event_log::Event {
        use crate::base::event_log::Event;
        match self {
            Origin::Build => Event::Build,
            Origin::Fetch => Event::Fetch,
            Origin::Import => Event::Import,
        }
    }
}

/// What [`publish_staged`] did.
pub(crate) enum Publication {
    /// The staged entry was renamed into place (or another writer's took the name first).
    Published(PublishOutcome),
    /// Another host's whole entry was already there (shared protocol): the answer, nothing
    /// published.
    Found(Answer),
}

/// Whom an entry is published for: the kernel's name and output kind, its key, slot and key
/// manifest. Built from a request (build, fetch) or from an entry's own `meta.json` (import).
pub(crate) struct Owner<'a> {
    pub(crate) name: &'a str,
    pub(crate) kind: nvcc::OutputKind,
    pub(crate) key: Digest,
    pub(crate) slot: Digest,
    pub(crate) manifest: &'a fingerprint::Manifest,
}

impl<'a> Owner<'a> {
    pub(crate) fn of(request: &'a Request, prepared: &'a Prepared) -> Owner<'a> {
        Owner {
            name: &request.spec.name,
            kind: request.spec.kind,
            key: prepared.key,
            slot: prepared.slot,
            manifest: &prepared.manifest,
        }
    }

    pub(crate) fn of_meta(meta: &'a Meta) -> Owner<'a> {
        Owner {
            name: &meta.name,
            kind: meta.kind,
            key: meta.key,
            slot: meta.slot,
            manifest: &meta.manifest,
        }
    }
}

/// Where the slot records of a publication go: written at once (one durable put each), or into
/// a batch the caller commits with its other files (an import of many entries).
pub(crate) enum Records<'b> {
    Now,
    Into(&'b mut durable_fs::Batch),
}

/// A kernel entry as the publication step (`storage/publish.rs`) takes it.
struct KernelEntry<'a> {
    key: &'a Digest,
    kind: nvcc::OutputKind,
    meta: &'a Meta,
    bytes: &'a [u8],
    inputs: &'a Inputs,
}

impl Publishable for KernelEntry<'_> {
    type Found = Answer;
    const POINTS: Points = Points {
        writing_meta: Failpoint::WritingMeta,
        publishing: Failpoint::Publishing,
        published: Failpoint::Published,
    };

    fn meta_json(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(self.meta)
    }

    fn open_found(
        &self,
        target: &Path,
        protocol: Protocol,
    ) -> std::result::Result<Answer, Unusable> {
        let variant_dir = target
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let (_, artifact) = open_entry(target, self.key, variant_dir, LastUse::Refresh(protocol))?
            .load(self.kind)?;
        Ok(Answer {
            artifact,
            outcome: Outcome::Built,
            warning: None,
            inputs: Some(Arc::new(self.inputs.clone())),
        })
    }

    /// A private copy of this builder's own output, which is the same artifact (DeepEP #684: a
    /// loser must not insist on seeing the winner).
    fn held_damaged(&self, target: &Path, _why: String) -> Result<Option<Answer>> {
        let artifact = crate::build::compile::private_copy(self.kind, self.bytes.to_vec())?;
        Ok(Some(Answer {
            artifact,
            outcome: Outcome::Built,
            warning: Some(format!(
                "entry {} is damaged or being evicted and may be held by another host; \
                 using a private copy",
                target.display()
            )),
            inputs: None,
        }))
    }

    /// The failpoints build's `meta-first` bug writes the artifact after the rename.
    fn deferrable(&self) -> Option<(&str, &[u8])> {
        Some((&self.meta.artifact_file, self.bytes))
    }
}

impl<'a> KernelEntry<'a> {
    fn of(owner: &'a Owner<'_>, meta: &'a Meta, bytes: &'a [u8], inputs: &'a Inputs) -> Self {
        KernelEntry {
            key: &owner.key,
            kind: owner.kind,
            meta,
            bytes,
            inputs,
        }
    }
}

/// A kernel entry's place: its key directory and its variant's directory.
fn target_of<'a>(owner: &'a Owner<'_>, meta: &'a Meta, dir: &'a Path) -> Target<'a> {
    Target {
        key: &owner.key,
        variant: &meta.variant,
        dir,
    }
}

/// The publication step of a kernel entry, for builds and fetches alike, under the key's lock
/// (`storage/publish.rs`); after the rename, the stat cache is saved, and the slot record, old
/// variants pruned and the key's failure record removed come before the event is logged.
pub(crate) fn publish_staged(
    cx: &BuildContext,
    layout: &Layout,
    request: &Request,
    prepared: &Prepared,
    staged: Staged<'_>,
) -> Result<Publication> {
    let owner = Owner::of(request, prepared);
    let Staged {
        staging,
        meta,
        bytes,
        inputs,
        origin,
    } = staged;
    let dir = layout.entry_dir(&owner.key, &meta.variant);
    let published = publish::publish(
        layout,
        staging,
        &KernelEntry::of(&owner, meta, bytes, inputs),
        target_of(&owner, meta, &dir),
        (origin.event(), owner.name, meta.compile_ms),
        || {
            cx.save_stat_cache();
            recorded(cx, layout, &owner, &meta.variant, inputs, Records::Now)
        },
    )?;
    Ok(match published {
        Published::Found(answer) => Publication::Found(answer),
        Published::Renamed(outcome) => Publication::Published(outcome),
    })
}

/// The publication step's first half for a kernel entry (a pack's import runs the halves).
/// `Some`: another host's whole entry is there (shared protocol), the answer; publish nothing.
pub(crate) fn before_rename(
    layout: &Layout,
    owner: &Owner<'_>,
    staging: &Staging,
    meta: &Meta,
    bytes: &[u8],
    inputs: &Inputs,
) -> Result<Option<Answer>> {
    let dir = layout.entry_dir(&owner.key, &meta.variant);
    publish::before_rename(
        layout,
        staging,
        &KernelEntry::of(owner, meta, bytes, inputs),
        target_of(owner, meta, &dir),
    )
}

/// The publication step's second half for a kernel entry, once the rename published it.
pub(crate) fn after_rename(
    cx: &BuildContext,
    layout: &Layout,
    owner: &Owner<'_>,
    meta: &Meta,
    inputs: &Inputs,
    origin: Origin,
    records: Records<'_>,
) -> Result<()> {
    let dir = layout.entry_dir(&owner.key, &meta.variant);
    publish::after_rename(
        layout,
        target_of(owner, meta, &dir),
        (origin.event(), owner.name, meta.compile_ms),
        || recorded(cx, layout, owner, &meta.variant, inputs, records),
    )
}

/// Keeps at most `max` variants under a key, moving the oldest-built aside.
fn prune_variants(layout: &Layout, key_dir: &Path, max: usize) -> Result<()> {
    let variants = entry::list_variants(key_dir);
    if variants.len() <= max {
        return Ok(());
    }
    let mut aged: Vec<(u64, PathBuf)> = variants
        .iter()
        .map(|v| {
            let dir = key_dir.join(v);
            let created = entry::read_meta(&dir)
                .map(|m| m.created_unix_ms)
                .unwrap_or(0);
            (created, dir)
        })
        .collect();
    aged.sort();
    for (_, dir) in aged.iter().take(variants.len() - max) {
        evict_unpinned(layout, dir)?;
    }
    Ok(())
}

/// What a kernel's publication records beside its entry, once the rename published it: the
/// slot record (its most recent manifest), the key's old variants pruned, the key's failure
/// record removed.
fn recorded(
    cx: &BuildContext,
    layout: &Layout,
    owner: &Owner<'_>,
    variant: &Digest,
    inputs: &Inputs,
    records: Records<'_>,
) -> Result<()> {
    let record = SlotRecord {
        name: owner.name.to_string(),
        key: owner.key,
        variant: *variant,
        headers: inputs.headers.clone(),
        manifest: owner.manifest.clone(),
    };
    let path = layout.slot_file(&owner.slot);
    match records {
        Records::Now => write_record(&path, &record)?,
        Records::Into(batch) => crate::build::records::stage_record(batch, &path, &record)?,
    }
    prune_variants(layout, &layout.key_dir(&owner.key), cx.options.max_variants)?;
    let _ = std::fs::remove_file(layout.failure_file(&owner.key));
    Ok(())
}
