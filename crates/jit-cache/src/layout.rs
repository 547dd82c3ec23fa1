//! The cache root: where it is, whether it is safe, and where each kind of file lives in it.
//!
//! ```text
//! <root>/v1/                         the format version; a new format gets a new directory
//!   entries/<k0k1>/<key>/<variant>/  one published entry: the artifact, then meta.json
//!   slots/<slot>.json                each slot's most recent manifest (explains rebuilds)
//!   failures/<key>.json              the last compile failure of a key, with its inputs
//!   locks/<00..ff>.lock              256 lock files, chosen by the key's first byte: a fixed set
//!   staging/                         builders' staging directories (durable-fs temp names)
//!   trash/                           entries moved aside by eviction, verify or replacement
//!   state/                           the stat cache and toolchain identity cache, per host
//! ```

use crate::error::{Error, Result};
use fingerprint::Digest;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The directory of the current on-disk format inside the root. Bump it when the layout or
/// `meta.json` changes incompatibly: old entries are then simply not seen.
pub const FORMAT_DIR: &str = "v1";

/// How the root may be shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RootMode {
    /// Owned by the current user, mode 0700, writable by nobody else. The default.
    Private,
    /// A team cache: a group-owned, setgid directory (mode 2770) shared by one group; never
    /// writable by others.
    Team,
}

/// The resolved places inside a cache root.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) base: PathBuf,
    pub(crate) mode: RootMode,
}

const SUBDIRS: [&str; 7] = [
    "entries", "slots", "failures", "locks", "staging", "trash", "state",
];

impl Layout {
    /// Opens (creating when missing) a root, refusing one that is not safe to use.
    pub(crate) fn open(root: &Path, mode: RootMode) -> Result<Layout> {
        let dir_mode = match mode {
            RootMode::Private => 0o700,
            RootMode::Team => 0o2770,
        };
        if std::fs::symlink_metadata(root).is_err() {
            durable_fs::create_dir_all_durable(root, dir_mode)?;
        }
        check_root(root, mode)?;
        let base = root.join(FORMAT_DIR);
        let layout = Layout {
            base: base.clone(),
            mode,
        };
        for sub in std::iter::once(base.clone()).chain(SUBDIRS.iter().map(|s| base.join(s))) {
            layout.ensure_dir(&sub)?;
        }
        Ok(layout)
    }

    /// Creates a directory inside the root durably when it is missing, refuses a symlink or file
    /// planted in its place, and in a team cache gives it exactly mode 2770 (the umask would
    /// otherwise take the group's write bit, and the group could not publish into it).
    pub(crate) fn ensure_dir(&self, dir: &Path) -> Result<()> {
        if std::fs::symlink_metadata(dir).is_err() {
            durable_fs::create_dir_all_durable(dir, self.dir_mode())?;
            if self.mode == RootMode::Team {
                let mut created = Some(dir);
                while let Some(d) = created.filter(|d| d.starts_with(&self.base)) {
                    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o2770))
                        .map_err(|e| Error::io("chmod team directory", d, e))?;
                    created = d.parent();
                }
            }
        }
        require_real_dir(dir)
    }

    pub(crate) fn dir(&self, sub: &str) -> PathBuf {
        self.base.join(sub)
    }

    pub(crate) fn key_dir(&self, key: &Digest) -> PathBuf {
        let hex = key.to_hex();
        self.base.join("entries").join(&hex[..2]).join(hex)
    }

    pub(crate) fn entry_dir(&self, key: &Digest, variant: &Digest) -> PathBuf {
        self.key_dir(key).join(variant_dir_name(variant))
    }

    pub(crate) fn slot_file(&self, slot: &Digest) -> PathBuf {
        self.base
            .join("slots")
            .join(format!("{}.json", slot.to_hex()))
    }

    pub(crate) fn failure_file(&self, key: &Digest) -> PathBuf {
        self.base
            .join("failures")
            .join(format!("{}.json", key.to_hex()))
    }

    /// One of 256 lock files, chosen by the key's first byte: lock files never grow in number,
    /// and are never deleted (two holders must never lock two different inodes).
    pub(crate) fn lock_file(&self, key: &Digest) -> PathBuf {
        let hex = key.to_hex();
        self.base.join("locks").join(format!("{}.lock", &hex[..2]))
    }

    pub(crate) fn dir_mode(&self) -> u32 {
        match self.mode {
            RootMode::Private => 0o700,
            RootMode::Team => 0o2770,
        }
    }
}

