//! The cache root: where it is, whether it is safe, and where each kind of file lives in it.
//!
//! ```text
//! <root>/v2/                         the format version; a new format gets a new directory
//!   entries/<k0k1>/<key>/<variant>/  one published entry: the artifact, then meta.json
//!   slots/<slot>.json                each slot's most recent manifest (explains rebuilds)
//!   failures/<key>.json              the last compile failure of a key, with its inputs
//!   locks/dfs-lock-<bucket>.lock     256 lock files (`durable_fs::lock_file_for_key`): a fixed set
//!   staging/                         builders' staging directories (durable-fs temp names)
//!   trash/                           entries moved aside by eviction, verify or replacement
//!   state/                           the stat cache and toolchain identity cache, per host
//! ```

use crate::base::fstype::{FsType, Protocol, Sharing};
use crate::error::{Error, Result};
use crate::storage::staging::Staging;
use durable_fs::{LockGuard, LockMode, Wait};
use fingerprint::Digest;
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The directory of the current on-disk format inside the root. Bump it when the layout or
/// `meta.json` changes incompatibly: old entries are then simply not seen.
pub const FORMAT_DIR: &str = "v2";

/// Every entry's metadata file, written last by the publication step (`publish.rs`); its mtime
/// is also an eviction's mark (`liveness.rs`).
pub(crate) const META_FILE: &str = "meta.json";

/// How many lock files a root has (`durable_fs::lock_file_for_key` buckets): a fixed set, since
/// lock files are never deleted.
const LOCK_BUCKETS: u32 = 256;

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

/// The subdirectories of the format directory, each opened once by [`Layout::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subdir {
    Entries,
    Slots,
    Failures,
    Locks,
    Staging,
    Trash,
    State,
}

impl Subdir {
    const ALL: [Subdir; 7] = [
        Subdir::Entries,
        Subdir::Slots,
        Subdir::Failures,
        Subdir::Locks,
        Subdir::Staging,
        Subdir::Trash,
        Subdir::State,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Subdir::Entries => "entries",
            Subdir::Slots => "slots",
            Subdir::Failures => "failures",
            Subdir::Locks => "locks",
            Subdir::Staging => "staging",
            Subdir::Trash => "trash",
            Subdir::State => "state",
        }
    }
}

/// The resolved places inside a cache root.
///
/// Besides paths, a layout holds each subdirectory open (`O_DIRECTORY | O_NOFOLLOW`, relative to
/// the root's own descriptor), checked once at open. Everything that removes or moves things
/// (sweep, clear, eviction, trash) works relative to those descriptors, so a team member who
/// later swaps `trash` or `slots` for a symlink cannot make another member's maintenance touch
/// anything outside the root: the descriptors still name the directories that were checked.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) base: PathBuf,
    pub(crate) mode: RootMode,
    dirs: Arc<OpenDirs>,
    /// The root's filesystem, read once at open.
    pub(crate) fs: FsType,
    /// Whether other hosts may share the root (`fstype.rs`, `liveness.rs`).
    pub(crate) protocol: Protocol,
}

#[derive(Debug)]
struct OpenDirs {
    /// Indexed like [`Subdir::ALL`].
    fds: Vec<OwnedFd>,
    /// Whether `/proc/self/fd/N` names descriptor N here, so that durable-fs functions, which
    /// take paths, can be handed a path pinned to a descriptor.
    via_proc: bool,
}

