//! Small JSON records beside the entries: each slot's most recent manifest (to explain a
//! rebuild) and each key's last compile failure (so a broken kernel is compiled once, not once per
//! caller). Both are written with `durable_fs::put`: whole or absent, never torn.

use crate::build::headers::{HeaderRecord, Inputs};
use crate::error::{CompileFailed, Result};
use fingerprint::{Digest, Manifest};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What a slot remembers of its most recent variant.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SlotRecord {
    pub(crate) name: String,
    pub(crate) key: Digest,
    pub(crate) variant: Digest,
    pub(crate) headers: Vec<HeaderRecord>,
    pub(crate) manifest: Manifest,
}

/// A key's last compile failure (the source's fault only) and what it depended on: the headers
/// and absences of its dependency file, or, when the compiler failed before writing one, of a
/// walk of the source's includes (so adding the missing header retires the record).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FailureRecord {
    pub(crate) key: Digest,
    pub(crate) inputs: Inputs,
    pub(crate) failure: CompileFailed,
}

/// Reads a JSON record; a missing, unreadable or corrupt one reads as absent, since each record
/// only saves work or explains it.
pub(crate) fn read_record<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes a JSON record durably and atomically.
pub(crate) fn write_record<T: Serialize>(path: &Path, record: &T) -> Result<()> {
    durable_fs::put(path, &encode(path, record)?)?;
    Ok(())
}

/// Stages a JSON record in `batch`: whole or absent once the batch commits, with the batch's
/// flushes instead of two of its own.
pub(crate) fn stage_record<T: Serialize>(
    batch: &mut durable_fs::Batch,
    path: &Path,
    record: &T,
) -> Result<()> {
    batch.put(path, &encode(path, record)?)?;
    Ok(())
}

fn encode<T: Serialize>(path: &Path, record: &T) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(record).map_err(|e| {
        crate::error::Error::io(
            "serialise record",
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })
}
