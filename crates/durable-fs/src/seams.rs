//! Test seams, compiled only with the `test-seams` feature; without it every check below is a
//! constant `false` and the public `testing` module does not exist.
//!
//! Each seam is a thread-local switch, so a test flips it for its own thread only and the
//! production path pays nothing when the feature is off.

#[cfg(feature = "test-seams")]
mod enabled {
    use std::cell::Cell;

    thread_local! {
        static RENAME_FLAGS_UNSUPPORTED: Cell<bool> = const { Cell::new(false) };
        static BATCH_FLAW: Cell<Option<crate::testing::BatchFlaw>> = const { Cell::new(None) };
    }

    pub(crate) fn rename_flags_unsupported() -> bool {
        RENAME_FLAGS_UNSUPPORTED.with(Cell::get)
    }

    pub(crate) fn batch_flaw() -> Option<crate::testing::BatchFlaw> {
        BATCH_FLAW.with(Cell::get)
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

    pub(crate) fn with_batch_flaw<R>(flaw: crate::testing::BatchFlaw, f: impl FnOnce() -> R) -> R {
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