impl Layout {
    /// Opens (creating when missing) a root, refusing one that is not safe to use.
    pub(crate) fn open(root: &Path, mode: RootMode) -> Result<Layout> {
        let root = &absolute_root(root)?;
        let dir_mode = match mode {
            RootMode::Private => 0o700,
            RootMode::Team => 0o2770,
        };
        let base = root.join(FORMAT_DIR);
        // A root opened before, the common case: its directories are opened by descriptor at
        // once, without the checks by path (`O_NOFOLLOW | O_DIRECTORY` refuses a planted
        // symlink or file as they would). Anything else (a directory missing, planted or
        // unreadable) takes the way that creates what is missing and names what is wrong.
        let opened = open_subdirs(root, &base).ok();
        if opened.is_none() && std::fs::symlink_metadata(root).is_err() {
            durable_fs::create_dir_all_durable(root, durable_fs::DirMode::from_mode(dir_mode))?;
        }
        check_root(root, mode)?;
        let fs = FsType::of(root);
        let mut layout = Layout {
            base: base.clone(),
            mode,
            dirs: Arc::new(OpenDirs {
                fds: Vec::new(),
                via_proc: false,
            }),
            fs,
            protocol: crate::base::fstype::protocol(Sharing::Detect, fs),
        };
        let fds = match opened {
            Some(fds) => fds,
            None => {
                layout.ensure_dir(&base)?;
                for sub in Subdir::ALL {
                    layout.ensure_dir(&base.join(sub.name()))?;
                }
                // The checks above were by path; from here on everything goes through
                // descriptors opened without following symlinks, each the real directory.
                open_subdirs(root, &base)?
            }
        };
        if mode == RootMode::Team {
            make_staging_sticky(&fds[Subdir::Staging as usize]);
        }
        let via_proc = proc_fd_paths_work(&fds[0]);
        if !via_proc && mode == RootMode::Team {
            return Err(Error::UnsafeRoot {
                path: root.to_path_buf(),
                reason: "a team cache works on its directories through descriptors named \
                         /proc/self/fd/N, and /proc is not usable here; mount /proc or use a \
                         private root"
                    .into(),
            });
        }
        layout.dirs = Arc::new(OpenDirs { fds, via_proc });
        Ok(layout)
    }

    /// Applies the caller's choice of protocol (an explicit choice beats detection).
    pub(crate) fn with_sharing(mut self, sharing: Sharing) -> Layout {
        self.protocol = crate::base::fstype::protocol(sharing, self.fs);
        self
    }

