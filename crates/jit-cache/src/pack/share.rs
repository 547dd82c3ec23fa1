//! Import without copying, where the filesystem shares extents (`FICLONERANGE`: xfs, btrfs).
//!
//! A chunk of the pack is first cloned into a private file of the importer's own (a staging
//! directory, mode 0700): the checks read that copy, which nothing else writes, so the bytes
//! they verified are the bytes every entry's file is then cloned from. Verifying the pack and
//! cloning from the pack would leave a window in which a writer of the pack changes what is
//! shared after it was checked; this order has none. The data is read once (the checks' one
//! sequential read, as without sharing) and never written: an entry's file costs a clone of
//! its whole blocks and a write of its last, partial one.
//!
//! An entry larger than a chunk is cloned alone the same way, and its streamed checks read the
//! copy a piece at a time ([`Source`]) before its large files are cloned from it.
//!
//! Where the filesystem refuses (ext4, tmpfs, the pack on another filesystem), the import reads
//! and writes the bytes as before and its report says why ([`Sharing::refused`]).

use super::format::{IndexFile, BLOCK, PIECE};
use crate::error::{Error, Result};
use crate::storage::layout::Layout;
use crate::storage::staging::Staging;
use direct_io::{Cloned, DirectFile};
use std::path::Path;

/// A file smaller than this is written from the bytes in memory: a clone of a block or two
/// saves nothing over writing it.
pub(super) const SHARE_MIN: u64 = 64 << 10;

/// Whether this import can share extents with the pack: it is tried on the first chunk and
/// given up for the rest of the import at the first refusal.
#[derive(Default)]
pub(super) struct Sharing {
    refused: Option<String>,
}

impl Sharing {
    /// Why the import copies rather than shares, once a clone was refused.
    pub(super) fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// The pack's bytes from `base` to `end` (block aligned) cloned into a private file, or
    /// `None` when the filesystem refuses (remembered: the rest of the import copies).
    pub(super) fn clone_chunk(
        &mut self,
        layout: &Layout,
        pack: &DirectFile,
        base: u64,
        end: u64,
    ) -> Result<Option<SharedChunk>> {
        if self.refused.is_some() {
            return Ok(None);
        }
        let staging = layout.new_staging_dir()?;
        let path = staging.path().join("chunk");
        let file = create(&path)?;
        match pack
            .clone_range_to(base, end - base, &file, 0, &path)
            .map_err(|e| Error::io("clone pack chunk", &path, e.into()))?
        {
            Cloned::Shared => {}
            Cloned::Refused(why) => {
                self.refused = Some(format!("the filesystem does not share extents ({why})"));
                return Ok(None);
            }
        }
        drop(file);
        let copy = DirectFile::open_with(&path, direct_io::CachePolicy::Buffered)
            .map_err(|e| Error::io("open", &path, e.into()))?;
        Ok(Some(SharedChunk {
            copy,
            base,
            _staging: staging,
        }))
    }
}

/// Where the pack's bytes are read from: the pack itself, or a private clone of a range of it
/// whose first byte is the pack's byte `base`. Offsets are the pack's either way.
#[derive(Clone, Copy)]
pub(super) struct Source<'a> {
    file: &'a DirectFile,
    base: u64,
}

impl<'a> Source<'a> {
    /// The pack itself.
    pub(super) fn pack(file: &'a DirectFile) -> Source<'a> {
        Source { file, base: 0 }
    }

    /// Reads `buf.len()` bytes at the pack's `offset`.
    pub(super) fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.file
            .read_exact_at(offset - self.base, buf)
            .map_err(|e| Error::io("read pack", self.file.path(), e.into()))
    }
}

/// A chunk of the pack cloned into a private file, which the checks read and entries' files are
/// cloned from.
pub(super) struct SharedChunk {
    copy: DirectFile,
    base: u64,
    /// The private directory that holds the copy, removed when the chunk is done.
    _staging: Staging,
}

impl SharedChunk {
    /// Reads the whole chunk (the checks' one read).
    pub(super) fn read(&self, buf: &mut [u8]) -> Result<()> {
        self.source().read(self.base, buf)
    }

