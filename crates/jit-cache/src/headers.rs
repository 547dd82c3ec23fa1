//! The headers a compile read, recorded so that a hit can be revalidated and a change explained.
//!
//! Each header from the dependency file is recorded relative to the search-path entry that
//! resolved it, never as an absolute path under the caller's tree, so a relocated checkout still
//! hits. The search path is the source's directory (for quoted includes) followed by the `-I`
//! directories in order. Together with a header we record the earlier search-path entries where
//! the same relative name was absent: a header added there later would shadow the recorded one,
//! and a hit checks that it is still absent.
//!
//! Headers outside the search path belong to the toolkit (under nvcc's root) or the system (such
//! as `/usr/include`). They are recorded too, by content, but revalidated once per process: they
//! change with an installation, not between two kernel launches.

use crate::error::Result;
use fingerprint::{Digest, StatCache};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

/// Where a recorded header was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Base {
    /// The source file's directory.
    SourceDir,
    /// The `-I` directory at this index.
    Include(u32),
    /// The compiler toolkit's root (the directory above nvcc's `bin`).
    Toolkit,
    /// Anywhere else; `rel` is then an absolute path.
    System,
}

/// One header a compile read. Stored in `meta.json` as one compact string per header (see
/// `record_text.rs`): an entry lists about 200 headers, and parsing them is most of a hit's work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeaderRecord {
    pub(crate) base: Base,
    pub(crate) rel: String,
    pub(crate) digest: Digest,
    /// Earlier search-path entries where `rel` did not exist when the entry was built.
    pub(crate) absent_in: Vec<Base>,
    /// The file's stat tuple when it was hashed, if it was then old enough to trust (git's racy
    /// rule): an identical tuple later proves the same content without hashing or loading the stat
    /// cache. Never part of a variant's identity (another host sees other tuples and re-hashes).
    pub(crate) stamp: Option<StatStamp>,
}

/// A file's identity for revalidation: device, inode, size, mtime and ctime in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatStamp(
    pub(crate) u64,
    pub(crate) u64,
    pub(crate) u64,
    pub(crate) i64,
    pub(crate) i64,
);

/// How far in the past a file's mtime and ctime must be, when it is hashed, for its stamp to be
/// trusted later: a write within the same timestamp tick would otherwise go unseen.
const RACY_MARGIN_NS: i64 = 2_000_000_000;

impl StatStamp {
    /// Stats `path` (following symlinks, as the compiler did).
    pub(crate) fn of(path: &Path) -> Option<StatStamp> {
        let st = rustix::fs::stat(path).ok()?;
        Some(StatStamp(
            st.st_dev,
            st.st_ino,
            st.st_size as u64,
            st.st_mtime as i64 * 1_000_000_000 + st.st_mtime_nsec as i64,
            st.st_ctime as i64 * 1_000_000_000 + st.st_ctime_nsec as i64,
        ))
    }

    /// Whether the stamp is old enough, now, to be trusted later.
    pub(crate) fn settled(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0);
        self.3 < now - RACY_MARGIN_NS && self.4 < now - RACY_MARGIN_NS
    }
}

/// Hashes a header the slow way (through the stat cache), for records without a usable stamp.
pub(crate) type SlowHash<'a> = dyn FnMut(&Path) -> Option<Digest> + 'a;

/// Hashes `path` and, when the file did not change while it was hashed and is old enough, returns
/// a stamp to trust later.
pub(crate) fn hash_with_stamp(
    path: &Path,
    stat: &mut StatCache,
) -> Result<(Digest, Option<StatStamp>)> {
    stamped(path, |p| Ok(stat.hash_file(p)?))
}

/// Like [`hash_with_stamp`], hashing the file directly: for a kernel source, cheaper than loading
/// the stat cache.
pub(crate) fn hash_direct_with_stamp(path: &Path) -> Result<(Digest, Option<StatStamp>)> {
    stamped(path, |p| Ok(fingerprint::hash_file(p)?))
}

