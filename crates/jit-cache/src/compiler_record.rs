//! What the compiler printed and read for an entry, kept beside the artifact so that a caller
//! standing in for the compiler (the `jit-cache nvcc` launcher) can answer a hit exactly as the
//! compile answered: the same diagnostics, and the dependency file nvcc would write.
//!
//! Stored as `compiler.json` in the entry directory, written before `meta.json` (so it is inside
//! the entry's one rename). Best effort: an entry without it (an older entry, a name that is not
//! UTF-8, one fetched from a remote tier) is still a valid entry; [`Cache::get_or_build_with_record`]
//! then returns no record and the caller runs the compiler itself.
//!
//! Prerequisites are stored relative to the search-path base that resolved them (the source's
//! directory, an `-I` directory by index, ...), never as the building request's absolute paths,
//! so a request from another build directory re-spells them against its own directories. Files
//! outside every project directory (toolkit, system headers) are kept as the compiler spelled
//! them: the toolkit's identity is in the key, so the same spelling holds for every hit.

use crate::cache::{Answer, Cache};
use crate::error::Result;
use crate::request::Request;
use crate::search::{join, Base, SearchPath};
use crate::spec::KernelSpec;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file name of the record inside an entry directory.
pub(crate) const RECORD_FILE: &str = "compiler.json";

/// Bump when the stored form changes: an entry with another version has no usable record.
/// Version 2 stores each prerequisite as one string (it parses several times faster than an
/// object, and a launcher hit parses hundreds); version 1's objects are still read.
const RECORD_VERSION: u32 = 2;

/// The oldest version still read.
const OLDEST_READ_VERSION: u32 = 1;

/// What the compiler printed and read for an entry, spelled for the request that asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompilerRecord {
    /// The compiler's stderr (warnings, `-Xptxas -v` reports), with every project directory of
    /// the building request re-spelled as this request's directory for the same place.
    pub stderr: String,
    /// The files the compile read besides the source, in the order nvcc's dependency file
    /// lists them (first appearance).
    pub prerequisites: Vec<Prerequisite>,
}

/// One file a compile read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prerequisite {
    /// This request's directory for the place that resolved the file (absolute, spelled as the
    /// request resolved it, never normalised), or `None` when `rel` is the whole path as the
    /// compiler spelled it (toolkit and system headers, files outside every search directory).
    pub dir: Option<PathBuf>,
    /// The name under `dir`, as the compiler spelled it (`..` kept).
    pub rel: PathBuf,
    /// Whether the preprocessor counts it a system header (found in an `-isystem` directory, the
    /// toolkit's `-isystem` directories or the host compiler's own): `-MMD` leaves these out.
    pub system: bool,
}

