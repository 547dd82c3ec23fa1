//! The fleet tier for stored entries: one another host published is fetched, every file checked
//! against the size and blake3 digest its manifest names before anything is written, and
//! published here by the store's own commit; one this host produced is uploaded after its
//! commit (blobs first, then the manifest by compare-and-set). Faults count and switch the
//! remote off as for kernels (`Remote::fault`): the store goes on locally.

use super::address::Address;
use crate::storage::layout::Layout;
use crate::store::tier::{Event, Expected, Remote, TierErrorKind};
use crate::store::tier_stored::{StoredFile, StoredManifest, STORED_MANIFEST_FORMAT};
use fingerprint::Digest;
use std::path::Path;

/// The longest stored manifest read: beyond it a value is refused unread.
const MAX_MANIFEST_BYTES: usize = 256 * 1024;

/// The largest stored file fetched.
const MAX_FILE_BYTES: u64 = 1 << 30;

/// Fetches the entry at `address` from the fleet into `staging` (an empty staging directory),
/// every file verified. True when the whole entry is there; false on a miss, a manifest or blob
/// that does not verify, or a fault (the caller produces it).
pub(crate) fn fetch_into(
    remote: &Remote,
    layout: &Layout,
    address: &Address,
    staging: &Path,
) -> bool {
    if !remote.readable() {
        return false;
    }
    let key = address.digest.to_hex();
    let bytes = match remote.tier.get_manifest(&key, MAX_MANIFEST_BYTES) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            remote.log(layout, Event::Miss);
            return false;
        }
        Err(e) if e.kind() == TierErrorKind::TooLarge => {
            remote.log(layout, Event::Rejected);
            return false;
        }
        Err(e) => {
            remote.fault_logged(layout, &e);
            return false;
        }
    };
    let manifest = StoredManifest::parse(&bytes).filter(|m| {
        m.namespace == address.namespace.as_str()
            && m.key == address.key
            && m.files
                .iter()
                .all(|f| super::entry::check_name(&f.name).is_ok() && f.size <= MAX_FILE_BYTES)
    });
    let Some(manifest) = manifest else {
        remote.log(layout, Event::Rejected);
        return false;
    };
    let mut fetched = 0;
    for file in &manifest.files {
        let blob = match remote
            .tier
            .get_blob(&file.digest.to_hex(), file.size as usize)
        {
            Ok(Some(blob)) => blob,
            // Evicted under a surviving manifest: a miss, not an error.
            Ok(None) => {
                remote.log(layout, Event::Miss);
                return false;
            }
            Err(e) if e.kind() == TierErrorKind::TooLarge => {
                remote.note_corrupt_blob(file.digest);
                remote.log(layout, Event::Rejected);
                return false;
            }
            Err(e) => {
                remote.fault_logged(layout, &e);
                return false;
            }
        };
        if blob.len() as u64 != file.size || Digest::of_bytes(&blob) != file.digest {
            remote.note_corrupt_blob(file.digest);
            remote.log(layout, Event::Rejected);
            return false;
        }
        if std::fs::write(staging.join(&file.name), &blob).is_err() {
            return false;
        }
        fetched += blob.len() as u64;
    }
    remote.log(layout, Event::Hit(fetched));
    true
}

/// Uploads a stored entry just published here: each file's blob (a blob read corrupt earlier is
/// repaired), then the manifest, replaced by compare-and-set against what was read.
pub(crate) fn upload(
    remote: &Remote,
    layout: &Layout,
    address: &Address,
    files: &[StoredFile],
    read: impl Fn(&str) -> Option<Vec<u8>>,
) {
    if !remote.writable() {
        return;
    }
    let mut total = 0;
    for file in files {
        let Some(bytes) = read(&file.name) else {
            return;
        };
        let digest = file.digest.to_hex();
        let body = crate::storage::hooks::uploaded_blob(&bytes);
        let put = if remote.blob_was_corrupt(&file.digest) {
            remote.tier.repair_blob(&digest, &body)
        } else {
            remote.tier.put_blob(&digest, &body)
        };
        if let Err(e) = put {
            remote.fault_logged(layout, &e);
            return;
        }
        total += bytes.len() as u64;
    }
    let manifest = StoredManifest {
        format: STORED_MANIFEST_FORMAT.to_string(),
        namespace: address.namespace.as_str().to_string(),
        key: address.key.clone(),
        files: files.to_vec(),
        host: crate::base::host::name(),
        created_unix_ms: crate::base::host::now_ms(),
    };
    let Ok(new) = serde_json::to_vec(&manifest) else {
        return;
    };
    let key = address.digest.to_hex();
    // A few rounds under contention; another writer's manifest of the same key names the same
    // files (the key names the content), so losing every round loses nothing.
    for _ in 0..4 {
        let current = match remote.tier.get_manifest(&key, MAX_MANIFEST_BYTES) {
            Ok(current) => Ok(current),
            Err(e) if e.kind() == TierErrorKind::TooLarge => Err(()),
            Err(e) => {
                remote.fault_logged(layout, &e);
                return;
            }
        };
        let expected = match &current {
            Ok(Some(current))
                if StoredManifest::parse(current).is_some_and(|m| m.files == files) =>
            {
                return;
            }
            Ok(Some(current)) => Expected::Value(current),
            Ok(None) => Expected::Absent,
            Err(()) => Expected::LongerThan(MAX_MANIFEST_BYTES),
        };
        match remote.tier.replace_manifest(&key, expected, &new) {
            Ok(true) => {
                remote.log(layout, Event::Upload(total));
                return;
            }
            Ok(false) => continue,
            Err(e) => {
                remote.fault_logged(layout, &e);
                return;
            }
        }
    }
}
