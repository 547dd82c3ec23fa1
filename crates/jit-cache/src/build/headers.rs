//! What a compile depended on beyond its key, recorded so that a hit can be revalidated and a
//! change explained: the headers it read (by place and content) and the places where a header was
//! looked for and absent (a header added there later would be read instead).
//!
//! `inputs.rs` derives both from the dependency file and the include directives by the compiler's
//! own search rules (`search.rs`); this module stores and checks them. Project headers and every
//! absence are checked on every hit; toolkit and installed headers once per process.

use crate::base::pass::Pass;
use crate::base::stamp::Settling;
pub(crate) use crate::base::stamp::{Look, StatStamp};
use crate::build::search::{join, Base, SearchPath};
use crate::build::source_bound::SourceBinding;
use crate::error::Result;
use fingerprint::{Digest, StatCache};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// One header a compile read. Stored in `meta.json` as one compact string (see `record_text.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeaderRecord {
    pub(crate) base: Base,
    /// The name under the base's directory, as the compiler spelled it (bytes, `..` kept).
    pub(crate) rel: PathBuf,
    pub(crate) digest: Digest,
    /// The file's stat tuple when it was hashed, if it was then settled (`stamp.rs`): an identical
    /// tuple later proves the same content without hashing. Never part of a
    /// variant's identity (another host sees other tuples and re-hashes).
    pub(crate) stamp: Option<StatStamp>,
}

/// Names that must stay absent under one directory: the compile looked for each there (or in a
/// directory below it that did not exist) before finding the header it read elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AbsenceGroup {
    pub(crate) base: Base,
    /// The directory under the base, the nearest one that existed.
    pub(crate) dir: PathBuf,
    /// The absent names, relative to `dir`.
    pub(crate) names: Vec<PathBuf>,
    /// Names the compile found as directories there (a `stat`, `access` or open that found a
    /// directory: a wrapper's `[ -d DIR ]`): each must still be one. Checked with the names,
    /// when the directory's stamp changed (a `rmdir` or `rename` there changes it).
    pub(crate) dirs: Vec<PathBuf>,
    /// Names the compile found as symlinks there (`readlink`, `lstat`), with their targets:
    /// each must still be a link to the same target. Checked with the names: a link is
    /// replaced, never changed in place, and replacing it changes the directory's stamp.
    pub(crate) links: Vec<(PathBuf, PathBuf)>,
    /// The directory's stat tuple when recorded, if settled: unchanged, no entry was added.
    pub(crate) stamp: Option<StatStamp>,
}

/// Everything a variant depends on beyond its key.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Inputs {
    pub(crate) headers: Vec<HeaderRecord>,
    #[serde(default)]
    pub(crate) absent: Vec<AbsenceGroup>,
    /// The source the output names, when it may (`source_bound.rs`): the variant then serves
    /// only that source, at that place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) source: Option<SourceBinding>,
}

impl Inputs {
    /// The part checked on every hit: project headers and the absences in project directories
    /// (the toolkit's and the installation's are checked once per process).
    pub(crate) fn project_part(&self) -> Inputs {
        Inputs {
            headers: self
                .headers
                .iter()
                .filter(|h| h.base.is_project())
                .cloned()
                .collect(),
            absent: self
                .absent
                .iter()
                .filter(|a| a.base.is_project())
                .cloned()
                .collect(),
            source: self.source.clone(),
        }
    }
}

/// Hashes a header the slow way (through the stat cache), for records without a usable stamp.
pub(crate) type SlowHash<'a> = dyn FnMut(&Path) -> Option<Digest> + 'a;

/// Hashes `path` and, when the file did not change while it was hashed and its stamp is settled
/// against `settling` (made before the file was read), returns a stamp to trust later.
pub(crate) fn hash_with_stamp(
    path: &Path,
    stat: &mut StatCache,
    settling: &mut Settling,
) -> Result<(Digest, Option<StatStamp>)> {
    stamped(path, settling, |p| Ok(stat.hash_file(p)?))
}

