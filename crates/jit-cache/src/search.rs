//! The compiler's search path for one request, in the order the preprocessor uses it, and the
//! places ("bases") a recorded header or absence is relative to.
//!
//! nvcc preprocesses each pass with the host compiler (`gcc -E -x c++`), so GCC's rules decide
//! what is read. For `#include "x"` GCC tries the including file's directory, then the `-iquote`
//! directories, then the bracket chain; for `#include <x>` only the bracket chain: the `-I`
//! directories (host-compiler `-I`s given through `-Xcompiler` first, then nvcc's, then `CPATH`),
//! the toolkit's include directory (nvcc adds it as the last `-I`), the `-isystem` directories
//! (then `CPLUS_INCLUDE_PATH`), the toolkit's CCCL directory (nvcc's last `-isystem`), and the host
//! compiler's built-in directories. `#include_next` continues after the directory that resolved
//! the current file. A forced include (`-include x`, and nvcc's own `cuda_runtime.h`) is searched
//! first in the working directory, then like `#include "x"`.
//!
//! Project directories (the source's, the working directory, `-iquote`, `-I`, `-isystem`) are
//! the caller's and may change between two requests: headers and absences there are recorded
//! relative to them and checked on every hit. The toolkit and the host compiler's built-in
//! directories change with an installation: their headers are checked once per process.

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
    /// The `-I` directory at this index (in search order).
    Include(u32),
    /// The `-isystem` directory at this index (in search order).
    System(u32),
    /// The forced include (`-include /abs/x.h`) at this index, given by absolute path: the
    /// record's name is empty, and each request checks its own file.
    Forced(u32),
    /// A project file outside every search directory; the path is absolute.
    Absolute,
    /// The toolkit's root (above nvcc's `bin`).
    Toolkit,
    /// One of the host compiler's built-in directories; the path is absolute.
    Installed,
}

impl Base {
    /// Whether files here belong to the caller (checked on every hit) rather than to an
    /// installation (checked once per process).
    pub(crate) fn is_project(self) -> bool {
        !matches!(self, Base::Toolkit | Base::Installed)
    }
}

/// The directories of the toolkit and host compiler, the same for every request of a toolchain.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SystemDirs {
    /// The toolkit's root, canonical.
    pub(crate) toolkit_root: PathBuf,
    /// nvcc's `-I` directory (after the caller's `-I`s).
    pub(crate) toolkit_include: Vec<PathBuf>,
    /// nvcc's `-isystem` directories (after the caller's `-isystem`s).
    pub(crate) toolkit_system: Vec<PathBuf>,
    /// The host compiler's built-in directories, in its order, as it lists them (canonicalised
    /// only when a miss classifies a header: a hit never needs them).
    pub(crate) installed: Vec<PathBuf>,
    /// Headers nvcc itself forces into every `.cu` translation unit.
    pub(crate) forced: Vec<PathBuf>,
}

/// The search path of one request: absolute directories, spelled as the compiler receives them
/// (never normalised: a `..` after a symlink is resolved by the kernel, as the compiler's is).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SearchPath {
    pub(crate) working_dir: PathBuf,
    /// The source's directory (None for text sources, compiled from a private copy).
    pub(crate) source_dir: Option<PathBuf>,
    pub(crate) quote: Vec<PathBuf>,
    pub(crate) include: Vec<PathBuf>,
    pub(crate) system: Vec<PathBuf>,
    /// Forced includes (`-include`), as given, after nvcc's own.
    pub(crate) forced: Vec<PathBuf>,
    pub(crate) dirs: Arc<SystemDirs>,
}

/// One directory of the search chain: its path, and its base when it is a project directory.
#[derive(Debug, Clone)]
pub(crate) struct ChainDir<'a> {
    pub(crate) path: &'a Path,
    pub(crate) base: Option<Base>,
}

impl SearchPath {
    /// The directory a base stands for (empty for bases whose paths are absolute).
    pub(crate) fn dir_of(&self, base: Base) -> Option<&Path> {
        match base {
            Base::SourceDir => self.source_dir.as_deref(),
            Base::WorkingDir => Some(&self.working_dir),
            Base::Quote(i) => self.quote.get(i as usize).map(PathBuf::as_path),
            Base::Include(i) => self.include.get(i as usize).map(PathBuf::as_path),
            Base::System(i) => self.system.get(i as usize).map(PathBuf::as_path),
            Base::Forced(i) => self
                .forced
                .get(i as usize)
                .filter(|f| f.is_absolute())
                .map(PathBuf::as_path),
            Base::Toolkit => Some(&self.dirs.toolkit_root),
            Base::Absolute | Base::Installed => Some(Path::new("")),
        }
    }

