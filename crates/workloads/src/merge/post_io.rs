//! The device's data movement for a request and its post-I/O work: staging at submission
//! (the CPU plays the device's DMA engine), then copy-out, verification, buffer release and
//! wake-up.

use std::sync::atomic::Ordering;

use smartcon_devemu::Op;
use smartcon_engine::verify;

use super::request::{ReqPtr, DONE};
use super::waiter::Item;
use super::{MergeDevice, PAGE_BYTES};

impl MergeDevice {
    /// Submission's data movement for one request: the CPU plays the device's DMA engine.
    pub(super) fn stage(&self, op: Op, item: &mut Item) {
        // SAFETY: the request is not DONE; its thread waits and does not touch its buffer.
        let req = unsafe { item.req.get() };
        let bs = self.config.bs_bytes as usize;
        match op {
            Op::Read => self.store.read(req.offset, item.buf.as_mut_slice()),
            Op::Write => {
                // SAFETY: as above; `buf` is `bs` bytes owned by the waiting thread.
                let src = unsafe { std::slice::from_raw_parts(req.buf as *const u8, bs) };
                item.buf.as_mut_slice().copy_from_slice(src);
                self.store.write(req.offset, item.buf.as_slice());
            }
        }
    }

    /// The post-I/O work of one request: copy-out, verification, buffer release, wake-up.
    pub(super) fn post(&self, op: Op, item: Item, me: ReqPtr) {
        let dev = self;
        // SAFETY: the request is not DONE until the store below; its thread waits.
        let req = unsafe { item.req.get() };
        let bs = dev.config.bs_bytes as usize;
        let checked: &[u8] = match op {
            Op::Read => {
                // SAFETY: the waiter's buffer of `bs` bytes; its thread does not touch it
                // until DONE.
                let dst = unsafe { std::slice::from_raw_parts_mut(req.buf, bs) };
                dst.copy_from_slice(item.buf.as_slice());
                dst
            }
            Op::Write => item.buf.as_slice(),
        };
        if let Some(seed) = dev.config.verify_seed {
            if let Err(m) = verify::check(checked, req.offset, PAGE_BYTES, seed) {
                // SAFETY: only the releasing thread writes this, before DONE.
                unsafe { *req.mismatch.get() = Some(m) };
            }
        }
        dev.pool.give_back(item.buf);
        if let Some(n) = dev.fault_panic_at_release {
            if dev.fault_releases.fetch_add(1, Ordering::Relaxed) + 1 == n {
                panic!("injected fault: the post-I/O work of release {n} panics");
            }
        }
        req.released.fetch_add(1, Ordering::Relaxed);
        let is_me = std::ptr::eq(item.req.0, me.0);
        // Clone before DONE: the request (and its Thread) may be gone right after it.
        let thread = (!is_me).then(|| req.thread.clone());
        req.state.store(DONE, Ordering::Release);
        if let Some(t) = thread {
            t.unpark();
        }
    }
}
