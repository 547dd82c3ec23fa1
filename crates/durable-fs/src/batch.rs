//! `Batch`: many files written beside their targets, then published with two flushes in all.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FlockOperation};

use crate::error::{Error, Result};
use crate::flush::{syncfs_is_barrier, Flush, FlushStrategy};
use crate::put::{create_temp, NAME_ATTEMPTS};
use crate::registry::{self, TempKind};
use crate::seams::{self, BatchFlaw};
use crate::sys;
use crate::temp_name::temp_name;

/// Many files written now and published together by [`Batch::commit`], with two flushes for the
/// whole batch instead of two per file.
///
/// [`Batch::put`] writes a file's bytes to a temp file beside its target at once (as [`crate::put`]
/// does, `O_EXCL`, `flock`ed, registered for [`crate::remove_live_temps`]) but neither flushes
/// nor renames it. [`Batch::commit`] then
/// 1. makes every temp's data durable: one `syncfs(2)` per filesystem on ext4, xfs and btrfs,
///    one `fsync(2)` per file elsewhere (see [`Flush`] and [`FlushStrategy`] for why);
/// 2. renames every temp over its target, in the order staged;
/// 3. makes every rename durable: one more `syncfs` per filesystem, or one `fsync` per distinct
///    directory.
///
/// # Guarantees
/// - **After `commit` returns `Ok`**, every file's data and every directory entry survive a
///   power cut (on filesystems that honour `fsync`/`syncfs`, as for [`crate::put`]).
/// - **Before it returns, and after an `Err`**, each target holds its old content or its whole
///   new content, never a torn or empty file: no rename is issued before all data is durable.
///   The batch is not atomic as a whole: after a cut, some targets may be new and others old.
///   Use a [`crate::StagingDir`] when several files must appear together.
/// - A flush error (`fsync` or `syncfs`) fails the whole batch: nothing is renamed, the temps
///   are removed, and the flush is never retried (the kernel may have dropped the dirty pages).
///   An error during the renames stops them: the files renamed before it are visible (their
///   durability is not promised), the rest are removed. The error names the operation and path.
///
/// # Limitations
/// - One open descriptor per staged file until `commit`: stage at most a few thousand files per
///   batch under the usual `RLIMIT_NOFILE`.
/// - `syncfs` writes back the whole filesystem's dirty data, other processes' too: on a busy
///   shared disk choose [`Flush::PerFile`].
/// - Every target's directory must exist. Staging one target twice publishes both in order;
///   the later one wins.
/// - The traps of [`crate::put`] apply: a symlink at a target is replaced, not followed, and the
///   old file's mode and owner are not kept.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use durable_fs::{Batch, FlushStrategy};
/// let dir = tempfile::tempdir()?;
/// let mut batch = Batch::new();
/// for i in 0..10 {
///     batch.put(dir.path().join(format!("part-{i}.bin")), &[i; 4096])?;
/// }
/// let report = batch.commit()?;
/// assert_eq!(report.files, 10);
/// // ext4, xfs, btrfs: two syncfs calls; tmpfs, FUSE, NFS: ten fsyncs and one directory fsync.
/// assert!(matches!(report.strategy, FlushStrategy::Syncfs | FlushStrategy::PerFile));
/// assert_eq!(std::fs::read(dir.path().join("part-3.bin"))?, [3; 4096]);
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct Batch {
    flush: Flush,
    dirs: Vec<StagedDir>,
    dir_index: HashMap<PathBuf, usize>,
    files: Vec<StagedFile>,
    /// `files[..renamed]` sit at their targets; only the rest are temps still to remove.
    renamed: usize,
}

/// What [`Batch::commit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchReport {
    /// Files published.
    pub files: usize,
    /// Distinct directories (as written) that received them.
    pub directories: usize,
    /// How the batch was flushed.
    pub strategy: FlushStrategy,
    /// `syncfs` or `fsync` calls made, both flushes together.
    pub flushes: usize,
}

