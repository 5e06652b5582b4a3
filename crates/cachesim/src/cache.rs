//! One set-associative cache: tags, validity and counts; replacement is the policy's.
//!
//! Addresses enter as block numbers (address >> line shift) so a hierarchy with one line
//! size shifts once. A tag slot holds `block + 1`, with 0 meaning invalid, so validity
//! costs no extra array. Write-allocate, no write-back traffic: the in-order timing model
//! charges a write like a read, and dirty evictions are absorbed by a write buffer (see
//! docs/cachesim-ets.md).

use crate::geometry::Geometry;
use crate::policy::ReplacementPolicy;

/// Access and miss counts of one cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub accesses: u64,
    pub hits: u64,
    pub misses: u64,
}

impl CacheStats {
    pub fn miss_ratio(&self) -> f64 {
        if self.accesses == 0 {
            0.0
        } else {
            self.misses as f64 / self.accesses as f64
        }
    }
}

/// Where an access landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub hit: bool,
    pub set: usize,
    pub way: usize,
    /// The block evicted to make room, if a valid line was replaced.
    pub evicted_block: Option<u64>,
}

pub struct Cache<P: ReplacementPolicy> {
    geometry: Geometry,
    ways: usize,
    set_mask: u64,
    tags: Vec<u64>,
    policy: P,
    pub stats: CacheStats,
}

impl<P: ReplacementPolicy> Cache<P> {
    /// For geometries known to be small (tests, fixed configurations); a size from the
    /// user goes through [`Cache::try_new`].
    pub fn new(geometry: Geometry) -> Self {
        Self::try_new(geometry).expect("a cache of a validated geometry fits in memory")
    }