    /// The path a record names: its base's directory joined with `rel`, never normalised.
    pub(crate) fn path_of(&self, base: Base, rel: &Path) -> Option<PathBuf> {
        Some(join(self.dir_of(base)?, rel))
    }

    /// The search chain after the including file's directory: the `-iquote` directories (for a
    /// quoted include), then the bracket chain.
    pub(crate) fn chain(&self, quoted: bool) -> Vec<ChainDir<'_>> {
        fn project(dirs: &[PathBuf], make: fn(u32) -> Base) -> impl Iterator<Item = ChainDir<'_>> {
            dirs.iter().enumerate().map(move |(i, d)| ChainDir {
                path: d,
                base: Some(make(i as u32)),
            })
        }
        fn other(dirs: &[PathBuf]) -> impl Iterator<Item = ChainDir<'_>> {
            dirs.iter().map(|d| ChainDir {
                path: d,
                base: None,
            })
        }
        let mut chain = Vec::new();
        if quoted {
            chain.extend(project(&self.quote, Base::Quote));
        }
        chain.extend(project(&self.include, Base::Include));
        chain.extend(other(&self.dirs.toolkit_include));
        chain.extend(project(&self.system, Base::System));
        chain.extend(other(&self.dirs.toolkit_system));
        chain.extend(other(&self.dirs.installed));
        chain
    }

    /// [`SearchPath::classify_with`] with a cache of its own (tests).
    #[cfg(test)]
    pub(crate) fn classify(&self, spelled: &Path) -> (Base, PathBuf) {
        self.classify_with(spelled, &mut Canonical::default())
    }

    /// Where a file the compiler read belongs, from the path it was read under: the most
    /// specific project directory that spells a prefix of it, else the toolkit or an installed
    /// directory (by canonical path), else an absolute project path. Canonical paths come
    /// through `canonical`, shared by every file of one compile, so its hundreds of headers cost
    /// a `realpath` per directory, not one each.
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
            .map(|d| (Base::SourceDir, d))
            .chain(
                self.quote
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (Base::Quote(i as u32), d)),
            )
            .chain(
                self.include
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (Base::Include(i as u32), d)),
            )
            .chain(
                self.system
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (Base::System(i as u32), d)),
            );
        let best = project
            .filter_map(|(base, dir)| Some((base, dir, rel_as_spelled(spelled, dir)?)))
            .max_by_key(|(_, dir, _)| dir.as_os_str().len());
        if let Some((base, _, rel)) = best {
            return (base, rel);
        }
        let canonical_dirs = canonical;
        let canonical = canonical_dirs.of_file(spelled);
        if let Ok(rel) = canonical.strip_prefix(&self.dirs.toolkit_root) {
            return (Base::Toolkit, rel.to_path_buf());
        }
        let installed = &self.dirs.installed;
        if installed
            .iter()
            .any(|d| canonical.starts_with(canonical_dirs.of_dir(d)))
        {
            return (Base::Installed, spelled.to_path_buf());
        }
        (Base::Absolute, spelled.to_path_buf())
    }
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
fn rel_as_spelled(spelled: &Path, dir: &Path) -> Option<PathBuf> {
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

    fn search() -> SearchPath {
        SearchPath {
            working_dir: "/w".into(),
            source_dir: Some("/p/src".into()),
            quote: vec!["/p/q".into()],
            include: vec!["/p".into(), "/p/src/include".into()],
            system: vec!["/s".into()],
            forced: vec![],
            dirs: Arc::new(SystemDirs {
                toolkit_root: "/nonexistent-tk".into(),
                toolkit_include: vec!["/nonexistent-tk/include".into()],
                toolkit_system: vec![],
                installed: vec!["/nonexistent-usr/include".into()],
                forced: vec![],
            }),
        }
    }

    #[test]
    fn a_header_belongs_to_the_most_specific_directory_spelling_it_and_keeps_its_dot_dots() {
        let s = search();
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
    fn the_chain_is_in_gcc_order() {
        let s = search();
        let quoted: Vec<_> = s.chain(true).iter().map(|c| c.path.to_path_buf()).collect();
        let want: Vec<PathBuf> = [
            "/p/q",
            "/p",
            "/p/src/include",
            "/nonexistent-tk/include",
            "/s",
            "/nonexistent-usr/include",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(quoted, want);
        assert_eq!(s.chain(false).len(), want.len() - 1, "no -iquote for <x>");
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