/// The directory name of a variant: its digest's first 32 hex digits (128 bits).
pub(crate) fn variant_dir_name(variant: &Digest) -> String {
    variant.to_hex()[..32].to_string()
}

/// The default root: `$JIT_CACHE_DIR`, else `$XDG_CACHE_HOME/jit-cache`, else `~/.cache/jit-cache`.
pub fn default_root() -> Option<PathBuf> {
    let non_empty = |var: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    non_empty("JIT_CACHE_DIR")
        .or_else(|| non_empty("XDG_CACHE_HOME").map(|d| d.join("jit-cache")))
        .or_else(|| non_empty("HOME").map(|h| h.join(".cache").join("jit-cache")))
}

fn require_real_dir(path: &Path) -> Result<()> {
    let meta = std::fs::symlink_metadata(path)
        .map_err(|e| Error::io("inspect cache directory", path, e))?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(Error::UnsafeRoot {
            path: path.to_path_buf(),
            reason: "it is not a real directory (a symlink or a file was planted there); remove it"
                .into(),
        });
    }
    Ok(())
}

fn check_root(root: &Path, mode: RootMode) -> Result<()> {
    require_real_dir(root)?;
    let meta =
        std::fs::symlink_metadata(root).map_err(|e| Error::io("inspect cache root", root, e))?;
    let perms = meta.permissions().mode();
    let unsafe_root = |reason: String| {
        Err(Error::UnsafeRoot {
            path: root.to_path_buf(),
            reason,
        })
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if perms & 0o002 != 0 {
        return unsafe_root(format!(
            "it is writable by every user (mode {:o}); a shared world-writable cache lets anyone plant \
             artifacts. Use a private root, or a team root (group-owned, chmod 2770)",
            perms & 0o7777
        ));
    }
    match mode {
        RootMode::Private => {
            if meta.uid() != euid {
                return unsafe_root(format!(
                    "it is owned by uid {}, not by you (uid {euid}); use your own root or a team root",
                    meta.uid()
                ));
            }
            if perms & 0o020 != 0 {
                return unsafe_root(format!(
                    "it is group-writable (mode {:o}); open it as a team cache (RootMode::Team) or chmod 700",
                    perms & 0o7777
                ));
            }
        }
        RootMode::Team => {
            if perms & 0o2000 == 0 || perms & 0o070 != 0o070 {
                return unsafe_root(format!(
                    "a team cache must be a group-owned setgid directory with mode 2770 (it has {:o})",
                    perms & 0o7777
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_world_writable_or_foreign_root_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("cache");
        std::fs::create_dir(&root).expect("mkdir");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = Layout::open(&root, RootMode::Private).expect_err("a 0777 root must be refused");
        assert!(
            err.to_string().contains("writable by every user"),
            "reason given: {err}"
        );
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        Layout::open(&root, RootMode::Private).expect("a 0700 root of ours is fine");
        let err = Layout::open(&root, RootMode::Team).expect_err("a team root needs setgid 2770");
        assert!(err.to_string().contains("2770"), "{err}");
    }

    #[test]
    fn a_symlinked_root_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let err =
            Layout::open(&link, RootMode::Private).expect_err("a symlinked root must be refused");
        assert!(err.to_string().contains("not a real directory"), "{err}");
    }
}
