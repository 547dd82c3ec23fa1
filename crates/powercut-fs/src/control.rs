//! The state shared by the FUSE daemon thread and the test: the model, the counters, the faults
//! to inject and the armed cut.

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::model::{CutMode, CutOutcome, Model};

/// What the daemon has been asked to do, counted since the mount was created (cuts included).
///
/// A test asserts on these: a daemon that answered ENOSYS to one fsync would make the kernel
/// report every later fsync as success without asking, so "the put called fsync" proves nothing
/// unless the count here went up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Changing requests (create, mkdir, link, unlink, rmdir, rename, write, truncate, fsync,
    /// fsyncdir), the unit of [`crate::PowercutMount::arm_cut_after`].
    pub operations: u64,
    /// `fsync` and `fdatasync` requests on files.
    pub fsync: u64,
    /// Of those, `fdatasync` requests.
    pub fdatasync: u64,
    /// `fsync` requests on directories.
    pub fsyncdir: u64,
    /// `flush` requests (one per `close` of a descriptor).
    pub flush: u64,
    /// `write` requests.
    pub writes: u64,
    /// Bytes accepted by `write` requests.
    pub bytes_written: u64,
    /// Power cuts so far.
    pub cuts: u64,
}

/// Faults to inject, each counted from the moment they are set with
/// [`crate::PowercutMount::set_faults`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// The n-th file `fsync` from now (1-based) fails with EIO, and its data is dropped as the
    /// kernel drops dirty pages after a writeback error.
    pub eio_on_fsync: Option<u64>,
    /// The n-th directory `fsync` from now (1-based) fails with EIO; its entries stay pending.
    pub eio_on_fsyncdir: Option<u64>,
    /// Writes fail with ENOSPC once this many more bytes have been written.
    pub enospc_after_bytes: Option<u64>,
}

/// How `renameat2` flags are treated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenameFlags {
    /// `RENAME_NOREPLACE` and `RENAME_EXCHANGE` work as on ext4, xfs and btrfs.
    #[default]
    Supported,
    /// Any flag is refused with EINVAL, as NFS, ceph, 9p and older ZFS do, so callers'
    /// `link`+`unlink` fallbacks run.
    RefuseWithEinval,
}

/// What one power cut did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutReport {
    /// The operation count (since the previous cut) after which the power went: the armed count
    /// if an armed cut fired, otherwise the count when [`crate::PowercutMount::power_cut`] ran.
    pub after_operation: u64,
    /// Whether an armed cut fired (every request after it failed with EIO).
    pub armed_cut_fired: bool,
    /// The mode that resolved the unsynced changes.
    pub mode: CutMode,
    /// Unsynced changes at the cut.
    pub unsynced_changes: usize,
    /// Of those, how many survived (always 0 under [`CutMode::DropUnsynced`]).
    pub survived: usize,
}

/// Fault targets as absolute counter values.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FaultTargets {
    pub(crate) eio_at_fsync: Option<u64>,
    pub(crate) eio_at_fsyncdir: Option<u64>,
    pub(crate) enospc_at_bytes: Option<u64>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) model: Model,
    pub(crate) counters: Counters,
    pub(crate) faults: FaultTargets,
    pub(crate) rename_flags: RenameFlags,
    pub(crate) cut_mode: CutMode,
    /// Operations since the last cut (or the first mount).
    pub(crate) ops_since_cut: u64,
    /// Cut right after this many operations since the last cut.
    pub(crate) armed_at: Option<u64>,
    /// Set once the power is out: every request fails with EIO until the remount.
    pub(crate) fired: Option<CutReport>,
}

impl Inner {
    /// Counts one changing request and fires an armed cut when its count is reached.
    pub(crate) fn count_operation(&mut self) {
        self.counters.operations += 1;
        self.ops_since_cut += 1;
        if self.armed_at == Some(self.ops_since_cut) {
            self.fire(true);
        }
    }

    /// Cuts the power now: the crash state is fixed and every later request fails with EIO.
    pub(crate) fn fire(&mut self, armed: bool) -> CutReport {
        if let Some(report) = self.fired {
            return report;
        }
        let CutOutcome { pending, kept } = self.model.power_cut(self.cut_mode);
        let report = CutReport {
            after_operation: self.ops_since_cut,
            armed_cut_fired: armed,
            mode: self.cut_mode,
            unsynced_changes: pending,
            survived: kept,
        };
        self.fired = Some(report);
        report
    }

    pub(crate) fn set_faults(&mut self, faults: Faults) {
        let c = self.counters;
        self.faults = FaultTargets {
            eio_at_fsync: faults.eio_on_fsync.map(|n| c.fsync + n),
            eio_at_fsyncdir: faults.eio_on_fsyncdir.map(|n| c.fsyncdir + n),
            enospc_at_bytes: faults.enospc_after_bytes.map(|n| c.bytes_written + n),
        };
    }
}

/// The lock around [`Inner`].
#[derive(Debug)]
pub(crate) struct Shared {
    inner: Mutex<Inner>,
}

impl Shared {
    pub(crate) fn new(rename_flags: RenameFlags, cut_mode: CutMode) -> Self {
        Shared {
            inner: Mutex::new(Inner {
                model: Model::new(),
                counters: Counters::default(),
                faults: FaultTargets::default(),
                rename_flags,
                cut_mode,
                ops_since_cut: 0,
                armed_at: None,
                fired: None,
            }),
        }
    }

    /// Locks the state; a panic in another holder cannot leave the model half-changed in a way
    /// that matters more than the panic itself, so poisoning is ignored.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
