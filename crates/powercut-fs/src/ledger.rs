//! The checker: a ledger of what a workload attempted and what returned success, compared with
//! what is on the filesystem after a cut.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::Error;

/// What a path holds: a file's bytes, or a directory tree of files (a staged commit).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Content {
    /// A regular file with these bytes.
    File(Vec<u8>),
    /// A directory whose files (by path relative to it) hold these bytes; empty directories
    /// inside are not represented.
    Tree(BTreeMap<PathBuf, Vec<u8>>),
}

#[derive(Debug, Clone, Default)]
struct Record {
    /// What the last successful operation left, or what the last check found.
    committed: Option<Content>,
    /// Operations attempted since, which may have landed wholly before the cut.
    attempts: Vec<Content>,
    /// Earlier committed contents since the last check: finding one of these is a rollback.
    superseded: Vec<Content>,
    /// Successful operations since the last check.
    succeeded: u64,
    /// This path needs to be whole only while `guard` is visible (an artifact and its meta file).
    guard: Option<PathBuf>,
}

/// The result of one check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Paths examined.
    pub paths_checked: u64,
    /// Successful operations whose results were examined.
    pub operations_checked: u64,
    /// Paths whose successful operation is not there (durability violated), with what was found.
    pub lost: Vec<String>,
    /// Paths that hold something no operation wrote whole (atomicity violated), with details.
    pub torn: Vec<String>,
}

impl Verdict {
    /// No durability or atomicity violation.
    pub fn is_clean(&self) -> bool {
        self.lost.is_empty() && self.torn.is_empty()
    }
}

/// Records attempts and successes per path, then checks a filesystem against them.
///
/// For every path: after a cut it must hold what its last successful operation left, or what a
/// later attempt would have left (that attempt may have landed before the power went); it may be
/// absent only if no operation on it ever succeeded. A guarded path is checked only while its
/// guard is visible.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    records: BTreeMap<PathBuf, Record>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Ledger::default()
    }

    /// Records that an operation is about to leave `content` at `path` (relative to the root).
    pub fn attempt(&mut self, path: impl Into<PathBuf>, content: Content) {
        self.records
            .entry(path.into())
            .or_default()
            .attempts
            .push(content);
    }

    /// Records that the last attempt on `path` returned success.
    pub fn succeeded(&mut self, path: impl AsRef<Path>) {
        if let Some(record) = self.records.get_mut(path.as_ref()) {
            if let Some(last) = record.attempts.pop() {
                if let Some(old) = record.committed.replace(last) {
                    record.superseded.push(old);
                }
                record.attempts.clear();
                record.succeeded += 1;
            }
        }
    }

    /// Records that the last attempt on `path` certainly did not land (for example a
    /// no-replace commit that found the target taken), so it is no longer an allowed state.
    pub fn abandoned(&mut self, path: impl AsRef<Path>) {
        if let Some(record) = self.records.get_mut(path.as_ref()) {
            record.attempts.pop();
        }
    }

    /// `path` must be whole only while `guard` is visible: the artifact a meta file names.
    pub fn guarded_by(&mut self, path: impl Into<PathBuf>, guard: impl Into<PathBuf>) {
        self.records.entry(path.into()).or_default().guard = Some(guard.into());
    }

    /// Compares the filesystem under `root` with the ledger, then takes what was found as the
    /// new baseline (so the ledger can carry on after the next cut).
    ///
    /// # Errors
    /// When a path cannot be read for a reason other than its absence.
    pub fn check(&mut self, root: &Path) -> Result<Verdict, Error> {
        let mut found = BTreeMap::new();
        for path in self.records.keys() {
            found.insert(path.clone(), read_content(&root.join(path))?);
        }
        let mut verdict = Verdict::default();
        for (path, record) in &mut self.records {
            let actual = found.get(path).cloned().flatten();
            let guarded_and_hidden = record
                .guard
                .as_ref()
                .is_some_and(|g| found.get(g).is_none_or(Option::is_none));
            verdict.paths_checked += 1;
            verdict.operations_checked += record.succeeded;
            if !guarded_and_hidden {
                let whole = |c: &Content| {
                    record.committed.as_ref() == Some(c) || record.attempts.contains(c)
                };
                match &actual {
                    None if record.committed.is_some() || record.guard.is_some() => {
                        verdict.lost.push(format!(
                            "{}: absent after {} successful operation(s)",
                            path.display(),
                            record.succeeded
                        ));
                    }
                    None => {}
                    Some(c) if whole(c) => {}
                    Some(c) if record.superseded.contains(c) => verdict.lost.push(format!(
                        "{}: rolled back to an older version after {} successful operation(s)",
                        path.display(),
                        record.succeeded
                    )),
                    Some(c) => verdict.torn.push(format!(
                        "{}: holds {} that no operation wrote whole",
                        path.display(),
                        describe(c)
                    )),
                }
            }
            record.committed = actual;
            record.attempts.clear();
            record.superseded.clear();
            record.succeeded = 0;
        }
        Ok(verdict)
    }
}