    /// Creates a directory inside the root durably when it is missing, refuses a symlink or file
    /// planted in its place, and in a team cache gives it exactly mode 2770 (the umask would
    /// otherwise take the group's write bit, and the group could not publish into it).
    pub(crate) fn ensure_dir(&self, dir: &Path) -> Result<()> {
        if std::fs::symlink_metadata(dir).is_err() {
            durable_fs::create_dir_all_durable(
                dir,
                durable_fs::DirMode::from_mode(self.dir_mode()),
            )?;
            if self.mode == RootMode::Team {
                let mut created = Some(dir);
                while let Some(d) = created.filter(|d| d.starts_with(&self.base)) {
                    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o2770))
                        .map_err(|e| Error::io("chmod team directory", d, e))?;
                    created = d.parent();
                }
            }
        }
        require_real_dir(dir).map(drop)
    }

    /// Creates a directory inside the root as [`Layout::ensure_dir`] does, but without its
    /// flushes: for a batch of publications whose one flush covers them (`durable_fs::StagingBatch`
    /// fsyncs the directories returned, which received the new entries, or `syncfs` covers them).
    /// A directory another process creates meanwhile counts as new: its creator may not have
    /// flushed it yet.
    pub(crate) fn ensure_dir_unflushed(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let mut missing = Vec::new();
        let mut cursor = dir;
        while std::fs::symlink_metadata(cursor).is_err() && cursor.starts_with(&self.base) {
            missing.push(cursor.to_path_buf());
            match cursor.parent() {
                Some(parent) => cursor = parent,
                None => break,
            }
        }
        let mut parents = Vec::with_capacity(missing.len());
        for new in missing.iter().rev() {
            let mut builder = std::fs::DirBuilder::new();
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, self.dir_mode());
            match builder.create(new) {
                Ok(()) => {
                    if self.mode == RootMode::Team {
                        std::fs::set_permissions(new, std::fs::Permissions::from_mode(0o2770))
                            .map_err(|e| Error::io("chmod team directory", new, e))?;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io("create directory", new, e)),
            }
            if let Some(parent) = new.parent() {
                parents.push(parent.to_path_buf());
            }
        }
        require_real_dir(dir)?;
        Ok(parents)
    }

    /// A subdirectory's path, for display and for paths handed to other processes (nvcc).
    pub(crate) fn dir(&self, sub: Subdir) -> PathBuf {
        self.base.join(sub.name())
    }

    /// The descriptor of a subdirectory, opened at [`Layout::open`].
    pub(crate) fn dir_fd(&self, sub: Subdir) -> BorrowedFd<'_> {
        // `open` fills `fds` in the order of `Subdir::ALL`, which is the declaration order.
        self.dirs.fds[sub as usize].as_fd()
    }

    /// A path that names the subdirectory opened at [`Layout::open`] whatever has been renamed
    /// or planted since: `/proc/self/fd/N`. Only for this process's own calls (a child process
    /// has other descriptors) and only while this layout lives.
    pub(crate) fn pinned(&self, sub: Subdir) -> PathBuf {
        self.fd_path(self.dir_fd(sub), &self.base.join(sub.name()))
    }

    /// The `/proc/self/fd/N` path of an open directory, or `fallback` where `/proc` is not
    /// usable (then only in a private root, which nobody else can write).
    pub(crate) fn fd_path(&self, fd: BorrowedFd<'_>, fallback: &Path) -> PathBuf {
        if self.dirs.via_proc {
            PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        } else {
            fallback.to_path_buf()
        }
    }

    /// A path as messages show it: one under a subdirectory's `/proc/self/fd/N` (what
    /// [`Layout::pinned`] gives, meaningless to anyone else) is named under the root instead.
    /// Any other path is returned as it is.
    pub(crate) fn shown(&self, path: &Path) -> PathBuf {
        if self.dirs.via_proc {
            for (sub, fd) in Subdir::ALL.iter().zip(&self.dirs.fds) {
                let pinned = format!("/proc/self/fd/{}", fd.as_raw_fd());
                if let Ok(rest) = path.strip_prefix(&pinned) {
                    return self.base.join(sub.name()).join(rest);
                }
            }
        }
        path.to_path_buf()
    }

    /// The error with every path it names [`shown`](Layout::shown).
    pub(crate) fn shown_error(&self, error: impl Into<Error>) -> Error {
        error.into().map_paths(|p| self.shown(p))
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

    /// The key's lock file: one of [`LOCK_BUCKETS`] files chosen by
    /// `durable_fs::lock_file_for_key`, in the `locks` directory opened at [`Layout::open`].
    /// Lock files never grow in number and are never deleted (two holders must never lock two
    /// different inodes). Builders, eviction, verify and `key_is_being_built` all lock this
    /// path, so they exclude one another.
    ///
    /// In a team root the file is created here, when missing, with mode 0660 whatever the
    /// umask, so that every member can open it read-write (NFS needs a writable descriptor for
    /// `flock`). That step is best effort: `durable_fs::lock` reports any real error.
    pub(crate) fn lock_file(&self, key: &Digest) -> PathBuf {
        let path =
            durable_fs::lock_file_for_key(self.pinned(Subdir::Locks), key.as_bytes(), LOCK_BUCKETS);
        if self.mode == RootMode::Team {
            if let Some(name) = path.file_name() {
                let _ = self.create_team_file(Subdir::Locks, Path::new(name));
            }
        }
        path
    }

    /// Waits for the key's lock as `wait` says.
    pub(crate) fn lock_key(&self, key: &Digest, wait: Wait) -> Result<LockGuard> {
        durable_fs::lock(self.lock_file(key), LockMode::Exclusive, wait)
            .map_err(|e| self.shown_error(e))
    }

    /// Tries once to take the key's lock; `None` while someone else (a builder) holds it.
    pub(crate) fn try_lock_key(&self, key: &Digest) -> Result<Option<LockGuard>> {
        durable_fs::try_lock(self.lock_file(key), LockMode::Exclusive)
            .map_err(|e| self.shown_error(e))
    }

    /// Creates `name` in a subdirectory when missing, mode 0660 whatever the umask (set with
    /// `fchmod` on the new file, never through a path).
    fn create_team_file(&self, sub: Subdir, name: &Path) -> std::io::Result<()> {
        let flags =
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(self.dir_fd(sub), name, flags, Mode::from_raw_mode(0o660)) {
            Ok(fd) => Ok(rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o660))?),
            Err(Errno::EXIST) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens `name` in a subdirectory for appending (relative to its descriptor, never through
    /// a symlink), creating it when missing: in a team root with mode 0660 whatever the umask,
    /// so that every member can append to it.
    pub(crate) fn open_append(&self, sub: Subdir, name: &str) -> std::io::Result<std::fs::File> {
        if self.mode == RootMode::Team {
            self.create_team_file(sub, Path::new(name))?;
        }
        let flags =
            OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(self.dir_fd(sub), name, flags, Mode::from_raw_mode(0o666))?;
        Ok(std::fs::File::from(fd))
    }

    /// Appends `line` and its newline to the log `name` with one `write`: under `O_APPEND` each
    /// lands whole after the others, whereas `writeln!` writes the pieces of its format apart,
    /// and another process's line can land between them. A log is best effort: a line that
    /// cannot be written is lost, never an error.
    pub(crate) fn append_line(&self, sub: Subdir, name: &str, mut line: String) {
        use std::io::Write;
        line.push('\n');
        if let Ok(mut file) = self.open_append(sub, name) {
            let _ = file.write_all(line.as_bytes());
        }
    }

    /// A fresh staging directory for a build, private to this process's user (mode 0700 from
    /// its `mkdir`, whatever the umask) until [`Layout::share_with_team`] opens it to the team
    /// just before its rename: a member who could write another's staging directory could
    /// plant a symlink there for that member's writes, `chmod`s and compiler to follow (issue
    /// 31, item 5). The price: a killed member's leftovers are swept by that member's own next
    /// sweep (or root's), not by the others'.
    ///
    /// In a team root nothing about it is found by a path another member can change: it is made
    /// in the `staging/` opened at [`Layout::open`] (`/proc/self/fd/N`, never `staging/` looked
    /// up again: a member may rename that and plant another), `staging/` is sticky (no member
    /// renames another's directory in it), and everything written into it, by this process or
    /// by the compiler it runs, goes through the directory's own descriptor
    /// ([`Staging::path`] is `/proc/<pid>/fd/N` there, where `/proc` is this process's own).
    ///
    /// Under the shared protocol a heartbeat keeps its mtime fresh while it lives, so that no
    /// other host's sweep takes it for a dead builder's (`liveness.rs`).
    pub(crate) fn new_staging_dir(&self) -> Result<Staging> {
        if self.mode != RootMode::Team {
            let staging = durable_fs::StagingDir::new_private_in(self.dir(Subdir::Staging))?;
            return Ok(Staging::new(staging, self.protocol));
        }
        let staging = durable_fs::StagingDir::new_private_in(self.pinned(Subdir::Staging))
            .map_err(|e| self.shown_error(e))?;
        let shown = self.shown(staging.path());
        Ok(Staging::anchored(staging, self.protocol, shown))
    }

    /// In a team root, just before the rename: every file of an entry (artifact, compiler
    /// record, stored files, `meta.json`) gets mode 0660 and the directory 2770, whatever the
    /// umask, so that every member can read (and, through the 2770 directories, move and
    /// remove) what one member published. Every change is made through the descriptor the
    /// staging directory was opened with when it was made (its path passes through `staging/`,
    /// which any member may rename): each entry is opened relative to it without following a
    /// link, and anything but a file or a directory is refused. The commit's fsyncs come after,
    /// so the modes are as durable as the content.
    pub(crate) fn share_with_team(&self, staging: &Staging) -> Result<()> {
        if self.mode != RootMode::Team {
            return Ok(());
        }
        let op = "share the staging directory with the team";
        let (dir, shown) = (staging.dir_fd(), staging.shown());
        let entries =
            rustix::fs::Dir::read_from(dir).map_err(|e| Error::io(op, shown, e.into()))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(op, shown, e.into()))?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let path = shown.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
            let file = rustix::fs::openat(dir, name, flags, Mode::empty())
                .map_err(|e| Error::io(op, &path, e.into()))?;
            let kind = rustix::fs::fstat(&file)
                .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode))
                .map_err(|e| Error::io(op, &path, e.into()))?;
            let mode = match kind {
                rustix::fs::FileType::RegularFile => 0o660,
                rustix::fs::FileType::Directory => 0o2770,
                _ => {
                    return Err(Error::io(
                        op,
                        &path,
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            "an entry holds only files and directories",
                        ),
                    ))
                }
            };
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))
                .map_err(|e| Error::io(op, &path, e.into()))?;
        }
        rustix::fs::fchmod(dir, Mode::from_raw_mode(0o2770))
            .map_err(|e| Error::io(op, shown, e.into()))
    }

    /// Appends one line to the event log: publications only (a hit never writes).
    pub(crate) fn log_event(&self, event: crate::base::event_log::Event, name: &str, ms: u64) {
        let record = crate::base::event_log::Record {
            at_ms: crate::base::host::now_ms(),
            event,
            name: name.to_string(),
            compile_ms: ms,
        };
        self.append_line(Subdir::State, "events.log", record.line());
    }

    pub(crate) fn dir_mode(&self) -> u32 {
        match self.mode {
            RootMode::Private => 0o700,
            RootMode::Team => 0o2770,
        }
    }
}

