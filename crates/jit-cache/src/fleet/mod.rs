//! The remote tier in the miss path, called by `publish.rs` under the key's local lock:
//! [`before_compile`] (fetch a verified variant, or a shared failure, or take the fleet's lease,
//! or wait for its holder), [`share_build`] (blob first, manifest last, then release) and
//! [`share_failure`].

mod manifest;

pub use manifest::manifest_artifacts;

use crate::build::answer::{Answer, Outcome};
use crate::build::entry::{self, Meta};
use crate::build::headers::Inputs;
use crate::build::key::Prepared;
use crate::build::records::{read_record, FailureRecord};
use crate::build::request::Request;
use crate::context::BuildContext;
use crate::error::{CompileFailed, Error, FailureCause, Result};
use crate::publication::{publish_staged, Built, Origin, Publication, Staged};
use crate::storage::layout::Layout;
use crate::store::tier::{Event, Expected, Remote, TierError, TierErrorKind};
use fingerprint::Digest;
use manifest::{
    without_stamps, RemoteManifest, RemoteVariant, MAX_FAILURE_BYTES, MAX_MANIFEST_BYTES,
};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// What to do after asking the remote.
pub(crate) enum Before {
    /// A verified remote artifact, now published locally (or privately, with a warning).
    Fetched(Built),
    /// Compile here; the fleet's lease when this process holds it.
    Compile(Option<LeaseGuard>),
}

/// Looks for a usable remote variant or failure of the key; when there is none, takes the
/// fleet's lease, or waits (polling) while another host holds it. Errors only with a shared
/// compile failure whose inputs match this host's; every remote fault is a miss.
pub(crate) fn before_compile(
    cx: &BuildContext,
    layout: &Layout,
    request: &Request,
    prepared: &Prepared,
) -> Result<Before> {
    let Some(remote) = cx.options.remote.as_ref().filter(|r| r.readable()) else {
        return Ok(Before::Compile(None));
    };
    let key = prepared.key.to_hex();
    let started = Instant::now();
    let mut waited = false;
    let mut lease = None;
    loop {
        // A fault turns the remote off at once: never one timeout per step.
        if !remote.readable() {
            return Ok(Before::Compile(lease));
        }
        if let Some(built) = fetch(cx, remote, layout, request, prepared)? {
            remote.log(layout, Event::Hit(built.1));
            return Ok(Before::Fetched(built.0));
        }
        if !remote.readable() {
            return Ok(Before::Compile(lease));
        }
        if let Some(failure) = shared_failure(cx, remote, layout, prepared) {
            remote.log(layout, Event::FailureFetched);
            return Err(Error::Compile(Arc::new(failure)));
        }
        // Looked again after taking the lease: the holder before us may have uploaded and
        // released between our look and our take.
        if lease.is_some() || !remote.writable() || started.elapsed() >= remote.policy.lease_wait {
            remote.log(layout, Event::Miss);
            return Ok(Before::Compile(lease));
        }
        let token = durable_fs::temp_name("lease")
            .to_string_lossy()
            .into_owned();
        match remote
            .tier
            .acquire_lease(&key, &token, remote.policy.lease_ttl)
        {
            Ok(true) => {
                lease = Some(LeaseGuard::start(remote.clone(), key.clone(), token));
                continue;
            }
            Ok(false) => {}
            Err(e) => {
                remote.fault_logged(layout, &e);
                continue;
            }
        }
        if !waited {
            waited = true;
            remote.log(layout, Event::LeaseWait);
        }
        // A bounded wait for another host's manifest (or for its lease to expire).
        std::thread::sleep(remote.policy.poll);
    }
}

/// Whether another host holds the fleet's lease of `key` (so a batch puts the kernel off). A
/// fault is counted and turns the remote off, as everywhere, and answers no.
pub(crate) fn leased_elsewhere(cx: &BuildContext, layout: &Layout, key: &Digest) -> bool {
    let Some(remote) = cx
        .options
        .remote
        .as_ref()
        .filter(|r| r.readable() && r.writable())
    else {
        return false;
    };
    match remote.tier.lease_held(&key.to_hex()) {
        Ok(held) => held,
        Err(e) => {
            remote.fault_logged(layout, &e);
            false
        }
    }
}

