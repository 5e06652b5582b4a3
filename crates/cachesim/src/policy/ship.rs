//! SHiP-PC (Wu et al., MICRO 2011) over SRRIP.
//!
//! Each line remembers the signature (a 14-bit hash of the PC that filled it) and whether it
//! was re-referenced. A table of 16K 3-bit saturating counters (SHCT) learns per signature:
//! a hit increments the counter, an eviction without any hit decrements it. A fill whose
//! signature counter is zero is predicted dead on arrival and inserted at RRPV 3 ("distant");
//! every other fill at RRPV 2 as in SRRIP. A flush forgets the lines but not the SHCT: the
//! table is a property of the code, which a context switch does not change.

use super::{rrip_victim, ReplacementPolicy, RRPV_LONG, RRPV_MAX};
use crate::geometry::Geometry;

pub const SHCT_ENTRIES: usize = 1 << 14;
pub const SHCT_MAX: u8 = 7;
/// Counters start weakly "reused" so a cold table does not declare everything dead.
const SHCT_INIT: u8 = 1;

pub struct Ship {
    ways: usize,
    rrpv: Vec<u8>,
    signature: Vec<u16>,
    reused: Vec<bool>,
    shct: Vec<u8>,
}

/// The 14-bit signature of a PC.
pub fn signature(pc: u64) -> u16 {
    let folded = pc ^ (pc >> 14) ^ (pc >> 28) ^ (pc >> 42);
    (folded as usize & (SHCT_ENTRIES - 1)) as u16
}

impl Ship {
    /// The SHCT counter of the signature of `pc`, for tests and reports.
    pub fn counter_for_pc(&self, pc: u64) -> u8 {
        self.shct[signature(pc) as usize]
    }

    pub fn rrpv(&self, set: usize, way: usize) -> u8 {
        self.rrpv[set * self.ways + way]
    }
}

impl ReplacementPolicy for Ship {
    fn new(geometry: &Geometry) -> Self {
        let lines = geometry.lines();
        Ship {
            ways: geometry.ways as usize,
            rrpv: vec![RRPV_MAX; lines],
            signature: vec![0; lines],
            reused: vec![false; lines],
            shct: vec![SHCT_INIT; SHCT_ENTRIES],
        }
    }

    fn name(&self) -> &'static str {
        "ship"
    }

    #[inline]
    fn on_hit(&mut self, set: usize, way: usize, _pc: u64) {
        let i = set * self.ways + way;
        self.rrpv[i] = 0;
        self.reused[i] = true;
        let c = &mut self.shct[self.signature[i] as usize];
        *c = (*c + 1).min(SHCT_MAX);
    }

    #[inline]
    fn victim(&mut self, set: usize) -> usize {
        rrip_victim(&mut self.rrpv[set * self.ways..(set + 1) * self.ways])
    }

    #[inline]
    fn on_evict(&mut self, set: usize, way: usize) {
        let i = set * self.ways + way;
        if !self.reused[i] {
            let c = &mut self.shct[self.signature[i] as usize];
            *c = c.saturating_sub(1);
        }
    }

    #[inline]
    fn on_fill(&mut self, set: usize, way: usize, pc: u64) {
        let i = set * self.ways + way;
        let sig = signature(pc);
        self.signature[i] = sig;
        self.reused[i] = false;
        self.rrpv[i] = if self.shct[sig as usize] == 0 { RRPV_MAX } else { RRPV_LONG };
    }

    fn on_flush(&mut self) {
        self.rrpv.fill(RRPV_MAX);
        // Invalidated lines were not evicted by a miss: they must not train the table.
        self.reused.fill(true);
    }
}
