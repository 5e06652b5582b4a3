//! The merge buffers' pool: page-aligned buffers a merged request's pages are staged in
//! (the driver's DMA-mapped coalescing memory of paper 002 Sec. 4). A buffer is taken at
//! submission and given back by the post-I/O work of the request it carried, so releasing
//! buffers is part of what pipelining overlaps with the device.
//!
//! Bounded: the pool never holds more than `capacity` buffers; a buffer given back to a full
//! pool is freed. Taking from an empty pool allocates (the first batches warm it up).

use std::sync::Mutex;

use smartcon_engine::target::AlignedBuf;

pub struct BufferPool {
    buf_bytes: usize,
    capacity: usize,
    free: Mutex<Vec<AlignedBuf>>,
}

impl BufferPool {
    pub fn new(buf_bytes: usize, capacity: usize) -> BufferPool {
        assert!(buf_bytes > 0 && capacity > 0);
        BufferPool { buf_bytes, capacity, free: Mutex::new(Vec::with_capacity(capacity)) }
    }

    pub fn buf_bytes(&self) -> usize {
        self.buf_bytes
    }

    pub fn take(&self) -> AlignedBuf {
        let popped = self.free.lock().unwrap().pop();
        popped.unwrap_or_else(|| AlignedBuf::new(self.buf_bytes))
    }

    pub fn give_back(&self, buf: AlignedBuf) {
        let mut free = self.free.lock().unwrap();
        if free.len() < self.capacity {
            free.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_at_most_its_capacity() {
        let pool = BufferPool::new(4096, 2);
        let bufs: Vec<AlignedBuf> = (0..5).map(|_| pool.take()).collect();
        assert!(bufs.iter().all(|b| b.as_slice().len() == 4096));
        for b in bufs {
            pool.give_back(b);
        }
        assert_eq!(pool.free.lock().unwrap().len(), 2);
        // Taken again from the pool, then allocated once it is empty.
        let again: Vec<AlignedBuf> = (0..3).map(|_| pool.take()).collect();
        assert_eq!(again.len(), 3);
        assert!(pool.free.lock().unwrap().is_empty());
    }
}