impl Prerequisite {
    /// The absolute path for this request (`dir/rel`, as the compiler joins them).
    pub fn path(&self) -> PathBuf {
        match &self.dir {
            Some(dir) => join(dir, &self.rel),
            None => self.rel.clone(),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Stored {
    version: u32,
    stderr: String,
    /// The building request's project directories, by base code, for re-spelling `stderr`.
    dirs: Vec<(String, PathBuf)>,
    prerequisites: Vec<StoredPrerequisite>,
}

/// Stored as `<base|-> <y|n> <path>` (`i0 n gen/h1.cuh`, `- y /usr/include/stdio.h`); version 1
/// stored an object of the three fields.
struct StoredPrerequisite {
    /// The base's code (`s`, `q3`, `i0`, `y1`), or None for a path kept as spelled.
    base: Option<String>,
    path: PathBuf,
    system: bool,
}

impl Serialize for StoredPrerequisite {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let path = self
            .path
            .to_str()
            .ok_or_else(|| serde::ser::Error::custom("a path that is not UTF-8"))?;
        let base = self.base.as_deref().unwrap_or("-");
        let system = if self.system { 'y' } else { 'n' };
        serializer.serialize_str(&format!("{base} {system} {path}"))
    }
}

impl<'de> Deserialize<'de> for StoredPrerequisite {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = StoredPrerequisite;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a prerequisite `<base|-> <y|n> <path>`")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
                let bad = || E::custom(format!("bad prerequisite `{text}`"));
                let mut parts = text.splitn(3, ' ');
                let base = match parts.next().ok_or_else(bad)? {
                    "-" => None,
                    code => Some(code.to_string()),
                };
                let system = match parts.next().ok_or_else(bad)? {
                    "y" => true,
                    "n" => false,
                    _ => return Err(bad()),
                };
                let path = PathBuf::from(parts.next().filter(|p| !p.is_empty()).ok_or_else(bad)?);
                Ok(StoredPrerequisite { base, path, system })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                #[derive(Deserialize)]
                struct Version1 {
                    base: Option<String>,
                    path: PathBuf,
                    system: bool,
                }
                let v1 = Version1::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(StoredPrerequisite {
                    base: v1.base,
                    path: v1.path,
                    system: v1.system,
                })
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

fn base_code(base: Base) -> Option<String> {
    match base {
        Base::SourceDir => Some("s".into()),
        Base::WorkingDir => Some("w".into()),
        Base::Quote(i) => Some(format!("q{i}")),
        Base::Include(i) => Some(format!("i{i}")),
        Base::System(i) => Some(format!("y{i}")),
        Base::Forced(i) => Some(format!("f{i}")),
        Base::Absolute | Base::Toolkit | Base::Installed => None,
    }
}

fn base_of(code: &str) -> Option<Base> {
    let index = |s: &str| s.parse::<u32>().ok();
    if !code.is_char_boundary(1) {
        return None;
    }
    match code.split_at(1) {
        ("s", "") => Some(Base::SourceDir),
        ("w", "") => Some(Base::WorkingDir),
        ("q", n) => index(n).map(Base::Quote),
        ("i", n) => index(n).map(Base::Include),
        ("y", n) => index(n).map(Base::System),
        ("f", n) => index(n).map(Base::Forced),
        _ => None,
    }
}

/// Whether the preprocessor treats `path` (spelled as read) as a system header. `system_dirs`
/// are the toolkit's `-isystem` directories, canonical; `parents` caches canonical directories
/// (a compile reads hundreds of headers from a few directories).
fn is_system(
    base: Base,
    path: &Path,
    system_dirs: &[PathBuf],
    parents: &mut std::collections::HashMap<PathBuf, PathBuf>,
) -> bool {
    match base {
        Base::System(_) | Base::Installed => true,
        Base::Toolkit => {
            let Some(parent) = path.parent() else {
                return false;
            };
            let canonical = parents.entry(parent.to_path_buf()).or_insert_with(|| {
                std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf())
            });
            system_dirs.iter().any(|d| canonical.starts_with(d))
        }
        _ => false,
    }
}

/// Writes the record of a compile into `entry_dir` (the staging directory, before `meta.json`).
/// `read` is what the compile's dependency file named besides the source, in order. Best
/// effort: a record that cannot be written is simply absent.
pub(crate) fn write(entry_dir: &Path, stderr: &str, read: &[PathBuf], search: &SearchPath) {
    let system_dirs: Vec<PathBuf> = search
        .dirs
        .toolkit_system
        .iter()
        .map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.clone()))
        .collect();
    let mut parents = std::collections::HashMap::new();
    // One cache of canonical directories for the whole list: a compile reads hundreds of
    // headers from a few tens of directories (a `realpath` each was most of a miss's overhead).
    let mut canonical = crate::search::Canonical::default();
    let prerequisites = read
        .iter()
        .map(|path| {
            let (base, rel) = search.classify_with(path, &mut canonical);
            let system = is_system(base, path, &system_dirs, &mut parents);
            match base_code(base) {
                Some(code) => StoredPrerequisite {
                    base: Some(code),
                    path: rel,
                    system,
                },
                None => StoredPrerequisite {
                    base: None,
                    path: path.clone(),
                    system,
                },
            }
        })
        .collect();
    let stored = Stored {
        version: RECORD_VERSION,
        stderr: stderr.to_string(),
        dirs: project_dirs(search),
        prerequisites,
    };
    // Serialising fails only for a path that is not UTF-8: then there is no record.
    if let Ok(bytes) = serde_json::to_vec(&stored) {
        let _ = std::fs::write(entry_dir.join(RECORD_FILE), bytes);
    }
}

/// The project directories of a search path, by base code.
fn project_dirs(search: &SearchPath) -> Vec<(String, PathBuf)> {
    let mut dirs = Vec::new();
    if let Some(dir) = &search.source_dir {
        dirs.push(("s".to_string(), dir.clone()));
    }
    dirs.push(("w".to_string(), search.working_dir.clone()));
    let lists = [
        ('q', &search.quote),
        ('i', &search.include),
        ('y', &search.system),
    ];
    for (code, list) in lists {
        for (i, dir) in list.iter().enumerate() {
            dirs.push((format!("{code}{i}"), dir.clone()));
        }
    }
    dirs
}

/// Reads the record of the entry at `entry_dir` and spells it for `search`.
fn load(entry_dir: &Path, search: &SearchPath) -> Option<CompilerRecord> {
    let bytes = std::fs::read(entry_dir.join(RECORD_FILE)).ok()?;
    let stored: Stored = serde_json::from_slice(&bytes).ok()?;
    if !(OLDEST_READ_VERSION..=RECORD_VERSION).contains(&stored.version) {
        return None;
    }
    let mut prerequisites = Vec::with_capacity(stored.prerequisites.len());
    for p in stored.prerequisites {
        let dir = match &p.base {
            Some(code) => Some(search.dir_of(base_of(code)?)?.to_path_buf()),
            None => None,
        };
        prerequisites.push(Prerequisite {
            dir,
            rel: p.path,
            system: p.system,
        });
    }
    // Re-spell the building request's directories as this request's, longest first so that a
    // directory inside another is replaced whole.
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (code, old) in &stored.dirs {
        let Some(new) = base_of(code).and_then(|b| search.dir_of(b)) else {
            continue;
        };
        // Unchanged directories stay in the list: a longer one must win over a shorter one that
        // changed (the source's directory inside the working directory).
        pairs.push((
            format!("{}/", old.to_string_lossy()),
            format!("{}/", new.to_string_lossy()),
        ));
    }
    pairs.sort_by_key(|(old, _)| std::cmp::Reverse(old.len()));
    let stderr = respell(&stored.stderr, &pairs);
    Some(CompilerRecord {
        stderr,
        prerequisites,
    })
}

