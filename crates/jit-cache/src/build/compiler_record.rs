//! What the compiler printed and read for an entry, kept beside the artifact so that a caller
//! standing in for the compiler (the `jit-cache nvcc` launcher) can answer a hit exactly as the
//! compile answered: the same diagnostics, and the dependency file nvcc would write.
//!
//! Stored as `compiler.json` in the entry directory, written before `meta.json` (so it is inside
//! the entry's one rename), and shared with the variant through the fleet's tier, where a host
//! that fetches it keeps it only when every file it names is one of the variant's recorded
//! headers here. Best effort: an entry without it (an older entry, a name that is not UTF-8, a
//! record too large to share or naming other files) is still a valid entry; [`Cache::get_or_build_with_record`]
//! then returns no record and the caller runs the compiler itself.
//!
//! The compile is given the source and every directory as the request spelled them, and those
//! spellings are in the key (the working directory too when debug information is asked for), so
//! every request that reaches an entry spells the command the same way: the dependency file's
//! names and the diagnostics are kept as the compiler printed them, and hold as they are for
//! every hit (a relative name is relative to each request's own working directory, as it was to
//! the compile's).

use crate::build::headers::HeaderRecord;
use crate::build::search::SearchPath;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file name of the record inside an entry directory.
pub(crate) const RECORD_FILE: &str = "compiler.json";

/// Bump when the stored form changes: an entry with another version has no usable record.
/// Version 3 keeps the compiler's spellings as they are (versions 1 and 2 stored them relative
/// to the building request's directories, to re-spell them; they are no longer read).
const RECORD_VERSION: u32 = 3;

/// What the compiler printed and read for an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompilerRecord {
    /// The compiler's stderr (warnings, `-Xptxas -v` reports), as it printed it.
    pub stderr: String,
    /// The files the compile read besides the source, in the order nvcc's dependency file
    /// lists them (first appearance).
    pub prerequisites: Vec<Prerequisite>,
}

/// One file a compile read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prerequisite {
    /// The name as the compiler's dependency file spells it (a relative name is relative to the
    /// command's working directory).
    pub path: PathBuf,
    /// Whether the preprocessor counts it a system header (found in an `-isystem` directory, the
    /// toolkit's `-isystem` directories or the host compiler's own): `-MMD` leaves these out.
    pub system: bool,
}

#[derive(Serialize, Deserialize)]
struct Stored {
    version: u32,
    stderr: String,
    /// `<y|n> <path>` each.
    prerequisites: Vec<String>,
}

/// Writes the record of a compile into `entry_dir` (the staging directory, before `meta.json`).
/// `read` is what the compile's dependency file named besides the source, resolved against the
/// working directory, and `spelled` the same names as written there. Best effort: a record that
/// cannot be written is simply absent.
pub(crate) fn write(
    entry_dir: &Path,
    stderr: &str,
    read: &[PathBuf],
    spelled: &[PathBuf],
    search: &SearchPath,
) {
    let mut prerequisites = Vec::with_capacity(spelled.len());
    for (path, name) in read.iter().zip(spelled) {
        let Some(name) = name.to_str() else {
            // A name that is not UTF-8: no record.
            return;
        };
        let system = if search.is_system(path) { 'y' } else { 'n' };
        prerequisites.push(format!("{system} {name}"));
    }
    let stored = Stored {
        version: RECORD_VERSION,
        stderr: stderr.to_string(),
        prerequisites,
    };
    if let Ok(bytes) = serde_json::to_vec(&stored) {
        let _ = std::fs::write(entry_dir.join(RECORD_FILE), bytes);
    }
}

/// The largest record that travels with a variant through the fleet's tier (diagnostics of a
/// `-Xptxas -v` compile are a few KiB; a larger record stays home, and a host that fetches the
/// variant runs the compiler for its launcher instead).
pub(crate) const MAX_SHARED_RECORD: usize = 64 << 10;

/// The stored text of the record of the entry at `entry_dir`, to share with other hosts: only a
/// record this version reads, and no larger than [`MAX_SHARED_RECORD`].
pub(crate) fn shared_text(entry_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(entry_dir.join(RECORD_FILE)).ok()?;
    (text.len() <= MAX_SHARED_RECORD && parse(text.as_bytes()).is_some()).then_some(text)
}

