//! `StagingBatch`: many staging directories published with two flushes in all, not three or
//! more per directory.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::flush::{syncfs_is_barrier, Flush, FlushStrategy};
use crate::fsync::fsync_tree;
use crate::rename::PublishOutcome;
use crate::staging::StagingDir;
use crate::sys;

/// Many [`StagingDir`]s, each published at its own target without replacing, with the flushes
/// of the whole set done together: what [`crate::Batch`] is for files, for whole trees.
///
/// [`StagingBatch::commit`]
/// 1. makes every staged tree durable: one `syncfs(2)` on ext4, xfs and btrfs (see [`Flush`]),
///    else `fsync` of every file and directory of every tree;
/// 2. renames each tree to its target with `RENAME_NOREPLACE` (or the fallback of
///    [`crate::rename_noreplace`]), in the order pushed;
/// 3. makes the renames durable: one more `syncfs`, or one `fsync` per distinct parent (and per
///    directory given to [`StagingBatch::flush_dir`]).
///
/// # Guarantees
/// - **After `commit` returns `Ok`**, every tree reported [`PublishOutcome::Published`] survives
///   a power cut at its target, whole.
/// - **At any moment**, each target is absent or a whole tree: no rename is issued before every
///   tree's data is durable. An existing target is never replaced
///   ([`PublishOutcome::AlreadyExisted`]; that staging directory is removed).
/// - A flush error fails the batch before any rename (nothing is published, every staging
///   directory is removed) and is never retried. An error during the renames stops them: the
///   trees renamed before it are visible but their durability is not promised; the rest are
///   removed.
///
/// # Limitations
/// - One open descriptor per staging directory until `commit`.
/// - `syncfs` writes back the whole filesystem's dirty data, other processes' too.
/// - Every staging directory must be on the filesystem of `parent` given to [`StagingBatch::new`]
///   and of its target (a rename cannot cross filesystems anyway).
#[derive(Debug)]
pub struct StagingBatch {
    flush: Flush,
    // Opened before any tree of the batch is written, so that `syncfs` through it reports every
    // writeback error since (the superblock's error is sampled at open).
    anchor: OwnedFd,
    anchor_path: PathBuf,
    staged: Vec<(StagingDir, PathBuf)>,
    /// Directories with new entries of the caller's, flushed with the renames.
    dirs: Vec<PathBuf>,
}

/// What [`StagingBatch::commit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StagingBatchReport {
    /// Each tree's outcome, in the order pushed.
    pub outcomes: Vec<PublishOutcome>,
    /// How the batch was flushed.
    pub strategy: FlushStrategy,
    /// `syncfs` or `fsync` calls made, both flushes together.
    pub flushes: usize,
}

impl StagingBatch {
    /// An empty batch for staging directories made in `parent` (opened now: create the batch
    /// before writing the trees).
    pub fn new(parent: impl AsRef<Path>, flush: Flush) -> Result<StagingBatch> {
        let anchor_path = parent.as_ref().to_path_buf();
        let anchor = sys::open_dir(&anchor_path)?;
        Ok(StagingBatch {
            flush,
            anchor,
            anchor_path,
            staged: Vec::new(),
            dirs: Vec::new(),
        })
    }

    /// Adds a staged tree to publish at `target`.
    pub fn push(&mut self, staging: StagingDir, target: impl Into<PathBuf>) {
        self.staged.push((staging, target.into()));
    }

    /// Adds a directory that received new entries (made by the caller without a flush, such as
    /// a new parent of a target): it is made durable with the renames.
    pub fn flush_dir(&mut self, dir: impl Into<PathBuf>) {
        let dir = dir.into();
        if !self.dirs.contains(&dir) {
            self.dirs.push(dir);
        }
    }

    /// Trees pushed so far.
    pub fn len(&self) -> usize {
        self.staged.len()
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.staged.is_empty()
    }