    /// Reserves the tag array fallibly first, so a cache larger than the memory left is an
    /// error and not an abort (the policy's arrays are smaller than the tags).
    pub fn try_new(geometry: Geometry) -> crate::error::Result<Self> {
        let mut tags = Vec::new();
        tags.try_reserve_exact(geometry.lines()).map_err(|e| {
            crate::error::Error::new(
                crate::error::ErrorKind::Usage,
                format!("cannot allocate a cache of {geometry}: {e}"),
            )
        })?;
        tags.resize(geometry.lines(), 0);
        let policy = P::new(&geometry);
        Ok(Cache {
            geometry,
            ways: geometry.ways as usize,
            set_mask: geometry.sets() as u64 - 1,
            tags,
            policy,
            stats: CacheStats::default(),
        })
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn policy(&self) -> &P {
        &self.policy
    }

    #[inline]
    pub fn set_of(&self, block: u64) -> usize {
        (block & self.set_mask) as usize
    }

    /// Looks up `block` for instruction `pc`, filling it on a miss.
    #[inline]
    pub fn access(&mut self, block: u64, pc: u64) -> Outcome {
        let set = self.set_of(block);
        let base = set * self.ways;
        let tag = block + 1;
        self.stats.accesses += 1;
        let row = &self.tags[base..base + self.ways];
        if let Some(way) = row.iter().position(|&t| t == tag) {
            self.stats.hits += 1;
            self.policy.on_hit(set, way, pc);
            return Outcome { hit: true, set, way, evicted_block: None };
        }
        self.stats.misses += 1;
        let (way, evicted_block) = match row.iter().position(|&t| t == 0) {
            Some(way) => (way, None),
            None => {
                let way = self.policy.victim(set);
                debug_assert!(way < self.ways, "policy chose way {way} of {}", self.ways);
                self.policy.on_evict(set, way);
                (way, Some(self.tags[base + way] - 1))
            }
        };
        self.tags[base + way] = tag;
        self.policy.on_fill(set, way, pc);
        Outcome { hit: false, set, way, evicted_block }
    }

    /// Whether `block` is present, without touching replacement state or counts.
    pub fn contains(&self, block: u64) -> bool {
        let base = self.set_of(block) * self.ways;
        self.tags[base..base + self.ways].contains(&(block + 1))
    }

    /// Invalidates every line (the paper's emulation of a context switch, Sec. II).
    pub fn flush(&mut self) {
        self.tags.fill(0);
        self.policy.on_flush();
    }

    /// Number of valid lines.
    pub fn valid_lines(&self) -> usize {
        self.tags.iter().filter(|&&t| t != 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Drrip, LeaderKind, Lru, Ship, PSEL_MAX};

    fn hits<P: ReplacementPolicy>(cache: &mut Cache<P>, blocks: &[u64]) -> String {
        blocks.iter().map(|&b| if cache.access(b, 0x400000).hit { 'H' } else { 'M' }).collect()
    }

    /// One set of two ways: blocks are multiples of nothing in particular, all map to set 0.
    fn one_set(ways: u32) -> Geometry {
        Geometry::new(u64::from(ways) * 64, ways, 64).unwrap()
    }

    #[test]
    fn lru_exact_sequence() {
        let mut c: Cache<Lru> = Cache::new(one_set(2));
        // A B A C B A: C evicts B (LRU), B evicts A, A evicts C.
        assert_eq!(hits(&mut c, &[1, 2, 1, 3, 2, 1, 2]), "MMHMMMH");
        assert_eq!(c.stats, CacheStats { accesses: 7, hits: 2, misses: 5 });
        let mut c: Cache<Lru> = Cache::new(one_set(4));
        // Cyclic scan of 5 blocks over 4 ways: LRU misses every time.
        assert_eq!(hits(&mut c, &[1, 2, 3, 4, 5, 1, 2, 3, 4, 5]), "MMMMMMMMMM");
        // Sets are selected by the low block bits.
        let mut c: Cache<Lru> = Cache::new(Geometry::new(256, 2, 64).unwrap());
        assert_eq!(hits(&mut c, &[0, 1, 2, 3, 4, 1, 3, 0]), "MMMMMHHM");
    }

    #[test]
    fn srrip_exact_sequence_in_a_drrip_follower_free_cache() {
        // A single set has no leaders: DRRIP degenerates to SRRIP (insert 2, hit 0).
        let mut c: Cache<Drrip> = Cache::new(one_set(2));
        assert_eq!(hits(&mut c, &[1, 2],), "MM");
        assert_eq!((c.policy().rrpv(0, 0), c.policy().rrpv(0, 1)), (2, 2));
        assert_eq!(hits(&mut c, &[1]), "H");
        assert_eq!(c.policy().rrpv(0, 0), 0);
        // 3 misses: ageing makes way 1 (rrpv 2 -> 3) the victim, way 0 ages to 1.
        assert_eq!(hits(&mut c, &[3]), "M");
        assert_eq!((c.policy().rrpv(0, 0), c.policy().rrpv(0, 1)), (1, 2));
        // Unlike LRU, the hit line 1 survives a following scan of two new blocks.
        assert_eq!(hits(&mut c, &[4, 1]), "MH");
        assert_eq!(c.policy().psel(), 511);
    }

    #[test]
    fn ship_exact_sequence_and_dead_on_arrival_learning() {
        let mut c: Cache<Ship> = Cache::new(one_set(2));
        let (hot_pc, scan_pc) = (0x1000, 0x2000);
        c.access(1, hot_pc);
        // The scan fills ways and evicts without reuse: its counter drops to 0.
        for b in 10..20 {
            c.access(b, scan_pc);
            c.access(1, hot_pc);
        }
        assert_eq!(c.policy().counter_for_pc(scan_pc), 0, "scan signature learned dead");
        assert!(c.policy().counter_for_pc(hot_pc) >= 6, "hot signature learned live");
        // A dead-on-arrival fill is inserted distant and leaves first.
        let o = c.access(100, scan_pc);
        assert_eq!(c.policy().rrpv(o.set, o.way), 3);
        assert!(c.access(1, hot_pc).hit);
    }

    #[test]
    fn drrip_leaders_exist_and_psel_moves_and_beats_lru_on_a_thrashing_scan() {
        let g = Geometry::new(256 * 1024, 16, 64).unwrap(); // 256 sets: 64 leaders, 192 followers
        let mut d: Cache<Drrip> = Cache::new(g);
        assert_eq!(d.policy().leader_count(LeaderKind::Srrip), 32);
        assert_eq!(d.policy().leader_count(LeaderKind::Brrip), 32);
        let mut l: Cache<Lru> = Cache::new(g);
        // Cyclic scan over 1.5x the cache: LRU gets zero hits after warm-up.
        let blocks = (g.lines() as u64 * 3) / 2;
        let psel_start = d.policy().psel();
        let mut psel_max_seen = psel_start;
        for _pass in 0..20 {
            for b in 0..blocks {
                d.access(b, 0x400);
                l.access(b, 0x400);
                psel_max_seen = psel_max_seen.max(d.policy().psel());
            }
        }
        assert!(psel_max_seen > psel_start, "SRRIP leader misses must move PSEL");
        assert_eq!(d.policy().psel(), PSEL_MAX, "BRRIP wins the duel on a thrashing scan");
        assert_eq!(l.stats.hits, 0);
        assert!(d.stats.hits * 4 > d.stats.accesses, "DRRIP keeps part of the scan: {:?}", d.stats);
        // Misses in BRRIP leaders move PSEL the other way.
        let mut p = Drrip::new(&g);
        let brrip_set = (0..g.sets()).find(|&s| p.leader_kind(s) == LeaderKind::Brrip).unwrap();
        let before = p.psel();
        for _ in 0..10 {
            p.on_fill(brrip_set, 0, 0);
        }
        assert_eq!(p.psel(), before - 10);
    }

    #[test]
    fn flush_invalidates_everything() {
        let mut c: Cache<Lru> = Cache::new(Geometry::new(4096, 4, 64).unwrap());
        for b in 0..64 {
            c.access(b, 0);
        }
        assert_eq!(c.valid_lines(), 64);
        c.flush();
        assert_eq!(c.valid_lines(), 0);
        assert!(!c.access(3, 0).hit);
    }
}
