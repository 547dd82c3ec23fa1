//! The compiler's search path for one request, in the order the preprocessor uses it, and the
//! places ("bases") a recorded header or absence is relative to.
//!
//! nvcc preprocesses each pass with the host compiler (`gcc -E -x c++`), so GCC's rules decide
//! what is read. Its command line holds the host compiler's own options first (every
//! `-Xcompiler` item), then nvcc's `-I` directories and the toolkit's `include`, nvcc's `-isystem`
//! directories and the toolkit's `include/cccl`; GCC then adds `CPATH` to the `-I` chain,
//! `CPLUS_INCLUDE_PATH` and its built-in directories to the system chain, and `-idirafter` after
//! them, and merges the chains as `merge_include_chains` (`incpath.cc`) does:
//! - the system chain (with `-idirafter` joined to it) loses every directory that is missing or
//!   not a directory, and every later duplicate (same device and inode);
//! - the `-I` chain loses those too, every directory that is also in the system chain (a
//!   directory given by `-I` and `-isystem` is searched only where the system chain has it), and
//!   its last directory when that is the system chain's first;
//! - the `-iquote` chain likewise, against the system chain, and its last directory when that is
//!   the `-I` chain's first.
//!
//! For `#include "x"` GCC tries the including file's directory, then the `-iquote` chain, then the
//! `-I` chain, then the system chain; for `#include <x>` the last two. `#include_next` continues
//! after the directory that resolved the current file. A forced file (`-imacros`, `-include`,
//! nvcc's own `cuda_runtime.h`) is searched first in the working directory, then like
//! `#include "x"`.
//!
//! Project directories (the source's, the working directory, `-iquote`, `-I`, `-isystem`,
//! `-idirafter`) are the caller's and may change between two requests: headers and absences there
//! are recorded relative to them and checked on every hit. The toolkit and the host compiler's
//! built-in directories change with an installation: what is recorded there is checked once per
//! process.

use crate::build::request::{DirState, SearchDir, UserSearch};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a recorded header or absence lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Base {
    /// The source file's directory.
    SourceDir,
    /// The working directory of the request (forced includes are searched there first).
    WorkingDir,
    /// The `-iquote` directory at this index.
    Quote(u32),
    /// The `-I` directory at this index (host compiler's, nvcc's, then `CPATH`'s).
    Include(u32),
    /// The `-isystem` directory at this index (host compiler's, nvcc's, then
    /// `CPLUS_INCLUDE_PATH`'s).
    System(u32),
    /// The `-idirafter` directory at this index.
    After(u32),
    /// The forced file (`-include /abs/x.h`) at this index, given by absolute path: the
    /// record's name is empty, and each request checks its own file.
    Forced(u32),
    /// A project file outside every search directory; the path is absolute.
    Absolute,
    /// The toolkit's root (above nvcc's `bin`).
    Toolkit,
    /// Outside the project and the toolkit (the host compiler's built-in directories, the
    /// installation's files); the path is absolute.
    Installed,
}

impl Base {
    /// Whether files here belong to the caller (checked on every hit) rather than to an
    /// installation (checked once per process).
    pub(crate) fn is_project(self) -> bool {
        !matches!(self, Base::Toolkit | Base::Installed)
    }
}

/// A toolchain directory and what it was when the toolchain was looked at.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SystemDir {
    pub(crate) path: PathBuf,
    pub(crate) state: DirState,
}

impl SystemDir {
    pub(crate) fn new(path: PathBuf) -> SystemDir {
        let state = DirState::of(&path);
        SystemDir { path, state }
    }
}

/// The directories of the toolkit and host compiler, the same for every request of a toolchain.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SystemDirs {
    /// The toolkit's root, canonical (its identity is in the key).
    pub(crate) toolkit_root: PathBuf,
    /// The toolkit's root as nvcc spells it (`<the directory nvcc was run from>/..`): the base of
    /// toolkit records, and the prefix of the toolkit's directories below.
    pub(crate) toolkit_top: PathBuf,
    /// nvcc's `-I` directory (after the caller's `-I`s), as nvcc spells it.
    pub(crate) toolkit_include: Vec<SystemDir>,
    /// nvcc's `-isystem` directories (after the caller's `-isystem`s), as nvcc spells them.
    pub(crate) toolkit_system: Vec<SystemDir>,
    /// The host compiler's built-in directories, in its order, as it lists them.
    pub(crate) installed: Vec<SystemDir>,
    /// Headers nvcc itself forces into every `.cu` translation unit.
    pub(crate) forced: Vec<PathBuf>,
}

