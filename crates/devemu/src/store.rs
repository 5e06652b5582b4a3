//! The RAM backing store of an emulated device.
//!
//! An anonymous private mapping with MAP_NORESERVE: pages cost memory only once written,
//! so a 1 GiB device that a benchmark touches 64 MiB of uses 64 MiB. Reads of never-written
//! bytes return zeros, like a fresh device. Requests copy in and out with memcpy; the
//! engine checks a request's range first, and a range outside the store is a caller's bug
//! that panics before any byte is touched.
//!
//! # Concurrency
//! `read` and `write` take `&self` and the store is `Sync`, so threads may issue requests to
//! overlapping ranges at once (evaluate's io-intensive load does, on `emu:` targets). Two
//! unsynchronized memcpys over the same bytes would be a data race, so the store is cut
//! into stripes of [`STRIPE_BYTES`], each with a lock, and a request holds the locks of
//! every stripe it touches, taken in ascending order (so two requests never wait for each
//! other in a cycle), for the whole copy. A request is therefore atomic against every
//! other request, even one spanning several stripes: a read sees all or nothing of each
//! overlapping write, like a device that serializes overlapping commands. Requests to
//! different stripes never contend; a request within one stripe (every 4 KiB request)
//! costs one uncontended lock. A multi-stripe request keeps its guards in a small vector.
//!
//! Non-goals: ordering between overlapping requests (whichever locks first wins, as on a
//! device with several queues); finer locking than a stripe.

use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

/// The unit of locking. 64 KiB keeps the lock table small (16 Ki locks for a 1 GiB device)
/// and the common 4 KiB request inside one stripe.
pub const STRIPE_BYTES: usize = 64 << 10;

pub struct RamStore {
    base: NonNull<u8>,
    len: usize,
    /// One lock per stripe; the bytes of stripe `i` are touched only under `stripes[i]`.
    stripes: Box<[Mutex<()>]>,
}

// SAFETY: the mapping is plain memory owned by this value (no thread affinity); it is
// unmapped once, by Drop.
unsafe impl Send for RamStore {}
// SAFETY: all methods take &self; the only shared state touched through &self is the
// mapping's bytes, and every access to a byte holds the lock of its stripe (see
// `lock_range`), so no two threads access the same byte concurrently with one of them
// writing.
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
        let stripes = (0..len.div_ceil(STRIPE_BYTES)).map(|_| Mutex::new(())).collect();
        Ok(RamStore { base: NonNull::new(ptr as *mut u8).expect("mmap never returns null"), len, stripes })
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

    /// Locks every stripe that `[offset, offset + len)` touches, in ascending order, and
    /// returns the guards (the range is checked to be inside the store, `len` > 0).
    fn lock_range(&self, offset: usize, len: usize) -> Guards<'_> {
        let first = offset / STRIPE_BYTES;
        let last = (offset + len - 1) / STRIPE_BYTES;
        // Copies never panic while holding a stripe, so a poisoned lock only means a caller
        // panicked elsewhere with it held: the bytes are as consistent as any memcpy left them.
        let lock = |i: usize| self.stripes[i].lock().unwrap_or_else(|e| e.into_inner());
        if first == last {
            Guards { _one: Some(lock(first)), _many: Vec::new() }
        } else {
            Guards { _one: None, _many: (first..=last).map(lock).collect() }
        }
    }

    /// Copies `buf.len()` bytes at `offset` out of the store.
    pub fn read(&self, offset: u64, buf: &mut [u8]) {
        self.check(offset, buf.len());
        if buf.is_empty() {
            return;
        }
        let _held = self.lock_range(offset as usize, buf.len());
        // SAFETY: the range is inside the mapping (checked); every stripe it touches is
        // locked by `_held` until after the copy, so no write to these bytes runs
        // concurrently; `buf` is a distinct allocation borrowed mutably by the caller (the
        // store never hands out references into the mapping, so it cannot overlap).
        unsafe { std::ptr::copy_nonoverlapping(self.base.as_ptr().add(offset as usize), buf.as_mut_ptr(), buf.len()) }
    }

    /// Copies `buf` into the store at `offset`.
    pub fn write(&self, offset: u64, buf: &[u8]) {
        self.check(offset, buf.len());
        if buf.is_empty() {
            return;
        }
        let _held = self.lock_range(offset as usize, buf.len());
        // SAFETY: as in `read`: inside the mapping, every touched stripe locked for the
        // whole copy (no concurrent reader or writer of these bytes), `buf` disjoint.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), self.base.as_ptr().add(offset as usize), buf.len()) }
    }
}

