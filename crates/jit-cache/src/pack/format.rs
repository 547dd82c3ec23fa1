//! The pack file's layout and its one codec: a header block, every entry's files at aligned
//! offsets, then the index. Pure: bytes in, checked values out, every refusal with its offset.
//!
//! ```text
//! 0      header block (BLOCK bytes): magic, format, block size, index offset and length,
//!        file length, the index's blake3, the header's own blake3, zeros
//! BLOCK  entry files, each at a multiple of BLOCK, zero-padded to the next one
//! I      the index (JSON), zero-padded to the file's end (a multiple of BLOCK)
//! ```
//!
//! Every file starts on a block boundary so the importer reads it with O_DIRECT into aligned
//! buffers (`direct-io`). The bytes depend only on the entries: entries sorted by key and
//! variant, files by name, no time of export, so exporting the same entries twice gives the
//! same file.
//!
//! Rule: if you change the layout or the index, bump [`PACK_FORMAT`].

use fingerprint::Digest;
use serde::{Deserialize, Serialize};

/// The pack format's version, checked before anything else is read.
pub(crate) const PACK_FORMAT: u32 = 1;

/// The alignment of every region: the largest O_DIRECT alignment of common filesystems.
pub(crate) const BLOCK: u64 = 4096;

/// The piece a long region (a streamed entry's file, a run of padding) is read or copied in: a
/// multiple of [`BLOCK`].
pub(crate) const PIECE: u64 = 8 << 20;

const MAGIC: &[u8; 8] = b"JITCPACK";

/// The header's fields end here; its digest covers them, and the rest of the block is zeros.
const FIELDS_END: usize = 8 + 4 + 4 + 8 * 4 + 32;
const DIGEST_END: usize = FIELDS_END + 32;

/// The largest index accepted (1 GiB): a corrupt length is refused before it is allocated.
const MAX_INDEX: u64 = 1 << 30;

/// Damage found in a pack: where, in which entry, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage {
    pub(crate) offset: u64,
    pub(crate) entry: Option<String>,
    pub(crate) reason: String,
}

impl Damage {
    pub(crate) fn at(offset: u64, reason: impl Into<String>) -> Damage {
        Damage {
            offset,
            entry: None,
            reason: reason.into(),
        }
    }

    pub(crate) fn in_entry(offset: u64, entry: &IndexEntry, reason: impl Into<String>) -> Damage {
        Damage {
            offset,
            entry: Some(entry.label()),
            reason: reason.into(),
        }
    }
}

/// The header block's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) index_offset: u64,
    pub(crate) index_len: u64,
    pub(crate) file_len: u64,
    pub(crate) index_digest: Digest,
}