/// Like [`hash_with_stamp`], hashing the file directly: for a kernel source, cheaper than loading
/// the stat cache.
pub(crate) fn hash_direct_with_stamp(path: &Path) -> Result<(Digest, Option<StatStamp>)> {
    stamped(path, &mut Settling::start(), |p| {
        Ok(fingerprint::hash_file(p)?)
    })
}

/// Hashes `path` between two stats; the stamp is kept when both agree and it is settled.
fn stamped(
    path: &Path,
    settling: &mut Settling,
    hash: impl FnOnce(&Path) -> Result<Digest>,
) -> Result<(Digest, Option<StatStamp>)> {
    let before = StatStamp::of(path);
    let digest = hash(path)?;
    let after = StatStamp::of(path);
    let stamp = match (before, after) {
        (Some(b), Some(a)) if a == b && settling.settled(path, &a) => Some(a),
        _ => None,
    };
    Ok((digest, stamp))
}

impl HeaderRecord {
    /// The component name used in manifests and rebuild reasons.
    pub(crate) fn component_name(&self) -> String {
        match self.base {
            Base::Toolkit => format!("header:<toolkit>/{}", self.rel.display()),
            Base::Forced(i) => format!("header:<-include {i}>"),
            _ => format!("header:{}", self.rel.display()),
        }
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
    /// A file now exists where the compile looked first and found nothing.
    Shadowed { name: PathBuf, by: PathBuf },
    /// A directory the compile listed has changed since.
    Relisted { dir: PathBuf },
    /// A directory the compile found is gone (or no longer a directory).
    DirGone { path: PathBuf },
    /// A symlink the compile found is gone, no longer a link, or points elsewhere.
    LinkChanged { path: PathBuf },
    /// The variant's output names its own source, and the request's is another (or elsewhere).
    OtherSource { source: PathBuf },
}

/// The name that stands, in an absence group, for the directory's listing: the compile listed
/// the directory, so any change of its entries (its stamp) may change the output. Never a
/// relative file name.
pub(crate) const LISTING: &str = "/";

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
            Mismatch::Changed { record, now: None } => write!(
                f,
                "header `{}` vanished",
                record.component_name().trim_start_matches("header:")
            ),
            Mismatch::Relisted { dir } => {
                write!(
                    f,
                    "directory {} changed since the compile listed it",
                    dir.display()
                )
            }
            Mismatch::DirGone { path } => write!(
                f,
                "directory {} that the compile found is gone",
                path.display()
            ),
            Mismatch::LinkChanged { path } => write!(
                f,
                "symlink {} that the compile found is gone or points elsewhere",
                path.display()
            ),
            Mismatch::Shadowed { name, by } => write!(
                f,
                "header `{}` is now shadowed by {}",
                name.display(),
                by.display()
            ),
            Mismatch::OtherSource { source } => write!(
                f,
                "the entry's output names its own source {}",
                source.display()
            ),
        }
    }
}

/// Whether the compiler would find a file at `path`: it exists and is not a directory (GCC
/// skips a directory and goes on searching).
pub(crate) fn findable(path: &Path) -> bool {
    rustix::fs::stat(path).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory
    })
}