/// The first remote variant whose inputs match this host's files, fetched, verified and
/// published locally, with its size.
fn fetch(
    cx: &BuildContext,
    remote: &Remote,
    layout: &Layout,
    request: &Request,
    prepared: &Prepared,
) -> Result<Option<(Built, u64)>> {
    let kind = request.spec.kind;
    let key = prepared.key.to_hex();
    let bytes = match remote.tier.get_manifest(&key, MAX_MANIFEST_BYTES) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(e) if e.kind() == TierErrorKind::TooLarge => {
            remote.log(layout, Event::Rejected);
            return Ok(None);
        }
        Err(e) => {
            remote.fault_logged(layout, &e);
            return Ok(None);
        }
    };
    let Some(manifest) = RemoteManifest::parse(&bytes, &prepared.key, kind.name()) else {
        remote.log(layout, Event::Rejected);
        return Ok(None);
    };
    for variant in &manifest.variants {
        if !variant.consistent() {
            remote.log(layout, Event::Rejected);
            continue;
        }
        let inputs = variant.inputs();
        if prepared
            .serves_source(inputs.source.as_ref())
            .and_then(|()| cx.revalidate(&inputs.headers, &inputs.absent, &prepared.search))
            .is_err()
        {
            continue;
        }
        let digest = variant.artifact_digest.to_hex();
        // Reads at most one byte past the recorded size: a longer value is refused unread.
        let blob = match remote
            .tier
            .get_blob(&digest, variant.artifact_size as usize)
        {
            Ok(Some(blob)) => blob,
            // Evicted under a surviving manifest (bazel #12423): a miss, not an error.
            Ok(None) => continue,
            Err(e) if e.kind() == TierErrorKind::TooLarge => {
                // Longer than the content its name stands for (or the manifest lies about the
                // size): an upload of the real bytes may overwrite it.
                remote.note_corrupt_blob(variant.artifact_digest);
                remote.log(layout, Event::Rejected);
                continue;
            }
            Err(e) => {
                remote.fault_logged(layout, &e);
                return Ok(None);
            }
        };
        if blob.len() as u64 != variant.artifact_size
            || Digest::of_bytes(&blob) != variant.artifact_digest
        {
            if Digest::of_bytes(&blob) != variant.artifact_digest {
                remote.note_corrupt_blob(variant.artifact_digest);
            }
            remote.log(layout, Event::Rejected);
            continue;
        }
        let size = blob.len() as u64;
        let built = match publish_fetched(cx, layout, request, prepared, variant, inputs, &blob) {
            Ok(answer) => answer,
            Err(e) if e.is_storage() => {
                // The local cache cannot take it: the verified bytes still answer, uncached.
                let artifact = crate::build::compile::private_copy(kind, blob)?;
                Answer {
                    artifact,
                    outcome: Outcome::Fetched,
                    warning: Some(format!(
                        "cache at {} failed ({e}); fetched `{}` uncached",
                        cx.root.display(),
                        request.spec.name
                    )),
                    inputs: None,
                }
            }
            Err(e) => return Err(e),
        };
        return Ok(Some((Built::Answer(built), size)));
    }
    Ok(None)
}