impl Header {
    /// The header block.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut block = vec![0u8; BLOCK as usize];
        block[..8].copy_from_slice(MAGIC);
        block[8..12].copy_from_slice(&PACK_FORMAT.to_le_bytes());
        // Bytes 12..16 are reserved (zero).
        let mut at = 16;
        for value in [BLOCK, self.index_offset, self.index_len, self.file_len] {
            block[at..at + 8].copy_from_slice(&value.to_le_bytes());
            at += 8;
        }
        block[at..at + 32].copy_from_slice(self.index_digest.as_bytes());
        let own = Digest::of_bytes(&block[..FIELDS_END]);
        block[FIELDS_END..DIGEST_END].copy_from_slice(own.as_bytes());
        block
    }

    /// Checks and reads the header block (the pack's first BLOCK bytes, or fewer when it is
    /// shorter).
    pub(crate) fn decode(block: &[u8]) -> Result<Header, Damage> {
        if block.len() < BLOCK as usize {
            return Err(Damage::at(
                block.len() as u64,
                format!("the pack ends inside its {BLOCK}-byte header"),
            ));
        }
        if &block[..8] != MAGIC {
            return Err(Damage::at(0, "not a jit-cache pack (bad magic)"));
        }
        let own = Digest::of_bytes(&block[..FIELDS_END]);
        if block[FIELDS_END..DIGEST_END] != own.as_bytes()[..] {
            return Err(Damage::at(0, "the header does not match its digest"));
        }
        let format = u32::from_le_bytes(word(block, 8));
        if format != PACK_FORMAT {
            return Err(Damage::at(
                8,
                format!("pack format {format}; this jit-cache reads format {PACK_FORMAT}"),
            ));
        }
        if let Some(i) = block[DIGEST_END..].iter().position(|b| *b != 0) {
            return Err(Damage::at(
                (DIGEST_END + i) as u64,
                "the header's padding is not zero",
            ));
        }
        let u64_at = |at: usize| u64::from_le_bytes(word(block, at));
        let (block_size, index_offset, index_len, file_len) =
            (u64_at(16), u64_at(24), u64_at(32), u64_at(40));
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&block[48..80]);
        if block_size != BLOCK {
            return Err(Damage::at(
                16,
                format!("block size {block_size}, not {BLOCK}"),
            ));
        }
        let aligned = |x: u64| x.is_multiple_of(BLOCK);
        if !aligned(index_offset)
            || !aligned(file_len)
            || index_offset < BLOCK
            || index_len > MAX_INDEX
            || index_offset
                .checked_add(index_len)
                .is_none_or(|end| end > file_len)
            || file_len - index_offset - index_len >= BLOCK
        {
            return Err(Damage::at(24, "the header's offsets are inconsistent"));
        }
        Ok(Header {
            index_offset,
            index_len,
            file_len,
            index_digest: digest_of(digest).ok_or_else(|| Damage::at(48, "a bad digest"))?,
        })
    }
}

fn digest_of(bytes: [u8; 32]) -> Option<Digest> {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    hex.parse().ok()
}

fn word<const N: usize>(block: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&block[at..at + N]);
    out
}

/// The index: every entry with its recorded inputs and its files' places and digests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Index {
    pub(crate) format: u32,
    pub(crate) entries: Vec<IndexEntry>,
}

/// What an entry of a pack is: a kernel of the nvcc front end or an entry of the keyed store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PackEntryKind {
    /// A kernel (`meta.json` of kind `kernel`).
    Kernel,
    /// An entry of [`crate::store`].
    Stored,
}

impl PackEntryKind {
    /// `kernel` or `stored`, as the index and `pack ls` spell it.
    pub fn name(self) -> &'static str {
        match self {
            PackEntryKind::Kernel => "kernel",
            PackEntryKind::Stored => "stored",
        }
    }
}

/// One entry of a pack. Its `meta.json` is one of its files (verified like the others); the
/// fields beside it say what `pack ls` shows without reading the data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IndexEntry {
    pub(crate) kind: PackEntryKind,
    /// The kernel's name, or `namespace/key` of a stored entry.
    pub(crate) name: String,
    /// The key directory's name (hex digest).
    pub(crate) key: String,
    /// The variant directory's name.
    pub(crate) variant: String,
    /// A kernel's output kind and arches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) output: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) arches: Vec<String>,
    /// A kernel's compiler identity (`<version> <digest>`) and host compiler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) toolchain: Option<String>,
    /// A kernel's headers, as `<component> <blake3>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) headers: Vec<String>,
    pub(crate) files: Vec<IndexFile>,
}

/// One file of an entry: where it lies in the pack, its size and its blake3.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IndexFile {
    pub(crate) name: String,
    pub(crate) offset: u64,
    pub(crate) size: u64,
    pub(crate) blake3: Digest,
}

impl IndexEntry {
    /// How errors and listings name the entry.
    pub(crate) fn label(&self) -> String {
        format!(
            "{} {} ({}/{})",
            self.kind.name(),
            self.name,
            self.key,
            self.variant
        )
    }

    /// The span of the pack its files occupy, padding included: (start, end).
    pub(crate) fn span(&self) -> (u64, u64) {
        let start = self.files.first().map_or(0, |f| f.offset);
        let end = self
            .files
            .last()
            .map_or(start, |f| f.offset.saturating_add(padded(f.size)));
        (start, end)
    }
}