#[derive(Debug)]
struct StagedDir {
    path: PathBuf,
    // Opened before any temp in it is written: `syncfs` reports writeback errors that happened
    // since the descriptor it is given was opened.
    fd: OwnedFd,
    dev: u64,
}

#[derive(Debug)]
struct StagedFile {
    dir: usize,
    temp: OsString,
    name: OsString,
    target: PathBuf,
    // Open and `flock`ed until the commit ends, so a sweep never removes a live temp.
    file: File,
    ticket: registry::Ticket<'static>,
}

impl Batch {
    /// An empty batch that flushes as [`Flush::Auto`] chooses.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// An empty batch that flushes as `flush` says.
    pub fn with_flush(flush: Flush) -> Batch {
        let mut batch = Batch::default();
        batch.flush = flush;
        batch
    }

    /// Files staged so far.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Writes `bytes` to a temp file beside `path`, to be renamed over it by [`Batch::commit`].
    ///
    /// On an error nothing is staged for `path` (its temp is removed) and the batch stays usable.
    pub fn put(&mut self, path: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
        self.put_with(path, |file| file.write_all(bytes))
    }

    /// Like [`Batch::put`], with the contents produced by `write` streaming into the temp file.
    pub fn put_with(
        &mut self,
        path: impl AsRef<Path>,
        write: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> Result<()> {
        let path = path.as_ref();
        let (dir, name) = sys::split("stage", path)?;
        let dir_index = self.dir_index_for(dir)?;
        let staged_dir = &self.dirs[dir_index];
        let stem = name.to_string_lossy();
        let mut attempt = 0;
        let (temp, mut file) = loop {
            let temp = temp_name(&stem);
            match create_temp(&staged_dir.fd, &staged_dir.path, &temp) {
                Ok(file) => break (temp, file),
                Err(e)
                    if e.kind() == io::ErrorKind::AlreadyExists && attempt + 1 < NAME_ATTEMPTS =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        };
        let temp_path = staged_dir.path.join(&temp);
        let ticket = registry::global().register(temp_path.clone(), TempKind::File);
        let remove_temp = |err: Error| -> Error {
            // Best effort: the error that matters is `err`.
            let _ = rustix::fs::unlinkat(&staged_dir.fd, &temp, AtFlags::empty());
            err
        };
        // As in `put`: the writer's lock tells a sweep this temp is live.
        rustix::fs::flock(file.as_fd(), FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| remove_temp(Error::new("lock temp file", &temp_path, e)))?;
        write(&mut file).map_err(|e| remove_temp(Error::new("write temp file", &temp_path, e)))?;
        self.files.push(StagedFile {
            dir: dir_index,
            temp,
            name,
            target: path.to_path_buf(),
            file,
            ticket,
        });
        Ok(())
    }

    fn dir_index_for(&mut self, dir: PathBuf) -> Result<usize> {
        if let Some(&i) = self.dir_index.get(&dir) {
            return Ok(i);
        }
        let fd = sys::open_dir(&dir)?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| Error::new("stat", &dir, e))?;
        self.dirs.push(StagedDir {
            path: dir.clone(),
            fd,
            dev: stat.st_dev,
        });
        self.dir_index.insert(dir, self.dirs.len() - 1);
        Ok(self.dirs.len() - 1)
    }

    /// Flushes every staged file, renames each over its target, and flushes the renames; see
    /// [`Batch`] for the guarantees. An empty batch does nothing.
    pub fn commit(mut self) -> Result<BatchReport> {
        let strategy = self.strategy()?;
        let mut flushes = 0;
        let rename_first = seams::batch_flaw_is(BatchFlaw::RenameBeforeFlush);
        if rename_first {
            self.rename_all()?;
        }
        // On a flush error: fail, never retry, never publish; Drop removes every temp.
        self.flush_data(strategy, &mut flushes)?;
        if !rename_first {
            self.rename_all()?;
        }
        let count = self.files.len();
        // Every temp is renamed; closing them now releases their locks and their descriptors.
        self.renamed = 0;
        self.files.clear();
        if !seams::batch_flaw_is(BatchFlaw::SkipEntryFlush) {
            self.flush_entries(strategy, &mut flushes)?;
        }
        Ok(BatchReport {
            files: count,
            directories: self.dirs.len(),
            strategy,
            flushes,
        })
    }

    fn strategy(&self) -> Result<FlushStrategy> {
        if seams::batch_flaw_is(BatchFlaw::ForceSyncfs) {
            return Ok(FlushStrategy::Syncfs);
        }
        if self.flush == Flush::PerFile {
            return Ok(FlushStrategy::PerFile);
        }
        for dir in &self.dirs {
            if !syncfs_is_barrier(&dir.fd, &dir.path)? {
                return Ok(FlushStrategy::PerFile);
            }
        }
        Ok(FlushStrategy::Syncfs)
    }

    /// One directory per filesystem, to call `syncfs` on.
    fn filesystems(&self) -> Vec<&StagedDir> {
        let mut seen = Vec::new();
        let mut firsts = Vec::new();
        for dir in &self.dirs {
            if !seen.contains(&dir.dev) {
                seen.push(dir.dev);
                firsts.push(dir);
            }
        }
        firsts
    }

    fn syncfs_all(&self, flushes: &mut usize) -> Result<()> {
        for dir in self.filesystems() {
            rustix::fs::syncfs(&dir.fd).map_err(|e| Error::new("syncfs", &dir.path, e))?;
            *flushes += 1;
        }
        Ok(())
    }

    fn flush_data(&self, strategy: FlushStrategy, flushes: &mut usize) -> Result<()> {
        match strategy {
            FlushStrategy::Syncfs => self.syncfs_all(flushes),
            FlushStrategy::PerFile => {
                for staged in &self.files {
                    rustix::fs::fsync(staged.file.as_fd()).map_err(|e| {
                        Error::new("fsync", self.dirs[staged.dir].path.join(&staged.temp), e)
                    })?;
                    *flushes += 1;
                }
                Ok(())
            }
        }
    }

    fn flush_entries(&self, strategy: FlushStrategy, flushes: &mut usize) -> Result<()> {
        match strategy {
            FlushStrategy::Syncfs => self.syncfs_all(flushes),
            FlushStrategy::PerFile => {
                for dir in &self.dirs {
                    sys::fsync_dir_fd(&dir.fd, &dir.path)?;
                    *flushes += 1;
                }
                Ok(())
            }
        }
    }

    /// Claims every temp, then renames them in order. On a failure the rest stay staged, and
    /// Drop removes them.
    fn rename_all(&mut self) -> Result<()> {
        for (i, staged) in self.files.iter().enumerate() {
            if !staged.ticket.begin_publish() {
                for earlier in &self.files[..i] {
                    earlier.ticket.abort_publish();
                }
                let dir = &self.dirs[staged.dir].path;
                return Err(Error::new(
                    "publish",
                    dir.join(&staged.temp),
                    io::Error::new(
                        io::ErrorKind::Interrupted,
                        "a temp file of the batch was removed by remove_live_temps",
                    ),
                ));
            }
        }
        for (i, staged) in self.files.iter().enumerate() {
            let dir = &self.dirs[staged.dir];
            if let Err(e) = rustix::fs::renameat(&dir.fd, &staged.temp, &dir.fd, &staged.name) {
                // Publish nothing further: the rest return to the live state for Drop to remove.
                for left in &self.files[i..] {
                    left.ticket.abort_publish();
                }
                self.renamed = i;
                return Err(Error::two(
                    "rename",
                    dir.path.join(&staged.temp),
                    &staged.target,
                    e,
                ));
            }
        }
        self.renamed = self.files.len();
        Ok(())
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        // Temps still staged were never published (an uncommitted or failed batch): remove them,
        // best effort; a sweep removes whatever this leaves.
        for staged in &self.files[self.renamed..] {
            if !staged.ticket.reclaimed() {
                let dir = &self.dirs[staged.dir];
                let _ = rustix::fs::unlinkat(&dir.fd, &staged.temp, AtFlags::empty());
            }
        }
    }
}