/// One directory of the merged search chain.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ChainDir {
    /// Absolute (the spelled directory resolved against the working directory).
    pub(crate) path: PathBuf,
    /// The base a candidate here is recorded under.
    pub(crate) base: Base,
    /// The candidate's name under the base is `prefix/name` (empty for project directories; the
    /// directory under the toolkit's root; the whole directory for installed ones).
    pub(crate) prefix: PathBuf,
    /// Whether GCC counts files found here as system headers.
    pub(crate) system: bool,
}

impl ChainDir {
    /// The record place of `name` looked up in this directory.
    pub(crate) fn place(&self, name: &Path) -> (Base, PathBuf) {
        (self.base, join(&self.prefix, name))
    }
}

/// What GCC's merge did with one directory of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Fate {
    Kept,
    Missing,
    NotDir,
    /// A non-system directory that is also a system one.
    DuplicatesSystem,
    /// The same directory as an earlier one of the chain.
    Duplicate,
    /// The chain's last directory, the same as the next chain's first.
    DuplicatesNext,
}

impl Fate {
    fn code(self) -> char {
        match self {
            Fate::Kept => 'k',
            Fate::Missing => 'm',
            Fate::NotDir => 'f',
            Fate::DuplicatesSystem => 's',
            Fate::Duplicate => 'd',
            Fate::DuplicatesNext => 'n',
        }
    }
}

/// The merged chains.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Chain {
    pub(crate) quote: Vec<ChainDir>,
    pub(crate) bracket: Vec<ChainDir>,
    pub(crate) system: Vec<ChainDir>,
}

/// The search path of one request: absolute directories, spelled as the compiler receives them
/// (never normalised: a `..` after a symlink is resolved by the kernel, as the compiler's is).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SearchPath {
    pub(crate) working_dir: PathBuf,
    /// The source's directory (None for text sources, compiled from a private copy).
    pub(crate) source_dir: Option<PathBuf>,
    pub(crate) user: UserSearch,
    /// Every forced file in GCC's order (`-imacros`, the host compiler's `-include`, nvcc's own,
    /// nvcc's `-include`), as given.
    pub(crate) forced: Vec<PathBuf>,
    pub(crate) dirs: Arc<SystemDirs>,
    pub(crate) chain: Chain,
    /// What the merge did with every directory, for the key (`i0k i1m y0s ...`).
    pub(crate) shape: String,
}

/// A raw chain entry before the merge.
struct Raw<'a> {
    path: &'a Path,
    state: DirState,
    base: Base,
    prefix: PathBuf,
    code: String,
}