/// Replaces each `old` prefix by its `new` one in one left-to-right pass (longest `old` first at
/// each position), so a replacement is never replaced again.
pub(crate) fn respell(text: &str, pairs: &[(String, String)]) -> String {
    if pairs.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'outer: while !rest.is_empty() {
        for (old, new) in pairs {
            if let Some(after) = rest.strip_prefix(old.as_str()) {
                out.push_str(new);
                rest = after;
                continue 'outer;
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out
}

impl Cache {
    /// [`Cache::get_or_build`], and what the compiler printed and read for the entry that
    /// answered, spelled for this request: for a caller that stands in for the compiler (a
    /// launcher replays the diagnostics and writes the dependency file the compiler would).
    ///
    /// The record is `None` when the answer is not a cached entry (compiled privately, see
    /// [`Answer::warning`]) or the entry has no record (written by an older version, fetched
    /// from a remote tier, or a path that is not UTF-8); such a caller runs the compiler itself.
    pub fn get_or_build_with_record(
        &self,
        spec: &KernelSpec,
    ) -> Result<(Answer, Option<CompilerRecord>)> {
        let request = Request::resolve(spec)?;
        let answer = self.answer(&request)?;
        let record = if answer.warning.is_some() {
            None
        } else {
            // The key was computed for this request just now: the memo answers at once.
            self.memos
                .prepare(self, &request, false)
                .ok()
                .and_then(|(_, prepared)| load(answer.artifact.path().parent()?, &prepared.search))
        };
        Ok((answer, record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn respelling_replaces_whole_directories_once_longest_first() {
        let pairs = vec![
            ("/a/b/inc/".to_string(), "/c/inc/".to_string()),
            ("/a/b/".to_string(), "/c/".to_string()),
        ];
        assert_eq!(
            respell("/a/b/inc/x.h(3): warning; /a/b/src.cu; /a/bb/y", &pairs),
            "/c/inc/x.h(3): warning; /c/src.cu; /a/bb/y",
            "each directory maps to its counterpart, a longer name is not cut"
        );
    }

    #[test]
    fn base_codes_round_trip() {
        for base in [
            Base::SourceDir,
            Base::WorkingDir,
            Base::Quote(3),
            Base::Include(0),
            Base::System(12),
            Base::Forced(1),
        ] {
            let code = base_code(base).expect("a project base has a code");
            assert_eq!(base_of(&code), Some(base), "{code} names {base:?}");
        }
        assert_eq!(base_code(Base::Toolkit), None, "toolkit paths stay spelled");
    }

    #[test]
    fn prerequisites_round_trip_as_text_and_version_1_objects_still_read() {
        let written = Stored {
            version: RECORD_VERSION,
            stderr: "warning".into(),
            dirs: vec![("i0".into(), PathBuf::from("/p/inc"))],
            prerequisites: vec![
                StoredPrerequisite {
                    base: Some("i0".into()),
                    path: "gen/a b.cuh".into(),
                    system: false,
                },
                StoredPrerequisite {
                    base: None,
                    path: "/usr/include/stdio.h".into(),
                    system: true,
                },
            ],
        };
        let json = serde_json::to_string(&written).expect("serialise");
        assert!(
            json.contains(r#""i0 n gen/a b.cuh","- y /usr/include/stdio.h""#),
            "{json}"
        );
        let read: Stored = serde_json::from_str(&json).expect("read back");
        let fields = |s: &Stored| -> Vec<(Option<String>, PathBuf, bool)> {
            s.prerequisites
                .iter()
                .map(|p| (p.base.clone(), p.path.clone(), p.system))
                .collect()
        };
        assert_eq!(fields(&read), fields(&written));
        let version_1 = r#"{"version":1,"stderr":"","dirs":[],"prerequisites":[
            {"base":"i0","path":"gen/a b.cuh","system":false},
            {"base":null,"path":"/usr/include/stdio.h","system":true}]}"#;
        let old: Stored = serde_json::from_str(version_1).expect("version 1 reads");
        assert_eq!(fields(&old), fields(&written));
        for bad in [r#""i0 x a.h""#, r#""i0 n ""#, r#""i0""#] {
            let text = format!(r#"{{"version":2,"stderr":"","dirs":[],"prerequisites":[{bad}]}}"#);
            assert!(
                serde_json::from_str::<Stored>(&text).is_err(),
                "{bad} is refused"
            );
        }
    }
}