fn describe(content: &Content) -> String {
    match content {
        Content::File(bytes) => format!("a file of {} bytes", bytes.len()),
        Content::Tree(files) => format!("a directory of {} files", files.len()),
    }
}

/// Reads a file or a directory tree; `None` when absent.
pub(crate) fn read_content(path: &Path) -> Result<Option<Content>, Error> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::new("stat", path, e)),
    };
    if meta.is_dir() {
        let mut files = BTreeMap::new();
        read_tree(path, Path::new(""), &mut files)?;
        Ok(Some(Content::Tree(files)))
    } else {
        let bytes = std::fs::read(path).map_err(|e| Error::new("read", path, e))?;
        Ok(Some(Content::File(bytes)))
    }
}

fn read_tree(base: &Path, rel: &Path, files: &mut BTreeMap<PathBuf, Vec<u8>>) -> Result<(), Error> {
    let dir = base.join(rel);
    let entries = std::fs::read_dir(&dir).map_err(|e| Error::new("read directory", &dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::new("read directory", &dir, e))?;
        let rel = rel.join(entry.file_name());
        let path = base.join(&rel);
        let kind = entry
            .file_type()
            .map_err(|e| Error::new("stat", &path, e))?;
        if kind.is_dir() {
            read_tree(base, &rel, files)?;
        } else {
            let bytes = std::fs::read(&path).map_err(|e| Error::new("read", &path, e))?;
            files.insert(rel, bytes);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_flags_lost_and_torn_files_and_respects_guards() -> Result<(), Error> {
        let dir = tempfile::tempdir().map_err(|e| Error::new("tempdir", Path::new("."), e))?;
        let root = dir.path();
        let write = |name: &str, bytes: &[u8]| {
            std::fs::write(root.join(name), bytes).expect("write a test file");
        };
        let mut ledger = Ledger::new();
        for name in ["kept", "lost", "torn", "in-flight", "artifact", "meta"] {
            ledger.attempt(name, Content::File(name.as_bytes().to_vec()));
        }
        for name in ["kept", "lost", "torn", "meta"] {
            ledger.succeeded(name);
        }
        ledger.guarded_by("artifact", "meta");
        write("kept", b"kept");
        write("torn", b"to");
        write("in-flight", b"in-flight");
        write("artifact", b"arti");
        write("meta", b"meta");
        let verdict = ledger.check(root)?;
        assert_eq!(verdict.lost.len(), 1, "only 'lost' is lost: {verdict:?}");
        assert!(verdict.lost[0].starts_with("lost"), "{verdict:?}");
        assert_eq!(
            verdict.torn.len(),
            2,
            "'torn' and the guarded artifact are torn: {verdict:?}"
        );
        std::fs::remove_file(root.join("meta")).expect("hide the guard");
        ledger.attempt("artifact", Content::File(b"artifact".to_vec()));
        let verdict = ledger.check(root)?;
        assert!(
            verdict.torn.is_empty(),
            "an artifact without its meta may be torn: {verdict:?}"
        );
        Ok(())
    }

    #[test]
    fn an_older_version_after_a_newer_success_is_a_rollback() -> Result<(), Error> {
        let dir = tempfile::tempdir().map_err(|e| Error::new("tempdir", Path::new("."), e))?;
        let mut ledger = Ledger::new();
        for v in [&b"v1"[..], b"v2"] {
            ledger.attempt("f", Content::File(v.to_vec()));
            ledger.succeeded("f");
        }
        std::fs::write(dir.path().join("f"), b"v1").expect("write the old version");
        let verdict = ledger.check(dir.path())?;
        assert_eq!(
            verdict.lost.len(),
            1,
            "a rollback is lost data: {verdict:?}"
        );
        assert!(verdict.torn.is_empty(), "and not a torn file: {verdict:?}");
        Ok(())
    }
}
