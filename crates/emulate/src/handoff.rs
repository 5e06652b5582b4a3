//! A bounded hand-over of reused buffers from one producer thread to one consumer thread
//! (the trace parser's chunks of I/Os to the replay, [`crate::replay::replay_reader`]).
//!
//! At most `slots` buffers are ever made, so memory is `slots` buffers whatever the length
//! of the stream. A side that has to wait sleeps until half the slots are ready for it
//! (filled ones for the consumer, emptied ones for the producer), not just one: with small
//! buffers a wake-up per buffer (a futex wake and a context switch, several microseconds
//! on a VM) would cost more than the buffer's work, and small buffers are what keep the
//! memory small (issue 33: eight chunks of 1024 I/Os, 256 KiB, where `std`'s bounded
//! channel held up to four chunks of 8192, 1 MiB, for about the same CPU time).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

/// The shared state: see the module's text.
pub struct Handoff<B, E> {
    slots: usize,
    /// Filled or emptied buffers a waiting side waits for before it is woken.
    half: usize,
    state: Mutex<State<B, E>>,
    /// The consumer waits on it.
    filled: Condvar,
    /// The producer waits on it.
    emptied: Condvar,
}

struct State<B, E> {
    full: VecDeque<B>,
    free: Vec<B>,
    /// Buffers made so far (at most `slots`).
    made: usize,
    /// The producer's end: `Ok` after the last buffer, or its error.
    end: Option<Result<(), E>>,
    consumer_gone: bool,
    consumer_waits: bool,
    producer_waits: bool,
}

impl<B, E> Handoff<B, E> {
    /// A hand-over of at most `slots` buffers (at least 2).
    pub fn new(slots: usize) -> Handoff<B, E> {
        let slots = slots.max(2);
        Handoff {
            slots,
            half: slots / 2,
            state: Mutex::new(State {
                full: VecDeque::with_capacity(slots),
                free: Vec::with_capacity(slots),
                made: 0,
                end: None,
                consumer_gone: false,
                consumer_waits: false,
                producer_waits: false,
            }),
            filled: Condvar::new(),
            emptied: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<B, E>> {
        // A panic on the other side poisons the lock; the state is still consistent (every
        // change is made whole under it).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Producer: an empty buffer (one of the emptied ones, or a new one from `make` while
    /// fewer than `slots` exist), or `None` once the consumer is gone.
    pub fn take_empty(&self, make: impl FnOnce() -> B) -> Option<B> {
        let mut s = self.lock();
        loop {
            if s.consumer_gone {
                return None;
            }
            if let Some(b) = s.free.pop() {
                return Some(b);
            }
            if s.made < self.slots {
                s.made += 1;
                drop(s);
                return Some(make());
            }
            s.producer_waits = true;
            while s.free.len() < self.half && !s.consumer_gone {
                s = self.emptied.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            s.producer_waits = false;
        }
    }

    /// Producer: a filled buffer, for the consumer.
    pub fn put_full(&self, b: B) {
        let mut s = self.lock();
        s.full.push_back(b);
        if s.consumer_waits && s.full.len() >= self.half {
            self.filled.notify_one();
        }
    }

    /// Producer: no more buffers (`Ok`), or an error for the consumer after the buffers
    /// already filled.
    pub fn finish(&self, end: Result<(), E>) {
        let mut s = self.lock();
        s.end = Some(end);
        self.filled.notify_one();
    }

    /// Consumer: hands back `done` (emptied) and takes the next filled buffer; `Ok(None)` at
    /// the end, the producer's error once after its last buffer.
    pub fn next(&self, done: Option<B>) -> Result<Option<B>, E> {
        let mut s = self.lock();
        if let Some(done) = done {
            s.free.push(done);
            if s.producer_waits && s.free.len() >= self.half {
                self.emptied.notify_one();
            }
        }
        loop {
            if let Some(b) = s.full.pop_front() {
                return Ok(Some(b));
            }
            match s.end.take() {
                Some(Err(e)) => {
                    s.end = Some(Ok(()));
                    return Err(e);
                }
                Some(Ok(())) => {
                    s.end = Some(Ok(()));
                    return Ok(None);
                }
                None => {}
            }
            s.consumer_waits = true;
            while s.full.len() < self.half && s.end.is_none() {
                s = self.filled.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            s.consumer_waits = false;
        }
    }

    /// Consumer: it takes no more buffers (the producer's next [`Handoff::take_empty`]
    /// returns `None`).
    pub fn close(&self) {
        let mut s = self.lock();
        s.consumer_gone = true;
        self.emptied.notify_one();
    }

    /// Whether the producer has finished.
    fn finished(&self) -> bool {
        self.lock().end.is_some()
    }

    /// Buffers made so far (a test's bound on the memory).
    pub fn made(&self) -> usize {
        self.lock().made
    }
}

/// Finishes the hand-over (`Ok`) when dropped, unless the producer did: a producer that
/// panics does not leave the consumer waiting.
pub struct FinishOnDrop<'a, B, E>(pub &'a Handoff<B, E>);

impl<B, E> Drop for FinishOnDrop<'_, B, E> {
    fn drop(&mut self) {
        if !self.0.finished() {
            self.0.finish(Ok(()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every item arrives once and in order, whichever side is faster, and no more than
    /// `slots` buffers are ever made (the memory bound), for several slot counts.
    #[test]
    fn items_arrive_in_order_through_at_most_slots_buffers() {
        for slots in [2, 3, 8] {
            for slow_consumer in [false, true] {
                let h: Handoff<Vec<u32>, String> = Handoff::new(slots);
                let n = 20_000u32;
                std::thread::scope(|scope| {
                    scope.spawn(|| {
                        let mut next = 0;
                        while next < n {
                            let Some(mut b) = h.take_empty(|| Vec::with_capacity(7)) else { return };
                            b.clear();
                            for _ in 0..7.min(n - next) {
                                b.push(next);
                                next += 1;
                            }
                            if !slow_consumer {
                                std::thread::yield_now();
                            }
                            h.put_full(b);
                        }
                        h.finish(Err("the end".into()));
                    });
                    let mut want = 0;
                    let mut done = None;
                    loop {
                        match h.next(done.take()) {
                            Ok(Some(b)) => {
                                for &x in &b {
                                    assert_eq!(x, want, "slots {slots}");
                                    want += 1;
                                }
                                if slow_consumer {
                                    std::thread::yield_now();
                                }
                                done = Some(b);
                            }
                            Ok(None) => panic!("the error was lost"),
                            Err(e) => {
                                assert_eq!(e, "the end");
                                break;
                            }
                        }
                    }
                    assert_eq!(want, n);
                    assert!(matches!(h.next(None), Ok(None)), "the end stays the end");
                });
                assert!(h.made() <= slots, "{} buffers made for {slots} slots", h.made());
            }
        }
    }

    /// A consumer that stops early releases a producer that waits for an empty buffer.
    #[test]
    fn a_closed_consumer_releases_the_producer() {
        let h: Handoff<Vec<u8>, ()> = Handoff::new(4);
        std::thread::scope(|scope| {
            let producer = scope.spawn(|| {
                let mut sent = 0;
                while let Some(b) = h.take_empty(Vec::new) {
                    h.put_full(b);
                    sent += 1;
                }
                sent
            });
            let first = h.next(None).unwrap();
            assert!(first.is_some());
            h.close();
            // It filled at least half the slots before the consumer woke, none past the slots.
            let sent = producer.join().unwrap();
            assert!((2..=4).contains(&sent), "{sent} buffers sent");
        });
    }
}
