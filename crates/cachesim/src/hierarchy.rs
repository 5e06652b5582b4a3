//! The simulated machine: L1 I and D, an optional L2, an LLC, and an in-order timing model.
//!
//! Table II of the paper is the default: a 4 GHz single-issue in-order core, L1 I and D
//! 32 KiB 2-way, L2 256 KiB 4-way, LLC 2 MiB 16-way at 24 cycles, memory at 400 cycles,
//! 64-byte lines everywhere. L1 and L2 are LRU; the LLC policy is the type parameter.
//!
//! Timing: every instruction costs one cycle; an access that misses L1 stalls the core for
//! the latency of the level that serves it (L2 `l2_hit_cycles`, LLC `llc_hit_cycles`,
//! memory `memory_cycles`), latencies being load-to-use totals, not sums. Table II gives no
//! L2 latency; 10 cycles is our choice (documented). Writes stall like reads
//! (write-allocate, no write buffer for misses); write-backs are not charged.
//!
//! Two modes: `TableII` treats an access that straddles two lines as two accesses through
//! all levels. `Cachegrind` reproduces valgrind cachegrind's model (cg_sim.c): I1 and D1 in
//! front of the LL with no L2, write-allocate, no write-backs, a straddling access counts
//! as one access that misses if either line misses, and the LL is consulted (with the same
//! straddle rule) only on an L1 miss. A modify (`M`) is one data access in both modes.
//!
//! Non-goals: prefetchers, out-of-order overlap of misses, TLBs, coherence.

use crate::cache::{Cache, CacheStats};
use crate::error::{Error, ErrorKind, Result};
use crate::geometry::Geometry;
use crate::policy::{Lru, ReplacementPolicy};
use crate::trace::{AccessKind, Record};

/// Core clock of Table II.
pub const CLOCK_HZ: u64 = 4_000_000_000;

/// Latencies in core cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub l2_hit_cycles: u64,
    pub llc_hit_cycles: u64,
    pub memory_cycles: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing { l2_hit_cycles: 10, llc_hit_cycles: 24, memory_cycles: 400 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    TableII,
    Cachegrind,
}

/// The geometry of every level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HierarchyConfig {
    pub l1i: Geometry,
    pub l1d: Geometry,
    /// `None` in cachegrind mode (and for any two-level machine).
    pub l2: Option<Geometry>,
    pub llc: Geometry,
    pub timing: Timing,
    pub mode: Mode,
}

impl HierarchyConfig {
    /// Table II of the paper.
    pub fn table_ii() -> Self {
        HierarchyConfig {
            l1i: Geometry::new(32 << 10, 2, 64).expect("static"),
            l1d: Geometry::new(32 << 10, 2, 64).expect("static"),
            l2: Some(Geometry::new(256 << 10, 4, 64).expect("static")),
            llc: Geometry::new(2 << 20, 16, 64).expect("static"),
            timing: Timing::default(),
            mode: Mode::TableII,
        }
    }

    /// One line size is required across levels (the paper uses 64 B everywhere; cachegrind
    /// needs equal I1 and LL line sizes for its fast path too). Checked here so the hot
    /// path shifts once.
    pub fn validate(&self) -> Result<()> {
        let line = self.llc.line_bytes;
        let all = [Some(self.l1i), Some(self.l1d), self.l2];
        if all.iter().flatten().any(|g| g.line_bytes != line) {
            return Err(Error::new(ErrorKind::Usage, "every level must use the same line size"));
        }
        if self.mode == Mode::Cachegrind && self.l2.is_some() {
            return Err(Error::new(ErrorKind::Usage, "the cachegrind-like mode has no L2 (I1, D1 and LL only)"));
        }
        Ok(())
    }
}

/// Sees every access that reaches the LLC (the L2 miss stream), after the LLC answered.
pub trait LlcObserver {
    fn on_llc_access(&mut self, block: u64, pc: u64, llc_hit: bool);
}