impl SearchPath {
    /// Builds the search path of a request with a toolchain's directories, merged as GCC merges
    /// them.
    pub(crate) fn new(
        working_dir: &Path,
        source_dir: Option<PathBuf>,
        user: &UserSearch,
        dirs: Arc<SystemDirs>,
    ) -> SearchPath {
        let toolkit = |d: &SystemDir, i: usize, list: &str| -> (PathBuf, String) {
            let prefix = d
                .path
                .strip_prefix(&dirs.toolkit_top)
                .map(Path::to_path_buf)
                .unwrap_or_default();
            (prefix, format!("{list}{i}"))
        };
        let system_user: &[SearchDir] = &user.system;
        let bracket_user: &[SearchDir] = &user.bracket;
        let mut system_raw: Vec<Raw<'_>> = Vec::new();
        system_raw.extend(
            system_user[..user.system_command]
                .iter()
                .enumerate()
                .map(|(i, d)| raw_user(d, Base::System(i as u32), 'y', i)),
        );
        for (i, d) in dirs.toolkit_system.iter().enumerate() {
            let (prefix, code) = toolkit(d, i, "ts");
            system_raw.push(Raw {
                path: &d.path,
                state: d.state,
                base: Base::Toolkit,
                prefix,
                code,
            });
        }
        system_raw.extend(
            system_user[user.system_command..]
                .iter()
                .enumerate()
                .map(|(k, d)| {
                    let i = user.system_command + k;
                    raw_user(d, Base::System(i as u32), 'y', i)
                }),
        );
        for (i, d) in dirs.installed.iter().enumerate() {
            system_raw.push(Raw {
                path: &d.path,
                state: d.state,
                base: Base::Installed,
                prefix: d.path.clone(),
                code: format!("b{i}"),
            });
        }
        system_raw.extend(
            user.after
                .iter()
                .enumerate()
                .map(|(i, d)| raw_user(d, Base::After(i as u32), 'a', i)),
        );
        let mut bracket_raw: Vec<Raw<'_>> = bracket_user[..user.bracket_command]
            .iter()
            .enumerate()
            .map(|(i, d)| raw_user(d, Base::Include(i as u32), 'i', i))
            .collect();
        for (i, d) in dirs.toolkit_include.iter().enumerate() {
            let (prefix, code) = toolkit(d, i, "ti");
            bracket_raw.push(Raw {
                path: &d.path,
                state: d.state,
                base: Base::Toolkit,
                prefix,
                code,
            });
        }
        bracket_raw.extend(bracket_user[user.bracket_command..].iter().enumerate().map(
            |(k, d)| {
                let i = user.bracket_command + k;
                raw_user(d, Base::Include(i as u32), 'i', i)
            },
        ));
        let quote_raw: Vec<Raw<'_>> = user
            .quote
            .iter()
            .enumerate()
            .map(|(i, d)| raw_user(d, Base::Quote(i as u32), 'q', i))
            .collect();

        let mut shape = Vec::new();
        let system = merge(system_raw, &[], None, true, &mut shape);
        let system_ids: Vec<DirState> = system.iter().map(|(_, s)| *s).collect();
        let bracket = merge(
            bracket_raw,
            &system_ids,
            system_ids.first().copied(),
            false,
            &mut shape,
        );
        let next_of_quote = bracket
            .first()
            .map(|(_, s)| *s)
            .or(system_ids.first().copied());
        let quote = merge(quote_raw, &system_ids, next_of_quote, false, &mut shape);
        let chain = Chain {
            quote: quote.into_iter().map(|(c, _)| c).collect(),
            bracket: bracket.into_iter().map(|(c, _)| c).collect(),
            system: system.into_iter().map(|(c, _)| c).collect(),
        };
        let mut forced = user.imacros.clone();
        forced.extend(user.host_include.iter().cloned());
        forced.extend(dirs.forced.iter().cloned());
        forced.extend(user.include.iter().cloned());
        SearchPath {
            working_dir: working_dir.to_path_buf(),
            source_dir,
            user: user.clone(),
            forced,
            dirs,
            chain,
            shape: shape.join(" "),
        }
    }

    /// The directory a base stands for (empty for bases whose paths are absolute).
    pub(crate) fn dir_of(&self, base: Base) -> Option<&Path> {
        fn user(list: &[SearchDir], i: u32) -> Option<&Path> {
            list.get(i as usize).map(|d| d.path.as_path())
        }
        match base {
            Base::SourceDir => self.source_dir.as_deref(),
            Base::WorkingDir => Some(&self.working_dir),
            Base::Quote(i) => user(&self.user.quote, i),
            Base::Include(i) => user(&self.user.bracket, i),
            Base::System(i) => user(&self.user.system, i),
            Base::After(i) => user(&self.user.after, i),
            Base::Forced(i) => self
                .forced
                .get(i as usize)
                .filter(|f| f.is_absolute())
                .map(PathBuf::as_path),
            Base::Toolkit => Some(&self.dirs.toolkit_top),
            Base::Absolute | Base::Installed => Some(Path::new("")),
        }
    }

    /// The path a record names: its base's directory joined with `rel`, never normalised.
    pub(crate) fn path_of(&self, base: Base, rel: &Path) -> Option<PathBuf> {
        Some(join(self.dir_of(base)?, rel))
    }

    /// The search chain after the including file's directory: the `-iquote` chain (for a quoted
    /// include), the `-I` chain, the system chain.
    pub(crate) fn chain(&self, quoted: bool) -> impl Iterator<Item = &ChainDir> + Clone {
        let quote: &[ChainDir] = if quoted { &self.chain.quote } else { &[] };
        quote
            .iter()
            .chain(&self.chain.bracket)
            .chain(&self.chain.system)
    }