/// Opens a directory relative to `at` without following a symlink in its last component.
/// The root spelled absolute, against the working directory at open (lexically: a symlink in
/// it is still checked by [`check_root`]). Every place derived from it (staging, entries, the
/// compile's private directory) is then spelled as the trace of a compile spells it, and a later
/// `chdir` cannot move the root.
pub(crate) fn absolute_root(root: &Path) -> Result<PathBuf> {
    std::path::absolute(root).map_err(|e| Error::io("resolve the cache root", root, e))
}

pub(crate) fn open_dir_nofollow(at: impl AsFd, path: &Path) -> Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(at, path, flags, Mode::empty())
        .map_err(|e| Error::io("open cache directory", path, e.into()))
}

/// The root's format directory's subdirectories ([`Subdir::ALL`] order), each opened without
/// following a symlink, through the root's and the format directory's descriptors.
fn open_subdirs(root: &Path, base: &Path) -> Result<Vec<OwnedFd>> {
    let root_fd = open_dir_nofollow(rustix::fs::CWD, root).map_err(|e| reopen_error(root, e))?;
    let base_fd =
        open_dir_nofollow(&root_fd, Path::new(FORMAT_DIR)).map_err(|e| reopen_error(base, e))?;
    Subdir::ALL
        .iter()
        .map(|sub| {
            open_dir_nofollow(&base_fd, Path::new(sub.name()))
                .map_err(|e| reopen_error(&base.join(sub.name()), e))
        })
        .collect()
}