/// `len` rounded up to a whole number of blocks; `u64::MAX` when that does not fit (a size
/// read from a pack near 2^64, which then lies outside every pack and is refused).
pub(crate) fn padded(len: u64) -> u64 {
    len.div_ceil(BLOCK).saturating_mul(BLOCK)
}

impl Index {
    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Checks the index's bytes against the header's digest, parses them and checks that every
    /// file lies on a block boundary inside the data region, in order, without overlap.
    pub(crate) fn decode(bytes: &[u8], header: &Header) -> Result<Index, Damage> {
        let at = header.index_offset;
        if Digest::of_bytes(bytes) != header.index_digest {
            return Err(Damage::at(at, "the index does not match its digest"));
        }
        let index: Index = serde_json::from_slice(bytes)
            .map_err(|e| Damage::at(at, format!("the index is not a pack index: {e}")))?;
        if index.format != PACK_FORMAT {
            return Err(Damage::at(at, format!("index format {}", index.format)));
        }
        let mut next = BLOCK;
        for entry in &index.entries {
            if entry.files.is_empty() {
                return Err(Damage::in_entry(at, entry, "an entry without files"));
            }
            // Names strictly ascending, as export writes them: a name given twice would be
            // checked as one file and written from the other.
            if let Some(pair) = entry.files.windows(2).find(|w| w[0].name >= w[1].name) {
                return Err(Damage::in_entry(
                    at,
                    entry,
                    format!(
                        "files `{}` and `{}` are out of order or named twice",
                        pair[0].name, pair[1].name
                    ),
                ));
            }
            for file in &entry.files {
                let plain = !file.name.is_empty()
                    && !file.name.starts_with('.')
                    && !file.name.contains(['/', '\0']);
                let end = file.offset.checked_add(padded(file.size));
                if !plain
                    || !file.offset.is_multiple_of(BLOCK)
                    || file.offset < next
                    || end.is_none_or(|end| end > header.index_offset)
                {
                    return Err(Damage::in_entry(
                        at,
                        entry,
                        format!("file `{}` lies outside the data region", file.name),
                    ));
                }
                next = end.unwrap_or(u64::MAX);
            }
        }
        Ok(index)
    }
}

/// Checks a chunk's bytes (`bytes`, read from the pack at `base`) for `entries`, which follow
/// `cursor`: the gaps between entries against zeros, then each entry ([`check_entry`]).
pub(crate) fn check_chunk(
    entries: &[IndexEntry],
    base: u64,
    mut cursor: u64,
    bytes: &[u8],
) -> Result<(), Damage> {
    for entry in entries {
        let (from, to) = entry.span();
        let gap = &bytes[(cursor - base) as usize..(from - base) as usize];
        check_zeros(cursor, gap, "the gap between entries")?;
        check_entry(entry, &bytes[(from - base) as usize..(to - base) as usize])?;
        cursor = to;
    }
    Ok(())
}

/// Checks one entry's span (read from the pack at `entry.span().0`): each file's bytes against
/// its size and digest, and the padding after each against zeros.
pub(crate) fn check_entry(entry: &IndexEntry, span: &[u8]) -> Result<(), Damage> {
    let (start, _) = entry.span();
    let mut cursor = start;
    for (file, (_, bytes)) in entry.files.iter().zip(files_of(entry, span)) {
        if file.offset > cursor {
            // The gap between two files of one entry is padding too.
            zeros(entry, span, start, cursor, file.offset)?;
        }
        if Digest::of_bytes(bytes) != file.blake3 {
            return Err(Damage::in_entry(
                file.offset,
                entry,
                format!("file `{}` does not match its digest", file.name),
            ));
        }
        // `Index::decode` proved every file's padded end inside the data region: no overflow.
        cursor = file.offset + file.size;
        zeros(entry, span, start, cursor, file.offset + padded(file.size))?;
        cursor = file.offset + padded(file.size);
    }
    Ok(())
}