/// Writes a record another host shared into `entry_dir` (a staging directory, before
/// `meta.json`), when every file it names is a header the variant records, the same file as
/// this request finds at the record's place (`headers`, resolved): a record that names anything else could make a
/// launcher write a dependency file that hides an input, and is left out (the launcher then
/// runs the compiler). Best effort, as [`write`].
pub(crate) fn write_shared(
    entry_dir: &Path,
    text: &str,
    headers: &[HeaderRecord],
    search: &SearchPath,
    working_dir: &Path,
) {
    if text.len() <= MAX_SHARED_RECORD && names_only(text.as_bytes(), headers, search, working_dir)
    {
        let _ = std::fs::write(entry_dir.join(RECORD_FILE), text);
    }
}

/// Whether a record another host made (shared, or in a pack) names only headers its variant
/// records: by the file this host finds at the header's place where `search` resolves it (a
/// dependency file spells the toolkit's headers through `bin/../include`, the records by their
/// directory), else, for a project header whose directory only a request knows (an import), by
/// its name under that directory. A record that names another file (one relabelled from another
/// kernel) could make a launcher write a dependency file of another compile's headers.
///
/// Limitation: a record that leaves a header out names only recorded ones and passes; the
/// dependency file written from it would then miss that header.
pub(crate) fn names_only(
    text: &[u8],
    headers: &[HeaderRecord],
    search: &SearchPath,
    working_dir: &Path,
) -> bool {
    let Some(record) = parse(text) else {
        return false;
    };
    let mut files = std::collections::HashSet::new();
    let mut names = Vec::new();
    for header in headers {
        match search.path_of(header.base, &header.rel) {
            Some(path) => files.extend(std::fs::canonicalize(path).ok()),
            None => names.push(header.rel.as_path()),
        }
    }
    record.prerequisites.iter().all(|p| {
        let path = working_dir.join(&p.path);
        std::fs::canonicalize(&path).is_ok_and(|path| files.contains(&path))
            || names
                .iter()
                .any(|rel| !rel.as_os_str().is_empty() && path.ends_with(rel))
    })
}

/// Reads the record of the entry at `entry_dir`.
pub(crate) fn load(entry_dir: &Path) -> Option<CompilerRecord> {
    let bytes = std::fs::read(entry_dir.join(RECORD_FILE)).ok()?;
    parse(&bytes)
}

fn parse(bytes: &[u8]) -> Option<CompilerRecord> {
    let stored: Stored = serde_json::from_slice(bytes).ok()?;
    if stored.version != RECORD_VERSION {
        return None;
    }
    let mut prerequisites = Vec::with_capacity(stored.prerequisites.len());
    for text in stored.prerequisites {
        let (system, path) = text.split_once(' ')?;
        let system = match system {
            "y" => true,
            "n" => false,
            _ => return None,
        };
        if path.is_empty() {
            return None;
        }
        prerequisites.push(Prerequisite {
            path: PathBuf::from(path),
            system,
        });
    }
    Some(CompilerRecord {
        stderr: stored.stderr,
        prerequisites,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_other_versions_are_not_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let stored = Stored {
            version: RECORD_VERSION,
            stderr: "k.cu(3): warning".into(),
            prerequisites: vec!["n inc/a b.cuh".into(), "y /usr/include/stdio.h".into()],
        };
        std::fs::write(
            dir.path().join(RECORD_FILE),
            serde_json::to_vec(&stored).expect("serialise"),
        )
        .expect("write");
        let record = load(dir.path()).expect("reads");
        assert_eq!(
            record.prerequisites,
            vec![
                Prerequisite {
                    path: "inc/a b.cuh".into(),
                    system: false
                },
                Prerequisite {
                    path: "/usr/include/stdio.h".into(),
                    system: true
                },
            ]
        );
        let old = r#"{"version":2,"stderr":"","dirs":[],"prerequisites":["i0 n a.h"]}"#;
        std::fs::write(dir.path().join(RECORD_FILE), old).expect("write");
        assert!(load(dir.path()).is_none(), "a version 2 record is not read");
    }
}