fn stamped(
    path: &Path,
    hash: impl FnOnce(&Path) -> Result<Digest>,
) -> Result<(Digest, Option<StatStamp>)> {
    let before = StatStamp::of(path);
    let digest = hash(path)?;
    let after = StatStamp::of(path);
    let stamp = match (before, after) {
        (Some(b), Some(a)) if a == b && a.settled() => Some(a),
        _ => None,
    };
    Ok((digest, stamp))
}

impl HeaderRecord {
    /// The component name used in manifests and rebuild reasons.
    pub(crate) fn component_name(&self) -> String {
        match self.base {
            Base::SourceDir | Base::Include(_) => format!("header:{}", self.rel),
            Base::Toolkit => format!("header:<toolkit>/{}", self.rel),
            Base::System => format!("header:{}", self.rel),
        }
    }

    /// Whether the record is checked on every hit (project headers) or once per process.
    pub(crate) fn is_project_header(&self) -> bool {
        matches!(self.base, Base::SourceDir | Base::Include(_))
    }
}

/// The search path of one spec, with absolute, lexically normalised directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SearchPath {
    pub(crate) source_dir: Option<PathBuf>,
    pub(crate) include_dirs: Vec<PathBuf>,
    pub(crate) toolkit_root: PathBuf,
}

impl SearchPath {
    pub(crate) fn dir_of(&self, base: Base) -> Option<&Path> {
        match base {
            Base::SourceDir => self.source_dir.as_deref(),
            Base::Include(i) => self.include_dirs.get(i as usize).map(PathBuf::as_path),
            Base::Toolkit => Some(&self.toolkit_root),
            Base::System => Some(Path::new("/")),
        }
    }

    /// The search-path entries in the order the preprocessor tries them.
    fn project_bases(&self) -> Vec<Base> {
        let mut bases = Vec::new();
        if self.source_dir.is_some() {
            bases.push(Base::SourceDir);
        }
        bases.extend((0..self.include_dirs.len()).map(|i| Base::Include(i as u32)));
        bases
    }

    /// Records one header from the dependency file. The most specific search-path entry that
    /// contains it is taken as the one that resolved it; every earlier entry is checked for the
    /// same relative name now, and recorded as an absence.
    pub(crate) fn classify(&self, header: &Path, stat: &mut StatCache) -> Result<HeaderRecord> {
        let header = normalize(header);
        let (digest, stamp) = hash_with_stamp(&header, stat)?;
        let bases = self.project_bases();
        let best = bases
            .iter()
            .enumerate()
            .filter_map(|(pos, &base)| {
                let dir = self.dir_of(base)?;
                let rel = header.strip_prefix(dir).ok()?;
                Some((pos, base, rel.to_path_buf()))
            })
            .min_by_key(|(_, _, rel)| rel.components().count());
        if let Some((pos, base, rel)) = best {
            let absent_in = bases[..pos]
                .iter()
                .copied()
                .filter(|b| {
                    self.dir_of(*b)
                        .is_some_and(|d| std::fs::symlink_metadata(d.join(&rel)).is_err())
                })
                .collect();
            return Ok(HeaderRecord {
                base,
                rel: rel.to_string_lossy().into_owned(),
                digest,
                absent_in,
                stamp,
            });
        }
        if let Ok(rel) = header.strip_prefix(&self.toolkit_root) {
            return Ok(HeaderRecord {
                base: Base::Toolkit,
                rel: rel.to_string_lossy().into_owned(),
                digest,
                absent_in: vec![],
                stamp,
            });
        }
        Ok(HeaderRecord {
            base: Base::System,
            rel: header.to_string_lossy().into_owned(),
            digest,
            absent_in: vec![],
            stamp,
        })
    }
}

/// Why a recorded variant no longer matches the files on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// The header's content differs (or it is gone): the reason names it.
    Changed {
        record: HeaderRecord,
        now: Option<Digest>,
    },
    /// A header now exists earlier in the search path and would shadow the recorded one.
    Shadowed { record: HeaderRecord, by: PathBuf },
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Changed {
                record,
                now: Some(now),
            } => write!(
                f,
                "header `{}` changed (blake3 {} -> {})",
                record.component_name().trim_start_matches("header:"),
                record.digest.short(),
                now.short()
            ),
            Mismatch::Changed { record, now: None } => {
                write!(
                    f,
                    "header `{}` vanished",
                    record.component_name().trim_start_matches("header:")
                )
            }
            Mismatch::Shadowed { record, by } => write!(
                f,
                "header `{}` is now shadowed by {}",
                record.component_name().trim_start_matches("header:"),
                by.display()
            ),
        }
    }
}