    /// [`SearchPath::classify_with`] with a cache of its own (tests).
    #[cfg(test)]
    pub(crate) fn classify(&self, spelled: &Path) -> (Base, PathBuf) {
        self.classify_with(spelled, &mut Canonical::default())
    }

    /// Where a file the compiler read belongs, from the path it was read under: the most
    /// specific project directory of the merged chain (or the source's directory) that spells a
    /// prefix of it, else the toolkit (by canonical path), else an installed file (outside every
    /// project directory and the working directory, by absolute path), else an absolute project
    /// path. Canonical paths come through `canonical`, shared by every file of one compile.
    pub(crate) fn classify_with(
        &self,
        spelled: &Path,
        canonical: &mut Canonical,
    ) -> (Base, PathBuf) {
        if let Some(i) = self
            .forced
            .iter()
            .position(|f| f.is_absolute() && f == spelled)
        {
            return (Base::Forced(i as u32), PathBuf::new());
        }
        let project = self
            .source_dir
            .iter()
            .map(|d| (Base::SourceDir, d.as_path()))
            .chain(
                self.chain(true)
                    .filter(|c| c.base.is_project())
                    .map(|c| (c.base, c.path.as_path())),
            );
        let best = project
            .filter_map(|(base, dir)| Some((base, dir, rel_as_spelled(spelled, dir)?)))
            .max_by_key(|(_, dir, _)| dir.as_os_str().len());
        if let Some((base, _, rel)) = best {
            return (base, rel);
        }
        if let Some(rel) = rel_as_spelled(spelled, &self.dirs.toolkit_top) {
            return (Base::Toolkit, rel);
        }
        let resolved = canonical.of_file(spelled);
        if let Ok(rel) = resolved.strip_prefix(&self.dirs.toolkit_root) {
            return (Base::Toolkit, rel.to_path_buf());
        }
        if rel_as_spelled(spelled, &self.working_dir).is_some() {
            return (
                Base::WorkingDir,
                rel_as_spelled(spelled, &self.working_dir).unwrap_or_default(),
            );
        }
        if self
            .dirs
            .installed
            .iter()
            .any(|d| resolved.starts_with(canonical.of_dir(&d.path)))
        {
            return (Base::Installed, spelled.to_path_buf());
        }
        (Base::Absolute, spelled.to_path_buf())
    }

    /// Where a path a trace saw belongs: as [`SearchPath::classify_with`], and an absolute path
    /// under the system's own directories (`/usr`, `/lib`, `/etc`, ...: the host compiler, the
    /// loader's libraries, locale data) is the installation's (checked once per process), not
    /// the project's.
    pub(crate) fn classify_observed(
        &self,
        path: &Path,
        canonical: &mut Canonical,
    ) -> (Base, PathBuf) {
        const SYSTEM: &[&str] = &[
            "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/bin", "/sbin",
        ];
        match self.classify_with(path, canonical) {
            (Base::Absolute, rel) if SYSTEM.iter().any(|s| path.starts_with(s)) => {
                (Base::Installed, rel)
            }
            other => other,
        }
    }

    /// Whether GCC counts a file at `path` (absolute, as spelled) a system header: the longest
    /// directory of the merged chain that spells a prefix of it is a system one.
    pub(crate) fn is_system(&self, path: &Path) -> bool {
        self.chain(true)
            .filter(|c| rel_as_spelled(path, &c.path).is_some())
            .max_by_key(|c| c.path.as_os_str().len())
            .is_some_and(|c| c.system)
    }
}

fn raw_user(d: &SearchDir, base: Base, code: char, i: usize) -> Raw<'_> {
    Raw {
        path: &d.path,
        state: d.state,
        base,
        prefix: PathBuf::new(),
        code: format!("{code}{i}"),
    }
}

