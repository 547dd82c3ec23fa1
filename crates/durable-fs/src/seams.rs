//! Test seams, compiled only with the `test-seams` feature; without it every check below is a
//! constant `false` and the public `testing` module does not exist.
//!
//! Each seam is a thread-local switch, so a test flips it for its own thread only and the
//! production path pays nothing when the feature is off.

/// The ways a test can break [`crate::Batch::commit`] (`testing::BatchFlaw` without the
/// `#[non_exhaustive]` public face).
#[cfg_attr(not(feature = "test-seams"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchFlaw {
    RenameBeforeFlush,
    ForceSyncfs,
    SkipEntryFlush,
}

#[cfg(feature = "test-seams")]
mod enabled {
    use super::BatchFlaw;
    use std::cell::Cell;

    thread_local! {
        static RENAME_FLAGS_UNSUPPORTED: Cell<bool> = const { Cell::new(false) };
        static BATCH_FLAW: Cell<Option<BatchFlaw>> = const { Cell::new(None) };
    }

    pub(crate) fn rename_flags_unsupported() -> bool {
        RENAME_FLAGS_UNSUPPORTED.with(Cell::get)
    }

    pub(crate) fn batch_flaw_is(flaw: BatchFlaw) -> bool {
        BATCH_FLAW.with(Cell::get) == Some(flaw)
    }

    /// Sets a thread-local switch for the duration of `f`, restoring it even if `f` panics.
    fn with_switch<T: Copy + 'static, R>(
        key: &'static std::thread::LocalKey<Cell<T>>,
        value: T,
        f: impl FnOnce() -> R,
    ) -> R {
        struct Reset<T: Copy + 'static>(&'static std::thread::LocalKey<Cell<T>>, T);
        impl<T: Copy + 'static> Drop for Reset<T> {
            fn drop(&mut self) {
                self.0.with(|c| c.set(self.1));
            }
        }
        let _reset = Reset(key, key.with(|c| c.replace(value)));
        f()
    }

    pub(crate) fn with_rename_flags_unsupported<R>(f: impl FnOnce() -> R) -> R {
        with_switch(&RENAME_FLAGS_UNSUPPORTED, true, f)
    }

    pub(crate) fn with_batch_flaw<R>(flaw: BatchFlaw, f: impl FnOnce() -> R) -> R {
        with_switch(&BATCH_FLAW, Some(flaw), f)
    }
}

#[cfg(feature = "test-seams")]
pub(crate) use enabled::*;

/// Without the feature no flag is ever forced off.
#[cfg(not(feature = "test-seams"))]
#[inline(always)]
pub(crate) fn rename_flags_unsupported() -> bool {
    false
}

/// Without the feature the batch is never broken.
#[cfg(not(feature = "test-seams"))]
#[inline(always)]
pub(crate) fn batch_flaw_is(_flaw: BatchFlaw) -> bool {
    false
}