/// The observer that observes nothing (compiles away).
pub struct NoObserver;

impl LlcObserver for NoObserver {
    #[inline(always)]
    fn on_llc_access(&mut self, _block: u64, _pc: u64, _llc_hit: bool) {}
}

/// Per-level counts and the timing totals.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HierarchyStats {
    pub records: u64,
    pub instructions: u64,
    pub cycles: u64,
    pub l1i: CacheStats,
    pub l1d: CacheStats,
    pub l2: Option<CacheStats>,
    pub llc: CacheStats,
}

impl HierarchyStats {
    pub fn ipc(&self) -> f64 {
        if self.cycles == 0 {
            0.0
        } else {
            self.instructions as f64 / self.cycles as f64
        }
    }
}

pub struct Hierarchy<P: ReplacementPolicy, O: LlcObserver = NoObserver> {
    config: HierarchyConfig,
    line_shift: u32,
    l1i: Cache<Lru>,
    l1d: Cache<Lru>,
    l2: Option<Cache<Lru>>,
    pub llc: Cache<P>,
    pub observer: O,
    records: u64,
    instructions: u64,
    cycles: u64,
}

impl<P: ReplacementPolicy> Hierarchy<P, NoObserver> {
    pub fn new(config: HierarchyConfig) -> Result<Self> {
        Self::with_observer(config, NoObserver)
    }
}

impl<P: ReplacementPolicy, O: LlcObserver> Hierarchy<P, O> {
    pub fn with_observer(config: HierarchyConfig, observer: O) -> Result<Self> {
        config.validate()?;
        Ok(Hierarchy {
            config,
            line_shift: config.llc.line_shift(),
            l1i: Cache::try_new(config.l1i)?,
            l1d: Cache::try_new(config.l1d)?,
            l2: config.l2.map(Cache::try_new).transpose()?,
            llc: Cache::try_new(config.llc)?,
            observer,
            records: 0,
            instructions: 0,
            cycles: 0,
        })
    }

    pub fn config(&self) -> &HierarchyConfig {
        &self.config
    }

    pub fn cycles(&self) -> u64 {
        self.cycles
    }

    pub fn instructions(&self) -> u64 {
        self.instructions
    }

    pub fn stats(&self) -> HierarchyStats {
        HierarchyStats {
            records: self.records,
            instructions: self.instructions,
            cycles: self.cycles,
            l1i: self.l1i.stats,
            l1d: self.l1d.stats,
            l2: self.l2.as_ref().map(|c| c.stats),
            llc: self.llc.stats,
        }
    }

    /// Simulates one record and advances the clock.
    #[inline]
    pub fn access(&mut self, r: &Record) {
        self.records += 1;
        let fetch = r.kind == AccessKind::Fetch;
        if fetch {
            self.instructions += 1;
            self.cycles += 1;
        }
        let size = u64::from(r.size_bytes.max(1));
        let first = r.addr >> self.line_shift;
        let last = r.addr.wrapping_add(size - 1) >> self.line_shift;
        match self.config.mode {
            Mode::TableII => {
                self.cycles += self.line_access(first, r.pc, fetch);
                if last != first {
                    self.cycles += self.line_access(last, r.pc, fetch);
                }
            }
            Mode::Cachegrind => self.cachegrind_access(first, last, r.pc, fetch),
        }
    }

    /// One line through every level; returns the stall in cycles.
    #[inline]
    fn line_access(&mut self, block: u64, pc: u64, fetch: bool) -> u64 {
        let l1 = if fetch { &mut self.l1i } else { &mut self.l1d };
        if l1.access(block, pc).hit {
            return 0;
        }
        if let Some(l2) = self.l2.as_mut() {
            if l2.access(block, pc).hit {
                return self.config.timing.l2_hit_cycles;
            }
        }
        let hit = self.llc.access(block, pc).hit;
        self.observer.on_llc_access(block, pc, hit);
        if hit {
            self.config.timing.llc_hit_cycles
        } else {
            self.config.timing.memory_cycles
        }
    }