    /// Flushes every tree, renames each to its target without replacing, and flushes the
    /// renames; see [`StagingBatch`] for the guarantees. An empty batch does nothing.
    pub fn commit(mut self) -> Result<StagingBatchReport> {
        let strategy = self.strategy()?;
        let mut flushes = 0;
        if self.staged.is_empty() {
            return Ok(StagingBatchReport {
                outcomes: Vec::new(),
                strategy,
                flushes,
            });
        }
        // On a flush error: fail, never retry, never publish; dropping the staging directories
        // removes them.
        match strategy {
            FlushStrategy::Syncfs => self.syncfs(&mut flushes)?,
            FlushStrategy::PerFile => {
                for (staging, _) in &self.staged {
                    fsync_tree(staging.path())?;
                    flushes += 1;
                }
            }
        }
        let mut outcomes = Vec::with_capacity(self.staged.len());
        let mut parents: Vec<PathBuf> = std::mem::take(&mut self.dirs);
        for (staging, target) in &mut self.staged {
            let outcome = staging.rename_unflushed(target)?;
            if outcome == PublishOutcome::Published {
                for parent in [sys::parent_of(target), sys::parent_of(staging.path())] {
                    if !parents.contains(&parent) {
                        parents.push(parent);
                    }
                }
            }
            outcomes.push(outcome);
        }
        match strategy {
            FlushStrategy::Syncfs => self.syncfs(&mut flushes)?,
            FlushStrategy::PerFile => {
                for parent in &parents {
                    sys::fsync_dir_path(parent)?;
                    flushes += 1;
                }
            }
        }
        Ok(StagingBatchReport {
            outcomes,
            strategy,
            flushes,
        })
    }

    fn strategy(&self) -> Result<FlushStrategy> {
        if self.flush == Flush::PerFile || !syncfs_is_barrier(&self.anchor, &self.anchor_path)? {
            return Ok(FlushStrategy::PerFile);
        }
        // `syncfs` covers one filesystem: a tree elsewhere is flushed file by file.
        let dev =
            |path: &Path| std::fs::metadata(path).map(|m| std::os::unix::fs::MetadataExt::dev(&m));
        let anchor_dev = rustix::fs::fstat(&self.anchor)
            .map_err(|e| Error::new("stat", &self.anchor_path, e))?
            .st_dev;
        for (staging, _) in &self.staged {
            match dev(staging.path()) {
                Ok(d) if d == anchor_dev => {}
                Ok(_) => return Ok(FlushStrategy::PerFile),
                Err(e) => return Err(Error::new("stat", staging.path(), e)),
            }
        }
        Ok(FlushStrategy::Syncfs)
    }

    fn syncfs(&self, flushes: &mut usize) -> Result<()> {
        rustix::fs::syncfs(self.anchor.as_fd())
            .map_err(|e| Error::new("syncfs", &self.anchor_path, e))?;
        *flushes += 1;
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn many_trees_publish_with_two_flushes_and_never_replace() {
        let root = tempfile::tempdir().expect("temp dir");
        let mut batch = StagingBatch::new(root.path(), Flush::Auto).expect("batch");
        let taken = root.path().join("entry-taken");
        std::fs::create_dir(&taken).expect("target");
        std::fs::write(taken.join("old"), b"old").expect("old file");
        for i in 0..20 {
            let staging = StagingDir::new_in(root.path()).expect("staging");
            std::fs::write(staging.path().join("data"), [i as u8; 100]).expect("write");
            let target = if i == 7 {
                taken.clone()
            } else {
                root.path().join(format!("entry-{i}"))
            };
            batch.push(staging, target);
        }
        let report = batch.commit().expect("commit");
        assert_eq!(report.outcomes.len(), 20);
        assert_eq!(
            report.outcomes[7],
            PublishOutcome::AlreadyExisted,
            "an existing tree is never replaced"
        );
        assert_eq!(std::fs::read(taken.join("old")).expect("old"), b"old");
        assert!(!taken.join("data").exists(), "nothing was mixed into it");
        for i in (0..20).filter(|i| *i != 7) {
            let data = std::fs::read(root.path().join(format!("entry-{i}/data"))).expect("data");
            assert_eq!(data, [i as u8; 100], "entry {i} is whole");
        }
        match report.strategy {
            FlushStrategy::Syncfs => assert_eq!(report.flushes, 2, "two syncfs in all"),
            FlushStrategy::PerFile => assert_eq!(report.flushes, 20 + 1, "a tree each, one parent"),
        }
        let left: Vec<_> = std::fs::read_dir(root.path())
            .expect("list")
            .flatten()
            .filter(|e| crate::is_temp_name(&e.file_name()))
            .collect();
        assert!(left.is_empty(), "no staging directory is left: {left:?}");
    }
}