    /// The copy, to read the chunk's bytes from by the pack's offsets.
    pub(super) fn source(&self) -> Source<'_> {
        Source {
            file: &self.copy,
            base: self.base,
        }
    }

    /// Writes `file`, whose bytes in the copy were checked as they were streamed, at `target`:
    /// its whole blocks cloned from the copy and the last, partial one written (true), or, where
    /// the filesystem refuses, every byte copied from the copy [`PIECE`] bytes at a time (false).
    pub(super) fn write_checked(&self, file: &IndexFile, target: &Path) -> Result<bool> {
        use std::os::unix::fs::FileExt;
        let out = create(target)?;
        let whole = file.size / BLOCK * BLOCK;
        let shared = self
            .copy
            .clone_range_to(file.offset - self.base, whole, &out, 0, target)
            .map_err(|e| Error::io("clone imported file", target, e.into()))?;
        let from = match shared {
            Cloned::Shared => whole,
            Cloned::Refused(_) => 0,
        };
        let mut piece = Vec::new();
        let mut at = from;
        while at < file.size {
            let n = (file.size - at).min(PIECE);
            piece.resize(n as usize, 0);
            self.source().read(file.offset + at, &mut piece)?;
            out.write_all_at(&piece, at)
                .map_err(|e| Error::io("write imported file", target, e))?;
            at += n;
        }
        Ok(matches!(shared, Cloned::Shared))
    }

    /// Writes `file` of the pack at `target`: cloned from the checked copy when it is large
    /// enough and the filesystem shares it (true), else written from `bytes`, its checked
    /// content (false).
    pub(super) fn write(&self, file: &IndexFile, bytes: &[u8], target: &Path) -> Result<bool> {
        use std::io::Write;
        use std::os::unix::fs::FileExt;
        let mut out = create(target)?;
        if file.size >= SHARE_MIN {
            // Whole blocks are cloned and the last, partial one written: truncating a clone of
            // it would read the shared block back from the disk to zero its tail.
            let whole = file.size / BLOCK * BLOCK;
            let at = file.offset - self.base;
            let shared = self
                .copy
                .clone_range_to(at, whole, &out, 0, target)
                .map_err(|e| Error::io("clone imported file", target, e.into()))?;
            if let Cloned::Shared = shared {
                out.write_all_at(&bytes[whole as usize..], whole)
                    .map_err(|e| Error::io("write imported file", target, e))?;
                return Ok(true);
            }
        }
        out.write_all(bytes)
            .map_err(|e| Error::io("write imported file", target, e))?;
        Ok(false)
    }
}

fn create(path: &Path) -> Result<std::fs::File> {
    std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io("create imported file", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RootMode;
    use fingerprint::Digest;
    use fs_testbed::FsKind;
    use std::os::unix::fs::{DirBuilderExt, FileExt};

    const LEN: usize = 256 << 10;

    /// A pack-like file on `mount`, a root beside it, and what a chunk of the whole file gives.
    fn cloned(mount: &Path) -> (std::path::PathBuf, Layout, Sharing, Option<SharedChunk>) {
        let root = mount.join("root");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&root)
            .expect("make the root");
        let layout = Layout::open(&root, RootMode::Private).expect("open the root");
        let pack = mount.join("pack");
        std::fs::write(&pack, vec![0xAA; LEN]).expect("write the pack");
        let file = DirectFile::open(&pack).expect("open the pack");
        let mut sharing = Sharing::default();
        let chunk = sharing
            .clone_chunk(&layout, &file, 0, LEN as u64)
            .expect("clone a chunk");
        (pack, layout, sharing, chunk)
    }

    #[test]
    fn what_is_checked_and_shared_is_a_private_copy_that_a_writer_of_the_pack_cannot_change() {
        for kind in [FsKind::Xfs, FsKind::Btrfs] {
            fs_testbed::run_or_skip(kind, |mount| {
                let (pack, _layout, sharing, chunk) = cloned(mount);
                let chunk = chunk.unwrap_or_else(|| {
                    panic!("{} shares extents: {:?}", kind.name(), sharing.refused())
                });
                // A writer changes the pack in place after the chunk was cloned.
                let writer = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&pack)
                    .expect("open the pack to write");
                writer
                    .write_all_at(&vec![0x55; LEN], 0)
                    .expect("rewrite the pack");
                writer.sync_all().expect("fsync the pack");
                let mut checked = vec![0u8; LEN];
                chunk.read(&mut checked).expect("read the chunk");
                assert!(
                    checked.iter().all(|b| *b == 0xAA),
                    "{}: the checks read the bytes the chunk was cloned with",
                    kind.name()
                );
                let size = (LEN - 4096) as u64;
                let file = IndexFile {
                    name: "kernel.cubin".into(),
                    offset: 0,
                    size,
                    blake3: Digest::of_bytes(&checked[..size as usize]),
                };
                let target = mount.join("kernel.cubin");
                let shared = chunk
                    .write(&file, &checked[..size as usize], &target)
                    .expect("write the file");
                assert!(shared, "{}: the file is cloned", kind.name());
                assert_eq!(
                    std::fs::read(&target).expect("read the file"),
                    checked[..size as usize],
                    "{}: the file holds the checked bytes, at its length",
                    kind.name()
                );
            });
        }
    }

    #[test]
    fn where_extents_cannot_be_shared_the_chunk_is_read_from_the_pack_and_the_reason_kept() {
        fs_testbed::run_or_skip(FsKind::Ext4, |mount| {
            let (_pack, _layout, sharing, chunk) = cloned(mount);
            assert!(chunk.is_none(), "ext4 has no reflinks");
            let why = sharing.refused().expect("the refusal is kept");
            assert!(why.contains("does not share extents"), "{why}");
        });
    }
}