/// The stripe locks a request holds; released together when dropped. One stripe needs no
/// allocation (an empty Vec does not allocate).
struct Guards<'a> {
    _one: Option<MutexGuard<'a, ()>>,
    _many: Vec<MutexGuard<'a, ()>>,
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

    /// Issue 11: concurrent overlapping requests neither race nor tear. Requests are
    /// `R_k = [k U, k U + 2 U)` with U half a stripe, so neighbours overlap by one unit and
    /// odd `k` spans two stripes. Writers fill a whole request with one tag (range, writer,
    /// sequence); readers read a whole request and check what a device that serializes
    /// overlapping commands allows: each unit carries one tag throughout (no torn write),
    /// from a request that covers it, and if both units carry tags of `R_k` they are the
    /// same write (a later `R_k` write would have covered both; a read interleaved with a
    /// write, which unlocked memcpys allow, shows two). Counts, not time, bound the run.
    #[test]
    fn overlapping_concurrent_requests_are_atomic() {
        const UNIT: usize = STRIPE_BYTES / 2;
        const UNITS: usize = 16;
        const OPS: u64 = 4000;
        let store = RamStore::new(UNIT * UNITS).unwrap();
        let ranges = UNITS as u64 - 1;
        let tag = |k: u64, writer: u64, seq: u64| ((k + 1) << 48) | (writer << 40) | seq;
        let range_of = |tag: u64| (tag >> 48).checked_sub(1);
        let next = |x: &mut u64| {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            *x
        };
        std::thread::scope(|s| {
            for writer in 0..2u64 {
                let store = &store;
                s.spawn(move || {
                    let mut x = 0x9e37_79b9_7f4a_7c15 ^ (writer + 1);
                    let mut buf = vec![0u8; 2 * UNIT];
                    for seq in 1..=OPS {
                        let k = next(&mut x) % ranges;
                        let t = tag(k, writer, seq).to_ne_bytes();
                        buf.chunks_exact_mut(8).for_each(|w| w.copy_from_slice(&t));
                        store.write(k * UNIT as u64, &buf);
                    }
                });
            }
            for reader in 0..2u64 {
                let store = &store;
                s.spawn(move || {
                    let mut x = 0x2545_f491_4f6c_dd1d ^ (reader + 1);
                    let mut buf = vec![0u8; 2 * UNIT];
                    for _ in 0..OPS {
                        let k = next(&mut x) % ranges;
                        store.read(k * UNIT as u64, &mut buf);
                        let word = |i: usize| u64::from_ne_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap());
                        let words = UNIT / 8;
                        let halves = [word(0), word(words)];
                        for (h, &first) in halves.iter().enumerate() {
                            // Every word equals `first` iff the unit equals itself shifted by a
                            // word (one memcmp, quick in debug builds too).
                            let unit = &buf[h * UNIT..(h + 1) * UNIT];
                            if unit[8..] != unit[..UNIT - 8] {
                                let torn = (h * words..(h + 1) * words).find(|&i| word(i) != first).unwrap();
                                panic!("R_{k} unit {h}: {first:#x} then {:#x}", word(torn));
                            }
                            // Unit k + h is covered by R_{k+h-1} and R_{k+h} only.
                            if let Some(r) = range_of(first) {
                                assert!(r + 1 >= k + h as u64 && r <= k + h as u64, "R_{k} unit {h}: tag of R_{r}");
                            }
                        }
                        let [a, b] = halves;
                        if range_of(a) == Some(k) || range_of(b) == Some(k) {
                            let both_k = range_of(a) == Some(k) && range_of(b) == Some(k);
                            assert!(a != 0 && b != 0, "R_{k}: half written ({a:#x}, {b:#x})");
                            assert!(!both_k || a == b, "R_{k}: units from two writes ({a:#x}, {b:#x})");
                        }
                    }
                });
            }
        });
    }

    #[test]
    #[should_panic(expected = "outside the store")]
    fn out_of_range_is_caught() {
        let store = RamStore::new(1 << 20).unwrap();
        let mut buf = vec![0u8; 4096];
        store.read((1 << 20) - 100, &mut buf);
    }
}
