//! Hashing a directory tree: a sorted walk with relative paths, file type and exec bit included.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::digest::{Digest, Framed};
use crate::error::{Error, ErrorKind};
use crate::file::{hash_opened, open_regular, type_name, Follow, Hashed, StatTuple, TypeChecked};
use crate::ignore::glob_match;
use crate::path_text::{escape_bytes, escape_path};
use crate::stat_cache::StatCache;

/// How many files a walk holds open at once while hashing.
const OPEN_BATCH: usize = 256;

/// Names ignored by [`TreeOptions::default`]: version-control metadata, Python bytecode and
/// editor temporaries (`*~`, vim's `.*.swp`, emacs's `#*#`).
pub const DEFAULT_IGNORES: &[&str] = &[".git", "__pycache__", "*.pyc", "*~", ".*.swp", "#*#"];

/// What to do with a symbolic link found in a tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SymlinkPolicy {
    /// Hash what the link points to, as the compiler would see it: a link to a file is hashed as
    /// that file, a link to a directory is walked under the link's name. A link that leads back
    /// into a directory being walked is reported as [`ErrorKind::SymlinkLoop`]. A dangling link
    /// is hashed as under [`SymlinkPolicy::Record`].
    #[default]
    Follow,
    /// Hash the link's target string and never follow it.
    Record,
}

/// How [`crate::Manifest::insert_tree`] records a tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TreeComponents {
    /// One component for the tree's digest under `name`, plus one per file under
    /// `name/relpath`, so that [`crate::diff`] can say which file changed.
    #[default]
    PerFile,
    /// Only the tree's digest under `name` (for large third-party trees such as a CUDA include
    /// directory, where a per-file list would bloat the manifest).
    TreeOnly,
}

/// Options of a tree walk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeOptions {
    /// Names to skip, matched against each path component: `*` matches any run of characters,
    /// `?` one character. Defaults to [`DEFAULT_IGNORES`].
    pub ignore: Vec<String>,
    /// The symlink policy.
    pub symlinks: SymlinkPolicy,
    /// What [`crate::Manifest::insert_tree`] records.
    pub components: TreeComponents,
}

impl Default for TreeOptions {
    fn default() -> Self {
        TreeOptions {
            ignore: DEFAULT_IGNORES.iter().map(|s| (*s).to_owned()).collect(),
            symlinks: SymlinkPolicy::default(),
            components: TreeComponents::default(),
        }
    }
}

impl TreeOptions {
    /// Adds an ignore pattern to the defaults.
    pub fn ignore(mut self, pattern: impl Into<String>) -> Self {
        self.ignore.push(pattern.into());
        self
    }

    /// Sets the symlink policy.
    pub fn symlinks(mut self, policy: SymlinkPolicy) -> Self {
        self.symlinks = policy;
        self
    }

    /// Sets what a manifest records for the tree.
    pub fn components(mut self, components: TreeComponents) -> Self {
        self.components = components;
        self
    }

    fn ignored(&self, name: &OsStr) -> bool {
        let name = name.as_bytes();
        self.ignore.iter().any(|p| glob_match(p.as_bytes(), name))
    }
}

/// The kind of an entry in a tree, hashed with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EntryKind {
    /// A regular file without any execute bit.
    File,
    /// A regular file with an execute bit.
    Executable,
    /// A symlink hashed by its target string.
    Symlink,
}

impl EntryKind {
    /// git's mode for the kind: "100644", "100755" or "120000".
    pub fn git_mode(self) -> &'static str {
        match self {
            EntryKind::File => "100644",
            EntryKind::Executable => "100755",
            EntryKind::Symlink => "120000",
        }
    }

    fn code(self) -> u64 {
        match self {
            EntryKind::File => 1,
            EntryKind::Executable => 2,
            EntryKind::Symlink => 3,
        }
    }
}

