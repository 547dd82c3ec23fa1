//! Content identity (blake3) of files, trees, toolchains, environment and Python wheels, with a
//! manifest whose diff explains staleness.
//!
//! A JIT cache decides whether a compiled artifact is still valid by comparing the fingerprint of
//! its inputs with the one stored beside it. This crate computes those fingerprints by content,
//! never by mtime, and says in words what changed:
//!
//! - [`hash_file`] and [`hash_tree`]: blake3 of a file, and of a tree walked in sorted order with
//!   paths relative to its root, kinds and exec bits included.
//! - [`StatCache`]: revalidates an unchanged tree with one `stat` per file, with git's rule for
//!   racy timestamps.
//! - [`tool_identity`] with [`IdentityCache`], [`wheel_identity`], [`python_identity`]: the
//!   compiler, the installed Python distributions, the interpreter ABI.
//! - [`Manifest`]: named [`Component`]s (see its naming convention); [`diff`] lists [`Change`]s
//!   that read like cargo's dirty reasons: "source `include/tile.cuh` changed (blake3 1f2e.. ->
//!   9a0b..)".
//!
//! # Guarantees
//! - Digests depend only on content, relative paths, entry kinds and exec bits: a tree copied to
//!   another absolute path with new mtimes hashes the same; content replaced under an older mtime
//!   hashes differently; `touch` changes nothing.
//! - Every hash input is framed (length-prefixed, domain-separated) and mixes in
//!   [`FORMAT_VERSION`]. Change an input, bump the version.
//! - A file is read with `read(2)` between two `fstat`s; if size, mtime or ctime moved it is
//!   re-hashed, and reported as [`ErrorKind::ChangedWhileHashing`] after three attempts.
//! - A FIFO, socket or device is reported by path and never opened.
//! - Paths are resolved, and files opened, by the calling thread; only reading and hashing run on
//!   rayon's threads. A caller in a private mount namespace (or with its own working directory
//!   after `unshare`) therefore hashes what it sees, not what the worker threads would see.
//! - [`StatCache::save`] and [`IdentityCache::save_if_changed`] write a temp file beside the
//!   target, fsync it, rename it over the target and fsync the directory: a concurrent reader sees
//!   the old or the new cache, and after return the new one survives a crash (on local
//!   filesystems that honour fsync: ext4, xfs, btrfs). A missing or corrupt cache loads as empty.
//!
//! # Limitations
//! - The stat caches trust `(device, inode, size, mtime_ns, ctime_ns)` for files older than two
//!   seconds; a tool that rewrites a file and forges both mtime and ctime (only possible by
//!   changing the system clock) defeats them. Use them only where a full hash is expensive.
//! - Under [`SymlinkPolicy::Follow`] a symlink's target content is hashed but its target path is
//!   not, so retargeting a link to an identical file changes nothing.
//! - Empty directories do not contribute to a tree's digest (as in git).
//! - Stat cache entries of deleted files stay until [`StatCache::retain`] drops them.
//! - Files are read with `read(2)`, never memory-mapped (a file truncated while mapped would kill
//!   the process with `SIGBUS`), which costs one copy per byte.
//! - Revalidating a tree costs one `statx` per file and directory; the walk itself is sequential.
//!
//! # Example
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use fingerprint::{diff, Manifest, TreeOptions};
//!
//! let dir = tempfile::tempdir()?;
//! std::fs::create_dir(dir.path().join("include"))?;
//! std::fs::write(dir.path().join("include/tile.cuh"), "#define TILE 64\n")?;
//!
//! let fingerprint = |flags: &[&str]| -> Result<Manifest, fingerprint::Error> {
//!     let mut m = Manifest::new();
//!     m.insert_tree("header:include", &dir.path().join("include"), &TreeOptions::default(), None)?;
//!     m.insert_list("flags", &flags.iter().map(|s| s.to_string()).collect::<Vec<_>>());
//!     m.insert_env("NVCC_APPEND_FLAGS");
//!     Ok(m)
//! };
//! let old = fingerprint(&["-arch=sm_90"])?;
//! std::fs::write(dir.path().join("include/tile.cuh"), "#define TILE 128\n")?;
//! let new = fingerprint(&["-arch=sm_90", "-O3"])?;
//!
//! assert_ne!(old.digest(), new.digest());
//! let reasons: Vec<String> = diff(&old, &new).iter().map(|c| c.to_string()).collect();
//! assert_eq!(reasons[0], "flag list `flags` changed: added `-O3`");
//! assert!(reasons[2].starts_with("header `include/tile.cuh` changed (blake3 "));
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod diff;
mod digest;
mod error;
mod file;
mod ignore;
mod manifest;
mod path_text;
mod persist;
mod python;
mod stat_cache;
mod toolchain;
mod tree;
mod wheel;

pub use diff::{diff, Change, FORMAT_VERSION_COMPONENT};
pub use digest::{Digest, ParseDigestError, FORMAT_VERSION};
pub use error::{Error, ErrorKind};
pub use file::hash_file;
pub use ignore::glob_match;
pub use manifest::{Component, Manifest};
pub use python::{python_identity, PythonIdentity};
pub use stat_cache::StatCache;
pub use toolchain::{tool_identity, IdentityCache, ToolIdentity};
pub use tree::{
    hash_tree, EntryKind, SymlinkPolicy, TreeComponents, TreeDigest, TreeOptions, DEFAULT_IGNORES,
};
pub use wheel::{parse_record, wheel_identity, RecordRow, WheelIdentity};
