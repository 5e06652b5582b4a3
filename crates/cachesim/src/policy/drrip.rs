//! DRRIP (Jaleel et al., ISCA 2010): SRRIP and BRRIP duelling through leader sets.
//!
//! 2-bit RRPVs. SRRIP inserts at RRPV 2 ("long"), BRRIP at RRPV 3 ("distant") except one
//! insertion in 32 at RRPV 2. Hits promote to 0. A 10-bit saturating PSEL counts misses in
//! the leader sets: a miss in an SRRIP leader moves it up, a miss in a BRRIP leader moves it
//! down, and follower sets use BRRIP while PSEL is in the upper half. The 1-in-32 choice is
//! a deterministic counter, not a random draw, so runs are reproducible.
//!
//! Leader sets are spread over the cache: with `n` leaders per policy the cache is cut into
//! `n` constituencies of `sets / n` sets; the first set of each is an SRRIP leader and the
//! middle one a BRRIP leader. Public implementations have shipped with leader predicates that
//! never matched a set, so `leader_count` is exposed and tested.

use super::{rrip_victim, ReplacementPolicy, RRPV_LONG, RRPV_MAX};
use crate::geometry::Geometry;

/// Largest PSEL value (10 bits).
pub const PSEL_MAX: u16 = 1023;
/// Followers use BRRIP when PSEL is at or above this.
const PSEL_THRESHOLD: u16 = 512;
/// Leader sets per policy (the DRRIP paper uses 32 for a 2 MiB LLC).
const LEADERS_PER_POLICY_MAX: usize = 32;
/// BRRIP inserts at "long" once per this many fills.
const BRRIP_LONG_PERIOD: u32 = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderKind {
    Follower,
    Srrip,
    Brrip,
}

pub struct Drrip {
    ways: usize,
    rrpv: Vec<u8>,
    leader: Vec<LeaderKind>,
    psel: u16,
    brrip_fills: u32,
}

impl Drrip {
    pub fn psel(&self) -> u16 {
        self.psel
    }

    pub fn leader_kind(&self, set: usize) -> LeaderKind {
        self.leader[set]
    }

    /// Number of sets led by `kind`.
    pub fn leader_count(&self, kind: LeaderKind) -> usize {
        self.leader.iter().filter(|&&k| k == kind).count()
    }

    /// The RRPV of one line, for tests.
    pub fn rrpv(&self, set: usize, way: usize) -> u8 {
        self.rrpv[set * self.ways + way]
    }

    fn brrip_insert(&mut self) -> u8 {
        self.brrip_fills = self.brrip_fills.wrapping_add(1);
        if self.brrip_fills.is_multiple_of(BRRIP_LONG_PERIOD) {
            RRPV_LONG
        } else {
            RRPV_MAX
        }
    }
}

impl ReplacementPolicy for Drrip {
    fn new(geometry: &Geometry) -> Self {
        let sets = geometry.sets();
        let mut leader = vec![LeaderKind::Follower; sets];
        // Duelling needs at least two sets per constituency; a smaller cache is pure SRRIP.
        let leaders = LEADERS_PER_POLICY_MAX.min(sets / 2);
        if let Some(stride) = sets.checked_div(leaders) {
            for c in 0..leaders {
                leader[c * stride] = LeaderKind::Srrip;
                leader[c * stride + stride / 2] = LeaderKind::Brrip;
            }
        }
        Drrip {
            ways: geometry.ways as usize,
            rrpv: vec![RRPV_MAX; geometry.lines()],
            leader,
            psel: PSEL_THRESHOLD - 1,
            brrip_fills: 0,
        }
    }

    fn name(&self) -> &'static str {
        "drrip"
    }

    #[inline]
    fn on_hit(&mut self, set: usize, way: usize, _pc: u64) {
        self.rrpv[set * self.ways + way] = 0;
    }

    #[inline]
    fn victim(&mut self, set: usize) -> usize {
        rrip_victim(&mut self.rrpv[set * self.ways..(set + 1) * self.ways])
    }

    #[inline]
    fn on_evict(&mut self, _set: usize, _way: usize) {}

    #[inline]
    fn on_fill(&mut self, set: usize, way: usize, _pc: u64) {
        // Every fill is a miss: this is where the leader sets vote.
        let value = match self.leader[set] {
            LeaderKind::Srrip => {
                self.psel = (self.psel + 1).min(PSEL_MAX);
                RRPV_LONG
            }
            LeaderKind::Brrip => {
                self.psel = self.psel.saturating_sub(1);
                self.brrip_insert()
            }
            LeaderKind::Follower => {
                if self.psel >= PSEL_THRESHOLD {
                    self.brrip_insert()
                } else {
                    RRPV_LONG
                }
            }
        };
        self.rrpv[set * self.ways + way] = value;
    }

    fn on_flush(&mut self) {
        self.rrpv.fill(RRPV_MAX);
    }
}