    /// cachegrind's rule: one access, a miss if either straddled line misses, both lines
    /// always looked up (their state changes), LL consulted only after an L1 miss.
    #[inline]
    fn cachegrind_access(&mut self, first: u64, last: u64, pc: u64, fetch: bool) {
        let l1 = if fetch { &mut self.l1i } else { &mut self.l1d };
        if !straddle_is_miss(l1, first, last, pc) {
            return;
        }
        let hit = !straddle_is_miss(&mut self.llc, first, last, pc);
        self.observer.on_llc_access(first, pc, hit);
        self.cycles += if hit { self.config.timing.llc_hit_cycles } else { self.config.timing.memory_cycles };
    }

    /// Invalidates the LLC only: the paper's context switch (Sec. II, Sec. IV: "effects other
    /// than the loss of saved state in the LLC" are eliminated).
    pub fn flush_llc(&mut self) {
        self.llc.flush();
    }
}

/// Counts one access per call in the cache's statistics, like cachegrind does.
#[inline]
fn straddle_is_miss<P: ReplacementPolicy>(cache: &mut Cache<P>, first: u64, last: u64, pc: u64) -> bool {
    if first == last {
        return !cache.access(first, pc).hit;
    }
    let before = cache.stats;
    let miss = !cache.access(first, pc).hit | !cache.access(last, pc).hit;
    cache.stats = CacheStats {
        accesses: before.accesses + 1,
        hits: before.hits + u64::from(!miss),
        misses: before.misses + u64::from(miss),
    };
    miss
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Lru;

    #[test]
    fn timing_charges_each_level_its_latency() {
        let mut h: Hierarchy<Lru> = Hierarchy::new(HierarchyConfig::table_ii()).unwrap();
        // Cold fetch: memory. Same line again: L1 hit.
        h.access(&Record::fetch(0x1000, 4));
        assert_eq!(h.cycles(), 1 + 400);
        h.access(&Record::fetch(0x1004, 4));
        assert_eq!(h.cycles(), 402);
        // A data read of the same line misses L1D but hits L2.
        h.access(&Record::data(0x1004, 0x1008, AccessKind::Read, 8));
        assert_eq!(h.cycles(), 412);
        let s = h.stats();
        assert_eq!((s.instructions, s.records), (2, 3));
        assert_eq!(s.l1i, CacheStats { accesses: 2, hits: 1, misses: 1 });
        assert_eq!(s.l1d.misses, 1);
        assert_eq!(s.l2.unwrap(), CacheStats { accesses: 2, hits: 1, misses: 1 });
        assert_eq!(s.llc, CacheStats { accesses: 1, hits: 0, misses: 1 });
        assert!((s.ipc() - 2.0 / 412.0).abs() < 1e-12);
    }

    #[test]
    fn cachegrind_mode_counts_a_straddle_once() {
        let mut config = HierarchyConfig::table_ii();
        config.l2 = None;
        config.mode = Mode::Cachegrind;
        let mut h: Hierarchy<Lru> = Hierarchy::new(config).unwrap();
        // 8 bytes at 0x103c straddle lines 0x40 and 0x41: one access, one miss at D1 and LL.
        h.access(&Record::data(0, 0x103c, AccessKind::Read, 8));
        let s = h.stats();
        assert_eq!(s.l1d, CacheStats { accesses: 1, hits: 0, misses: 1 });
        assert_eq!(s.llc, CacheStats { accesses: 1, hits: 0, misses: 1 });
        // Both lines are now present: hits.
        h.access(&Record::data(0, 0x1040, AccessKind::Write, 4));
        h.access(&Record::data(0, 0x1000, AccessKind::Modify, 4));
        assert_eq!(h.stats().l1d.misses, 1);
        assert_eq!(h.stats().l1d.accesses, 3);
        assert!(HierarchyConfig { mode: Mode::Cachegrind, ..HierarchyConfig::table_ii() }.validate().is_err());
    }
}