/// Publishes verified remote bytes as a local entry through the build's own publication step
/// (`publication::publish_staged`). Runs under the key's local lock.
fn publish_fetched(
    cx: &BuildContext,
    layout: &Layout,
    request: &Request,
    prepared: &Prepared,
    remote_variant: &RemoteVariant,
    inputs: Inputs,
    bytes: &[u8],
) -> Result<Answer> {
    let spec = &request.spec;
    let meta = Meta::for_kernel(
        spec,
        prepared,
        &inputs,
        (bytes.len() as u64, remote_variant.artifact_digest),
        remote_variant.compile_ms,
        remote_variant.host.clone(),
    );
    let variant = meta.variant;
    let staging = layout.new_staging_dir()?;
    let artifact_path = staging.path().join(&meta.artifact_file);
    std::fs::write(&artifact_path, bytes)
        .map_err(|e| Error::io("write fetched artifact", &artifact_path, e))?;
    if let Some(text) = &remote_variant.record {
        crate::build::compiler_record::write_shared(
            staging.path(),
            text,
            &inputs.headers,
            &prepared.search,
            &request.working_dir,
        );
    }
    let target = layout.entry_dir(&prepared.key, &variant);
    let staged = Staged {
        staging,
        meta: &meta,
        bytes,
        inputs: &inputs,
        origin: Origin::Fetch,
    };
    let published = match publish_staged(cx, layout, request, prepared, staged)? {
        Publication::Found(answer) => {
            return Ok(Answer {
                outcome: Outcome::Fetched,
                ..answer
            })
        }
        Publication::Published(published) => published,
    };
    // Our own entry holds the bytes just verified: pin it without reading them again. Another
    // writer's (it published this very variant meanwhile) is opened and checked like any entry.
    let ours = match published {
        durable_fs::PublishOutcome::Published => entry::Artifact::repin(
            Arc::from(bytes),
            &target.join(entry::artifact_file_name(spec.kind)),
            spec.kind,
            layout.protocol,
        ),
        _ => None,
    };
    let artifact = match ours {
        Some(artifact) => artifact,
        None => {
            let variant_dir = crate::storage::layout::variant_dir_name(&variant);
            entry::open_entry(
                &target,
                &prepared.key,
                &variant_dir,
                crate::storage::pin::LastUse::Refresh(layout.protocol),
            )
            .and_then(|open| open.load(spec.kind))
            .map_err(|why| {
                Error::io(
                    "open fetched entry",
                    &target,
                    std::io::Error::other(format!("{why:?}")),
                )
            })?
            .1
        }
    };
    Ok(Answer {
        artifact,
        outcome: Outcome::Fetched,
        warning: None,
        inputs: Some(Arc::new(inputs)),
    })
}

/// A compile failure shared by another host whose inputs match this host's files.
fn shared_failure(
    cx: &BuildContext,
    remote: &Remote,
    layout: &Layout,
    prepared: &Prepared,
) -> Option<CompileFailed> {
    let bytes = match remote
        .tier
        .get_failure(&prepared.key.to_hex(), MAX_FAILURE_BYTES)
    {
        Ok(bytes) => bytes?,
        Err(e) => {
            remote.fault_logged(layout, &e);
            return None;
        }
    };
    let record: FailureRecord = serde_json::from_slice(&bytes).ok()?;
    if record.key != prepared.key || record.failure.cause != FailureCause::Source {
        return None;
    }
    let inputs = without_stamps(record.inputs);
    prepared.serves_source(inputs.source.as_ref()).ok()?;
    cx.revalidate(&inputs.headers, &inputs.absent, &prepared.search)
        .ok()?;
    Some(CompileFailed {
        from_record: true,
        ..record.failure
    })
}

/// After a local publication: uploads the blob, then the manifest (compare-and-set, merged with
/// what other hosts uploaded meanwhile), then releases the lease.
pub(crate) fn share_build(
    cx: &BuildContext,
    layout: &Layout,
    meta: &Meta,
    bytes: &[u8],
    lease: Option<LeaseGuard>,
) {
    let Some(remote) = cx.options.remote.as_ref().filter(|r| r.writable()) else {
        return;
    };
    let inputs = without_stamps(meta.inputs());
    let variant = RemoteVariant {
        variant: entry::variant_of(&inputs),
        name: meta.name.clone(),
        artifact_size: bytes.len() as u64,
        artifact_digest: meta.artifact_digest,
        headers: inputs.headers,
        absent: inputs.absent,
        source: inputs.source,
        record: crate::build::compiler_record::shared_text(
            &layout.entry_dir(&meta.key, &meta.variant),
        ),
        created_unix_ms: meta.created_unix_ms,
        compile_ms: meta.compile_ms,
        host: meta.host.clone(),
    };
    let digest = meta.artifact_digest.to_hex();
    let body = crate::storage::hooks::uploaded_blob(bytes);
    let uploaded = if remote.blob_was_corrupt(&meta.artifact_digest) {
        remote.tier.repair_blob(&digest, &body)
    } else {
        remote.tier.put_blob(&digest, &body)
    };
    if let Err(e) = uploaded {
        remote.fault_logged(layout, &e);
        return;
    }
    let key = meta.key.to_hex();
    match update_manifest(remote, &key, meta, variant) {
        Ok(true) => remote.log(layout, Event::Upload(bytes.len() as u64)),
        // Other writers kept winning: they are publishing this key, the blob stays.
        Ok(false) => {}
        Err(e) => remote.fault_logged(layout, &e),
    }
    drop(lease);
}

