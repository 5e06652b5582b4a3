//! True LRU by per-line timestamps.
//!
//! A 64-bit stamp per line from one counter per cache: the victim is the smallest stamp in
//! the set. This is exact LRU (not tree pseudo-LRU), which is what cachegrind simulates and
//! what the paper's Table II machine uses at every level.

use super::ReplacementPolicy;
use crate::geometry::Geometry;

pub struct Lru {
    ways: usize,
    stamps: Vec<u64>,
    clock: u64,
}

impl ReplacementPolicy for Lru {
    fn new(geometry: &Geometry) -> Self {
        Lru { ways: geometry.ways as usize, stamps: vec![0; geometry.lines()], clock: 0 }
    }

    fn name(&self) -> &'static str {
        "lru"
    }

    #[inline]
    fn on_hit(&mut self, set: usize, way: usize, _pc: u64) {
        self.clock += 1;
        self.stamps[set * self.ways + way] = self.clock;
    }

    #[inline]
    fn victim(&mut self, set: usize) -> usize {
        let row = &self.stamps[set * self.ways..(set + 1) * self.ways];
        let mut best = 0;
        for (way, &stamp) in row.iter().enumerate().skip(1) {
            if stamp < row[best] {
                best = way;
            }
        }
        best
    }

    #[inline]
    fn on_evict(&mut self, _set: usize, _way: usize) {}

    #[inline]
    fn on_fill(&mut self, set: usize, way: usize, _pc: u64) {
        self.clock += 1;
        self.stamps[set * self.ways + way] = self.clock;
    }

    fn on_flush(&mut self) {
        self.stamps.fill(0);
    }
}