/// Checks recorded headers against the files now on disk. A record whose stamp equals the file's
/// stat tuple now is unchanged (one `stat`); others are hashed through `slow`. Toolkit and system
/// headers without a stamp are checked once per process: `confirmed` remembers them.
pub(crate) fn revalidate(
    records: &[HeaderRecord],
    search: &SearchPath,
    slow: &mut SlowHash<'_>,
    confirmed: &mut HashSet<(PathBuf, Digest)>,
) -> std::result::Result<(), Box<Mismatch>> {
    for record in records {
        let Some(dir) = search.dir_of(record.base) else {
            return Err(Box::new(Mismatch::Changed {
                record: record.clone(),
                now: None,
            }));
        };
        let path = dir.join(&record.rel);
        let stamped = record.stamp.is_some() && StatStamp::of(&path) == record.stamp;
        if !stamped {
            let memo_key = (!record.is_project_header()).then(|| (path.clone(), record.digest));
            if !memo_key.as_ref().is_some_and(|k| confirmed.contains(k)) {
                match slow(&path) {
                    Some(now) if now == record.digest => {}
                    now => {
                        return Err(Box::new(Mismatch::Changed {
                            record: record.clone(),
                            now,
                        }))
                    }
                }
                if let Some(key) = memo_key {
                    confirmed.insert(key);
                }
            }
        }
        for absent in &record.absent_in {
            if let Some(dir) = search.dir_of(*absent) {
                let shadow = dir.join(&record.rel);
                if std::fs::symlink_metadata(&shadow).is_ok() {
                    return Err(Box::new(Mismatch::Shadowed {
                        record: record.clone(),
                        by: shadow,
                    }));
                }
            }
        }
    }
    Ok(())
}

/// A repeated request's header check, precomputed for one search path: each header's path and
/// settled stamp, and, for the recorded absences, the settled stamp of the directory that would
/// hold the shadowing file (adding a file to a directory changes its mtime and ctime). One `stat`
/// per header and one per directory, no allocation.
#[derive(Debug)]
pub(crate) struct FastCheck {
    search: SearchPath,
    files: Vec<(PathBuf, StatStamp)>,
    dirs: Vec<(PathBuf, StatStamp)>,
}

impl FastCheck {
    /// None when some header or directory has no settled stamp (the full check then runs).
    pub(crate) fn new(records: &[HeaderRecord], search: &SearchPath) -> Option<FastCheck> {
        let mut files = Vec::with_capacity(records.len());
        let mut dirs: Vec<(PathBuf, StatStamp)> = Vec::new();
        for record in records {
            let path = search.dir_of(record.base)?.join(&record.rel);
            let stamp = record.stamp.filter(|s| StatStamp::of(&path) == Some(*s))?;
            files.push((path, stamp));
            for absent in &record.absent_in {
                let shadow = search.dir_of(*absent)?.join(&record.rel);
                // The nearest existing directory on the shadow's path: a new file or directory
                // below it changes that directory's stamp.
                let dir = shadow
                    .ancestors()
                    .skip(1)
                    .find(|d| d.is_dir())?
                    .to_path_buf();
                if !dirs.iter().any(|(d, _)| *d == dir) {
                    let stamp = StatStamp::of(&dir).filter(StatStamp::settled)?;
                    dirs.push((dir, stamp));
                }
            }
        }
        Some(FastCheck {
            search: search.clone(),
            files,
            dirs,
        })
    }

    /// Whether this check was made for `search`.
    pub(crate) fn applies_to(&self, search: &SearchPath) -> bool {
        self.search == *search
    }

    /// Whether every file and directory still has its stamp.
    pub(crate) fn still_valid(&self) -> bool {
        self.files
            .iter()
            .chain(&self.dirs)
            .all(|(path, stamp)| StatStamp::of(path) == Some(*stamp))
    }
}