/// Each file of an entry with its bytes in `span` (read from the pack at `entry.span().0`):
/// the content [`check_entry`] checked.
pub(crate) fn files_of<'a>(entry: &'a IndexEntry, span: &'a [u8]) -> Vec<(&'a str, &'a [u8])> {
    let (start, _) = entry.span();
    entry
        .files
        .iter()
        .map(|file| {
            let from = (file.offset - start) as usize;
            (file.name.as_str(), &span[from..from + file.size as usize])
        })
        .collect()
}

fn zeros(entry: &IndexEntry, span: &[u8], start: u64, from: u64, to: u64) -> Result<(), Damage> {
    let region = &span[(from - start) as usize..(to - start) as usize];
    match region.iter().position(|b| *b != 0) {
        None => Ok(()),
        Some(i) => Err(Damage::in_entry(
            from + i as u64,
            entry,
            "padding after a file is not zero",
        )),
    }
}

/// Checks the gaps between entries (zeros) and after the index (zeros): `bytes` read at `from`.
pub(crate) fn check_zeros(from: u64, bytes: &[u8], what: &str) -> Result<(), Damage> {
    match bytes.iter().position(|b| *b != 0) {
        None => Ok(()),
        Some(i) => Err(Damage::at(from + i as u64, format!("{what} is not zero"))),
    }
}

/// The refusal of a damaged pack.
pub(super) fn refused(path: &std::path::Path, damage: Damage) -> crate::error::Error {
    crate::error::Error::Pack {
        path: path.to_path_buf(),
        offset: damage.offset,
        entry: damage.entry,
        reason: damage.reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An index of one entry with files of one byte each, one block apart, and its header.
    fn decoded(names: &[&str]) -> Result<Index, Damage> {
        let files = names
            .iter()
            .enumerate()
            .map(|(i, name)| IndexFile {
                name: name.to_string(),
                offset: BLOCK * (1 + i as u64),
                size: 1,
                blake3: Digest::of_bytes(b"x"),
            })
            .collect();
        let index = Index {
            format: PACK_FORMAT,
            entries: vec![IndexEntry {
                kind: PackEntryKind::Kernel,
                name: "k".into(),
                key: "0".repeat(64),
                variant: "v".into(),
                output: None,
                arches: Vec::new(),
                toolchain: None,
                headers: Vec::new(),
                files,
            }],
        };
        let bytes = index.encode();
        let index_offset = BLOCK * (1 + names.len() as u64);
        let header = Header {
            index_offset,
            index_len: bytes.len() as u64,
            file_len: index_offset + padded(bytes.len() as u64),
            index_digest: Digest::of_bytes(&bytes),
        };
        Index::decode(&bytes, &header)
    }

    /// Issue 31, item 11: a size near 2^64 wrapped the padding arithmetic and panicked the
    /// importer (overflow in `padded`); it is refused as a file outside the data region.
    #[test]
    fn a_file_size_near_two_to_the_64_is_refused_not_a_panic() {
        let mut index = decoded(&["meta.json"]).expect("a one-file index");
        index.entries[0].files[0].size = u64::MAX - 10;
        let bytes = index.encode();
        let header = Header {
            index_offset: 2 * BLOCK,
            index_len: bytes.len() as u64,
            file_len: 2 * BLOCK + padded(bytes.len() as u64),
            index_digest: Digest::of_bytes(&bytes),
        };
        let refused = Index::decode(&bytes, &header).expect_err("refused");
        assert!(
            refused.reason.contains("outside the data region"),
            "{}",
            refused.reason
        );
    }

    #[test]
    fn an_entry_naming_one_file_twice_is_refused() {
        // Checked against the first, written from the second: the published file would not be
        // the one `meta.json` describes.
        assert!(decoded(&["kernel.cubin", "meta.json"]).is_ok());
        let refused = decoded(&["kernel.cubin", "kernel.cubin", "meta.json"])
            .expect_err("a file named twice is refused");
        assert!(
            refused.reason.contains("kernel.cubin"),
            "the file is named: {}",
            refused.reason
        );
    }
}