/// GCC's `remove_duplicates`: keeps the directories of `raw` that exist, are directories, are not
/// in `system` and not earlier in this chain, and (the last one) are not `next`, the following
/// chain's first. Records each directory's fate in `shape`.
fn merge(
    raw: Vec<Raw<'_>>,
    system: &[DirState],
    next: Option<DirState>,
    is_system_chain: bool,
    shape: &mut Vec<String>,
) -> Vec<(ChainDir, DirState)> {
    let mut kept: Vec<(ChainDir, DirState)> = Vec::new();
    let count = raw.len();
    for (index, entry) in raw.into_iter().enumerate() {
        let fate = match entry.state {
            DirState::Missing => Fate::Missing,
            DirState::NotDir => Fate::NotDir,
            id @ DirState::Dir { .. } => {
                if system.contains(&id) {
                    Fate::DuplicatesSystem
                } else if kept.iter().any(|(_, k)| *k == id) {
                    Fate::Duplicate
                } else if index + 1 == count && next == Some(id) {
                    Fate::DuplicatesNext
                } else {
                    Fate::Kept
                }
            }
        };
        shape.push(format!("{}{}", entry.code, fate.code()));
        if fate == Fate::Kept {
            let system_header = is_system_chain;
            kept.push((
                ChainDir {
                    path: entry.path.to_path_buf(),
                    base: entry.base,
                    prefix: entry.prefix,
                    system: system_header,
                },
                entry.state,
            ));
        }
    }
    kept
}

/// Canonical paths, remembered per directory: a file's is its directory's joined with its name
/// (a file that is itself a symlink is resolved on its own).
#[derive(Debug, Default)]
pub(crate) struct Canonical {
    dirs: std::collections::HashMap<PathBuf, PathBuf>,
}

impl Canonical {
    /// The canonical form of a directory (itself when it cannot be resolved).
    pub(crate) fn of_dir(&mut self, dir: &Path) -> PathBuf {
        if let Some(known) = self.dirs.get(dir) {
            return known.clone();
        }
        let resolved = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        self.dirs.insert(dir.to_path_buf(), resolved.clone());
        resolved
    }

    /// The canonical form of a file.
    pub(crate) fn of_file(&mut self, file: &Path) -> PathBuf {
        let is_link = std::fs::symlink_metadata(file).is_ok_and(|m| m.file_type().is_symlink());
        match (file.parent(), file.file_name()) {
            (Some(dir), Some(name)) if !is_link => self.of_dir(dir).join(name),
            _ => std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf()),
        }
    }
}

/// `spelled` with `dir` and the separator after it cut off, byte for byte (`Path::strip_prefix`
/// would drop `.` components, which the compiler keeps).
pub(crate) fn rel_as_spelled(spelled: &Path, dir: &Path) -> Option<PathBuf> {
    let s = spelled.as_os_str().as_bytes();
    let d = dir.as_os_str().as_bytes();
    let d = d.strip_suffix(b"/").unwrap_or(d);
    let rest = s.strip_prefix(d)?.strip_prefix(b"/")?;
    let rest = rest
        .iter()
        .position(|&b| b != b'/')
        .map_or(rest, |n| &rest[n..]);
    (!rest.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(rest)))
}

/// `dir` and `rel` joined as the compiler joins them: `dir/rel`, with nothing normalised.
pub(crate) fn join(dir: &Path, rel: &Path) -> PathBuf {
    if dir.as_os_str().is_empty() {
        return rel.to_path_buf();
    }
    if rel.as_os_str().is_empty() {
        return dir.to_path_buf();
    }
    dir.join(rel)
}

