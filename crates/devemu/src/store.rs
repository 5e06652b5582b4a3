//! The RAM backing store of an emulated device.
//!
//! An anonymous private mapping with MAP_NORESERVE: pages cost memory only once written,
//! so a 1 GiB device that a benchmark touches 64 MiB of uses 64 MiB. Reads of never-written
//! bytes return zeros, like a fresh device. Requests copy in and out with memcpy; the
//! engine guarantees a request's range is inside the store and the caller owns its buffer.
//!
//! Concurrent requests to overlapping ranges are the caller's business, as on real hardware:
//! the store itself never tears its own metadata because it has none.

use std::ptr::NonNull;

pub struct RamStore {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; concurrent access to disjoint or
// overlapping ranges is memcpy on shared memory, which the engine orders per request.
unsafe impl Send for RamStore {}
// SAFETY: see above; all methods take &self and copy bytes, no interior metadata.
unsafe impl Sync for RamStore {}

impl RamStore {
    pub fn new(len: usize) -> std::io::Result<RamStore> {
        assert!(len > 0);
        // SAFETY: an anonymous mapping with no address hint; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(RamStore { base: NonNull::new(ptr as *mut u8).expect("mmap never returns null"), len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: u64, len: usize) {
        assert!(
            offset.checked_add(len as u64).is_some_and(|end| end <= self.len as u64),
            "request [{offset}, +{len}) outside the store of {} bytes",
            self.len
        );
    }

    /// Copies `buf.len()` bytes at `offset` out of the store.
    pub fn read(&self, offset: u64, buf: &mut [u8]) {
        self.check(offset, buf.len());
        // SAFETY: the range is inside the mapping (checked) and `buf` is a distinct
        // allocation owned by the caller.
        unsafe { std::ptr::copy_nonoverlapping(self.base.as_ptr().add(offset as usize), buf.as_mut_ptr(), buf.len()) }
    }

    /// Copies `buf` into the store at `offset`.
    pub fn write(&self, offset: u64, buf: &[u8]) {
        self.check(offset, buf.len());
        // SAFETY: as in `read`; writes through a shared mapping are ordered by the engine.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), self.base.as_ptr().add(offset as usize), buf.len()) }
    }
}

impl Drop for RamStore {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `new`.
        unsafe {
            libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_return_what_was_written_and_zeros_elsewhere() {
        let store = RamStore::new(1 << 20).unwrap();
        let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        store.write(8192, &data);
        let mut back = vec![0u8; 4096];
        store.read(8192, &mut back);
        assert_eq!(back, data);
        store.read(0, &mut back);
        assert!(back.iter().all(|&b| b == 0));
    }

    #[test]
    #[should_panic(expected = "outside the store")]
    fn out_of_range_is_caught() {
        let store = RamStore::new(1 << 20).unwrap();
        let mut buf = vec![0u8; 4096];
        store.read((1 << 20) - 100, &mut buf);
    }
}
