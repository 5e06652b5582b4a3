//! Page-aligned I/O buffers (O_DIRECT needs the buffer aligned to the logical block size;
//! a page covers every block size up to 4 KiB).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

pub const ALIGN_BYTES: usize = 4096;

pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer is an owned heap allocation with no shared state.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    pub fn new(len: usize) -> AlignedBuf {
        assert!(len > 0);
        let layout = Layout::from_size_align(len, ALIGN_BYTES).expect("valid layout");
        // SAFETY: the layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        AlignedBuf { ptr: NonNull::new(ptr).expect("out of memory"), layout }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() initialized (zeroed) bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