/// The digest of a tree and of each of its entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeDigest {
    /// The digest of the whole tree.
    pub digest: Digest,
    /// Each entry's path relative to the root (`/`-separated, in the lossless text form: `\` is
    /// written `\\` and each byte that is not UTF-8 `\xNN`) and content digest (for a symlink
    /// under [`SymlinkPolicy::Record`], the digest of its target string), sorted by path bytes.
    pub files: Vec<(String, Digest)>,
    /// `kinds[i]` is the kind of `files[i]`.
    pub kinds: Vec<EntryKind>,
}

enum Item {
    File {
        rel: Vec<u8>,
        abs: PathBuf,
        kind: EntryKind,
        stat: StatTuple,
        follow: Follow,
    },
    Link {
        rel: Vec<u8>,
        target: Vec<u8>,
    },
}

impl Item {
    fn rel(&self) -> &[u8] {
        match self {
            Item::File { rel, .. } | Item::Link { rel, .. } => rel,
        }
    }
}

/// Hashes the tree under `root`.
///
/// The walk is deterministic: entries are sorted by their path bytes relative to `root`, and
/// the tree digest frames, for each entry, its relative path bytes (never the absolute path, so a
/// copy elsewhere hashes the same), its kind (file, executable, symlink) and its content digest.
/// mtimes never enter the digest. Directories contribute only through the entries beneath them
/// (an empty directory changes nothing, as in git). Names matching `options.ignore` are skipped
/// with everything beneath them. Non-UTF-8 names are hashed by their bytes.
///
/// A FIFO, socket or device is reported as [`ErrorKind::SpecialFile`] naming its path, and is
/// never opened. Unreadable files and directories are reported with their path.
///
/// With a [`StatCache`], files whose stat tuple matches a trusted entry are not read; the rest
/// are hashed on all cores and recorded. Cache keys are the canonical absolute paths.
pub fn hash_tree(
    root: &Path,
    options: &TreeOptions,
    cache: Option<&mut StatCache>,
) -> Result<TreeDigest, Error> {
    let root = std::fs::canonicalize(root).map_err(|e| Error::io("resolve tree root", root, e))?;
    let meta = std::fs::metadata(&root).map_err(|e| Error::io("stat tree root", &root, e))?;
    if !meta.is_dir() {
        return Err(Error::new("hash tree", &root, ErrorKind::NotADirectory));
    }
    let mut items = Vec::new();
    let mut ancestors = vec![(meta.dev(), meta.ino())];
    walk(&root, &[], &mut ancestors, options, &mut items)?;
    items.sort_by(|a, b| a.rel().cmp(b.rel()));

    // Serve what the cache can; hash the rest in parallel.
    let mut digests: Vec<Option<Digest>> = vec![None; items.len()];
    if let Some(c) = cache.as_deref() {
        for (slot, item) in digests.iter_mut().zip(&items) {
            if let Item::File { abs, stat, .. } = item {
                *slot = c.lookup(&escape_path(abs), stat);
            }
        }
    }
    let todo: Vec<(usize, &Path, Follow)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| match item {
            Item::File { abs, follow, .. } if digests[i].is_none() => {
                Some((i, abs.as_path(), *follow))
            }
            _ => None,
        })
        .collect();
    // Files are opened by this thread (its view of the filesystem is the one that counts, see
    // `open_regular`) in batches that bound the number of open descriptors, and read and hashed
    // on all cores.
    let mut hashed: Vec<(usize, Result<Hashed, Error>)> = Vec::with_capacity(todo.len());
    for batch in todo.chunks(OPEN_BATCH) {
        let mut opened = Vec::with_capacity(batch.len());
        for &(i, abs, follow) in batch {
            opened.push((i, abs, open_regular(abs, follow, TypeChecked::Yes)?));
        }
        hashed.par_extend(
            opened
                .into_par_iter()
                .map(|(i, abs, mut file)| (i, hash_opened(&mut file, abs, &mut |_| {}))),
        );
    }
    let mut cache = cache;
    for (i, result) in hashed {
        let (digest, stat, started) = result?;
        digests[i] = Some(digest);
        if let (Some(c), Item::File { abs, .. }) = (cache.as_deref_mut(), &items[i]) {
            c.record(escape_path(abs), stat, digest, started);
        }
    }

    let mut h = Framed::new("tree");
    h.u64(items.len() as u64);
    let mut files = Vec::with_capacity(items.len());
    let mut kinds = Vec::with_capacity(items.len());
    for (item, digest) in items.iter().zip(digests) {
        let (kind, digest) = match item {
            Item::File { kind, .. } => (*kind, digest),
            Item::Link { target, .. } => (EntryKind::Symlink, Some(Digest::of_bytes(target))),
        };
        let Some(digest) = digest else {
            // Every file slot was filled above or an error returned; keep the walk honest anyway.
            return Err(Error::new(
                "hash tree",
                &root,
                ErrorKind::Io(io::Error::other("internal: an entry was left unhashed")),
            ));
        };
        h.bytes(item.rel()).u64(kind.code()).digest(&digest);
        files.push((escape_bytes(item.rel()), digest));
        kinds.push(kind);
    }
    Ok(TreeDigest {
        digest: h.finish(),
        files,
        kinds,
    })
}

