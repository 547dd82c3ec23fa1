//! Mounting the daemon in a private namespace, cutting the power and remounting.

use std::fmt;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{BackgroundSession, Config, MountOption, Session};

use crate::control::{Counters, CutReport, Faults, RenameFlags, Shared};
use crate::daemon::Daemon;
use crate::error::Error;
use crate::model::CutMode;
use fs_testbed::namespace;

/// How to set up the filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Whether `renameat2` flags work or are refused with EINVAL.
    pub rename_flags: RenameFlags,
    /// How a cut treats unsynced changes (can be changed later with
    /// [`PowercutMount::set_cut_mode`]).
    pub cut_mode: CutMode,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            rename_flags: RenameFlags::Supported,
            cut_mode: CutMode::DropUnsynced,
        }
    }
}

/// Why the filesystem could not be mounted.
#[derive(Debug, Clone)]
pub struct Skipped {
    /// What was missing or failed.
    pub reason: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "skipped powercut-fs: {}", self.reason)
    }
}

/// The mounted filesystem, owned by the thread in whose private namespace it is mounted.
///
/// Paths under [`PowercutMount::root`] are valid on that thread and in processes it spawns.
#[derive(Debug)]
pub struct PowercutMount {
    shared: Arc<Shared>,
    session: Option<BackgroundSession>,
    mountpoint: PathBuf,
    connection: u64,
}

impl PowercutMount {
    fn mount(shared: Arc<Shared>, mountpoint: &Path) -> Result<Self, Error> {
        let mut mount = PowercutMount {
            shared,
            session: None,
            mountpoint: mountpoint.to_path_buf(),
            connection: 0,
        };
        mount.attach()?;
        Ok(mount)
    }

    fn attach(&mut self) -> Result<(), Error> {
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("powercut".into()),
            MountOption::Subtype("powercut".into()),
            MountOption::DefaultPermissions,
            MountOption::RW,
        ];
        let daemon = Daemon {
            shared: Arc::clone(&self.shared),
        };
        let session = Session::new(daemon, &self.mountpoint, &config)
            .and_then(Session::spawn)
            .map_err(|e| Error::new("mount powercut-fs on", &self.mountpoint, e))?;
        self.session = Some(session);
        self.connection = namespace::fuse_connection(&self.mountpoint)
            .map_err(|e| Error::new("stat the FUSE mount", &self.mountpoint, e))?;
        Ok(())
    }

    fn detach(&mut self) -> Result<(), Error> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        match namespace::umount(&self.mountpoint, 0) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                // Files are still open: detach the mount and abort the connection, so those
                // descriptors fail (as after a real power cut) and the daemon loop ends.
                namespace::umount(&self.mountpoint, libc::MNT_DETACH)
                    .map_err(|e| Error::new("detach", &self.mountpoint, e))?;
                namespace::abort_fuse_connection(self.connection)
                    .map_err(|e| Error::new("abort the FUSE connection of", &self.mountpoint, e))?;
            }
            Err(e) => return Err(Error::new("unmount", &self.mountpoint, e)),
        }
        match session.join() {
            // After an abort the daemon's read of /dev/fuse fails with ECONNABORTED instead of
            // ENODEV: both mean the connection is gone, which is what was asked for.
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(()),
            result => {
                result.map_err(|e| Error::new("join the FUSE daemon of", &self.mountpoint, e))
            }
        }
    }

    /// The root directory of the filesystem.
    pub fn root(&self) -> &Path {
        &self.mountpoint
    }

    /// What the daemon has been asked so far.
    pub fn counters(&self) -> Counters {
        self.shared.lock().counters
    }

    /// Changing operations since the last cut (or the mount).
    pub fn operations_since_cut(&self) -> u64 {
        self.shared.lock().ops_since_cut
    }

    /// Unsynced changes right now (writes, truncates, entry changes, renames).
    pub fn unsynced_changes(&self) -> usize {
        self.shared.lock().model.pending_len()
    }

    /// Replaces the injected faults; their counts start now.
    pub fn set_faults(&self, faults: Faults) {
        self.shared.lock().set_faults(faults);
    }

    /// Sets how the next cut treats unsynced changes.
    pub fn set_cut_mode(&self, mode: CutMode) {
        self.shared.lock().cut_mode = mode;
    }

    /// Cuts the power right after the `k`-th changing operation from now (`k` = 0: now). From
    /// then on every request fails with EIO, as a dead disk would, until
    /// [`PowercutMount::power_cut`] remounts. The crash state is fixed at that moment.
    pub fn arm_cut_after(&self, k: u64) {
        let mut inner = self.shared.lock();
        if k == 0 {
            inner.fire(false);
        } else {
            inner.armed_at = Some(inner.ops_since_cut + k);
        }
    }

    /// Whether the power is out (an armed cut fired and no remount happened yet).
    pub fn power_is_out(&self) -> bool {
        self.shared.lock().fired.is_some()
    }

    /// Cuts the power (unless an armed cut already did), unmounts, keeps only what survived and
    /// mounts the survivor at the same path.
    ///
    /// Close every file on the mount first: descriptors still open are cut off (ENOTCONN).
    ///
    /// # Errors
    /// When unmounting or remounting fails.
    pub fn power_cut(&mut self) -> Result<CutReport, Error> {
        let report = self.shared.lock().fire(false);
        self.detach()?;
        {
            let mut inner = self.shared.lock();
            inner.fired = None;
            inner.armed_at = None;
            inner.ops_since_cut = 0;
            inner.counters.cuts += 1;
        }
        self.attach()?;
        Ok(report)
    }
}

