//! Replacement policies behind one small trait.
//!
//! The cache owns tags and validity; a policy owns only its per-line and global metadata and
//! answers two questions: which way to evict from a full set, and what to do on a hit or a
//! fill. Invalid ways are filled first by the cache without asking the policy, the way
//! hardware fills empty ways. Policies are plugged in as a type parameter (not a trait
//! object) because the hit path runs tens of millions of times a second.
//!
//! Non-goals: prefetch-aware or multi-core-aware variants (TA-DRRIP), random tie-breaking.
//! Every policy here is deterministic so a run is reproducible.

mod drrip;
mod lru;
mod ship;

pub use drrip::{Drrip, LeaderKind, PSEL_MAX};
pub use lru::Lru;
pub use ship::{Ship, SHCT_ENTRIES, SHCT_MAX};

use crate::geometry::Geometry;

/// A replacement policy for one cache.
pub trait ReplacementPolicy {
    /// A fresh policy for a cache of this geometry.
    fn new(geometry: &Geometry) -> Self
    where
        Self: Sized;
    /// The name used in tables and JSON.
    fn name(&self) -> &'static str;
    /// The access by instruction `pc` hit `way` of `set`.
    fn on_hit(&mut self, set: usize, way: usize, pc: u64);
    /// The way to evict from `set`, whose ways are all valid.
    fn victim(&mut self, set: usize) -> usize;
    /// The line in `way` of `set` is being evicted to make room for a miss.
    fn on_evict(&mut self, set: usize, way: usize);
    /// A miss by instruction `pc` was filled into `way` of `set`.
    fn on_fill(&mut self, set: usize, way: usize, pc: u64);
    /// Every line was invalidated (a flush); learned global state may stay.
    fn on_flush(&mut self);
}

/// The LLC policies the CLI offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    Lru,
    Drrip,
    Ship,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 3] = [PolicyKind::Lru, PolicyKind::Drrip, PolicyKind::Ship];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Lru => "lru",
            PolicyKind::Drrip => "drrip",
            PolicyKind::Ship => "ship",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        PolicyKind::ALL.into_iter().find(|p| p.name() == text.to_ascii_lowercase())
    }
}

/// RRIP constants shared by DRRIP and SHiP: 2-bit re-reference prediction values.
pub(crate) const RRPV_MAX: u8 = 3;
/// SRRIP inserts at "long" re-reference interval.
pub(crate) const RRPV_LONG: u8 = RRPV_MAX - 1;

/// Finds the RRIP victim: the first way predicted "distant", ageing the set until one is.
/// Bounded: after at most `RRPV_MAX` ageing rounds some way reaches the maximum.
pub(crate) fn rrip_victim(rrpv: &mut [u8]) -> usize {
    for _round in 0..=RRPV_MAX {
        if let Some(way) = rrpv.iter().position(|&v| v >= RRPV_MAX) {
            return way;
        }
        for v in rrpv.iter_mut() {
            *v += 1;
        }
    }
    unreachable!("RRIP ageing is bounded by RRPV_MAX rounds")
}