/// A directory checked by path that cannot be opened as one now was swapped meanwhile.
fn reopen_error(path: &Path, e: Error) -> Error {
    match e {
        Error::Io { ref source, .. } if matches!(source.raw_os_error(), Some(code) if code == Errno::LOOP.raw_os_error() || code == Errno::NOTDIR.raw_os_error()) => {
            Error::UnsafeRoot {
                path: path.to_path_buf(),
                reason: "it is not a real directory (a symlink or a file was planted); remove it"
                    .into(),
            }
        }
        other => other,
    }
}

/// Whether `/proc/self/fd/N` leads to descriptor N's directory here.
fn proc_fd_paths_work(fd: &OwnedFd) -> bool {
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    match (rustix::fs::fstat(fd), rustix::fs::stat(path.as_str())) {
        (Ok(held), Ok(named)) => held.st_dev == named.st_dev && held.st_ino == named.st_ino,
        _ => false,
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

fn require_real_dir(path: &Path) -> Result<std::fs::Metadata> {
    let meta = std::fs::symlink_metadata(path)
        .map_err(|e| Error::io("inspect cache directory", path, e))?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(Error::UnsafeRoot {
            path: path.to_path_buf(),
            reason: "it is not a real directory (a symlink or a file was planted there); remove it"
                .into(),
        });
    }
    Ok(meta)
}

/// A team root's `staging/` is sticky (mode 3770): a member may make and remove directories
/// there, but rename or remove only their own, so no member can swap another's staging
/// directory, mid-build, for one of their own making (which the builder's rename would then
/// publish). Only the directory's owner can set the bit: a root made by an earlier release gets
/// it at its owner's next open, and until then is as before. Best effort for the same reason.
fn make_staging_sticky(staging: &OwnedFd) {
    let Ok(stat) = rustix::fs::fstat(staging) else {
        return;
    };
    if stat.st_mode & 0o1000 == 0 {
        let _ = rustix::fs::fchmod(staging, Mode::from_raw_mode(0o3770));
    }
}

fn check_root(root: &Path, mode: RootMode) -> Result<()> {
    let meta = require_real_dir(root)?;
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

    /// A team root in a temp dir: group-owned (the process's own group), setgid, 2770.
    fn team_layout(dir: &Path) -> Layout {
        let root = dir.join("team");
        std::fs::create_dir(&root).expect("mkdir");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o2770)).expect("chmod");
        Layout::open(&root, RootMode::Team).expect("open a team root")
    }

    fn mode_of(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .expect("stat")
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn a_team_staging_directory_is_private_until_it_is_shared_before_the_rename() {
        let dir = tempfile::tempdir().expect("temp dir");
        let layout = team_layout(dir.path());
        let staging = layout.new_staging_dir().expect("staging");
        // No other member can plant a link in it (setgid comes from the parent).
        assert_eq!(
            mode_of(staging.shown()) & 0o777,
            0o700,
            "private while built"
        );
        std::fs::write(staging.path().join("artifact.cubin"), b"cubin").expect("write");
        layout.share_with_team(&staging).expect("share");
        assert_eq!(mode_of(staging.shown()), 0o2770, "the team's once shared");
        assert_eq!(mode_of(&staging.shown().join("artifact.cubin")), 0o660);
    }

    /// Sharing goes through the descriptor made with the directory: a directory planted at its
    /// path (`staging/` renamed by another member) is never the one changed.
    #[test]
    fn sharing_changes_the_staging_directory_made_not_one_planted_at_its_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let layout = team_layout(dir.path());
        let staging = layout.new_staging_dir().expect("staging");
        std::fs::write(staging.path().join("artifact.cubin"), b"ours").expect("write");
        let moved = dir.path().join("moved");
        std::fs::rename(staging.shown(), &moved).expect("move the staging directory away");
        std::fs::create_dir(staging.shown()).expect("plant a directory at its path");
        let planted = staging.shown().join("artifact.cubin");
        std::fs::write(&planted, b"planted").expect("write");
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        layout.share_with_team(&staging).expect("share");
        assert_eq!(
            mode_of(&moved.join("artifact.cubin")),
            0o660,
            "the one made"
        );
        assert_eq!(mode_of(&moved), 0o2770);
        assert_eq!(mode_of(&planted), 0o600, "the planted one is untouched");
    }

    /// Issue 31, item 5: `staging/` itself was looked up by its path for every build, so a
    /// member who renamed it after another member's open and planted a link to a directory of
    /// their own got that member's staging directories, and their compiler's writes, made in it
    /// (seen failing: the staging directory was made in the planted directory). It is made in
    /// the `staging/` opened at open, and written through its own descriptor.
    #[test]
    fn a_staging_directory_is_made_and_written_where_the_root_was_opened_not_where_a_link_points() {
        let dir = tempfile::tempdir().expect("temp dir");
        let layout = team_layout(dir.path());
        let staging_dir = layout.base.join("staging");
        let moved = dir.path().join("staging-moved");
        std::fs::rename(&staging_dir, &moved).expect("rename staging/");
        let planted = dir.path().join("planted");
        std::fs::create_dir(&planted).expect("mkdir planted");
        std::os::unix::fs::symlink(&planted, &staging_dir).expect("plant a link");
        let staging = layout.new_staging_dir().expect("staging");
        assert!(
            staging.path().starts_with("/proc"),
            "written through its descriptor: {}",
            staging.path().display()
        );
        std::fs::write(staging.path().join("artifact.cubin"), b"cubin").expect("write");
        let name = staging.shown().file_name().expect("a name").to_owned();
        assert!(
            moved.join(&name).join("artifact.cubin").exists(),
            "made and written in the staging/ opened"
        );
        assert_eq!(
            std::fs::read_dir(&planted).expect("list planted").count(),
            0,
            "nothing in the planted directory"
        );
        assert_eq!(
            staging.shown(),
            staging_dir.join(&name),
            "named under the root in messages"
        );
    }

    /// Issue 31, item 5: `staging/` is sticky in a team root, so no member renames another's
    /// staging directory (and plants one of their own for that member to publish).
    #[test]
    fn a_team_roots_staging_is_sticky() {
        let dir = tempfile::tempdir().expect("temp dir");
        let layout = team_layout(dir.path());
        assert_eq!(mode_of(&layout.base.join("staging")), 0o3770);
        for sub in ["entries", "trash", "locks"] {
            assert_eq!(mode_of(&layout.base.join(sub)), 0o2770, "{sub}");
        }
    }

    #[test]
    fn sharing_never_follows_a_link_planted_in_the_staging_directory() {
        let dir = tempfile::tempdir().expect("temp dir");
        let layout = team_layout(dir.path());
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"a member's secret").expect("write");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let staging = layout.new_staging_dir().expect("staging");
        std::os::unix::fs::symlink(&secret, staging.path().join("artifact.cubin"))
            .expect("plant a link");
        let err = layout
            .share_with_team(&staging)
            .expect_err("a link in an entry is refused");
        assert!(
            err.to_string().contains("artifact.cubin"),
            "names the file: {err}"
        );
        assert_eq!(mode_of(&secret), 0o600, "the link's target keeps its mode");
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

    #[test]
    fn a_subdirectory_swapped_for_a_link_or_a_file_after_the_first_open_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("root");
        drop(Layout::open(&root, RootMode::Private).expect("first open"));
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("mkdir");
        for (sub, plant) in [("entries", "link"), ("locks", "file")] {
            let path = root.join(FORMAT_DIR).join(sub);
            let aside = dir.path().join(format!("{sub}-aside"));
            std::fs::rename(&path, &aside).expect("move the directory aside");
            match plant {
                "link" => std::os::unix::fs::symlink(&elsewhere, &path).expect("plant a link"),
                _ => std::fs::write(&path, b"").expect("plant a file"),
            }
            let err = Layout::open(&root, RootMode::Private)
                .expect_err("a planted subdirectory must be refused, never opened");
            assert!(
                err.to_string().contains("not a real directory") && err.to_string().contains(sub),
                "{err}"
            );
            std::fs::remove_file(&path).expect("remove the plant");
            std::fs::rename(&aside, &path).expect("put the directory back");
        }
        assert!(
            std::fs::read_dir(&elsewhere)
                .expect("list")
                .next()
                .is_none(),
            "nothing was made where the link pointed"
        );
        Layout::open(&root, RootMode::Private).expect("the repaired root opens");
    }

    #[test]
    fn every_event_line_is_whole_when_many_writers_append_at_once() {
        const WRITERS: usize = 8;
        const EVENTS: usize = 400;
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("cache");
        std::fs::create_dir(&root).expect("mkdir");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let layout = Layout::open(&root, RootMode::Private).expect("open the root");
        std::thread::scope(|scope| {
            for writer in 0..WRITERS {
                let layout = &layout;
                scope.spawn(move || {
                    for i in 0..EVENTS {
                        layout.log_event(
                            crate::base::event_log::Event::Build,
                            &format!("kernel-{writer}-{i}"),
                            7,
                        );
                    }
                });
            }
        });
        let log = std::fs::read_to_string(layout.dir(Subdir::State).join("events.log"))
            .expect("read the event log");
        let torn: Vec<&str> = log
            .lines()
            .filter(|line| crate::base::event_log::Record::parse(line).is_none())
            .collect();
        assert!(
            torn.is_empty(),
            "torn lines: {:?}",
            &torn[..torn.len().min(5)]
        );
        assert_eq!(log.lines().count(), WRITERS * EVENTS, "one line per event");
    }
}