/// The directory part of a relative name (`a/b/x.h` -> `a/b`, `x.h` -> ``).
pub(crate) fn parent_rel(rel: &Path) -> PathBuf {
    let bytes = rel.as_os_str().as_bytes();
    match bytes.iter().rposition(|&b| b == b'/') {
        Some(n) => PathBuf::from(OsStr::from_bytes(&bytes[..n])),
        None => PathBuf::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(state: DirState, path: &str) -> SearchDir {
        SearchDir {
            spelled: path.into(),
            path: path.into(),
            state,
        }
    }

    const fn id(ino: u64) -> DirState {
        DirState::Dir { dev: 1, ino }
    }

    fn system_dirs() -> Arc<SystemDirs> {
        Arc::new(SystemDirs {
            toolkit_root: "/tk".into(),
            toolkit_top: "/tk".into(),
            toolkit_include: vec![SystemDir {
                path: "/tk/include".into(),
                state: id(100),
            }],
            toolkit_system: vec![SystemDir {
                path: "/tk/include/cccl".into(),
                state: id(101),
            }],
            installed: vec![
                SystemDir {
                    path: "/usr/include/c++/12".into(),
                    state: id(200),
                },
                SystemDir {
                    path: "/usr/include".into(),
                    state: id(201),
                },
            ],
            forced: vec!["cuda_runtime.h".into()],
        })
    }

    fn order(s: &SearchPath, quoted: bool) -> Vec<String> {
        s.chain(quoted)
            .map(|c| c.path.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_directory_given_by_i_and_isystem_is_searched_only_where_the_system_chain_has_it() {
        // `-I A -isystem B -isystem A`: GCC drops A from the -I chain.
        let user = UserSearch {
            bracket: vec![dir(id(1), "/p/A")],
            bracket_command: 1,
            system: vec![dir(id(2), "/p/B"), dir(id(1), "/p/A")],
            system_command: 2,
            ..UserSearch::default()
        };
        let s = SearchPath::new(Path::new("/w"), None, &user, system_dirs());
        assert_eq!(
            order(&s, false),
            [
                "/tk/include",
                "/p/B",
                "/p/A",
                "/tk/include/cccl",
                "/usr/include/c++/12",
                "/usr/include"
            ]
        );
        assert!(s.shape.contains("i0s"), "{}", s.shape);
        assert!(
            s.is_system(Path::new("/p/A/x.h")),
            "found in the system chain"
        );
    }

    #[test]
    fn missing_duplicate_and_joined_directories_are_dropped_as_gcc_drops_them() {
        let user = UserSearch {
            quote: vec![dir(id(5), "/q"), dir(id(3), "/p/i2")],
            bracket: vec![
                dir(DirState::Missing, "/p/gone"),
                dir(DirState::NotDir, "/p/file"),
                dir(id(3), "/p/i2"),
                dir(id(3), "/p/i2-again"),
            ],
            bracket_command: 4,
            system: vec![dir(id(201), "/usr/include")],
            system_command: 1,
            after: vec![dir(id(7), "/late")],
            ..UserSearch::default()
        };
        let s = SearchPath::new(Path::new("/w"), None, &user, system_dirs());
        assert_eq!(
            order(&s, true),
            [
                "/q",
                "/p/i2",
                "/tk/include",
                "/usr/include",
                "/tk/include/cccl",
                "/usr/include/c++/12",
                "/late"
            ],
            "the -isystem /usr/include keeps its early place and the built-in one goes; the last \
             -iquote directory is the -I chain's first, and goes"
        );
        for code in ["i0m", "i1f", "i2k", "i3d", "b1d", "q0k", "q1n"] {
            assert!(
                s.shape.split(' ').any(|c| c == code),
                "{code} in {}",
                s.shape
            );
        }
        // The last -iquote directory is the -I chain's first: dropped.
        let user = UserSearch {
            quote: vec![dir(id(3), "/p/i2")],
            bracket: vec![dir(id(3), "/p/i2")],
            bracket_command: 1,
            ..UserSearch::default()
        };
        let s = SearchPath::new(Path::new("/w"), None, &user, system_dirs());
        assert!(s.shape.contains("q0n"), "{}", s.shape);
    }

    #[test]
    fn a_header_belongs_to_the_most_specific_directory_spelling_it_and_keeps_its_dot_dots() {
        let user = UserSearch {
            bracket: vec![dir(id(1), "/p"), dir(id(2), "/p/src/include")],
            bracket_command: 2,
            ..UserSearch::default()
        };
        let s = SearchPath::new(Path::new("/w"), Some("/p/src".into()), &user, system_dirs());
        assert_eq!(
            s.classify(Path::new("/p/src/include/tile.cuh")),
            (Base::Include(1), PathBuf::from("tile.cuh"))
        );
        assert_eq!(
            s.classify(Path::new("/p/src/../common/p.cuh")),
            (Base::SourceDir, PathBuf::from("../common/p.cuh")),
            "a header reached with `..` from the source stays relative to the source"
        );
        assert_eq!(
            s.classify(Path::new("/elsewhere/x.h")),
            (Base::Absolute, PathBuf::from("/elsewhere/x.h"))
        );
    }

    #[test]
    fn parents_and_joins_keep_the_bytes() {
        assert_eq!(parent_rel(Path::new("a/b/x.h")), PathBuf::from("a/b"));
        assert_eq!(parent_rel(Path::new("x.h")), PathBuf::new());
        assert_eq!(
            join(Path::new("/d"), Path::new("../x.h")),
            PathBuf::from("/d/../x.h")
        );
    }
}
