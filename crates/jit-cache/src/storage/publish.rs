//! The one publication step of every kind of entry (a kernel built, fetched or imported; a
//! stored entry produced, fetched or imported), under the key's lock, in one order:
//!
//! 1. `meta.json` written last into the staging directory (the one writer of an entry's
//!    metadata), then the team's modes;
//! 2. the target cleared: nothing there, or under the local protocol whatever the locked lookup
//!    did not accept moved aside; under the shared protocol another host's whole entry is the
//!    answer (it published since this host looked, hidden by a negative lookup cache or
//!    unguarded by a lock this host cannot see), and a damaged one is moved aside only when no
//!    host can hold it ([`Publishable::held_damaged`] says what then);
//! 3. one no-replace rename of the staging directory, its fsyncs inside
//!    (`durable_fs::StagingDir::commit_noreplace`);
//! 4. the note for other hosts' waiters (shared protocol), what the kind records beside its
//!    entries, and the event log.
//!
//! A single entry goes through [`publish`]; a pack's import runs the halves itself, since it
//! renames many entries with two flushes in all (`durable_fs::StagingBatch`).

use crate::base::event_log::Event;
use crate::base::fstype::Protocol;
use crate::error::{Error, Result};
use crate::storage::evict::{evict_unless_pinned, move_to_trash, Evicted};
use crate::storage::hooks::{self, Failpoint};
use crate::storage::layout::Layout;
use crate::storage::pin::Unusable;
use crate::storage::staging::Staging;
use durable_fs::PublishOutcome;
use fingerprint::Digest;
use std::path::Path;

/// The failpoints that name one kind's steps in the crash harness.
pub(crate) struct Points {
    pub(crate) writing_meta: Failpoint,
    pub(crate) publishing: Failpoint,
    pub(crate) published: Failpoint,
}

/// What one kind of entry brings to the publication step.
pub(crate) trait Publishable {
    /// What a publication that found another writer's whole entry at its target answers with.
    type Found;
    /// The failpoints of this kind's steps.
    const POINTS: Points;
    /// The entry's `meta.json`.
    fn meta_json(&self) -> serde_json::Result<Vec<u8>>;
    /// Opens the entry found at `target` (pinned), or says why it cannot be used.
    fn open_found(
        &self,
        target: &Path,
        protocol: Protocol,
    ) -> std::result::Result<Self::Found, Unusable>;
    /// A damaged entry at `target` that another host may hold (`why` it is damaged): what this
    /// publication answers with instead of publishing over it.
    fn held_damaged(&self, target: &Path, why: String) -> Result<Option<Self::Found>>;
    /// The file the failpoints build's `meta-first` bug (a negative control of the crash
    /// harness) holds back until after the rename, and its bytes; none for most kinds.
    fn deferrable(&self) -> Option<(&str, &[u8])> {
        None
    }
}

/// Where an entry is published: its key directory's digest and the entry directory under it.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) key: &'a Digest,
    pub(crate) variant: &'a Digest,
    pub(crate) dir: &'a Path,
}

/// What [`publish`] did.
pub(crate) enum Published<F> {
    /// The staged entry was renamed into place, or another writer's took the name first.
    Renamed(PublishOutcome),
    /// Another writer's whole entry was at the target already: the answer, nothing published.
    Found(F),
}

/// The whole step for one entry; `recorded` runs after the rename, before the event is logged:
/// what the kind records beside its entries (a kernel's slot record, its old variants pruned).
pub(crate) fn publish<P: Publishable>(
    layout: &Layout,
    staging: Staging,
    entry: &P,
    target: Target<'_>,
    logged: (Event, &str, u64),
    recorded: impl FnOnce() -> Result<()>,
) -> Result<Published<P::Found>> {
    if let Some(found) = before_rename(layout, &staging, entry, target)? {
        return Ok(Published::Found(found));
    }
    let outcome = rename(staging, entry, target.dir)?;
    if outcome == PublishOutcome::Published {
        after_rename(layout, target, logged, recorded)?;
    }
    Ok(Published::Renamed(outcome))
}

/// Steps 1 and 2. `Some`: another writer's whole entry is at the target, the answer; publish
/// nothing.
pub(crate) fn before_rename<P: Publishable>(
    layout: &Layout,
    staging: &Staging,
    entry: &P,
    target: Target<'_>,
) -> Result<Option<P::Found>> {
    hooks::point(P::POINTS.writing_meta);
    write_meta(staging, entry)?;
    layout.share_with_team(staging)?;
    layout.ensure_dir(&layout.key_dir(target.key))?;
    if std::fs::symlink_metadata(target.dir).is_err() {
        return Ok(None);
    }
    if !layout.protocol.adopts_found_entries() {
        move_to_trash(layout, target.dir)?;
        return Ok(None);
    }
    let why = match entry.open_found(target.dir, layout.protocol) {
        Ok(found) => return Ok(Some(found)),
        // Marked by an eviction killed before its move: moved aside like a damaged one (a
        // reader that refreshed it just before the kill may hold it).
        Err(Unusable::Absent) if !crate::storage::liveness::is_marked_evicting_at(target.dir) => {
            return Ok(None)
        }
        Err(Unusable::Absent) => "marked by an eviction".to_string(),
        Err(Unusable::Corrupt(why)) => why,
    };
    match evict_unless_pinned(layout, target.dir, None)? {
        Evicted::Moved | Evicted::Absent => Ok(None),
        Evicted::Pinned | Evicted::Replaced => entry.held_damaged(target.dir, why),
    }
}

/// Step 3: the one no-replace rename, its fsyncs inside.
pub(crate) fn rename<P: Publishable>(
    staging: Staging,
    entry: &P,
    target: &Path,
) -> Result<PublishOutcome> {
    hooks::point(P::POINTS.publishing);
    let deferred = entry.deferrable().map(|(name, bytes)| {
        (
            hooks::defer_artifact(&staging.path().join(name)),
            name,
            bytes,
        )
    });
    let published = staging.commit_noreplace(target)?;
    hooks::point(P::POINTS.published);
    if let Some((deferred, name, bytes)) = deferred {
        hooks::write_deferred(deferred, &target.join(name), bytes)?;
    }
    Ok(published)
}

/// Step 4, once the rename published the entry: the note for other hosts' waiters, what the
/// kind records (`recorded`), the event.
pub(crate) fn after_rename(
    layout: &Layout,
    target: Target<'_>,
    (event, name, ms): (Event, &str, u64),
    recorded: impl FnOnce() -> Result<()>,
) -> Result<()> {
    if layout.protocol.notes_publications() {
        crate::storage::notes::note_published(layout, target.key, target.variant);
    }
    recorded()?;
    layout.log_event(event, name, ms);
    Ok(())
}

/// Writes `meta.json` into the staging directory, last: every kind's metadata, by this one
/// writer. Plainly: the commit that publishes the directory fsyncs every file in it before its
/// one rename, so a durable put here would only add two fsyncs and a rename to every build.
fn write_meta<P: Publishable>(staging: &Staging, entry: &P) -> Result<()> {
    let path = staging.path().join(crate::storage::layout::META_FILE);
    let shown = staging.shown().join(crate::storage::layout::META_FILE);
    let json = entry.meta_json().map_err(|e| {
        Error::io(
            "serialise meta.json",
            &shown,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })?;
    std::fs::write(&path, json).map_err(|e| Error::io("write meta.json", &shown, e))
}