/// Checks recorded inputs against the files now on disk. A header whose stamp equals the file's
/// stat tuple now is unchanged (one `stat`); others are hashed through `slow`. Toolkit and
/// installed headers without a stamp are hashed once per process: `confirmed` remembers them. An
/// absence group whose directory kept its settled stamp had no entry added; otherwise each name is
/// looked up.
pub(crate) fn revalidate(
    headers: &[HeaderRecord],
    absent: &[AbsenceGroup],
    search: &SearchPath,
    look: Look,
    slow: &mut SlowHash<'_>,
    confirmed: &mut HashSet<(PathBuf, Digest)>,
) -> std::result::Result<(), Box<Mismatch>> {
    let mut pass = Pass::new(look);
    for record in headers {
        let Some(path) = search.path_of(record.base, &record.rel) else {
            return Err(Box::new(Mismatch::Changed {
                record: record.clone(),
                now: None,
            }));
        };
        if record.stamp.is_some() && pass.stamp(&path) == record.stamp {
            continue;
        }
        let memo_key = (!record.base.is_project()).then(|| (path.to_path_buf(), record.digest));
        if memo_key.as_ref().is_some_and(|k| confirmed.contains(k)) {
            continue;
        }
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
    for group in absent {
        let Some(dir) = search.path_of(group.base, &group.dir) else {
            continue;
        };
        // The toolkit's and the installation's absences, like their headers, once per process.
        let memo_key = (!group.base.is_project()).then(|| {
            let names: Vec<&[u8]> = group
                .names
                .iter()
                .map(PathBuf::as_path)
                .chain(std::iter::once(Path::new(LISTING)))
                .chain(group.dirs.iter().map(PathBuf::as_path))
                .chain(
                    group
                        .links
                        .iter()
                        .flat_map(|(n, t)| [n.as_path(), t.as_path()]),
                )
                .map(|n| n.as_os_str().as_encoded_bytes())
                .collect();
            (dir.clone(), Digest::of_bytes(&names.join(&0u8)))
        });
        if memo_key.as_ref().is_some_and(|k| confirmed.contains(k)) {
            continue;
        }
        if !(group.stamp.is_some() && pass.stamp(&dir) == group.stamp) {
            if group.names.iter().any(|n| n.as_os_str() == LISTING) {
                return Err(Box::new(Mismatch::Relisted { dir }));
            }
            if let Some(path) = first_present(&dir, &group.names) {
                return Err(Box::new(Mismatch::Shadowed {
                    name: path.strip_prefix(&dir).unwrap_or(&path).to_path_buf(),
                    by: path,
                }));
            }
            if let Some(path) = group
                .dirs
                .iter()
                .map(|d| dir.join(d))
                .find(|p| !std::fs::metadata(p).is_ok_and(|m| m.is_dir()))
            {
                return Err(Box::new(Mismatch::DirGone { path }));
            }
            if let Some(path) = group
                .links
                .iter()
                .map(|(name, target)| (dir.join(name), target))
                .find(|(p, target)| std::fs::read_link(p).ok().as_ref() != Some(*target))
                .map(|(p, _)| p)
            {
                return Err(Box::new(Mismatch::LinkChanged { path }));
            }
        }
        if let Some(key) = memo_key {
            confirmed.insert(key);
        }
    }
    Ok(())
}

/// Groups with more names than this are checked by their first components: one look at each
/// distinct one, or one listing of their directory when there are more of those than this too.
const LIST_THRESHOLD: usize = 8;

/// The first of `names` (relative to `dir`) that the compiler would now find, if any.
///
/// A large group (toolkit headers' `#include <bits/...>` all looked in the caller's `-I`
/// directory first; the loader's search of `tls/haswell/x86_64/...` in a build directory) is
/// checked by the names' first components: a name whose first component is not in `dir` cannot
/// be found; only the others are looked up whole. The first components are looked at one by one
/// when they are few (a build directory may hold thousands of entries), else `dir` is listed
/// once. Either is what `stat`s would have seen at that moment, so the answer is the same.
pub(crate) fn first_present(dir: &Path, names: &[PathBuf]) -> Option<PathBuf> {
    let first_of = |name: &PathBuf| match name.components().next() {
        Some(std::path::Component::Normal(first)) => Some(first.to_os_string()),
        _ => None,
    };
    let there: Option<HashSet<std::ffi::OsString>> = (names.len() > LIST_THRESHOLD)
        .then(|| {
            let firsts: HashSet<std::ffi::OsString> = names
                .iter()
                .filter(|n| n.as_os_str() != LISTING)
                .filter_map(first_of)
                .collect();
            if firsts.len() <= 4 * LIST_THRESHOLD {
                Some(
                    firsts
                        .into_iter()
                        .filter(|first| std::fs::symlink_metadata(dir.join(first)).is_ok())
                        .collect(),
                )
            } else {
                std::fs::read_dir(dir)
                    .ok()
                    .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
            }
        })
        .flatten();
    names
        .iter()
        .filter(|n| n.as_os_str() != LISTING)
        .find_map(|name| {
            let surely_absent = match (&there, first_of(name)) {
                (Some(there), Some(first)) => !there.contains(&first),
                _ => false,
            };
            let path = join(dir, name);
            (!surely_absent && findable(&path)).then_some(path)
        })
}

/// A repeated request's check, precomputed for one search path: each project header's path and
/// settled stamp, each absence directory's settled stamp (adding a file to a directory changes
/// its mtime and ctime), and the absent paths whose directory had no settled stamp. One `stat`
/// per entry, no allocation.
#[derive(Debug)]
pub(crate) struct FastCheck {
    search: SearchPath,
    stamped: Vec<(PathBuf, StatStamp)>,
    /// Absence groups whose directory had no settled stamp: each name is looked up.
    absent: Vec<(PathBuf, Vec<PathBuf>)>,
}

impl FastCheck {
    /// Stamps everything `inputs` names now. Call it *before* validating `inputs`: a change made
    /// after these stamps were taken fails the check later. None when a header has no settled
    /// stamp (the full check then runs).
    pub(crate) fn stamp(inputs: &Inputs, search: &SearchPath) -> Option<FastCheck> {
        let mut stamped = Vec::with_capacity(inputs.headers.len() + inputs.absent.len());
        let mut absent = Vec::new();
        let mut settling = Settling::start();
        for record in inputs.headers.iter().filter(|h| h.base.is_project()) {
            let path = search.path_of(record.base, &record.rel)?;
            let stamp = settling.stamp(&path)?;
            stamped.push((path, stamp));
        }
        for group in &inputs.absent {
            let dir = search.path_of(group.base, &group.dir)?;
            match settling.stamp(&dir) {
                Some(stamp) => stamped.push((dir, stamp)),
                // A listing is checked by the directory's stamp alone: without a settled one,
                // the full check runs.
                None if group.names.iter().any(|n| n.as_os_str() == LISTING) => return None,
                None => absent.push((dir, group.names.clone())),
            }
        }
        Some(FastCheck {
            search: search.clone(),
            stamped,
            absent,
        })
    }

    /// Whether this check was made for `search`.
    pub(crate) fn applies_to(&self, search: &SearchPath) -> bool {
        self.search == *search
    }

    /// Whether every file and directory still has its stamp and every absent path is absent.
    pub(crate) fn still_valid(&self, look: Look) -> bool {
        let mut pass = Pass::new(look);
        self.stamped
            .iter()
            .all(|(path, stamp)| pass.stamp(path) == Some(*stamp))
            && self
                .absent
                .iter()
                .all(|(dir, names)| first_present(dir, names).is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_absence_group_finds_exactly_what_single_lookups_find() {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        std::fs::create_dir_all(d.join("bits")).expect("mkdir bits");
        std::fs::create_dir_all(d.join("sub")).expect("mkdir sub");
        let mut names: Vec<PathBuf> = (0..12).map(|i| PathBuf::from(format!("h{i}.h"))).collect();
        names.push("bits/types.h".into());
        names.push("../outside.h".into());
        assert_eq!(first_present(d, &names), None, "nothing there yet");
        std::fs::write(d.join("bits/types.h"), "x").expect("write");
        assert_eq!(
            first_present(d, &names),
            Some(d.join("bits/types.h")),
            "a name under an existing directory is looked up"
        );
        std::fs::remove_file(d.join("bits/types.h")).expect("remove");
        std::fs::write(dir.path().join("sub/../outside.h"), "x").expect("write");
        let outside = d.join("../outside.h");
        assert_eq!(
            first_present(d, &names).is_some(),
            findable(&outside),
            "a `..` name is looked up, never judged by the listing"
        );
        std::fs::create_dir(d.join("h3.h")).expect("a directory");
        assert!(
            first_present(d, &names[..4]).is_none(),
            "a directory is skipped, as GCC skips it"
        );
        // Past the threshold of first components the directory is listed: the same answers.
        let many: Vec<PathBuf> = (0..40)
            .map(|i| PathBuf::from(format!("m{i}/x.h")))
            .collect();
        assert_eq!(first_present(d, &many), None, "listed: nothing there");
        std::fs::create_dir(d.join("m7")).expect("mkdir m7");
        assert_eq!(first_present(d, &many), None, "m7 is there, m7/x.h is not");
        std::fs::write(d.join("m7/x.h"), "x").expect("write");
        assert_eq!(first_present(d, &many), Some(d.join("m7/x.h")));
    }
}
