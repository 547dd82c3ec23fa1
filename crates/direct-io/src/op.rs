//! One read request and its completion: what the stream hands every engine, and what each
//! engine (`threads.rs`, `uring.rs`) gives back.

use std::os::fd::RawFd;

/// One read request handed to an engine. `buf` must stay valid, unmoved and untouched by
/// anyone else until the completion with the same `tag` has been returned.
pub(crate) struct Op {
    pub(crate) fd: RawFd,
    pub(crate) offset: u64,
    pub(crate) buf: *mut u8,
    pub(crate) len: usize,
    pub(crate) tag: usize,
    pub(crate) fixed: Option<u16>,
}

// SAFETY: an Op is a request for exclusive use of its buffer until completion; the submitter
// guarantees that exclusivity (see Op), so moving it to a reader thread is sound.
unsafe impl Send for Op {}

/// A finished read: the bytes read or the error.
pub(crate) struct Done {
    pub(crate) tag: usize,
    pub(crate) result: std::io::Result<usize>,
}