impl Drop for PowercutMount {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            // Nothing leaks anyway: the namespace dies with its thread and takes the mount along.
            eprintln!("powercut-fs: {e}");
        }
    }
}

fn check_prerequisites() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("mounting FUSE without libfuse needs root".into());
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| {
            format!("open /dev/fuse: {e} (load the fuse module or run with --device /dev/fuse)")
        })?;
    Ok(())
}

/// Mounts a fresh filesystem in a private mount namespace and runs `f` on the mounting thread.
///
/// A panic inside `f` is propagated after the mount is gone.
///
/// # Errors
/// [`Skipped`] when root or `/dev/fuse` is missing or the mount fails.
pub fn with_mount<R: Send>(
    options: Options,
    f: impl FnOnce(&mut PowercutMount) -> R + Send,
) -> Result<R, Skipped> {
    let skip = |reason: String| Skipped { reason };
    check_prerequisites().map_err(skip)?;
    let scratch = tempfile::Builder::new()
        .prefix("powercut-fs-")
        .tempdir()
        .map_err(|e| {
            skip(format!(
                "create a scratch dir in {}: {e}",
                std::env::temp_dir().display()
            ))
        })?;
    let mountpoint = scratch.path().join("mnt");
    std::fs::create_dir(&mountpoint)
        .map_err(|e| skip(format!("mkdir {}: {e}", mountpoint.display())))?;
    let shared = Arc::new(Shared::new(options.rename_flags, options.cut_mode));
    std::thread::scope(|scope| {
        let handle = scope.spawn(|| -> Result<R, Skipped> {
            namespace::enter_private_mount_namespace()
                .map_err(|e| skip(format!("enter a private mount namespace: {e}")))?;
            let mut mount =
                PowercutMount::mount(shared, &mountpoint).map_err(|e| skip(e.to_string()))?;
            Ok(f(&mut mount))
        });
        match handle.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Like [`with_mount`], but prints why it skipped and returns `None`.
///
/// # Panics
/// When the filesystem cannot be mounted and `FS_TESTBED_REQUIRE=1` (under `cargo xtask test`).
pub fn run_or_skip<R: Send>(
    options: Options,
    f: impl FnOnce(&mut PowercutMount) -> R + Send,
) -> Option<R> {
    match with_mount(options, f) {
        Ok(r) => Some(r),
        Err(skipped) if fs_testbed::skips_are_failures() => {
            panic!("{skipped} (FS_TESTBED_REQUIRE=1: a skip is a failure under cargo xtask test)")
        }
        Err(skipped) => {
            eprintln!("{skipped}");
            None
        }
    }
}
