//! A heap buffer whose address and length are multiples of an alignment, as O_DIRECT needs.

use std::alloc::Layout;
use std::ptr::NonNull;

/// A zero-initialised heap buffer aligned for O_DIRECT: its address is a multiple of
/// `align` and its length a multiple of `align`.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give out &[u8], like a Vec<u8>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates at least `len` bytes (rounded up to `align`, at least one `align` block),
    /// aligned to `align`, which must be a power of two. Returns None when `align` is not a power
    /// of two or the size overflows.
    pub fn new(len: usize, align: usize) -> Option<AlignedBuf> {
        if !align.is_power_of_two() {
            return None;
        }
        let rounded = len.max(1).checked_add(align - 1)? & !(align - 1);
        let layout = Layout::from_size_align(rounded, align).ok()?;
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = match NonNull::new(raw) {
            Some(p) => p,
            None => std::alloc::handle_alloc_error(layout),
        };
        Some(AlignedBuf { ptr, layout })
    }

    /// The buffer's length in bytes (a multiple of its alignment).
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Always false: a buffer holds at least one alignment block.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The alignment of the address and the length.
    pub fn align(&self) -> usize {
        self.layout.align()
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() initialised bytes, owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for layout.size() initialised bytes, borrowed exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// The start address, for engines that hand it to the kernel.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated with exactly this layout and is freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len())
            .field("align", &self.align())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn address_and_length_are_aligned() {
        for (len, align) in [(0, 512), (1, 4096), (4097, 4096), (10, 64)] {
            let mut b = AlignedBuf::new(len, align).expect("power-of-two alignment");
            assert_eq!(b.as_mut_ptr() as usize % align, 0, "address aligned");
            assert_eq!(b.len() % align, 0, "length aligned");
            assert!(b.len() >= len.max(1), "holds what was asked");
            assert!(b.as_slice().iter().all(|&x| x == 0), "zeroed");
        }
        assert!(
            AlignedBuf::new(1, 3000).is_none(),
            "non power of two refused"
        );
    }
}