/// Compare-and-set of the manifest, a few times under contention.
fn update_manifest(
    remote: &Remote,
    key: &str,
    meta: &Meta,
    variant: RemoteVariant,
) -> std::result::Result<bool, TierError> {
    for _ in 0..8 {
        let (current, oversized) = match remote.tier.get_manifest(key, MAX_MANIFEST_BYTES) {
            Ok(current) => (current, false),
            // An oversized manifest can only be garbage: it is replaced, compared by its length
            // (compared as "absent", a value there would keep it forever).
            Err(e) if e.kind() == TierErrorKind::TooLarge => (None, true),
            Err(e) => return Err(e),
        };
        let expected = match (&current, oversized) {
            (_, true) => Expected::LongerThan(MAX_MANIFEST_BYTES),
            (Some(bytes), false) => Expected::Value(bytes),
            (None, false) => Expected::Absent,
        };
        let merged = RemoteManifest::merged(
            current.as_deref(),
            &meta.key,
            meta.kind.name(),
            variant.clone(),
            remote.policy.max_variants,
        );
        let new = serde_json::to_vec(&merged).map_err(|e| {
            TierError::new(
                "serialise manifest",
                key,
                TierErrorKind::Protocol,
                e.to_string(),
            )
        })?;
        if remote.tier.replace_manifest(key, expected, &new)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// After a compile failure of the source's own that was recorded locally: shares the record
/// for the policy's failure expiry, then releases the lease.
pub(crate) fn share_failure(
    cx: &BuildContext,
    layout: &Layout,
    prepared: &Prepared,
    failure: &CompileFailed,
    lease: Option<LeaseGuard>,
) {
    let Some(remote) = cx.options.remote.as_ref().filter(|r| r.writable()) else {
        return;
    };
    if failure.cause != FailureCause::Source {
        return;
    }
    let Some(mut record) = read_record::<FailureRecord>(&layout.failure_file(&prepared.key)) else {
        return;
    };
    // Only the record of this very failure (an older one may be left when this one was not
    // recordable).
    if record.key != prepared.key
        || record.failure.command != failure.command
        || record.failure.stderr_tail != failure.stderr_tail
    {
        return;
    }
    record.inputs = without_stamps(record.inputs);
    let Ok(bytes) = serde_json::to_vec(&record) else {
        return;
    };
    match remote
        .tier
        .put_failure(&prepared.key.to_hex(), &bytes, remote.policy.failure_ttl)
    {
        Ok(()) => remote.log(layout, Event::FailureShared),
        Err(e) => remote.fault_logged(layout, &e),
    }
    drop(lease);
}

/// The fleet's lease on one key while this process compiles it: renewed every third of its
/// expiry by a thread, released (compare-and-delete) when dropped.
#[must_use = "the lease is released when dropped: hold it until the upload is done"]
pub(crate) struct LeaseGuard {
    remote: Remote,
    key: String,
    token: String,
    stop: Option<mpsc::Sender<()>>,
    renewer: Option<JoinHandle<()>>,
}

impl LeaseGuard {
    fn start(remote: Remote, key: String, token: String) -> LeaseGuard {
        let (stop, stopped) = mpsc::channel::<()>();
        let renewer = {
            let (remote, key, token) = (remote.clone(), key.clone(), token.clone());
            std::thread::Builder::new()
                .name("jit-cache-lease".into())
                .spawn(move || {
                    let every = remote.policy.lease_ttl / 3;
                    // Wakes every `every` to renew, or at once when the guard is dropped.
                    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                        match remote
                            .tier
                            .renew_lease(&key, &token, remote.policy.lease_ttl)
                        {
                            Ok(true) => {}
                            // Expired or taken: another host compiles too; ours still counts.
                            Ok(false) => return,
                            Err(e) => {
                                remote.fault(&e);
                                return;
                            }
                        }
                    }
                })
                .ok()
        };
        LeaseGuard {
            remote,
            key,
            token,
            stop: Some(stop),
            renewer,
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
        if !self.remote.readable() {
            // The remote failed meanwhile: the lease expires on its own.
            return;
        }
        if let Err(e) = self.remote.tier.release_lease(&self.key, &self.token) {
            self.remote.fault(&e);
        }
    }
}