fn kind_of_mode(mode: u32) -> EntryKind {
    if mode & 0o111 != 0 {
        EntryKind::Executable
    } else {
        EntryKind::File
    }
}

fn walk(
    dir: &Path,
    prefix: &[u8],
    ancestors: &mut Vec<(u64, u64)>,
    options: &TreeOptions,
    out: &mut Vec<Item>,
) -> Result<(), Error> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("read directory", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("read directory", dir, e))?;
        let name = entry.file_name();
        if options.ignored(&name) {
            continue;
        }
        let abs = entry.path();
        let mut rel = prefix.to_vec();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name.as_bytes());
        let ft = entry
            .file_type()
            .map_err(|e| Error::io("stat tree entry", &abs, e))?;
        if ft.is_symlink() {
            let record = |rel: Vec<u8>| -> Result<Item, Error> {
                let target =
                    std::fs::read_link(&abs).map_err(|e| Error::io("read symlink", &abs, e))?;
                Ok(Item::Link {
                    rel,
                    target: target.as_os_str().as_bytes().to_vec(),
                })
            };
            if options.symlinks == SymlinkPolicy::Record {
                out.push(record(rel)?);
                continue;
            }
            match std::fs::metadata(&abs) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => out.push(record(rel)?),
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                    return Err(Error::new("follow symlink", &abs, ErrorKind::SymlinkLoop))
                }
                Err(e) => return Err(Error::io("follow symlink", &abs, e)),
                Ok(m) if m.is_dir() => {
                    let id = (m.dev(), m.ino());
                    if ancestors.contains(&id) {
                        return Err(Error::new("follow symlink", &abs, ErrorKind::SymlinkLoop));
                    }
                    ancestors.push(id);
                    walk(&abs, &rel, ancestors, options, out)?;
                    ancestors.pop();
                }
                Ok(m) if m.is_file() => out.push(Item::File {
                    rel,
                    kind: kind_of_mode(m.permissions().mode()),
                    stat: StatTuple::of(&m),
                    abs,
                    follow: Follow::Yes,
                }),
                Ok(m) => {
                    return Err(Error::new(
                        "hash tree entry",
                        &abs,
                        ErrorKind::SpecialFile {
                            file_type: type_name(m.file_type()),
                        },
                    ))
                }
            }
        } else if ft.is_dir() {
            let m = entry
                .metadata()
                .map_err(|e| Error::io("stat tree entry", &abs, e))?;
            ancestors.push((m.dev(), m.ino()));
            walk(&abs, &rel, ancestors, options, out)?;
            ancestors.pop();
        } else if ft.is_file() {
            let m = entry
                .metadata()
                .map_err(|e| Error::io("stat tree entry", &abs, e))?;
            out.push(Item::File {
                rel,
                kind: kind_of_mode(m.permissions().mode()),
                stat: StatTuple::of(&m),
                abs,
                follow: Follow::No,
            });
        } else {
            return Err(Error::new(
                "hash tree entry",
                &abs,
                ErrorKind::SpecialFile {
                    file_type: type_name(ft),
                },
            ));
        }
    }
    Ok(())
}