/// Makes a path absolute (against the current directory) and removes `.` and `..` lexically, so
/// that `bin/../include/x.h` from a depfile compares equal to `include/x.h`.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_removes_dot_dot_lexically() {
        assert_eq!(
            normalize(Path::new("/a/bin/../include/./x.h")),
            PathBuf::from("/a/include/x.h")
        );
    }

    #[test]
    fn a_header_is_recorded_against_the_most_specific_search_entry_with_absences() {
        let dir = tempfile::tempdir().expect("temp dir");
        let src = dir.path().join("src");
        let inc = src.join("include");
        std::fs::create_dir_all(&inc).expect("mkdir");
        std::fs::write(inc.join("tile.cuh"), "x").expect("write header");
        let search = SearchPath {
            source_dir: Some(src.clone()),
            include_dirs: vec![inc.clone()],
            toolkit_root: dir.path().join("tk"),
        };
        let mut stat = StatCache::default();
        let record = search
            .classify(&inc.join("tile.cuh"), &mut stat)
            .expect("classify");
        assert_eq!(record.base, Base::Include(0));
        assert_eq!(record.rel, "tile.cuh");
        assert_eq!(
            record.absent_in,
            vec![Base::SourceDir],
            "src/tile.cuh was absent and would shadow it"
        );
        let mut confirmed = HashSet::new();
        let mut slow = |p: &Path| stat.hash_file(p).ok();
        assert!(revalidate(
            std::slice::from_ref(&record),
            &search,
            &mut slow,
            &mut confirmed
        )
        .is_ok());
        std::fs::write(src.join("tile.cuh"), "shadow").expect("plant a shadowing header");
        let mismatch =
            revalidate(&[record], &search, &mut slow, &mut confirmed).expect_err("shadowed");
        assert!(mismatch.to_string().contains("shadowed"), "{mismatch}");
    }

    /// The precomputed memo check must see a header edit and a new shadowing header; stamps are
    /// taken now (the settled rule is the constructor's, tested below), not waited for.
    #[test]
    fn the_fast_check_sees_an_edit_and_a_new_shadowing_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (src, inc) = (dir.path().join("src"), dir.path().join("src/include"));
        std::fs::create_dir_all(&inc).expect("mkdir");
        let header = inc.join("tile.cuh");
        std::fs::write(&header, "a").expect("write header");
        let search = SearchPath {
            source_dir: Some(src.clone()),
            include_dirs: vec![inc.clone()],
            toolkit_root: dir.path().join("tk"),
        };
        let stamp = |p: &Path| StatStamp::of(p).expect("stat");
        let check = || FastCheck {
            search: search.clone(),
            files: vec![(header.clone(), stamp(&header))],
            dirs: vec![(src.clone(), stamp(&src))],
        };
        assert!(check().still_valid(), "nothing changed");
        assert!(check().applies_to(&search));
        let fresh = check();
        std::fs::write(&header, "b").expect("edit the header");
        assert!(!fresh.still_valid(), "an edited header fails the check");
        let fresh = check();
        std::fs::write(src.join("tile.cuh"), "shadow").expect("plant a shadowing header");
        assert!(
            !fresh.still_valid(),
            "a new file where the header was absent fails the check"
        );
    }

    #[test]
    fn the_fast_check_is_not_built_from_unsettled_stamps() {
        let dir = tempfile::tempdir().expect("temp dir");
        let header = dir.path().join("h.cuh");
        std::fs::write(&header, "x").expect("write header");
        let mut stat = StatCache::default();
        let (digest, stamp) = hash_with_stamp(&header, &mut stat).expect("hash");
        assert!(stamp.is_none(), "a file written just now is racy: no stamp");
        let record = HeaderRecord {
            base: Base::SourceDir,
            rel: "h.cuh".into(),
            digest,
            absent_in: vec![],
            stamp,
        };
        let search = SearchPath {
            source_dir: Some(dir.path().to_path_buf()),
            include_dirs: vec![],
            toolkit_root: dir.path().join("tk"),
        };
        assert!(
            FastCheck::new(&[record], &search).is_none(),
            "no fast check without settled stamps"
        );
    }
}
